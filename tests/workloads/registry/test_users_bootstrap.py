"""The launcher's user bootstrap against a real MLflow 3.17.2 basic-auth server (conftest.py).

What it must do (docs/registry.md, "Access"): create each caller's user with the password of its Secret,
grant each the least permission it needs on the model through the basic-auth app's REST API
(mlflow/server/auth/routes.py 3.17.2: ``users/create``, ``users/update-password``, API 3.0
``users/permissions/grant|revoke|list``), change nothing on a second start, rotate a password the
Secret changed, and delete every user neither the admin nor declared (``users/list``, ``users/delete``).
What the permissions must mean (mlflow/server/auth/__init__.py 3.17.2):
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
from collections.abc import Mapping
from pathlib import Path

import pytest

from components.handle import WORKLOAD_IDENTITIES
from components.kubernetes.registry import allowed_hosts
from tests.workloads.inference.serving import free_port
from workloads.registry.client import RegistryClient, RegistryError
from workloads.registry.lineage import experiment_name
from workloads.registry.server.launch import (
    ADMIN_REFUSED,
    ADMIN_USERNAME,
    CREATE_EXPERIMENT,
    CREATE_MODEL,
    CREATE_USER,
    CURRENT_USER,
    DELETE_USER,
    GRANT,
    LIST_PERMISSIONS,
    LIST_USERS,
    PORT,
    AuthApi,
    User,
    bootstrap_users,
    local_url,
    prune_users,
    write_auth_config,
)

from .conftest import ADMIN_PASSWORD, DATABASE, MLFLOW, SERVER_DIR, migrated_database

pytestmark = pytest.mark.slow

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
    assert {c for c in first if c.startswith("created")} == {
        f"created registered model {MODEL}",  # by the admin: no caller gets a creator's MANAGE on it
        *(f"created user {u.username}" for u in USERS),
    }
    for user in USERS:
        assert api.call("GET", CURRENT_USER, credentials=(user.username, user.password))[0] == 200
        assert _grants(api, user) == dict(user.grants)


def test_a_second_start_changes_nothing(bootstrapped: tuple[AuthApi, list[str], list[str]]) -> None:
    assert bootstrapped[2] == []


def test_read_cannot_move_an_alias_and_edit_can_move_it_and_tag_the_model(
    auth_registry_uri: str, bootstrapped: tuple[AuthApi, list[str], list[str]]
) -> None:
    api = bootstrapped[0]
    # Training registers a version (as the trainer does) on the model the launcher made.
    training = _client(auth_registry_uri, TRAINING)
    run = training.create_run(training.experiment_id("bootstrap"), "run-1", {})
    training.ensure_registered_model(MODEL)
    version = training.create_version(MODEL, run["info"]["artifact_uri"], run["info"]["run_id"], {})

    # ``challenger``: an alias MLflow's own grants decide (the protected ones are the guard's too).
    with pytest.raises(RegistryError) as refused:
        _client(auth_registry_uri, INFERENCE).set_alias(MODEL, "challenger", version.version)
    assert refused.value.status == 403
    tag = {"name": MODEL, "key": "mlplatform.rollout", "value": "paused"}
    reader = (INFERENCE.username, INFERENCE.password)
    assert api.call("POST", SET_MODEL_TAG, tag, credentials=reader)[0] == 403

    _client(auth_registry_uri, ROLLOUT).set_alias(MODEL, "challenger", version.version)
    assert training.version_by_alias(MODEL, "challenger").version == version.version
    assert api.call("POST", SET_MODEL_TAG, tag, credentials=(ROLLOUT.username, ROLLOUT.password))[0] == 200

    # The admin made the model: training holds the declared EDIT, and the next start writes nothing.
    assert _grants(api, TRAINING)[MODEL] == "EDIT"
    assert bootstrap_users(api, USERS) == []


def test_a_creators_manage_on_a_declared_model_is_taken_back_to_the_declared_grant(
    auth_registry_uri: str,
) -> None:
    """A stack from before this release: training's first registration created the model and got MANAGE
    (``set_can_manage_registered_model_permission``), which deletes its versions and aliases and grants
    anything. The next start sets the declared EDIT (the control review, S1)."""
    api = AuthApi(auth_registry_uri, ADMIN_PASSWORD)
    early = User("ml-training-m", "training-password-m", (("made-by-training", "EDIT"),))
    bootstrap_users(api, [User(early.username, early.password)])
    _client(auth_registry_uri, early).ensure_registered_model("made-by-training")
    assert _grants(api, early) == {"made-by-training": "MANAGE"}
    assert bootstrap_users(api, [early]) == [
        f"granted EDIT on made-by-training to {early.username} (was MANAGE)"
    ]
    assert _grants(api, early) == {"made-by-training": "EDIT"}
    assert bootstrap_users(api, [early]) == []


def test_a_rotated_password_is_set_and_the_old_one_refused(
    bootstrapped: tuple[AuthApi, list[str], list[str]],
) -> None:
    api = bootstrapped[0]
    rotated = User(TEAM.username, "team-password-0002", TEAM.grants)
    assert bootstrap_users(api, [rotated]) == [f"updated the password of {TEAM.username}"]
    assert api.call("GET", CURRENT_USER, credentials=(TEAM.username, rotated.password))[0] == 200
    assert api.call("GET", CURRENT_USER, credentials=(TEAM.username, TEAM.password))[0] == 401
    assert bootstrap_users(api, [rotated]) == []


# Training logs its runs in the experiment named after its model (lineage.py ``experiment_name``). Creating
# a run there needs ``update`` on the experiment (``validate_can_create_run``), and so does uploading
# its artifacts through the proxy (``validate_can_update_experiment_artifact_proxy``,
# mlflow/server/auth/__init__.py 3.17.2); ``default_permission`` READ has neither. A person who trained
# locally first created the experiment and owns it.
LOGGED_MODEL = "experiment-owned-elsewhere"
LOGGING = User(
    "ml-training-e",
    "training-password-e",
    ((LOGGED_MODEL, "EDIT"),),
    ((experiment_name(LOGGED_MODEL), "EDIT"),),
)
PERSON = User("team-person-e", "person-password-e1")


def _runs_and_uploads(uri: str, user: User, tmp_path: Path) -> None:
    client = _client(uri, user)
    run = client.create_run(client.experiment_id(experiment_name(LOGGED_MODEL)), "cluster-run", {})
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    client.upload(run["info"]["artifact_uri"] + "/model", tmp_path)
    assert client.list_files(run["info"]["artifact_uri"] + "/model") == ["model.onnx"]


def test_training_may_log_runs_in_its_experiment_made_first_by_someone_else(
    auth_registry_uri: str, tmp_path: Path
) -> None:
    api = AuthApi(auth_registry_uri, ADMIN_PASSWORD)
    bootstrap_users(api, [PERSON, User(LOGGING.username, LOGGING.password)])
    person = _client(auth_registry_uri, PERSON)
    person.experiment_id(experiment_name(LOGGED_MODEL))  # created by the person, who owns it
    with pytest.raises(RegistryError) as refused:  # what the cluster's training met before the grant
        _runs_and_uploads(auth_registry_uri, LOGGING, tmp_path)
    assert refused.value.status == 403

    assert bootstrap_users(api, [LOGGING]) == [
        f"created registered model {LOGGED_MODEL}",
        f"granted EDIT on {LOGGED_MODEL} to {LOGGING.username}",
        f"granted EDIT on experiment {experiment_name(LOGGED_MODEL)} to {LOGGING.username}",
    ]
    _runs_and_uploads(auth_registry_uri, LOGGING, tmp_path)
    assert bootstrap_users(api, [LOGGING]) == []


def test_an_experiment_not_made_yet_is_made_for_training(auth_registry_uri: str, tmp_path: Path) -> None:
    fresh = User("ml-training-f", "training-password-f", (), (("never-trained", "EDIT"),))
    assert bootstrap_users(AuthApi(auth_registry_uri, ADMIN_PASSWORD), [fresh])[-1] == (
        "granted EDIT on experiment never-trained to ml-training-f"
    )
    client = _client(auth_registry_uri, fresh)
    client.create_run(client.experiment_id("never-trained"), "first", {})


class _Racing(AuthApi):
    """Another replica's launcher, bootstrapping the same users from the same Secrets, wins every race:
    just before each of this one's writes (creating a user, a grant, an experiment; deleting a user) it
    makes the same."""

    RACED = (CREATE_MODEL, CREATE_USER, GRANT, CREATE_EXPERIMENT, DELETE_USER)

    def __init__(self, base_url: str, admin_password: str) -> None:
        super().__init__(base_url, admin_password)
        self.other = AuthApi(base_url, admin_password)
        self.lost: list[str] = []

    def call(
        self,
        method: str,
        path: str,
        payload: Mapping[str, str] | None = None,
        credentials: tuple[str, str] | None = None,
    ) -> tuple[int, dict[str, object]]:
        if method in {"POST", "DELETE"} and path in self.RACED:
            assert self.other.call(method, path, payload, credentials)[0] == 200
            status, body = super().call(method, path, payload, credentials)
            self.lost.append(f"{path}: {status} {body.get('error_code')}")
            return status, body
        return super().call(method, path, payload, credentials)


def test_a_replica_bootstrapping_at_the_same_time_is_no_error(auth_registry_uri: str) -> None:
    """Two servers start at once (two replicas): MLflow refuses the second create of a user, a grant or
    an experiment with RESOURCE_ALREADY_EXISTS (400: ``create_user``, ``grant_user_resource_permission``,
    mlflow/server/auth/sqlalchemy_store.py 3.17.2), which must not fail the loser's start."""
    raced = User(
        "ml-training-r", "training-password-r", (("raced-model", "EDIT"),), (("raced-model", "EDIT"),)
    )
    api = _Racing(auth_registry_uri, ADMIN_PASSWORD)
    assert bootstrap_users(api, [raced]) == []  # the other replica made every change
    lost = "400 RESOURCE_ALREADY_EXISTS"
    # The model, the user, its grants on the model and the experiment, the experiment: each lost, none failed.
    assert sorted(api.lost) == sorted(
        f"{path}: {lost}" for path in (CREATE_MODEL, CREATE_USER, GRANT, GRANT, CREATE_EXPERIMENT)
    )
    assert api.call("GET", CURRENT_USER, credentials=(raced.username, raced.password))[0] == 200
    client = _client(auth_registry_uri, raced)
    client.create_run(client.experiment_id("raced-model"), "after-the-race", {})
    assert _grants(api, raced) == {"raced-model": "EDIT"}


def _usernames(api: AuthApi) -> set[str]:
    rows = api.ok("GET", LIST_USERS)["users"]
    assert isinstance(rows, list)
    return {row["username"] for row in rows}


def test_a_user_no_longer_declared_is_deleted_and_the_admin_and_declared_users_stay(
    auth_registry_uri: str,
) -> None:
    """A team removed from the stack (docs/operations.md, "Add or remove a team"): its user is no longer in
    ``REGISTRY_USERS``, so the next start deletes it and its grants, and its password is refused."""
    api = AuthApi(auth_registry_uri, ADMIN_PASSWORD)
    gone = User("team-removed-p", "removed-password-p1", (("pruned-model", "EDIT"),))
    bootstrap_users(api, [gone])
    # Every other user on this server is the stack's: declared.
    declared = _usernames(api) - {ADMIN_USERNAME, gone.username}
    assert prune_users(api, declared) == [f"deleted user {gone.username} (not declared)"]
    assert api.call("GET", CURRENT_USER, credentials=(gone.username, gone.password))[0] == 401
    assert _usernames(api) == declared | {ADMIN_USERNAME}
    assert api.call("GET", CURRENT_USER)[0] == 200  # the admin
    assert prune_users(api, declared) == []  # the next start deletes nothing


def test_a_user_another_replica_deleted_meanwhile_is_no_error(auth_registry_uri: str) -> None:
    """Two replicas start at once and both delete the same undeclared user: the loser's ``users/delete``
    answers 404 RESOURCE_DOES_NOT_EXIST (``_get_user``, mlflow/server/auth/sqlalchemy_store.py 3.17.2)."""
    plain = AuthApi(auth_registry_uri, ADMIN_PASSWORD)
    gone = User("team-removed-r", "removed-password-r1")
    bootstrap_users(plain, [gone])
    api = _Racing(auth_registry_uri, ADMIN_PASSWORD)
    assert prune_users(api, _usernames(plain) - {gone.username}) == []  # the other replica deleted it
    assert api.lost == [f"{DELETE_USER}: 404 RESOURCE_DOES_NOT_EXIST"]
    assert api.call("GET", CURRENT_USER, credentials=(gone.username, gone.password))[0] == 401


# The launcher as the pod runs it (``serve_and_bootstrap``): the server its child, the users bootstrapped
# once it answers, SIGTERM passed on; a failed bootstrap stops the server and fails the start.
SUPERVISOR = """
import json, os, sys
from workloads.registry.server.launch import User, serve_and_bootstrap
spec = json.loads(sys.argv[1])
users = [User(name, password) for name, password in spec["users"]]
sys.exit(serve_and_bootstrap(spec["command"], {**os.environ, **spec["env"]}, users, spec["port"]))
"""
# The Host names the registry's Deployment admits (components/kubernetes/registry.py), as it sets them.
DEPLOYMENT_ALLOWED_HOSTS = allowed_hosts(WORKLOAD_IDENTITIES["registry"].namespace)


def _supervise(
    root: Path, users: list[User], admin_password: str = ADMIN_PASSWORD
) -> tuple[subprocess.Popen[str], str]:
    """The launcher and its server as the Deployment runs them, on ``root``'s database (``migrated_database``,
    as the migration Job leaves it): ``MLFLOW_SERVER_ALLOWED_HOSTS`` as the manifest renders it, the
    admin's password from ``admin_password`` (the Secret ``registry-admin``)."""
    port = free_port()
    database = f"sqlite:///{root / DATABASE}"
    config = write_auth_config(database, root)
    command = [MLFLOW, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    command += ["--backend-store-uri", database, "--app-name", "basic-auth"]
    command += ["--artifacts-destination", str(root / "artifacts"), "--serve-artifacts"]
    env = {
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_SERVER_ALLOWED_HOSTS": DEPLOYMENT_ALLOWED_HOSTS,
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_AUTH_ADMIN_PASSWORD": admin_password,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "csrf-key-for-tests",
        "PYTHONPATH": str(SERVER_DIR),  # the image's /app: the authorization function guard.py
    }
    spec = {"command": command, "env": env, "users": [(u.username, u.password) for u in users], "port": port}
    process = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        start_new_session=True,
    )
    return process, local_url(port)


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


# Someone changed the admin's password since MLflow created the admin (MLflow's ``users/update-password``),
# or edited the Secret: the Secret's password is refused, and MLflow will not take it again
# (``create_admin_user`` reads MLFLOW_AUTH_ADMIN_PASSWORD only for an admin that does not exist yet).
CURRENT_ADMIN_PASSWORD = "the-admins-password-now"


def test_the_launcher_bootstraps_its_child_server_and_passes_sigterm_on(tmp_path: Path) -> None:
    """With the Deployment's ``MLFLOW_SERVER_ALLOWED_HOSTS``: MLflow answers 403 to a Host header the list
    does not admit on every path but ``/health`` (``HostValidationMiddleware``, mlflow/server/
    fastapi_security.py 3.17.2), so a bootstrap through 127.0.0.1 failed and the pod crash-looped. A user
    an earlier start made and the stack no longer declares (a removed team) is deleted first, and said.

    The admin is the one an earlier start made, its password changed since, and the Secret's password set
    to the current one: the first way out of ``test_an_admin_password_the_server_refuses_...``, whose
    refused start leaves the database as it found it (one start serves both tests: MLflow's costs the
    most here)."""
    from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore

    removed = User("team-removed-s", "removed-password-s1")
    store = SqlAlchemyStore()
    store.init_db(migrated_database(tmp_path))  # type: ignore[no-untyped-call]
    store.create_user(ADMIN_USERNAME, CURRENT_ADMIN_PASSWORD, is_admin=True)
    store.create_user(removed.username, removed.password)
    store.engine.dispose()
    user = User("ml-training-s", "supervised-password-1")
    process, local = _supervise(tmp_path, [user], admin_password=CURRENT_ADMIN_PASSWORD)
    try:
        api, deadline = AuthApi(local, CURRENT_ADMIN_PASSWORD), time.monotonic() + 90
        while not _logs_in(api, user):
            assert process.poll() is None and time.monotonic() < deadline, (
                process.stdout and process.stdout.read()
            )
            time.sleep(0.5)
        # Deleted before the declared users were made: gone by now, the admin still there.
        assert api.call("GET", CURRENT_USER, credentials=(removed.username, removed.password))[0] == 401
        assert _usernames(api) == {ADMIN_USERNAME, user.username}
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        output = process.stdout.read() if process.stdout else ""
        assert "registry users: deleted user team-removed-s (not declared)" in output
        assert "registry users: created user ml-training-s" in output
        assert not _serving(local)
    finally:
        _stop(process)


def test_a_failed_bootstrap_stops_the_server_and_fails_the_start(tmp_path: Path) -> None:
    # MLflow refuses a password under 12 characters (mlflow/utils/validation.py ``_validate_password``).
    migrated_database(tmp_path)
    process, local = _supervise(tmp_path, [User("ml-inference-s", "too-short")])
    try:
        process.wait(90)
        assert process.returncode == 1
        assert process.stdout is not None and "users/create: HTTP 400" in process.stdout.read()
        assert not _serving(local)
    finally:
        _stop(process)


def test_the_deployments_allowed_hosts_refuse_127_0_0_1_and_admit_the_launchers_url() -> None:
    """Why the launcher calls ``localhost`` (``local_url``): MLflow's own matching of the Host header."""
    from mlflow.server.security_utils import is_allowed_host_header

    admitted = DEPLOYMENT_ALLOWED_HOSTS.split(",")
    assert not is_allowed_host_header(admitted, f"127.0.0.1:{PORT}")
    host = local_url().removeprefix("http://")
    assert host == f"localhost:{PORT}" and is_allowed_host_header(admitted, host)


def test_an_admin_password_the_server_refuses_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore

    # The admin as MLflow made it, with the password it has now (not the Secret's).
    store = SqlAlchemyStore()
    store.init_db(migrated_database(tmp_path))  # type: ignore[no-untyped-call]
    store.create_user(ADMIN_USERNAME, CURRENT_ADMIN_PASSWORD, is_admin=True)
    store.engine.dispose()
    process, local = _supervise(tmp_path, [User("ml-training-a", "admin-check-password-1")])
    try:
        process.wait(90)
        output = process.stdout.read() if process.stdout else ""
        assert process.returncode == 2, output[-3000:]
        [line] = [line for line in output.splitlines() if "registry admin" in line]
        assert line == ADMIN_REFUSED
        assert "Secret registry-admin" in line and "users/update-password" in line
        assert "registry users:" not in output  # nothing else was tried
        assert not _serving(local)
    finally:
        _stop(process)
    # The Secret's password as the current one, the first way out: the launcher test starts with it.
