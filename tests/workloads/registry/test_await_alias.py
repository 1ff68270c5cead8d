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

from tests.workloads.inference.conftest import model_dir  # noqa: F401  (the session's trained model)
from tests.workloads.inference.serving import serve_alias, wait_ready
from workloads.artifacts import load_metadata
from workloads.registry.client import RegistryClient

REPO = Path(__file__).resolve().parents[3]
NAME = "digits-unpromoted"
POLL_S = 0.5
LOAD_BUDGET_S = 5.0


def _register(registry: str, version_dir: Path) -> str:
    client = RegistryClient(registry)
    client.ensure_registered_model(NAME)
    run = client.create_run(client.experiment_id(NAME), "await-alias", {})
    source = run["info"]["artifact_uri"] + "/model"
    client.upload(source, version_dir)
    return client.create_version(NAME, source, run["info"]["run_id"], {}).version


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
                deadline = time.monotonic() + 30
                while True:
                    assert server.process.poll() is None, server.logs()
                    try:
                        healthz = client.get("/healthz")
                        break
                    except httpx.TransportError:
                        assert time.monotonic() < deadline, server.logs()
                        time.sleep(0.05)
                assert healthz.status_code == 200, (step, healthz.text)
                assert client.get("/readyz").status_code == 503, step
                refused = client.post("/v1/predict", json={"instances": [row]})
                assert refused.status_code == 503, (step, refused.text)
                if step == "unregistered":
                    version = _register(registry_uri, model_dir)
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
