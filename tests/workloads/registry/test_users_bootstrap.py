"""The launcher's user bootstrap against a real MLflow 3.17.2 basic-auth server (conftest.py).

What it must do (docs/registry.md, "Access"): create each caller's user with the password of its Secret,
grant each the least permission it needs on the model through the basic-auth app's REST API
(mlflow/server/auth/routes.py 3.17.2: ``users/create``, ``users/update-password``, API 3.0
``users/permissions/grant|revoke|list``), change nothing on a second start, and rotate a password the
Secret changed. What the permissions must mean (mlflow/server/auth/__init__.py 3.17.2):
``SetRegisteredModelAlias`` needs ``can_update`` on the model (``validate_can_set_model_or_prompt_version_
alias``), as does ``SetRegisteredModelTag`` (``_validate_can_update_registered_model_or_prompt``); READ has
no ``can_update``, EDIT has (mlflow/server/auth/permissions.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.workloads.inference.serving import free_port
from workloads.registry.client import RegistryClient, RegistryError
from workloads.registry.server.launch import (
    CURRENT_USER,
    LIST_PERMISSIONS,
    AuthApi,
    User,
    bootstrap_users,
    write_auth_config,
)

from .conftest import ADMIN_PASSWORD, MLFLOW

MODEL = "bootstrap-model"
TRAINING = User("ml-training-b", "training-password-1", ((MODEL, "EDIT"),))
INFERENCE = User("ml-inference-b", "inference-password-1", ((MODEL, "READ"),))
ROLLOUT = User("rollout-b", "rollout-password-1", ((MODEL, "EDIT"),))
TEAM = User("team-vision-b", "team-password-0001")
USERS = [TRAINING, INFERENCE, ROLLOUT, TEAM]
SET_MODEL_TAG = "/api/2.0/mlflow/registered-models/set-tag"


class _Credentials(dict[str, str]):
    """A caller's environment with its user name and password (what its mounted Secret gives)."""

    def __init__(self, user: User) -> None:
        super().__init__(MLFLOW_TRACKING_USERNAME=user.username, MLFLOW_TRACKING_PASSWORD=user.password)


def _client(uri: str, user: User) -> RegistryClient:
    return RegistryClient(uri, environ=_Credentials(user), attempts=1)


def _grants(api: AuthApi, user: User) -> dict[str, str]:
    rows = api.ok("GET", LIST_PERMISSIONS, {"username": user.username})["permissions"]
    assert isinstance(rows, list)
    return {r["resource_pattern"]: r["permission"] for r in rows if r["resource_type"] == "registered_model"}


@pytest.fixture(scope="module")
def bootstrapped(auth_registry_uri: str) -> tuple[AuthApi, list[str], list[str]]:
    api = AuthApi(auth_registry_uri, ADMIN_PASSWORD)
    first = bootstrap_users(api, USERS)
    second = bootstrap_users(api, USERS)
    return api, first, second


def test_the_first_start_creates_each_user_with_its_grants(
    bootstrapped: tuple[AuthApi, list[str], list[str]],
) -> None:
    api, first, _ = bootstrapped
    assert {c for c in first if c.startswith("created")} == {f"created user {u.username}" for u in USERS}
    for user in USERS:
        assert api.call("GET", CURRENT_USER, credentials=(user.username, user.password))[0] == 200
        assert _grants(api, user) == dict(user.grants)


def test_a_second_start_changes_nothing(bootstrapped: tuple[AuthApi, list[str], list[str]]) -> None:
    assert bootstrapped[2] == []


def test_read_cannot_move_an_alias_and_edit_can_move_it_and_tag_the_model(
    auth_registry_uri: str, bootstrapped: tuple[AuthApi, list[str], list[str]]
) -> None:
    api = bootstrapped[0]
    # Training registers a version (as the trainer does): it creates the model, so it owns it (MANAGE).
    training = _client(auth_registry_uri, TRAINING)
    run = training.create_run(training.experiment_id("bootstrap"), "run-1", {})
    training.ensure_registered_model(MODEL)
    version = training.create_version(MODEL, run["info"]["artifact_uri"], run["info"]["run_id"], {})

    with pytest.raises(RegistryError) as refused:
        _client(auth_registry_uri, INFERENCE).set_alias(MODEL, "champion", version.version)
    assert refused.value.status == 403
    tag = {"name": MODEL, "key": "mlplatform.rollout", "value": "paused"}
    reader = (INFERENCE.username, INFERENCE.password)
    assert api.call("POST", SET_MODEL_TAG, tag, credentials=reader)[0] == 403

    _client(auth_registry_uri, ROLLOUT).set_alias(MODEL, "champion", version.version)
    assert training.version_by_alias(MODEL, "champion").version == version.version
    assert api.call("POST", SET_MODEL_TAG, tag, credentials=(ROLLOUT.username, ROLLOUT.password))[0] == 200

    # The creator's MANAGE is stronger than the declared EDIT: the next start keeps it and writes nothing.
    assert _grants(api, TRAINING)[MODEL] == "MANAGE"
    assert bootstrap_users(api, USERS) == []


def test_a_rotated_password_is_set_and_the_old_one_refused(
    bootstrapped: tuple[AuthApi, list[str], list[str]],
) -> None:
    api = bootstrapped[0]
    rotated = User(TEAM.username, "team-password-0002", TEAM.grants)
    assert bootstrap_users(api, [rotated]) == [f"updated the password of {TEAM.username}"]
    assert api.call("GET", CURRENT_USER, credentials=(TEAM.username, rotated.password))[0] == 200
    assert api.call("GET", CURRENT_USER, credentials=(TEAM.username, TEAM.password))[0] == 401
    assert bootstrap_users(api, [rotated]) == []


# The launcher as the pod runs it (``serve_and_bootstrap``): the server its child, the users bootstrapped
# once it answers, SIGTERM passed on; a failed bootstrap stops the server and fails the start.
SUPERVISOR = """
import json, os, sys
from workloads.registry.server.launch import User, serve_and_bootstrap
spec = json.loads(sys.argv[1])
users = [User(name, password) for name, password in spec["users"]]
sys.exit(serve_and_bootstrap(spec["command"], {**os.environ, **spec["env"]}, users, spec["local"]))
"""


def _supervise(root: Path, users: list[User]) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    config = write_auth_config(f"sqlite:///{root / 'mlflow.db'}", root)
    command = [MLFLOW, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    command += ["--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--app-name", "basic-auth"]
    command += ["--artifacts-destination", str(root / "artifacts"), "--serve-artifacts"]
    env = {
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "csrf-key-for-tests",
    }
    local = f"http://127.0.0.1:{port}"
    spec = {
        "command": command,
        "env": env,
        "users": [(u.username, u.password) for u in users],
        "local": local,
    }
    process = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        start_new_session=True,
    )
    return process, local


def _stop(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def _serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2):
            return True
    except OSError:
        return False


def _logs_in(api: AuthApi, user: User) -> bool:
    try:
        return api.call("GET", CURRENT_USER, credentials=(user.username, user.password))[0] == 200
    except OSError:  # not listening yet
        return False


def test_the_launcher_bootstraps_its_child_server_and_passes_sigterm_on(tmp_path: Path) -> None:
    user = User("ml-training-s", "supervised-password-1")
    process, local = _supervise(tmp_path, [user])
    try:
        api, deadline = AuthApi(local, ADMIN_PASSWORD), time.monotonic() + 90
        while not _logs_in(api, user):
            assert process.poll() is None and time.monotonic() < deadline, (
                process.stdout and process.stdout.read()
            )
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        assert (
            process.stdout is not None
            and "registry users: created user ml-training-s" in process.stdout.read()
        )
        assert not _serving(local)
    finally:
        _stop(process)


def test_a_failed_bootstrap_stops_the_server_and_fails_the_start(tmp_path: Path) -> None:
    # MLflow refuses a password under 12 characters (mlflow/utils/validation.py ``_validate_password``).
    process, local = _supervise(tmp_path, [User("ml-inference-s", "too-short")])
    try:
        process.wait(90)
        assert process.returncode == 1
        assert process.stdout is not None and "users/create: HTTP 400" in process.stdout.read()
        assert not _serving(local)
    finally:
        _stop(process)
