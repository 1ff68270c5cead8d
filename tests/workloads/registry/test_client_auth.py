"""The registry client against MLflow 3.17.2's basic-auth app (a real server, conftest.py): credentials
from the files of a mounted Secret (``MLFLOW_TRACKING_USERNAME_FILE`` / ``..._PASSWORD_FILE``), read again

pytestmark = pytest.mark.slow
after a 401 so a rotated password works without a restart (kubernetes.io, "Secrets": mounted Secrets are
updated in place; MLflow docs, "Authentication with Username and Password": every request carries HTTP
basic credentials, ``users/create`` and ``users/update-password`` are the admin's; passwords of at least 12
characters, mlflow/utils/validation.py ``_validate_password``)."""

from __future__ import annotations

import base64
import json
import urllib.request
from pathlib import Path

import pytest

from workloads.registry.client import PASSWORD_FILE_ENV, USERNAME_FILE_ENV, RegistryClient, RegistryError
from workloads.registry.server.launch import BREAK_GLASS_HEADER

from .conftest import ADMIN_PASSWORD

pytestmark = pytest.mark.slow

# The admin's change of another user's password or grants is break-glass on the registry: it names its
# reason in ``BREAK_GLASS_HEADER`` (guard.py ``user_change``), as the launcher's ``AuthApi`` does.
TEST_REASON = "test_client_auth: the admin sets up the users these tests sign in as"


def _admin(uri: str, method: str, endpoint: str, payload: dict[str, str]) -> None:
    credentials = base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()
    request = urllib.request.Request(
        f"{uri}/api/2.0/mlflow/{endpoint}",
        data=json.dumps(payload).encode(),
        method=method,
        headers={
            "Authorization": f"Basic {credentials}",
            "Content-Type": "application/json",
            BREAK_GLASS_HEADER: TEST_REASON,
        },
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


def _secret(directory: Path, username: str, password: str) -> dict[str, str]:
    """The Secret ``registry-client`` as the kubelet mounts it: one file per key."""
    directory.mkdir(exist_ok=True)
    (directory / "username").write_text(username)
    (directory / "password").write_text(password + "\n")  # `kubectl create --from-file` keeps newlines
    return {USERNAME_FILE_ENV: str(directory / "username"), PASSWORD_FILE_ENV: str(directory / "password")}


def test_a_caller_without_credentials_is_refused(auth_registry_uri: str) -> None:
    client = RegistryClient(auth_registry_uri, environ={}, attempts=1)
    with pytest.raises(RegistryError) as refused:
        client.experiment_id("anonymous")
    assert refused.value.status == 401


def test_credentials_come_from_the_secret_files_and_a_rotated_password_is_read_again(
    auth_registry_uri: str, tmp_path: Path
) -> None:
    _admin(auth_registry_uri, "POST", "users/create", {"username": "trainer", "password": "first-password"})
    environ = _secret(tmp_path / "registry-client", "trainer", "first-password")
    client = RegistryClient(auth_registry_uri, environ=environ, attempts=1)
    experiment = client.experiment_id("rotation")

    # The admin rotates the password and the kubelet updates the mounted file: the next call's 401 makes
    # the client read the files again, and it goes through with the new password.
    _admin(
        auth_registry_uri,
        "PATCH",
        "users/update-password",
        {"username": "trainer", "password": "second-password"},
    )
    _secret(tmp_path / "registry-client", "trainer", "second-password")
    assert client.experiment_id("rotation") == experiment


def test_a_wrong_password_stays_a_401_after_one_more_read(auth_registry_uri: str, tmp_path: Path) -> None:
    environ = _secret(tmp_path / "registry-client", "admin", "not-the-password")
    client = RegistryClient(auth_registry_uri, environ=environ, attempts=1)
    with pytest.raises(RegistryError) as refused:
        client.experiment_id("wrong")
    assert refused.value.status == 401


def test_an_unreadable_credentials_file_is_one_line_naming_its_variable(tmp_path: Path) -> None:
    environ = _secret(tmp_path / "registry-client", "trainer", "a-long-password")
    missing = tmp_path / "absent" / "password"
    environ[PASSWORD_FILE_ENV] = str(missing)
    with pytest.raises(ValueError, match=f"^{PASSWORD_FILE_ENV}={missing}: No such file or directory$"):
        RegistryClient("http://127.0.0.1:1", environ=environ)


def test_a_401_names_the_credential_files_to_fix(auth_registry_uri: str, tmp_path: Path) -> None:
    """Trial defect 11 (docs/registry.md "Access"): a refused password said only ``HTTP 401``."""
    environ = _secret(tmp_path / "registry-client", "admin", "not-the-password")
    client = RegistryClient(auth_registry_uri, environ=environ, attempts=1)
    with pytest.raises(RegistryError) as refused:
        client.registered_model("digits")
    message = str(refused.value)
    assert f"the user name in {environ[USERNAME_FILE_ENV]}" in message
    assert f"the password in {environ[PASSWORD_FILE_ENV]}" in message and "HTTP 401" in message
    anonymous = RegistryClient(auth_registry_uri, environ={}, attempts=1)
    with pytest.raises(RegistryError, match="no credentials \\(set MLFLOW_TRACKING_USERNAME"):
        anonymous.registered_model("digits")


def test_a_403_names_the_user_and_the_grant_it_lacks(auth_registry_uri: str, tmp_path: Path) -> None:
    """A READ user moving an alias (MLflow's basic-auth app: READ has no ``can_update``)."""
    _admin(auth_registry_uri, "POST", "registered-models/create", {"name": "grant-words"})
    _admin(auth_registry_uri, "POST", "users/create", {"username": "reader", "password": "reader-password"})
    client = RegistryClient(auth_registry_uri, environ=_secret(tmp_path / "r", "reader", "reader-password"))
    with pytest.raises(RegistryError) as refused:
        client.set_model_tag("grant-words", "k", "v")
    assert refused.value.status == 403
    assert str(refused.value).startswith(
        f"registry {auth_registry_uri}: user reader has no grant for POST registered-models/set-tag"
        " (HTTP 403)"
    )
