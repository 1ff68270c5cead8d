"""The registry image: its Dockerfile passes hadolint and pins the MLflow the objects name, and its
launcher builds MLflow's command and configuration as MLflow 3.17.2 reads them (mlflow/cli/__init__.py:
``--backend-store-uri`` from ``MLFLOW_BACKEND_STORE_URI``, ``--serve-artifacts``,
``--artifacts-destination``, ``--app-name``; mlflow/server/auth/config.py: the ``[mlflow]`` section's
``default_permission``, ``database_uri``, ``admin_username``, ``authorization_function``)."""

from __future__ import annotations

import configparser
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from mlflow.server.auth.config import read_auth_config

from components.kubernetes.registry import MLFLOW_VERSION, PORT
from tests.linters import hadolint, needs_hadolint
from workloads.registry.server.launch import (
    AUTH_CACHE_TTL_S,
    admin_env,
    backend_uri,
    install_password_refresh,
    server_argv,
    upgrade,
    write_auth_config,
)
from workloads.registry.server.launch import PORT as LAUNCH_PORT

REGISTRY = Path(__file__).resolve().parents[3] / "workloads" / "registry" / "server"
ARN = "arn:aws:secretsmanager:me-central-1:123456789012:secret:rds!db-1"
POSTGRES = {
    "REGISTRY_DB_HOST": "db.internal",
    "REGISTRY_DB_PORT": "5432",
    "REGISTRY_DB_NAME": "mlflow",
    "REGISTRY_DB_USER": "mlflow",
    "REGISTRY_DB_SECRET_ARN": ARN,
}


@needs_hadolint
def test_hadolint_is_clean() -> None:
    done = hadolint(REGISTRY / "Dockerfile")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_pins_the_mlflow_the_objects_name_and_runs_non_root() -> None:
    requirements = (REGISTRY / "requirements.txt").read_text()
    assert re.search(rf"^mlflow\[auth,azure\]=={re.escape(MLFLOW_VERSION)}$", requirements, re.MULTILINE)
    pins = [line for line in requirements.splitlines() if line and not line.startswith("#")]
    assert all("==" in pin for pin in pins), pins
    final = (REGISTRY / "Dockerfile").read_text().split("\nFROM ")[-1]
    assert re.search(r"^USER 10001:10001$", final, flags=re.MULTILINE)
    assert "pip install" not in final
    assert PORT == LAUNCH_PORT


def test_postgres_uri_reads_the_password_at_start_quoted_and_over_tls() -> None:
    asked: list[str] = []

    def secret(arn: str) -> str:
        asked.append(arn)
        return "p@ss/w:rd"

    uri = backend_uri(POSTGRES, secret)
    parts = urlsplit(uri)
    assert asked == [ARN]
    assert parts.scheme == "postgresql+psycopg2" and parts.hostname == "db.internal" and parts.port == 5432
    assert unquote(parts.password or "") == "p@ss/w:rd"
    # AWS: the name verified against the vendored RDS roots (AWS review N7), which the image copies.
    assert parse_qs(parts.query) == {
        "sslmode": ["verify-full"],
        "sslrootcert": [str(REGISTRY / "rds-ca-me-central-1.pem")],
    }


def test_sqlite_uri_is_an_absolute_path() -> None:
    uri = backend_uri({"REGISTRY_SQLITE_PATH": "/var/lib/registry/registry/mlflow.db"})
    assert uri == "sqlite:////var/lib/registry/registry/mlflow.db"


def test_auth_config_keeps_users_in_the_registry_database_and_no_password(tmp_path: Path) -> None:
    path = write_auth_config("postgresql+psycopg2://u:p@h:5432/mlflow", tmp_path)
    config = configparser.ConfigParser()
    config.read(path)
    section = config["mlflow"]
    assert section["database_uri"] == "postgresql+psycopg2://u:p@h:5432/mlflow"
    assert section["default_permission"] == "READ" and section["admin_username"] == "admin"
    assert "admin_password" not in section
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_verified_credential_is_trusted_for_the_cache_window_as_mlflow_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow's own reader (mlflow/server/auth/config.py 3.17.2) turns the credential cache on: 0, its
    default, would scrypt-hash every request's password (docs/registry.md, "Access")."""
    path = write_auth_config("sqlite:///x.db", tmp_path)
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(path))
    monkeypatch.setenv("MLFLOW_AUTH_ADMIN_PASSWORD", "an-admin-password-1")
    assert read_auth_config().auth_cache_ttl_seconds == AUTH_CACHE_TTL_S == 30


def test_server_serves_artifacts_and_authenticates_when_asked() -> None:
    env = {"REGISTRY_ARTIFACTS_DESTINATION": "s3://bucket/registry/", "REGISTRY_WORKERS": "2"}
    argv = server_argv({**env, "REGISTRY_AUTH": "true"})
    assert argv[:2] == ["mlflow", "server"] and "--serve-artifacts" in argv
    assert argv[argv.index("--artifacts-destination") + 1] == "s3://bucket/registry/"
    assert argv[argv.index("--workers") + 1] == "2" and argv[argv.index("--port") + 1] == str(PORT)
    assert argv[argv.index("--app-name") + 1] == "basic-auth"
    assert "--app-name" not in server_argv({**env, "REGISTRY_AUTH": "false"})
    assert not any("postgresql" in word for word in argv), "the URI travels in the environment"


def test_upgrade_migrates_both_schemas_in_this_process(tmp_path: Path) -> None:
    """The tracking schema, then the basic-auth app's (its own ``alembic_version_auth``), through MLflow's
    own click commands in this process: no command line carries the URI and its password, which a failed
    ``subprocess.run(check=True)`` printed (registry review C1)."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    upgrade(uri, {"REGISTRY_AUTH": "true"})
    tables = set(sqlalchemy.inspect(sqlalchemy.create_engine(uri)).get_table_names())
    assert {
        "registered_models",
        "model_versions",
        "alembic_version",
        "users",
        "alembic_version_auth",
    } <= tables


def test_the_admin_secret_files_become_the_variables_mlflow_reads(tmp_path: Path) -> None:
    (tmp_path / "password").write_text("s3cret\n")
    (tmp_path / "flask-secret-key").write_text("csrf")
    assert admin_env(tmp_path) == {
        "MLFLOW_AUTH_ADMIN_PASSWORD": "s3cret",
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "csrf",
    }


def test_every_new_connection_takes_the_current_password() -> None:
    """After a rotation, a connection opened later uses the new password (SQLAlchemy ``do_connect``,
    listened to on the Engine class, so every engine of the process)."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    passwords = iter(["before", "after"])
    assert install_password_refresh({}, lambda arn: "unused") is None
    listener = install_password_refresh({"REGISTRY_DB_SECRET_ARN": ARN}, lambda arn: next(passwords))
    assert listener is not None
    try:
        engine = sqlalchemy.create_engine("sqlite://")
        seen = []
        for _ in range(2):
            params: dict[str, object] = {"password": "stale"}
            engine.dialect.dispatch.do_connect(engine.dialect, None, [], params)
            seen.append(params["password"])
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "do_connect", listener)
    assert seen == ["before", "after"]


def test_an_azure_database_takes_an_entra_token_for_every_connection() -> None:
    """Azure Database for PostgreSQL with Entra authentication takes an access token for
    https://ossrdbms-aad.database.windows.net/.default as the password (Microsoft Entra authentication
    with Azure Database for PostgreSQL flexible server); the user is the identity's principal name."""
    env = {
        **{k: v for k, v in POSTGRES.items() if k != "REGISTRY_DB_SECRET_ARN"},
        "REGISTRY_DB_ENTRA": "true",
    }
    env["REGISTRY_DB_USER"] = "registry-identity"
    scopes: list[str] = []

    def token(scope: str) -> str:
        scopes.append(scope)
        return "eyJ.token/+="

    uri = backend_uri(env, token)
    assert uri.startswith("postgresql+psycopg2://registry-identity:eyJ.token%2F%2B%3D@")
    # Azure: the name verified against the system's roots (DigiCert Global Root G2, Microsoft RSA Root
    # Certificate Authority 2017; Azure review D4).
    assert uri.endswith("?sslmode=verify-full&sslrootcert=%2Fetc%2Fssl%2Fcerts%2Fca-certificates.crt")
    assert scopes == ["https://ossrdbms-aad.database.windows.net/.default"]


def _runtime_env() -> dict[str, str]:
    """The ENV of the Dockerfile's last stage (``KEY=value`` pairs, continued lines joined)."""
    text = (REGISTRY / "Dockerfile").read_text().replace("\\\n", " ")
    last = text.rsplit("\nFROM ", 1)[1]
    found: dict[str, str] = {}
    for line in last.splitlines():
        if line.startswith("ENV "):
            found |= dict(pair.split("=", 1) for pair in line[4:].split())
    return found


def _telemetry_disabled(env: dict[str, str]) -> bool:
    """MLflow's own switch (mlflow/telemetry/utils.py ``is_telemetry_disabled``), in a clean process: no
    CI or pytest variables, which MLflow also reads as "off"."""
    keep = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    code = "from mlflow.telemetry.utils import is_telemetry_disabled as off; print(off())"
    result = subprocess.run(
        [sys.executable, "-c", code], env={**keep, **env}, capture_output=True, text=True, check=True
    )
    return result.stdout.strip().splitlines()[-1] == "True"


def test_the_image_keeps_mlflow_telemetry_inside(tmp_path: Path) -> None:
    """MLflow 3.17.2 sends usage telemetry to a service outside the UAE unless told not to (registry
    review C2); the image's environment tells it."""
    env = {k: v for k, v in _runtime_env().items() if "$" not in v}
    assert _telemetry_disabled(env)
    assert not _telemetry_disabled(
        {k: v for k, v in env.items() if k not in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")}
    )


def test_the_vendored_rds_roots_are_the_sourced_ones() -> None:
    """The image's RDS CA file is exactly what its SOURCE note records (sha256, the three me-central-1
    G1 roots, self-signed, valid now): an edit to one without the other fails here."""
    import datetime
    import hashlib

    from cryptography import x509
    from cryptography.x509.oid import NameOID

    pem = (REGISTRY / "rds-ca-me-central-1.pem").read_bytes()
    source = (REGISTRY / "rds-ca-me-central-1.SOURCE.md").read_text()
    assert f"sha256 `{hashlib.sha256(pem).hexdigest()}`" in source
    now = datetime.datetime.now(datetime.UTC)
    names = []
    for cert in x509.load_pem_x509_certificates(pem):
        name = str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)
        assert cert.issuer == cert.subject and cert.not_valid_before_utc < now < cert.not_valid_after_utc
        assert f"| {name} | {cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} GMT" in source
        names.append(name)
    assert names == [
        f"Amazon RDS me-central-1 Root CA {kind} G1" for kind in ("RSA2048", "RSA4096", "ECC384")
    ]
