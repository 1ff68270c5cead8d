"""MLflow's REST API over HTTPS (plain HTTP off the cluster): the few calls the platform makes, standard
library only.

Why not the MLflow client: the inference image must not carry MLflow (its dependency tree is larger than
the server's), and the trainer and the CLI need a dozen calls, not a framework. One client for all three
keeps the wire format in one place. The endpoints and fields are MLflow 3.17.2's
(``mlflow/protos/service.proto`` and ``model_registry.proto``; the artifact proxy in
``mlflow/server/handlers.py``), checked against a real server by tests/workloads/registry/.

- Registry: ``registered-models/search`` (the names, for errors), ``registered-models/alias`` (GET
  resolves an alias, POST sets one, DELETE removes one),
  ``registered-models/get`` (a model's aliases and tags in one answer), ``registered-models/set-tag``
  (the model's own tags: the rollout's split and shadow settings, workloads/delivery/contract.py),
  ``model-versions/get``, ``model-versions/search``, ``model-versions/create``, ``model-versions/set-tag``,
  ``registered-models/create``.
- Tracking: ``experiments/get-by-name`` and ``create``, ``runs/create``, ``runs/search``, ``runs/get``,
  ``runs/log-batch``, ``runs/log-inputs``, ``runs/update``.
- Artifacts, proxied by the server (``mlflow server --serve-artifacts``): ``GET`` / ``PUT``
  ``/api/2.0/mlflow-artifacts/artifacts/<path>`` and the listing ``GET ...artifacts?path=<dir>``. A run's
  artifact URI is ``mlflow-artifacts:/<experiment>/<run>/artifacts``; the path is what follows the scheme.

Authentication, as MLflow's own client reads it: ``MLFLOW_TRACKING_TOKEN`` (a bearer token), else
``MLFLOW_TRACKING_USERNAME`` and ``MLFLOW_TRACKING_PASSWORD`` (basic). On the cluster the user name and
password are files of the mounted Secret ``registry-client`` (checkov CKV_K8S_35: secrets as files, not
environment variables), named by ``MLFLOW_TRACKING_USERNAME_FILE`` and ``MLFLOW_TRACKING_PASSWORD_FILE``
(the files win over the plain variables). The files are read when the client is made and again after a
401: the kubelet updates a mounted Secret's files in place when the Secret changes (kubernetes.io,
"Secrets": "Mounted Secrets are updated automatically"), so a rotated password is picked up by the next
request that the old one fails, without a restart.

TLS, as MLflow's own client reads it (``MLFLOW_TRACKING_SERVER_CERT_PATH``, "Path to a CA bundle to
use", mlflow/environment_variables.py 3.17.2): an ``https://`` registry is verified against that bundle
(else the system's), its name checked, TLS 1.3 only (the registry serves nothing older:
workloads/registry/server/launch.py). ``MLFLOW_TRACKING_INSECURE_TLS`` is not honoured: verification is
never off. A certificate that does not verify is final (no retry) and one line: what failed and which
bundle was used.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

API = "/api/2.0/mlflow"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
# MLflow's error code for a name that does not exist (a model, a version, an experiment).
NOT_FOUND = "RESOURCE_DOES_NOT_EXIST"
# Transient answers worth another try; anything else is the request's fault and final.
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[A-Za-z0-9_-]+)|/(?P<version>[0-9]+))$")


# The code of a RegistryError when no HTTP answer came: the registry is down, or the URI is wrong.
UNREACHABLE = "UNREACHABLE"


class RegistryError(Exception):
    """A registry call that failed; ``code`` is MLflow's ``error_code`` (or ``UNREACHABLE``)."""

    def __init__(self, message: str, code: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.status = status

    @property
    def not_found(self) -> bool:
        # A missing alias is INVALID_PARAMETER_VALUE in 3.17.2 ("Registered model alias x not found.").
        return self.code == NOT_FOUND or (self.status in (400, 404) and "not found" in str(self).lower())


@dataclass(frozen=True)
class ModelRef:
    """``models:/<name>@<alias>`` or ``models:/<name>/<version>``: what a server is told to serve."""

    name: str
    alias: str | None = None
    version: str | None = None

    @classmethod
    def parse(cls, uri: str) -> ModelRef:
        match = _MODEL_URI.match(uri)
        if match is None:
            raise ValueError(f"{uri!r} is not models:/<name>@<alias> or models:/<name>/<version>")
        return cls(match["name"], match["alias"], match["version"])

    def __str__(self) -> str:
        return f"models:/{self.name}@{self.alias}" if self.alias else f"models:/{self.name}/{self.version}"


@dataclass(frozen=True)
class ModelVersion:
    """One registered version, as ``model-versions/get`` returns it."""

    name: str
    version: str
    source: str
    run_id: str
    aliases: tuple[str, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    created_ms: int = 0

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ModelVersion:
        return cls(
            name=body["name"],
            version=str(body["version"]),
            source=body.get("source", ""),
            run_id=body.get("run_id", ""),
            aliases=tuple(body.get("aliases", ())),
            tags={t["key"]: t.get("value", "") for t in body.get("tags", ())},
            created_ms=int(body.get("creation_timestamp", 0)),
        )


@dataclass(frozen=True)
class RegisteredModel:
    """A registered model, as ``registered-models/get`` returns it: every alias (name -> version) and its
    tags (``registered_model_tags``), read in one call."""

    name: str
    aliases: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RegisteredModel:
        return cls(
            name=body["name"],
            aliases={a["alias"]: str(a["version"]) for a in body.get("aliases", ())},
            tags={t["key"]: t.get("value", "") for t in body.get("tags", ())},
        )


def artifact_path(uri: str) -> str:
    """The proxied artifact path of an ``mlflow-artifacts:`` URI (with or without a host part)."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme != "mlflow-artifacts":
        raise RegistryError(f"{uri}: not an artifact the registry serves (mlflow-artifacts:)")
    path = parsed.path.lstrip("/")
    if not path or ".." in path.split("/"):
        raise RegistryError(f"{uri}: not a valid artifact path")
    return path


USERNAME_FILE_ENV = "MLFLOW_TRACKING_USERNAME_FILE"
PASSWORD_FILE_ENV = "MLFLOW_TRACKING_PASSWORD_FILE"
UNAUTHORIZED = 401
FORBIDDEN = 403
# The error code of a refusal that explains itself (the registry's alias guard); MLflow's own 403 has none.
PERMISSION_DENIED = "PERMISSION_DENIED"
CA_BUNDLE_ENV = "MLFLOW_TRACKING_SERVER_CERT_PATH"
# Why an admin moves a protected alias (break-glass): sent with each alias set or delete, where the
# registry's guard refuses the admin's move without it (workloads/registry/server/guard.py
# ``BREAK_GLASS_HEADER``; docs/security.md, "Break-glass: the registry's admin moves the champion").
BREAK_GLASS_REASON_ENV = "MLPLATFORM_BREAK_GLASS_REASON"
BREAK_GLASS_HEADER = "X-ML-Platform-Break-Glass-Reason"
# What a caller says of its move of a protected alias (a JSON object: reason, numbers, force), which the
# registry puts on its record event of the move as the caller's claims (guard.py ``_move_claim``): the
# registry decides on the record alone, and only ``force`` (an approver's ``--force``) changes its rule.
MOVE_HEADER = "X-ML-Platform-Move"
ALIAS_ENDPOINT = "registered-models/alias"
# The registry's own route that appends to its lifecycle record (workloads/registry/server/guard.py).
RECORD_ENDPOINT = "mlplatform/record-events"


def tls_context(environ: Mapping[str, str]) -> ssl.SSLContext:
    """Verifying, TLS 1.3 only, against ``$MLFLOW_TRACKING_SERVER_CERT_PATH`` (else the system's CAs);
    ValueError, in one line, when that bundle cannot be read."""
    cafile = environ.get(CA_BUNDLE_ENV) or None
    try:
        context = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"{CA_BUNDLE_ENV}={cafile}: {getattr(exc, 'strerror', None) or exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context


def _credential(environ: Mapping[str, str], name: str, file_env: str) -> str | None:
    """The content of the file ``file_env`` names (trailing newline dropped), else the variable ``name``;
    ValueError, in one line, when the named file cannot be read."""
    if path := environ.get(file_env):
        try:
            return Path(path).read_text().rstrip("\r\n") or None
        except OSError as exc:
            raise ValueError(f"{file_env}={path}: {exc.strerror or exc}") from None
    return environ.get(name)


def credential_source(environ: Mapping[str, str]) -> str:
    """Where the credentials a call sends come from, as the user would fix them: named in every 401."""
    if environ.get("MLFLOW_TRACKING_TOKEN"):
        return "the bearer token in MLFLOW_TRACKING_TOKEN"
    user = environ.get(USERNAME_FILE_ENV) or "MLFLOW_TRACKING_USERNAME"
    password = environ.get(PASSWORD_FILE_ENV) or "MLFLOW_TRACKING_PASSWORD"
    if not (environ.get(USERNAME_FILE_ENV) or environ.get("MLFLOW_TRACKING_USERNAME")):
        return "no credentials (set MLFLOW_TRACKING_USERNAME and _PASSWORD, or their _FILE twins)"
    return f"the user name in {user} and the password in {password}"


def _auth_header(environ: Mapping[str, str]) -> dict[str, str]:
    if token := environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {token}"}
    user = _credential(environ, "MLFLOW_TRACKING_USERNAME", USERNAME_FILE_ENV)
    password = _credential(environ, "MLFLOW_TRACKING_PASSWORD", PASSWORD_FILE_ENV)
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


class RegistryClient:
    """Calls to one MLflow server; each retries transient failures (connection refused, 5xx, 429).
    ValueError when the URI is not http(s), a credentials file cannot be read or the break-glass reason
    is not printable ASCII (an HTTP header's)."""

    def __init__(
        self,
        uri: str,
        *,
        timeout_s: float = 30.0,
        attempts: int = 3,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        parsed = urllib.parse.urlparse(uri)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"registry URI {uri!r} must be http(s)://host[:port]")
        self.uri = uri.rstrip("/")
        self.timeout_s = timeout_s
        self.attempts = attempts
        self._environ = environ
        self._headers = _auth_header(environ)
        self._tls = tls_context(environ) if parsed.scheme == "https" else None
        self._break_glass = environ.get(BREAK_GLASS_REASON_ENV, "").strip()
        if not (self._break_glass.isascii() and self._break_glass.isprintable()):
            raise ValueError(f"{BREAK_GLASS_REASON_ENV} must be printable ASCII (it is sent as a header)")

    # -- transport -------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None,
        extra: Mapping[str, str] | None = None,
    ) -> bytes:
        try:
            return self._send_once(method, path, body, content_type, extra)
        except RegistryError as exc:
            # Credentials from files may have been rotated since they were read: read them again and,
            # if they changed, try once more with the new ones (files mid-update: the 401 stands).
            if exc.status != UNAUTHORIZED:
                raise
            try:
                fresh = _auth_header(self._environ)
            except ValueError:
                raise exc from None
            if fresh == self._headers:
                raise
            self._headers = fresh
            return self._send_once(method, path, body, content_type, extra)

    def _send_once(
        self,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None,
        extra: Mapping[str, str] | None = None,
    ) -> bytes:
        headers = {**self._headers, **(extra or {})}
        if content_type:
            headers["Content-Type"] = content_type
        if self._break_glass and method != "GET" and path.endswith(ALIAS_ENDPOINT):
            headers[BREAK_GLASS_HEADER] = self._break_glass
        request = urllib.request.Request(self.uri + path, data=body, method=method, headers=headers)
        delay = 0.5
        for attempt in range(1, self.attempts + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._tls) as response:
                    data: bytes = response.read()
                    return data
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                if exc.code not in _RETRY_STATUS or attempt == self.attempts:
                    raise self._refusal(_http_error(method, path, exc.code, raw), method, path) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, ssl.SSLCertVerificationError):
                    raise self._unverified(reason) from None
                if attempt == self.attempts:
                    raise RegistryError(f"registry {self.uri} unreachable: {reason}", UNREACHABLE) from None
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # the loop returns or raises

    def _refusal(self, error: RegistryError, method: str, path: str) -> RegistryError:
        """A 401 or 403 reworded to name the credential or the grant to fix (MLflow's basic-auth app answers
        both with a bare "Unauthenticated" / "Permission denied", mlflow/server/auth/__init__.py)."""
        what = path.split("?", 1)[0].removeprefix(API + "/")
        if error.status == UNAUTHORIZED:
            message = (
                f"registry {self.uri} refused {credential_source(self._environ)} (HTTP 401 on {method}"
                f" {what}): the user is unknown or the password or token is wrong"
            )
        elif error.status == FORBIDDEN and error.code == PERMISSION_DENIED:
            # The registry's own rule (workloads/registry/server/guard.py), which names the user and why.
            message = f"registry {self.uri}: {error} (HTTP 403 on {method} {what})"
        elif error.status == FORBIDDEN:
            try:
                who = _credential(self._environ, "MLFLOW_TRACKING_USERNAME", USERNAME_FILE_ENV)
            except ValueError:
                who = None
            who = who or "this caller"
            message = (
                f"registry {self.uri}: user {who} has no grant for {method} {what} (HTTP 403); an admin"
                " grants it with users/permissions/grant (docs/registry.md, Access)"
            )
        elif error.status == 404 and not error.code:
            message = (
                f"registry {self.uri} answered {method} {what} with HTTP 404 ({error}): not an MLflow"
                " server's REST API; check --registry-uri"
            )
        else:
            return error
        return RegistryError(message, error.code, error.status)

    def _unverified(self, error: ssl.SSLCertVerificationError) -> RegistryError:
        """A wrong CA or name: no retry mends it."""
        bundle = self._environ.get(CA_BUNDLE_ENV)
        where = f"{CA_BUNDLE_ENV}={bundle}" if bundle else f"the system's CAs (${CA_BUNDLE_ENV} unset)"
        return RegistryError(
            f"registry {self.uri}: TLS certificate not verified against {where}: "
            f"{error.verify_message or error.reason}",
            "TLS_UNVERIFIED",
        )

    def _call(
        self,
        method: str,
        endpoint: str,
        payload: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        if method == "GET":
            query = "?" + urllib.parse.urlencode(payload) if payload else ""
            raw = self._send("GET", f"{API}/{endpoint}{query}", None, None, headers)
        else:
            raw = self._send(
                method, f"{API}/{endpoint}", json.dumps(payload or {}).encode(), "application/json", headers
            )
        result: dict[str, Any] = json.loads(raw or b"{}")
        return result

    # -- registry --------------------------------------------------------------------------------

    def version_by_alias(self, name: str, alias: str) -> ModelVersion:
        body = self._call("GET", ALIAS_ENDPOINT, {"name": name, "alias": alias})
        return ModelVersion.from_json(body["model_version"])

    def alias_or_none(self, name: str, alias: str) -> ModelVersion | None:
        try:
            return self.version_by_alias(name, alias)
        except RegistryError as exc:
            if exc.not_found:
                return None
            raise

    def current_user(self) -> str:
        """The authenticated caller's user name (MLflow's basic-auth app, ``users/current``); a 404 where
        the registry authenticates nobody."""
        body = self._call("GET", "users/current")
        return str(body["user"]["username"])

    def append_record_event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Have the registry append ``event`` (its kind and body) to its lifecycle record as the caller
        (workloads/registry/record.py ``RegistryRecord``): the event as appended, and the record's URI."""
        return self._call("POST", RECORD_ENDPOINT, event)

    def registry_record(self) -> str:
        """The URI of the lifecycle record the registry appends to, once it has checked it can."""
        return str(self._call("GET", RECORD_ENDPOINT)["record"])

    def model_names(self) -> list[str]:
        """The registered models' names (the first 1,000), for a message naming what exists."""
        body = self._call("GET", "registered-models/search", {"max_results": "1000"})
        return sorted(m["name"] for m in body.get("registered_models", ()))

    def get_version(self, name: str, version: str) -> ModelVersion:
        body = self._call("GET", "model-versions/get", {"name": name, "version": version})
        return ModelVersion.from_json(body["model_version"])

    def registered_model(self, name: str) -> RegisteredModel:
        body = self._call("GET", "registered-models/get", {"name": name})
        return RegisteredModel.from_json(body["registered_model"])

    def resolve(self, ref: ModelRef) -> ModelVersion:
        if ref.alias is not None:
            return self.version_by_alias(ref.name, ref.alias)
        assert ref.version is not None
        return self.get_version(ref.name, ref.version)

    def search_versions(self, name: str, run_id: str | None = None) -> list[ModelVersion]:
        """Every version of ``name`` (of one run, if given), newest first, all pages."""
        query = f"name = '{_quoted(name)}'" + (f" and run_id = '{_quoted(run_id)}'" if run_id else "")
        versions: list[ModelVersion] = []
        token = ""
        while True:
            params = {"filter": query, "max_results": "1000", **({"page_token": token} if token else {})}
            body = self._call("GET", "model-versions/search", params)
            versions += [ModelVersion.from_json(v) for v in body.get("model_versions", ())]
            token = body.get("next_page_token", "")
            if not token:
                break
        # search does not return aliases in 3.17.2; a get per version does.
        return sorted(versions, key=lambda v: int(v.version), reverse=True)

    def ensure_registered_model(self, name: str) -> None:
        try:
            self._call("GET", "registered-models/get", {"name": name})
        except RegistryError as exc:
            if not exc.not_found:
                raise
            try:
                self._call("POST", "registered-models/create", {"name": name})
            except RegistryError as again:  # created meanwhile by another caller
                if again.code != "RESOURCE_ALREADY_EXISTS":
                    raise

    def create_version(self, name: str, source: str, run_id: str, tags: Mapping[str, str]) -> ModelVersion:
        body = self._call(
            "POST",
            "model-versions/create",
            {"name": name, "source": source, "run_id": run_id, "tags": _tag_list(tags)},
        )
        return ModelVersion.from_json(body["model_version"])

    def set_alias(self, name: str, alias: str, version: str, move: Mapping[str, Any] | None = None) -> None:
        """``move``: what the caller says of a move of a protected alias (``MOVE_HEADER``: reason, numbers,
        force), for the registry's record event of it; JSON, ASCII as a header must be."""
        headers = {MOVE_HEADER: json.dumps(dict(move), default=str)} if move else None
        self._call("POST", ALIAS_ENDPOINT, {"name": name, "alias": alias, "version": version}, headers)

    def set_version_tag(self, name: str, version: str, key: str, value: str) -> None:
        self._call(
            "POST", "model-versions/set-tag", {"name": name, "version": version, "key": key, "value": value}
        )

    def set_model_tag(self, name: str, key: str, value: str) -> None:
        self._call("POST", "registered-models/set-tag", {"name": name, "key": key, "value": value})

    def delete_model_tag(self, name: str, key: str) -> None:
        self._call("DELETE", "registered-models/delete-tag", {"name": name, "key": key})

    # -- tracking --------------------------------------------------------------------------------

    def experiment_id(self, name: str) -> str:
        """The experiment called ``name``, created if missing."""
        try:
            body = self._call("GET", "experiments/get-by-name", {"experiment_name": name})
            return str(body["experiment"]["experiment_id"])
        except RegistryError as exc:
            if not exc.not_found:
                raise
        try:
            return str(self._call("POST", "experiments/create", {"name": name})["experiment_id"])
        except RegistryError as exc:
            if exc.code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self.experiment_id(name)

    def find_run(self, experiment_id: str, tag: str, value: str) -> dict[str, Any] | None:
        """The newest run of the experiment whose tag ``tag`` equals ``value``."""
        body = self._call(
            "POST",
            "runs/search",
            {
                "experiment_ids": [experiment_id],
                "filter": f"tags.`{tag}` = '{_quoted(value)}'",
                "max_results": 1,
                "order_by": ["attributes.start_time DESC"],
            },
        )
        runs: list[dict[str, Any]] = body.get("runs", [])
        return runs[0] if runs else None

    def create_run(self, experiment_id: str, run_name: str, tags: Mapping[str, str]) -> dict[str, Any]:
        body = self._call(
            "POST",
            "runs/create",
            {
                "experiment_id": experiment_id,
                "run_name": run_name,
                "start_time": int(time.time() * 1000),
                "tags": _tag_list(tags),
            },
        )
        run: dict[str, Any] = body["run"]
        return run

    def get_run(self, run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self._call("GET", "runs/get", {"run_id": run_id})["run"]
        return run

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: Mapping[str, float] | None = None,
        step: int = 0,
        params: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        now = int(time.time() * 1000)
        self._call(
            "POST",
            "runs/log-batch",
            {
                "run_id": run_id,
                "metrics": [
                    {"key": k, "value": v, "timestamp": now, "step": step} for k, v in (metrics or {}).items()
                ],
                "params": [{"key": k, "value": v} for k, v in (params or {}).items()],
                "tags": _tag_list(tags or {}),
            },
        )

    def log_dataset(self, run_id: str, dataset: Mapping[str, str], context: str) -> None:
        """One MLflow dataset input (name, digest, source_type, source, optional schema/profile)."""
        self._call(
            "POST",
            "runs/log-inputs",
            {
                "run_id": run_id,
                "datasets": [
                    {"dataset": dict(dataset), "tags": [{"key": "mlflow.data.context", "value": context}]}
                ],
            },
        )

    def finish_run(self, run_id: str, status: str = "FINISHED") -> None:
        self._call(
            "POST", "runs/update", {"run_id": run_id, "status": status, "end_time": int(time.time() * 1000)}
        )

    # -- artifacts -------------------------------------------------------------------------------

    def upload(self, artifact_uri: str, local: Path) -> None:
        """Upload every file of the directory ``local`` under ``artifact_uri`` (one level deep)."""
        base = artifact_path(artifact_uri)
        for path in sorted(p for p in local.iterdir() if p.is_file() and not p.name.startswith(".")):
            target = urllib.parse.quote(f"{base}/{path.name}")
            self._send("PUT", f"{ARTIFACTS}/{target}", path.read_bytes(), "application/octet-stream")

    def read_artifact(self, artifact_uri: str) -> bytes:
        """One file the registry serves (``mlflow-artifacts:`` URI)."""
        return self._send("GET", f"{ARTIFACTS}/{urllib.parse.quote(artifact_path(artifact_uri))}", None, None)

    def list_files(self, artifact_uri: str) -> list[str]:
        """The names of the files directly under ``artifact_uri`` (relative to it)."""
        base = artifact_path(artifact_uri)
        raw = self._send("GET", f"{ARTIFACTS}?{urllib.parse.urlencode({'path': base})}", None, None)
        return [f["path"] for f in json.loads(raw or b"{}").get("files", ()) if not f.get("is_dir")]

    def download(self, artifact_uri: str, destination: Path) -> Path:
        """Download the files under ``artifact_uri`` into ``destination`` (created; replaced if there),
        through a staging directory renamed into place, so a partial download is never a directory a
        reader could take for a model."""
        base = artifact_path(artifact_uri)
        staging = destination.with_name(f".{destination.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            for name in self.list_files(artifact_uri):
                if "/" in name or name.startswith("."):
                    raise RegistryError(f"{artifact_uri}: unexpected artifact name {name!r}")
                data = self._send("GET", f"{ARTIFACTS}/{urllib.parse.quote(f'{base}/{name}')}", None, None)
                (staging / name).write_bytes(data)
            shutil.rmtree(destination, ignore_errors=True)
            staging.rename(destination)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return destination


def _quoted(value: str) -> str:
    """A value inside a single-quoted MLflow search filter."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"key": k, "value": v} for k, v in tags.items()]


def _http_error(method: str, path: str, status: int, raw: bytes) -> RegistryError:
    try:
        body = json.loads(raw)
        return RegistryError(body.get("message", raw.decode()), body.get("error_code", ""), status)
    except (ValueError, UnicodeDecodeError):
        return RegistryError(f"{method} {path}: HTTP {status}", "", status)
