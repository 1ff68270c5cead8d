"""A fresh stack: the server follows ``@champion`` before any version has it (docs/registry.md).

It must not exit (the pods would crash-loop and a first ``pulumi up`` would never see them ready): it
stays live (``/healthz`` 200, so the kubelet does not restart it), unready (``/readyz`` 503, so the
Service sends it nothing) and refuses predictions with 503, then serves the version promoted within the
poll interval and a load. Against the real MLflow server of conftest.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.workloads.inference.conftest import model_dir  # noqa: F401  (the session's trained model)
from tests.workloads.inference.serving import Server, free_port, serve_alias, wait_ready
from workloads.artifacts import load_metadata
from workloads.registry.client import RegistryClient
from workloads.registry.server.launch import AuthApi, User, bootstrap_users

from .conftest import ADMIN_PASSWORD, admin_client

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
NAME = "digits-unpromoted"
POLL_S = 0.5
# Download, load and warm-up on a loaded 2-core machine; with POLL_S still well under the 30 s default
# interval (workloads/inference/config.py), so a server that ignored its poll setting would not make it.
LOAD_BUDGET_S = 20.0


def _register(client: RegistryClient, version_dir: Path, name: str = NAME) -> str:
    client.ensure_registered_model(name)
    run = client.create_run(client.experiment_id(name), "await-alias", {})
    source = run["info"]["artifact_uri"] + "/model"
    client.upload(source, version_dir)
    return client.create_version(name, source, run["info"]["run_id"], {}).version


def _healthz(server: Server, client: httpx.Client, deadline_s: float = 30) -> httpx.Response:
    """``/healthz`` once the server listens: it logs its wait before uvicorn starts listening."""
    deadline = time.monotonic() + deadline_s
    while True:
        assert server.process.poll() is None, server.logs()
        try:
            return client.get("/healthz")
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"not listening in {deadline_s}s:\n{server.logs()}"
            time.sleep(0.05)


def _waiting(server: Server, client: httpx.Client, logged: str, deadline_s: float = 30) -> None:
    """Live (``/healthz`` 200) and unready (``/readyz`` and predictions 503), once ``logged`` is in the
    server's log."""
    deadline = time.monotonic() + deadline_s
    while logged not in server.logs():
        assert server.process.poll() is None and time.monotonic() < deadline, server.logs()
        time.sleep(0.05)
    assert _healthz(server, client, deadline_s).status_code == 200, server.logs()
    assert client.get("/readyz").status_code == 503
    assert client.post("/v1/predict", json={"instances": [[0.0]]}).status_code == 503


def test_a_server_waits_live_and_unready_for_its_alias_then_serves_the_promoted_version(
    registry_uri: str,
    model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    server = serve_alias(
        {"PATH": "/usr/bin:/bin"}, registry_uri, f"models:/{NAME}@champion", POLL_S, tmp_path
    )
    row = [0.0] * len(load_metadata(model_dir).feature_names)
    try:
        with server.client() as client:
            # Not registered at all, then registered with no version under the alias: waiting both times.
            for step in ("unregistered", "no alias"):
                healthz = _healthz(server, client)
                assert healthz.status_code == 200, (step, healthz.text)
                assert client.get("/readyz").status_code == 503, step
                refused = client.post("/v1/predict", json={"instances": [row]})
                assert refused.status_code == 503, (step, refused.text)
                if step == "unregistered":
                    version = _register(RegistryClient(registry_uri), model_dir)
                    time.sleep(POLL_S * 2)
            waiting = [line for line in server.logs().splitlines() if "waiting for" in line]
            assert len(waiting) == 1, server.logs()
            assert (
                f"waiting for models:/{NAME}@champion: no version has that alias yet; "
                "promote one with mlplatform models promote"
            ) in waiting[0]

            RegistryClient(registry_uri).set_alias(NAME, "champion", version)
            promoted = time.monotonic()
            wait_ready(server, POLL_S + LOAD_BUDGET_S)
            assert time.monotonic() - promoted <= POLL_S + LOAD_BUDGET_S
            answer = client.post("/v1/predict", json={"instances": [row]})
            assert answer.status_code == 200, answer.text
            assert answer.json()["model_version"] == version
    finally:
        status = server.terminate()
    assert status == 0, server.logs()[-3000:]


def test_on_a_basic_auth_registry_a_server_waits_through_401_and_403_then_serves(
    auth_registry_uri: str,
    model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A fresh enterprise stack: the inference pods start before the registry's launcher made their user
    (401), then before the model exists, which the basic-auth app answers with 403, not 404
    (``validate_can_read_model_or_prompt_version``: no model, no target, denied; mlflow/server/auth/
    __init__.py 3.17.2). Both are waits, logged with the registry's answer, not a crash loop."""
    name, user = "digits-enterprise", User("ml-inference-w", "inference-wait-password")
    credentials = {"MLFLOW_TRACKING_USERNAME": user.username, "MLFLOW_TRACKING_PASSWORD": user.password}
    server = serve_alias(
        {"PATH": "/usr/bin:/bin", **credentials},
        auth_registry_uri,
        f"models:/{name}@champion",
        POLL_S,
        tmp_path,
    )
    try:
        with server.client() as client:
            # Trial defect 11: a refused password was told to "promote one"; each answer says what to fix.
            _waiting(server, client, "the registry refuses this server's credentials")
            assert (
                "the user name in MLFLOW_TRACKING_USERNAME" in server.logs() and "HTTP 401" in server.logs()
            )
            assert "promote one" not in server.logs()
            bootstrap_users(AuthApi(auth_registry_uri, ADMIN_PASSWORD), [user])
            _waiting(server, client, "the registry denies this server's user the model")

            admin = admin_client(auth_registry_uri)
            version = _register(admin, model_dir, name)
            admin.set_alias(name, "champion", version)
            wait_ready(server, POLL_S + LOAD_BUDGET_S)
            row = [0.0] * len(load_metadata(model_dir).feature_names)
            answer = client.post("/v1/predict", json={"instances": [row]})
            assert answer.status_code == 200, answer.text
            assert answer.json()["model_version"] == version
    finally:
        status = server.terminate()
    assert status == 0, server.logs()[-3000:]


def test_a_registry_not_up_yet_is_a_wait_and_a_malformed_uri_still_an_error(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    server = serve_alias({"PATH": "/usr/bin:/bin"}, nowhere, f"models:/{NAME}@champion", POLL_S, tmp_path)
    try:
        with server.client() as client:
            _waiting(server, client, f"the registry answers: registry {nowhere} unreachable")
            assert "the registry cannot be reached (not up yet, or a wrong registry URI)" in server.logs()
    finally:
        status = server.terminate()
    assert status == 0, server.logs()[-3000:]

    bad = serve_alias({"PATH": "/usr/bin:/bin"}, nowhere, f"models:/{NAME}@", POLL_S, tmp_path)
    assert bad.process.wait(30) == 2, bad.logs()
    assert "is not models:/<name>@<alias>" in bad.logs()
