"""A real MLflow 3.17.2 server on loopback, once per session: SQLite backend, local artifacts it serves
itself (``--serve-artifacts``), in its own process group (``start_new_session``) killed at teardown.

Job execution off (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``, mlflow/environment_variables.py): the
server would otherwise start Huey consumer processes for its background jobs, which the registry does
not use and which would outlive a plain kill of the server.

A second one, ``auth_registry_uri``, runs MLflow's basic-auth app as enterprise registries do, with the
image's authorization function (workloads/registry/server/guard.py: only ``PROMOTERS`` and the admin move
``@champion``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import mlplatform.plan
from components.config import PLATFORM_KEY
from components.kubernetes.registry import (
    APPROVAL_ENV,
    APPROVERS_ENV,
    PROMOTERS_ENV,
    RESTORERS_ENV,
    ROLLOUT_USER_ENV,
)
from mlplatform.cli import app
from mlplatform.plan import Target, resolve_target
from tests import once
from tests.stack_variants import template
from tests.workloads.inference.serving import free_port
from workloads.artifacts import METADATA_FILE, load_metadata, write_metadata
from workloads.registry.client import BREAK_GLASS_REASON_ENV, RegistryClient
from workloads.registry.record import REGISTRY_RECORD_ENV
from workloads.registry.server.launch import write_auth_config

MLFLOW = str(Path(sys.executable).with_name("mlflow"))
REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 60


ADMIN_PASSWORD = "admin-password-for-tests"
# The tests' own admin moves of a protected alias (seeding a champion) are break-glass moves: they name why.
SETUP_REASON = "test setup: seed the served version"


def admin_client(uri: str, reason: str | None = SETUP_REASON) -> RegistryClient:
    """The registry's admin, naming ``reason`` for its moves of the protected aliases (none: no reason)."""
    environ = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": ADMIN_PASSWORD}
    if reason is not None:
        environ[BREAK_GLASS_REASON_ENV] = reason
    return RegistryClient(uri, environ=environ)


# The image's /app: launch.py, guard.py (the authorization function) and sitecustomize.py.
SERVER_DIR = REPO / "workloads" / "registry" / "server"
# The promotion identities of the shared basic-auth server: a rollout's user (test_users_bootstrap.py), the
# stack's rollout user, drift monitor and approver (test_promotion_guard.py), and the approvers of
# test_lifecycle.py's governed stack.
PROMOTERS = (
    "rollout-b",
    "ml-inference-rollout",
    "approver-ana",
    "alice",
    "carol",
)
# The users that may only roll @champion back: the stack's drift monitor (test_promotion_guard.py).
RESTORERS = ("ml-inference-drift-monitor",)
# The approver role of the shared server (test_promotion_guard.py's approver, test_lifecycle.py's governed
# stack), whose approval a promotion needs (``promotionApproval``), and the stack's rollout user: the server
# decides each move of @champion on the record as ``mlplatform models promote --stack governed`` does.
APPROVERS = ("alice", "approver-ana", "carol")
ROLLOUT_USER = "ml-inference-rollout"


DATABASE = "mlflow.db"
# The registry's migration (launch.py ``upgrade``: the tracking schema, then the basic-auth app's), as the
# stack's migration Job runs it before any server starts (components/kubernetes/registry.py).
MIGRATE = (
    "import sys; from workloads.registry.server.launch import upgrade; "
    "upgrade(sys.argv[1], {'REGISTRY_AUTH': 'true'})"
)


def _migrate(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    uri = f"sqlite:///{folder / DATABASE}"
    done = subprocess.run(
        [sys.executable, "-c", MIGRATE, uri],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def migrated_database(root: Path) -> str:
    """``root/mlflow.db``, a copy of a database migrated once per test run (tests/once.py) by the registry's
    own migration, and its URI: a server started on it skips MLflow's migrations from an empty database,
    about 1.5 CPU-s a start, as the stack's servers start on the schema the migration Job made."""
    template = once.folder("mlflow-database", _migrate, root / "template")
    shutil.copyfile(template / DATABASE, root / DATABASE)
    return f"sqlite:///{root / DATABASE}"


def _serve(root: Path, extra_args: list[str], extra_env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **extra_env}
    command = [MLFLOW, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    command += ["--backend-store-uri", migrated_database(root)]
    command += ["--artifacts-destination", str(root / "artifacts"), "--serve-artifacts", *extra_args]
    log = root / "server.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise AssertionError(f"mlflow server exited {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"mlflow server not up in {START_TIMEOUT_S}s:\n{log.read_text()[-3000:]}"
                )
            time.sleep(0.2)
        yield uri
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@pytest.fixture(scope="session")
def registry_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _serve(tmp_path_factory.mktemp("mlflow"), [], {})


@pytest.fixture(scope="session")
def auth_record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lifecycle record the basic-auth server appends to (``REGISTRY_RECORD``), a directory: its callers
    append through the registry (workloads/registry/record.py ``RegistryRecord``) and read it here. Each
    test's model has its own name, so its events are its own."""
    return tmp_path_factory.mktemp("auth-record")


@pytest.fixture(scope="session")
def auth_registry_uri(tmp_path_factory: pytest.TempPathFactory, auth_record: Path) -> Iterator[str]:
    """The same server with MLflow's basic-auth app, configured as the registry's launcher configures it
    (``write_auth_config``: users in the same database, authenticated users read by default), the admin
    ``admin`` with ``ADMIN_PASSWORD`` (``MLFLOW_AUTH_ADMIN_PASSWORD``, mlflow/server/auth/config.py), the
    lifecycle record ``auth_record``."""
    root = tmp_path_factory.mktemp("mlflow-auth")
    config = write_auth_config(f"sqlite:///{root / DATABASE}", root)
    env = {
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "csrf-key-for-tests",
        # The image's /app: guard.py, and the record's writer under workloads/ (its Dockerfile's COPY lines).
        "PYTHONPATH": os.pathsep.join((str(SERVER_DIR), str(REPO))),
        REGISTRY_RECORD_ENV: str(auth_record),
        PROMOTERS_ENV: json.dumps(PROMOTERS),
        RESTORERS_ENV: json.dumps(RESTORERS),
        APPROVERS_ENV: json.dumps(APPROVERS),
        APPROVAL_ENV: "true",
        ROLLOUT_USER_ENV: ROLLOUT_USER,
    }
    yield from _serve(root, ["--app-name", "basic-auth"], env)


def named_version(source: Path, dest: Path, name: str) -> Path:
    """``source``'s version files under the model name ``name`` (the servers' series carry it, and the
    rollout reads them by the registered name), every file hashed into its metadata as the trainer does."""
    dest.mkdir()
    for path in source.iterdir():
        if path.name != METADATA_FILE:
            (dest / path.name).write_bytes(path.read_bytes())
    write_metadata(dest, load_metadata(source).model_copy(update={"name": name}))
    return dest


def register_version(
    client: RegistryClient, name: str, version_dir: Path, *, as_trained: bool = False
) -> str:
    """``version_dir`` registered as a new version of ``name``; ``as_trained``: its run also carries the
    version's metrics and its dataset's digest (``dataset_sha256``), as a training run's does
    (workloads/registry/lineage.py), so a promotion can compare it with another version's."""
    client.ensure_registered_model(name)
    run = client.create_run(client.experiment_id(name), name, {})
    if as_trained:
        meta = load_metadata(version_dir)
        params = {"dataset_sha256": meta.dataset.sha256}
        client.log_batch(run["info"]["run_id"], metrics=meta.metrics, params=params)
    source = run["info"]["artifact_uri"] + "/model"
    client.upload(source, version_dir)
    return client.create_version(name, source, run["info"]["run_id"], {}).version


def with_metadata(client: RegistryClient, source: str, content: str) -> str:
    """``source`` with a ``metadata.json`` of ``content`` uploaded under it: what a version's digest is taken
    of (record.py ``version_digest``), which the registry reads to tell the record's events of a version
    (guard.py ``move_decision``), as every version ``mlplatform train`` registers has one."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / METADATA_FILE).write_text(content)
        client.upload(source, Path(folder))
    return source


# The people of the governed stack (``governed_stack``) and of the drift monitor's lifecycle: bob trains,
# carol requests, alice approves (carol and alice: the approver role, and ``PROMOTERS``).
PASSWORDS = {"bob": "bob-trains-models", "carol": "carol-requests-it", "alice": "alice-approves-it"}


@pytest.fixture
def governed_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """``--stack governed``: an SMB template with approval required and the approver role alice, carol."""
    config = template("aws-smb-dev")
    registry = {"promotionApproval": True, "approvers": ["alice", "carol"]}
    config[PLATFORM_KEY].setdefault("workloads", {})["registry"] = registry
    path = tmp_path / "Pulumi.governed.yaml"
    path.write_text(yaml.safe_dump({"config": config}))

    def resolve(stack: str | None = None, **_: Any) -> Target:
        return resolve_target(stack_file=path) if stack == "governed" else resolve_target(stack)

    monkeypatch.setattr(mlplatform.plan, "resolve_target", resolve)
    return "governed"


def as_user(user: str, uri: str, record: Path, *args: str) -> Any:
    """``mlplatform models ARGS`` as ``user`` (``PASSWORDS``) against ``uri``, recorded in ``record``."""
    env = {
        "MLFLOW_TRACKING_USERNAME": user,
        "MLFLOW_TRACKING_PASSWORD": PASSWORDS[user],
        "USER": "someone-else",
    }
    command = ["models", *args, "--registry-uri", uri, "--record", str(record)]
    return CliRunner().invoke(app, command, env=env)
