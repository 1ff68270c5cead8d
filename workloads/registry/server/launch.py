"""Start the model registry (MLflow's tracking server and model registry) or migrate its databases,
from the environment its Kubernetes objects set (components/kubernetes/registry.py).

Standalone (the image copies this file alone; standard library, plus boto3 where the database password
lives in AWS Secrets Manager): no password is ever in the pod spec or the command line the kubelet
shows. The backend store URI is built here, at start, and handed to MLflow through its environment
(``MLFLOW_BACKEND_STORE_URI``, the ``--backend-store-uri`` option's envvar, mlflow/cli/__init__.py 3.17.2).

Modes:
- ``upgrade``: ``mlflow db upgrade`` for the tracking schema, then the basic-auth app's own migration
  (``python -m mlflow.server.auth db upgrade --url``, its separate ``alembic_version_auth`` table), so the
  servers start on a current schema instead of racing to migrate it (MLflow's ``db upgrade`` help:
  migrations are not guaranteed transactional).
- ``server``: ``mlflow server`` with ``--serve-artifacts`` to the stack's encrypted store, and with
  ``--app-name basic-auth`` when ``REGISTRY_AUTH`` is on (the admin password and CSRF key read from the
  mounted Secret's files, ``REGISTRY_ADMIN_SECRET_DIR``). With basic-auth the launcher stays the
  server's parent: once ``/health`` answers on loopback it checks the admin's password
  (``check_admin``), deletes every user that is neither the admin nor declared (``prune_users``), creates
  or updates each declared user (``REGISTRY_USERS``, their passwords the files of ``REGISTRY_USERS_DIR``)
  and its grants (``bootstrap_users``), all through the basic-auth app's REST API (idempotent: a second
  start changes nothing, and a replica bootstrapping at the same time is no error), then waits for the
  server, passing SIGTERM on.

TLS (``REGISTRY_TLS_DIR``: the mounted Secret ``registry-tls``, ``tls.crt``, ``tls.key``, ``ca.crt``): the
server itself serves HTTPS, TLS 1.3 only, no terminator in front of it. ``mlflow server`` runs uvicorn
(mlflow/server/__init__.py ``_build_uvicorn_command`` 3.17.2) and passes ``--uvicorn-opts`` through, so
uvicorn's ``--ssl-certfile``/``--ssl-keyfile`` load the certificate. Uvicorn has no option for the
protocol floor (its ``--ssl-version`` is an ``ssl.PROTOCOL_*`` constant, and no TLS-1.3-only one
exists), and an OpenSSL ``MinProtocol = TLSv1.3`` configuration does not reach Python's contexts (measured:
CPython 3.11 sets a TLS 1.2 floor on every new ``SSLContext``), so ``install_tls13_floor`` (run by the
image's ``sitecustomize``, in the server's every process) raises the floor of the context uvicorn makes.
The launcher reaches its own server at ``https://localhost`` and verifies it against ``ca.crt`` (the
certificate names ``localhost`` as well as the Service).
"""

from __future__ import annotations

import base64
import configparser
import json
import os
import shlex
import signal
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PORT = 5000
# Where the server writes what it must (the auth config); the root file system is read-only.
SCRATCH = Path("/tmp")


def _secret_password(arn: str) -> str:
    """The database password from the RDS-managed secret (JSON with ``username`` and ``password``: RDS
    user guide, "Password management with Amazon RDS and AWS Secrets Manager"), read with the pod's IRSA
    role. The region is the secret's own (its ARN's fourth field)."""
    # In the image (requirements.txt), not in the toolkit's environment.
    import boto3

    client = boto3.client("secretsmanager", region_name=arn.split(":")[3])
    secret: dict[str, str] = json.loads(client.get_secret_value(SecretId=arn)["SecretString"])
    return secret["password"]


# The audience of a token Azure Database for PostgreSQL accepts as a password (Microsoft Entra
# authentication with Azure Database for PostgreSQL flexible server).
ENTRA_SCOPE = "https://ossrdbms-aad.database.windows.net/.default"


_credential: list[object] = []


def _entra_token(_unused: str) -> str:
    """A Microsoft Entra access token for the pod's workload identity (the AKS webhook's AZURE_*
    variables, read by ``DefaultAzureCredential``). One credential per process: it caches its token
    until shortly before it expires, so a connection costs no round trip to Entra ID; a new credential
    per connection would fetch a new token every time (registry review D4)."""
    # In the image (requirements.txt); the registry extra has it too (the lifecycle record on Azure).
    from azure.identity import DefaultAzureCredential

    if not _credential:
        _credential.append(DefaultAzureCredential())
    credential: Any = _credential[0]
    return str(credential.get_token(ENTRA_SCOPE).token)


def password_source(env: Mapping[str, str]) -> tuple[str, Callable[[str], str]] | None:
    """Where a PostgreSQL password comes from: an Entra token (``REGISTRY_DB_ENTRA``, Azure), the
    RDS-managed secret (``REGISTRY_DB_SECRET_ARN``, AWS), or nowhere (SQLite)."""
    if env.get("REGISTRY_DB_ENTRA") == "true":
        return ENTRA_SCOPE, _entra_token
    arn = env.get("REGISTRY_DB_SECRET_ARN")
    return (arn, _secret_password) if arn else None


def install_password_refresh(
    env: Mapping[str, str], read_secret: Callable[[str], str] | None = None
) -> Callable[..., None] | None:
    """Give every new database connection the secret's current password, in every process that imports
    this (the image's ``sitecustomize.py``: the server's worker processes too). RDS rotates its managed
    master secret every seven days by default (RDS user guide, "Password management with Amazon RDS and
    AWS Secrets Manager"); established connections survive a rotation, but a password read once at start
    would refuse every connection opened after it. SQLAlchemy's ``do_connect`` event may rewrite the
    driver's connect arguments (SQLAlchemy "Core Events", ``DialectEvents.do_connect``). An Entra token
    lasts about an hour, so it too is taken afresh for each connection."""
    source = password_source(env)
    if source is None:
        return None
    key, reader = source
    read = read_secret or reader
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def current_password(
        _dialect: object, _record: object, _cargs: object, cparams: dict[str, object]
    ) -> None:
        cparams["password"] = read(key)

    event.listen(Engine, "do_connect", current_password)
    return current_password


# The CAs the registry verifies its database against (``sslmode=verify-full``: the certificate chains to
# one of them and names the host; libpq "SSL Support", "SSL Mode Descriptions"). Explicit files, not
# ``sslrootcert=system``: the libpq that psycopg2-binary 2.9.13 bundles (libpq.so.5.17, with its own
# libssl) was built with OPENSSLDIR "/host/tmp/libpq.build", so "system" would find no CA at all.
# - Amazon RDS: its own CAs, in no public bundle; the me-central-1 roots, vendored beside this file
#   (rds-ca-me-central-1.SOURCE.md).
# - Azure Database for PostgreSQL flexible server: dual-signed certificates whose intermediates chain to
#   DigiCert Global Root G2 and Microsoft RSA Root Certificate Authority 2017 (Microsoft Learn,
#   flexible-server/concepts-networking-ssl-tls, "Root CAs used by Azure Database for PostgreSQL"; "the
#   root CAs remain the same" through the 2025-2026 intermediate rotation), both in Debian bookworm's
#   ca-certificates (20230311), which the python:3.11.7-slim-bookworm base installs (docker-library/python
#   slim-bookworm Dockerfile: apt-get install ca-certificates netbase tzdata).
RDS_CA = Path(__file__).with_name("rds-ca-me-central-1.pem")
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def database_ca(env: Mapping[str, str]) -> Path:
    """The CA file that verifies the database: the system's on Azure (Entra), RDS's own on AWS."""
    return SYSTEM_CA if env.get("REGISTRY_DB_ENTRA") == "true" else RDS_CA


def backend_uri(env: Mapping[str, str], read_secret: Callable[[str], str] | None = None) -> str:
    """PostgreSQL over TLS with the server's certificate and name verified when a database host is set
    (``sslmode`` from ``PGSSLMODE``, ``verify-full`` in every plan, against ``database_ca``; the servers
    refuse plain connections anyway, rds.force_ssl / require_secure_transport), else SQLite at
    ``REGISTRY_SQLITE_PATH``."""
    host = env.get("REGISTRY_DB_HOST")
    if not host:
        path = Path(env["REGISTRY_SQLITE_PATH"])
        return f"sqlite:///{path}"
    source = password_source(env)
    if source is None:
        raise KeyError("REGISTRY_DB_SECRET_ARN or REGISTRY_DB_ENTRA")
    key, reader = source
    password = urllib.parse.quote((read_secret or reader)(key), safe="")
    user = urllib.parse.quote(env["REGISTRY_DB_USER"], safe="")
    # The plan states the mode (``PGSSLMODE``, libpq's variable: PostgreSQL docs, "Environment Variables")
    # where the transport judge reads it; verify-full where it does not.
    mode = env.get("PGSSLMODE", "verify-full")
    tls = urllib.parse.urlencode({"sslmode": mode, "sslrootcert": str(database_ca(env))})
    return (
        f"postgresql+psycopg2://{user}:{password}@{host}:{env['REGISTRY_DB_PORT']}/"
        f"{env['REGISTRY_DB_NAME']}?{tls}"
    )


# The basic-auth app's authorization function: MLflow's basic authentication, and only the promotion
# identities (``REGISTRY_PROMOTERS``) move ``@champion`` and ``@previous-champion`` (guard.py, beside this
# file in the image's /app, which is on the server's PYTHONPATH).
AUTHORIZATION_FUNCTION = "guard:authenticate"


# How long a verified (user, password) is trusted without checking its hash again
# (basic_auth.ini 3.17.2, ``auth_cache_ttl_seconds``; off by default). Each check is a scrypt
# hash, 0.11 s of CPU on this project's test machine: every authenticated request paid it, so the
# servers' and the rollout's polling kept a core busy. The cost is the window the ini names: a
# password changed or a user deleted through another replica (or by the launcher's bootstrap, out of
# band) is still accepted for at most this long (docs/registry.md, "Access").
AUTH_CACHE_TTL_S = 30


def write_auth_config(uri: str, directory: Path = SCRATCH) -> Path:
    """The basic-auth app's config (mlflow/server/auth/basic_auth.ini 3.17.2): users in the same database,
    authenticated users may read by default, the admin's password from ``MLFLOW_AUTH_ADMIN_PASSWORD``
    (a Secret; MLflow ships no default and refuses to start without one), requests authenticated by
    ``AUTHORIZATION_FUNCTION``."""
    config = configparser.ConfigParser()
    config["mlflow"] = {
        "default_permission": "READ",
        "database_uri": uri,
        "admin_username": "admin",
        "authorization_function": AUTHORIZATION_FUNCTION,
        "auth_cache_ttl_seconds": str(AUTH_CACHE_TTL_S),
    }
    path = directory / "basic_auth.ini"
    with path.open("w") as handle:
        config.write(handle)
    path.chmod(0o600)
    return path


# The admin Secret's files (components/kubernetes/registry.py) → the variables MLflow's basic-auth app
# reads (mlflow/server/auth/config.py, mlflow/server/auth/__init__.py 3.17.2).
ADMIN_FILES = {"password": "MLFLOW_AUTH_ADMIN_PASSWORD", "flask-secret-key": "MLFLOW_FLASK_SERVER_SECRET_KEY"}


def admin_env(directory: Path) -> dict[str, str]:
    """The admin password and CSRF key from the mounted Secret; a missing file fails the start."""
    return {variable: (directory / key).read_text().strip() for key, variable in ADMIN_FILES.items()}


# The mounted Secret ``registry-tls``'s files (components/kubernetes/registry.py).
TLS_DIR_ENV = "REGISTRY_TLS_DIR"
CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"


def tls_dir(env: Mapping[str, str]) -> Path | None:
    return Path(env[TLS_DIR_ENV]) if env.get(TLS_DIR_ENV) else None


def tls_options(env: Mapping[str, str]) -> list[str]:
    """``mlflow server``'s options that make uvicorn serve HTTPS with the mounted certificate; none
    without TLS."""
    directory = tls_dir(env)
    if directory is None:
        return []
    files = f"--ssl-certfile {shlex.quote(str(directory / CERT_FILE))} "
    return ["--uvicorn-opts", files + f"--ssl-keyfile {shlex.quote(str(directory / KEY_FILE))}"]


def install_tls13_floor(env: Mapping[str, str]) -> bool:
    """With TLS on, every context uvicorn makes for its listener (``uvicorn.config.create_ssl_context``,
    which ``Config.load`` calls in each worker) refuses anything older than TLS 1.3."""
    if tls_dir(env) is None:
        return False
    import uvicorn.config  # in the image (mlflow's dependency); only the server's processes get here

    made = uvicorn.config.create_ssl_context

    def tls13(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        context = made(*args, **kwargs)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        return context

    uvicorn.config.create_ssl_context = tls13
    return True


def client_context(env: Mapping[str, str]) -> ssl.SSLContext | None:
    """How the launcher verifies its own server: against the mounted ``ca.crt``, TLS 1.3."""
    directory = tls_dir(env)
    if directory is None:
        return None
    context = ssl.create_default_context(cafile=str(directory / CA_FILE))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


def server_argv(env: Mapping[str, str]) -> list[str]:
    argv = [
        "mlflow",
        "server",
        "--host",
        "0.0.0.0",
        "--port",
        str(PORT),
        "--workers",
        env.get("REGISTRY_WORKERS", "1"),
        "--serve-artifacts",
        "--artifacts-destination",
        env["REGISTRY_ARTIFACTS_DESTINATION"],
    ]
    if env.get("REGISTRY_AUTH") == "true":
        argv += ["--app-name", "basic-auth"]
    return argv + tls_options(env)


def upgrade(uri: str, env: Mapping[str, str]) -> None:
    """``mlflow db upgrade`` and the basic-auth app's ``db upgrade``, run in this process through their own
    click commands (mlflow/db.py, mlflow/server/auth/db/cli.py 3.17.2) rather than as commands: a failed
    command is reported with its argv, and the URI in it carries the database password (registry review
    C1). An error here is the migration's own (SQLAlchemy / the driver), without the URI."""
    from mlflow.db import upgrade as tracking_upgrade
    from mlflow.server.auth.db.cli import upgrade as auth_upgrade

    tracking_upgrade.main(args=[uri], standalone_mode=False)
    if env.get("REGISTRY_AUTH") == "true":
        auth_upgrade.main(args=["--url", uri], standalone_mode=False)


# The basic-auth app's permissions, weakest first (mlflow/server/auth/permissions.py 3.17.2,
# ``PERMISSION_PRIORITY``): READ reads; EDIT (``can_update``) also moves aliases
# (``SetRegisteredModelAlias``), sets model and version tags and registers versions on a model, and creates
# runs and uploads their artifacts in an experiment (``validate_can_create_run``,
# ``validate_can_update_experiment_artifact_proxy``, mlflow/server/auth/__init__.py); MANAGE also deletes
# and grants.
PERMISSION_RANK = {"READ": 1, "USE": 2, "EDIT": 3, "MANAGE": 4}
# The 3.0 grant API's resource types (mlflow/server/auth/permissions.py ``RESOURCE_TYPE_*``): a model is
# named by its name, an experiment by its id.
REGISTERED_MODEL = "registered_model"
EXPERIMENT = "experiment"
ADMIN_USERNAME = "admin"


@dataclass(frozen=True)
class User:
    """A caller's registry user: its password (a file of the mounted Secret) and the least permission it
    must hold on each registered model it names (``grants``) and on each experiment, by name, it logs runs
    to (``experiments``)."""

    username: str
    password: str
    grants: tuple[tuple[str, str], ...] = ()
    experiments: tuple[tuple[str, str], ...] = ()


def read_users(env: Mapping[str, str]) -> list[User]:
    """``REGISTRY_USERS`` (JSON: ``[{"username", "grants": {model: permission}, "experiments": {name:
    permission}}]``, from the pod spec) with each password from ``REGISTRY_USERS_DIR/<username>`` (the
    Secret ``registry-users``); none without."""
    declared = json.loads(env.get("REGISTRY_USERS") or "[]")
    directory = Path(env.get("REGISTRY_USERS_DIR", ""))
    return [
        User(
            u["username"],
            (directory / u["username"]).read_text().strip(),
            tuple(sorted(u["grants"].items())),
            tuple(sorted(u.get("experiments", {}).items())),
        )
        for u in declared
    ]


class AuthApiError(RuntimeError):
    pass


class AdminPasswordError(AuthApiError):
    """The admin Secret's password is not the admin's: nothing the launcher does can succeed."""


# MLflow's ``error_code`` when a user, a grant or an experiment exists already (another replica made it).
ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"


# The admin's change of another user's password or permissions is break-glass on the registry: it names
# its reason in this header (guard.py ``BREAK_GLASS_HEADER``, ``user_change``; review 35 A5), and the
# launcher's reconciliation of the stack's declared users names this one.
BREAK_GLASS_HEADER = "X-ML-Platform-Break-Glass-Reason"
LAUNCHER_REASON = "registry launcher: the stack's declared users (REGISTRY_USERS)"


class AuthApi:
    """The basic-auth app's REST API (mlflow/server/auth/routes.py 3.17.2), with the admin's credentials;
    every change of a user (``USER_CHANGES``) names ``reason`` (``BREAK_GLASS_HEADER``; empty: none)."""

    def __init__(
        self,
        base_url: str,
        admin_password: str,
        timeout_s: float = 30,
        context: ssl.SSLContext | None = None,
        reason: str = LAUNCHER_REASON,
    ) -> None:
        self.base_url, self.admin_password, self.timeout_s = base_url.rstrip("/"), admin_password, timeout_s
        self.context, self.reason = context, reason

    def call(
        self,
        method: str,
        path: str,
        payload: Mapping[str, str] | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> tuple[int, dict[str, object]]:
        """``(status, JSON body)``; GET parameters go in the query string, others in a JSON body. An error's
        body is MLflow's (``error_code``, ``message``), or ``{"error": text}`` when it is not JSON."""
        username, password = credentials or (ADMIN_USERNAME, self.admin_password)
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        url, data = f"{self.base_url}{path}", None
        if method == "GET" and payload:
            url += "?" + urllib.parse.urlencode(payload)
        elif payload is not None:
            data = json.dumps(payload).encode()
        headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
        if self.reason and method != "GET" and path in USER_CHANGES:
            headers[BREAK_GLASS_HEADER] = self.reason
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.context) as response:
                body = response.read()
                return response.status, json.loads(body) if body.strip() else {}
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                error = json.loads(text)
            except ValueError:
                error = None
            return exc.code, error if isinstance(error, dict) else {"error": text[:300]}

    def ok(self, method: str, path: str, payload: Mapping[str, str] | None = None) -> dict[str, object]:
        status, body = self.call(method, path, payload)
        if status != 200:
            raise _failed(method, path, status, body)
        return body

    def created(self, method: str, path: str, payload: Mapping[str, str]) -> dict[str, object] | None:
        """``ok`` for a write that creates something; None when MLflow answers that it exists already
        (``RESOURCE_ALREADY_EXISTS``, 400: another replica made it meanwhile)."""
        status, body = self.call(method, path, payload)
        if status == 400 and body.get("error_code") == ALREADY_EXISTS:
            return None
        if status != 200:
            raise _failed(method, path, status, body)
        return body


def _failed(method: str, path: str, status: int, body: Mapping[str, object]) -> AuthApiError:
    return AuthApiError(f"{method} {path}: HTTP {status}: {body.get('message') or body.get('error', '')}")


# The endpoints (mlflow/server/auth/routes.py 3.17.2; the per-user grants are API 3.0, ``/users/permissions/
# grant|revoke|list``; 3.17 has no ``registered-models/permissions/*`` routes any more).
CURRENT_USER = "/api/2.0/mlflow/users/current"
GET_USER = "/api/2.0/mlflow/users/get"
LIST_USERS = "/api/2.0/mlflow/users/list"
DELETE_USER = "/api/2.0/mlflow/users/delete"
CREATE_USER = "/api/2.0/mlflow/users/create"
UPDATE_PASSWORD = "/api/2.0/mlflow/users/update-password"
LIST_PERMISSIONS = "/api/3.0/mlflow/users/permissions/list"
GRANT = "/api/3.0/mlflow/users/permissions/grant"
REVOKE = "/api/3.0/mlflow/users/permissions/revoke"
GET_MODEL = "/api/2.0/mlflow/registered-models/get"
CREATE_MODEL = "/api/2.0/mlflow/registered-models/create"
GET_EXPERIMENT = "/api/2.0/mlflow/experiments/get-by-name"
CREATE_EXPERIMENT = "/api/2.0/mlflow/experiments/create"
# What the launcher changes of users: break-glass on the registry, so each names ``AuthApi.reason``.
USER_CHANGES = (CREATE_USER, UPDATE_PASSWORD, DELETE_USER, GRANT, REVOKE)

# What the launcher says when the admin's password is refused. MLflow reads MLFLOW_AUTH_ADMIN_PASSWORD
# only to create the admin, when no user of that name exists (``create_admin_user``,
# mlflow/server/auth/__init__.py 3.17.2; basic_auth.ini's comment on ``admin_password``), so once the
# admin's password was changed (``users/update-password``), or the Secret edited, they disagree for good.
ADMIN_REFUSED = (
    "registry admin: MLflow refused the password in Secret registry-admin (key password) for user admin "
    "(HTTP 401): MLflow sets the admin's password from it only when it first creates the admin, so one of "
    "them was changed since; either set the Secret's password to the admin's current one, or change the "
    "admin's password to the Secret's (PATCH /api/2.0/mlflow/users/update-password as admin, with "
    'current_password), then restart the registry pods (docs/registry.md, "Rotating the admin\'s password")'
)


def check_admin(api: AuthApi) -> None:
    """``AdminPasswordError`` (``ADMIN_REFUSED``) when the server refuses the admin's password."""
    status, body = api.call("GET", CURRENT_USER)
    if status == 401:
        raise AdminPasswordError(ADMIN_REFUSED)
    if status != 200:
        raise _failed("GET", f"{CURRENT_USER} as {ADMIN_USERNAME}", status, body)


def _ensure_user(api: AuthApi, user: User, again: bool = True) -> list[str]:
    # The user's own credentials answer 200 when it exists with this password: nothing to write.
    status, _ = api.call("GET", CURRENT_USER, credentials=(user.username, user.password))
    if status == 200:
        return []
    if status != 401:
        raise AuthApiError(f"GET {CURRENT_USER} as {user.username}: HTTP {status}")
    exists, _ = api.call("GET", GET_USER, {"username": user.username})
    if exists == 404:
        created = api.created("POST", CREATE_USER, {"username": user.username, "password": user.password})
        if created is not None:
            return [f"created user {user.username}"]
        # Another replica created it meanwhile: check its password as on any start.
        if again:
            return _ensure_user(api, user, again=False)
    # An admin's update needs no current password (``update_user_password``, mlflow/server/auth/__init__.py).
    api.ok("PATCH", UPDATE_PASSWORD, {"username": user.username, "password": user.password})
    return [f"updated the password of {user.username}"]


def _experiment_id(api: AuthApi, name: str, again: bool = True) -> str:
    """The id of the experiment ``name``, created (by the admin) when missing; the grant API names an
    experiment by its id."""
    status, body = api.call("GET", GET_EXPERIMENT, {"experiment_name": name})
    if status == 200:
        experiment = body.get("experiment")
        assert isinstance(experiment, dict)
        return str(experiment["experiment_id"])
    if status != 404:
        raise _failed("GET", f"{GET_EXPERIMENT} {name}", status, body)
    created = api.created("POST", CREATE_EXPERIMENT, {"name": name})
    if created is not None:
        return str(created["experiment_id"])
    if not again:
        raise AuthApiError(f"experiment {name}: created meanwhile, yet not found")
    return _experiment_id(api, name, again=False)


def _held(api: AuthApi, username: str) -> dict[tuple[str, str], str]:
    """The user's strongest grant on each (resource type, model name or experiment id)."""
    rows = api.ok("GET", LIST_PERMISSIONS, {"username": username}).get("permissions", [])
    held: dict[tuple[str, str], str] = {}
    for row in rows if isinstance(rows, list) else []:
        key, permission = (row["resource_type"], row["resource_pattern"]), row["permission"]
        if PERMISSION_RANK.get(permission, 0) > PERMISSION_RANK.get(held.get(key, ""), 0):
            held[key] = permission
    return held


def _ensure_model(api: AuthApi, name: str) -> list[str]:
    """The registered model ``name``, created by the admin when missing. Its creator gets MANAGE on it
    (``set_can_manage_registered_model_permission``, mlflow/server/auth/__init__.py 3.17.2): made here,
    that is the admin, not training's first registration, whose MANAGE would let it delete the versions
    and aliases the servers follow and grant itself anything (the control review, S1)."""
    status, body = api.call("GET", GET_MODEL, {"name": name})
    if status == 200:
        return []
    if body.get("error_code") != "RESOURCE_DOES_NOT_EXIST":
        raise _failed("GET", f"{GET_MODEL} {name}", status, body)
    if api.created("POST", CREATE_MODEL, {"name": name}) is None:  # another replica made it meanwhile
        return []
    return [f"created registered model {name}"]


def _satisfied(kind: str, held: str, wanted: str) -> bool:
    """A model grant exactly as declared (a creator's stronger MANAGE is taken back: only the grants the
    stack derives decide who may do what to the served model); an experiment's at least as strong."""
    if kind == REGISTERED_MODEL:
        return held == wanted
    return PERMISSION_RANK.get(held, 0) >= PERMISSION_RANK[wanted]


def _ensure_grants(api: AuthApi, user: User) -> list[str]:
    """Each grant as declared (``_satisfied``). A replica that granted the same meanwhile is no error: what
    it wrote is read back and checked."""
    wanted = [(REGISTERED_MODEL, model, model, permission) for model, permission in user.grants]
    wanted += [(EXPERIMENT, _experiment_id(api, name), name, p) for name, p in user.experiments]
    held = _held(api, user.username)
    changes = []
    for kind, resource, name, permission in wanted:
        if _satisfied(kind, held.get((kind, resource), ""), permission):
            continue
        grant = {"username": user.username, "resource_type": kind, "resource_id": resource}
        if (kind, resource) in held:  # another grant of the user's own: the grant API refuses a second row
            status, body = api.call("POST", REVOKE, grant)
            if status != 200 and body.get("error_code") != "RESOURCE_DOES_NOT_EXIST":  # revoked meanwhile
                raise _failed("POST", REVOKE, status, body)
        if api.created("POST", GRANT, {**grant, "permission": permission}) is None:
            now = _held(api, user.username).get((kind, resource), "")
            if not _satisfied(kind, now, permission):
                raise AuthApiError(f"{user.username} holds {now} on {kind} {name}, not {permission}")
            continue
        what = name if kind == REGISTERED_MODEL else f"experiment {name}"
        was = f" (was {held[(kind, resource)]})" if (kind, resource) in held else ""
        changes.append(f"granted {permission} on {what} to {user.username}{was}")
    return changes


def prune_users(api: AuthApi, declared: Collection[str]) -> list[str]:
    """Delete every registry user that is neither the admin nor ``declared``: the stack owns the registry's
    users, so a caller removed from the stack (a team) loses its login and its grants at the next start.
    Through the REST API as the admin (``users/list``, ``users/delete``: ``list_users``, ``delete_user``,
    mlflow/server/auth/__init__.py 3.17.2, admin-only), so the server's own checks run and it drops the
    user from its credential cache. A user another replica deleted meanwhile (404
    ``RESOURCE_DOES_NOT_EXIST``, ``_get_user``, mlflow/server/auth/sqlalchemy_store.py) is no error."""
    rows = api.ok("GET", LIST_USERS).get("users", [])
    changes = []
    for row in rows if isinstance(rows, list) else []:
        username = row["username"]
        if username == ADMIN_USERNAME or username in declared:
            continue
        status, body = api.call("DELETE", DELETE_USER, {"username": username})
        if status == 404 and body.get("error_code") == "RESOURCE_DOES_NOT_EXIST":
            continue
        if status != 200:
            raise _failed("DELETE", f"{DELETE_USER} {username}", status, body)
        changes.append(f"deleted user {username} (not declared)")
    return changes


def bootstrap_users(api: AuthApi, users: Sequence[User]) -> list[str]:
    """Create each model the users are granted on, then create or update each user (password) and its
    grants; what changed, empty when nothing did."""
    changes: list[str] = []
    for model in sorted({model for user in users for model, _ in user.grants}):
        changes += _ensure_model(api, model)
    for user in users:
        changes += _ensure_user(api, user) + _ensure_grants(api, user)
    return changes


def wait_healthy(
    url: str, timeout_s: float, alive: Callable[[], bool], context: ssl.SSLContext | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise AuthApiError("the server exited before it answered /health")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except ssl.SSLCertVerificationError as exc:
            raise AuthApiError(f"the server's certificate does not verify: {exc.verify_message}") from None
        except OSError:
            pass
        time.sleep(0.5)
    raise AuthApiError(f"the server did not answer /health within {timeout_s:.0f}s")


# Within the Deployment's startup probe (60 tries every 5 s: components/kubernetes/registry.py).
STARTUP_TIMEOUT_S = 240


def local_url(port: int = PORT, tls: bool = False) -> str:
    """Where the launcher reaches its own server. ``localhost``, not 127.0.0.1: with
    ``MLFLOW_SERVER_ALLOWED_HOSTS`` set, MLflow admits only the Host headers that list names (the
    variable replaces its defaults: ``get_allowed_hosts``, mlflow/server/fastapi_security.py 3.17.2) and
    answers 403 on any other path than ``/health`` (``HostValidationMiddleware``); the list the Deployment
    sets (components/kubernetes/registry.py ``allowed_hosts``) has ``localhost:*``, which
    ``is_allowed_host_header`` (mlflow/server/security_utils.py) matches with ``fnmatch`` against
    ``localhost:<port>``, and no pattern that matches ``127.0.0.1:<port>``."""
    return f"{'https' if tls else 'http'}://localhost:{port}"


def serve_and_bootstrap(
    command: list[str], env: Mapping[str, str], users: Sequence[User], port: int = PORT
) -> int:
    """Run the server as a child, prune and bootstrap the users once it answers, then wait for it; SIGTERM and
    SIGINT go to the server (the kubelet signals this process, PID 1). A failed bootstrap stops the
    server and fails the start (1): the pod restarts rather than serve callers who cannot log in. An
    admin password the server refuses is one line, ``ADMIN_REFUSED``, and exit 2: no restart mends it."""
    import subprocess

    server = subprocess.Popen(command, env=dict(env))
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda signum, _frame: server.send_signal(signum))
    local, context = local_url(port, tls_dir(env) is not None), client_context(env)
    try:
        wait_healthy(local, STARTUP_TIMEOUT_S, lambda: server.poll() is None, context)
        api = AuthApi(local, env["MLFLOW_AUTH_ADMIN_PASSWORD"], context=context)
        check_admin(api)
        changes = prune_users(api, {user.username for user in users}) + bootstrap_users(api, users)
        for change in changes:
            print(f"registry users: {change}", flush=True)
    except AuthApiError as exc:
        admin = isinstance(exc, AdminPasswordError)
        print(exc if admin else f"registry users: {exc}", file=sys.stderr, flush=True)
        server.terminate()
        server.wait()
        return 2 if admin else 1
    return server.wait()


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else ""
    env = dict(os.environ)
    if mode not in {"server", "upgrade"}:
        print(f"usage: {argv[0]} server|upgrade", file=sys.stderr)
        return 2
    if not env.get("REGISTRY_DB_HOST"):
        Path(env["REGISTRY_SQLITE_PATH"]).parent.mkdir(parents=True, exist_ok=True)
    uri = backend_uri(env)
    if mode == "upgrade":
        upgrade(uri, env)
        return 0
    env["MLFLOW_BACKEND_STORE_URI"] = uri
    if env.get("REGISTRY_AUTH") == "true":
        env["MLFLOW_AUTH_CONFIG_PATH"] = str(write_auth_config(uri))
        env |= admin_env(Path(env["REGISTRY_ADMIN_SECRET_DIR"]))
        return serve_and_bootstrap(server_argv(env), env, read_users(env))
    command = server_argv(env)
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
