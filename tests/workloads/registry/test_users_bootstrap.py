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

import pytest

from workloads.registry.client import RegistryClient, RegistryError
from workloads.registry.server.launch import (
    CURRENT_USER,
    LIST_PERMISSIONS,
    AuthApi,
    User,
    bootstrap_users,
)

from .conftest import ADMIN_PASSWORD

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
