"""The server side of progressive delivery against a real MLflow server on loopback (conftest.py): the
container's entry point follows ``@champion``; the registry's tags (workloads/delivery/contract.py) load
the ``@challenger`` beside it, split the traffic, and unload it again; a tag that is not a number counts
as 0 and is logged once; a share counts only while a rollout's lease is current (workloads/registry/
lock.py), so one whose lease lapses goes back to 0 by itself; a challenger that fails to verify leaves the
champion serving alone, counted.

Tags are set with MLflow's own REST call (``registered-models/set-tag``, mlflow/protos/
model_registry.proto ``SetRegisteredModelTag``), as the rollout sets them.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.workloads.inference.conftest import model_dir  # noqa: F401  (the session's trained model)
from tests.workloads.inference.serving import Server, metric_samples, serve_alias, wait_ready
from workloads.artifacts import load_metadata
from workloads.delivery import contract
from workloads.registry.client import RegistryClient
from workloads.registry.lock import LEASE_TAG

pytestmark = pytest.mark.slow

NAME = "digits-delivery"  # the registered model; the model itself (V2 paths, metric labels) is "digits"
MODEL = "digits"
POLL_S = 0.3
LOAD_BUDGET_S = 10.0


def _tampered(good: Path, staging: Path) -> Path:
    """``good``'s files with one byte of model.onnx changed: its recorded sha256 no longer matches."""
    staging.mkdir()
    for path in good.iterdir():
        (staging / path.name).write_bytes(path.read_bytes())
    onnx = bytearray((staging / "model.onnx").read_bytes())
    onnx[-1] ^= 0xFF
    (staging / "model.onnx").write_bytes(bytes(onnx))
    return staging


def _register(client: RegistryClient, version_dir: Path) -> str:
    client.ensure_registered_model(NAME)
    run = client.create_run(client.experiment_id(NAME), "delivery", {})
    source = run["info"]["artifact_uri"] + "/model"
    client.upload(source, version_dir)
    return client.create_version(NAME, source, run["info"]["run_id"], {}).version


def _set_tag(registry: str, key: str, value: str) -> None:
    request = urllib.request.Request(
        f"{registry}/api/2.0/mlflow/registered-models/set-tag",
        data=json.dumps({"name": NAME, "key": key, "value": value}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


def _lease(registry: str, ahead: timedelta) -> None:
    _set_tag(registry, LEASE_TAG, (datetime.now(UTC) + ahead).isoformat())


def _until(condition: Callable[[], bool], what: str, server: Server) -> None:
    deadline = time.monotonic() + POLL_S + LOAD_BUDGET_S
    while not condition():
        assert time.monotonic() < deadline, f"{what}:\n{server.logs()[-3000:]}"
        time.sleep(0.05)


def _applied(server: Server, version: str) -> tuple[float | None, float | None]:
    found = metric_samples(server)
    labels = (("model", MODEL), ("version", version))
    return found.get((contract.SPLIT_APPLIED, labels)), found.get((contract.SHADOW_APPLIED, labels))


def test_the_tags_load_split_and_unload_the_challenger(
    registry_uri: str,
    model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    client = RegistryClient(registry_uri)
    champion, challenger = _register(client, model_dir), _register(client, model_dir)
    client.set_alias(NAME, "champion", champion)
    client.set_alias(NAME, "challenger", challenger)
    row = [0.0] * len(load_metadata(model_dir).feature_names)
    server = serve_alias(
        {"PATH": "/usr/bin:/bin"}, registry_uri, f"models:/{NAME}@champion", POLL_S, tmp_path
    )
    try:
        wait_ready(server)
        with server.client() as http:

            def versions() -> list[str]:
                loaded: list[str] = http.get(f"/v2/models/{MODEL}").json()["versions"]
                return loaded

            assert versions() == [champion]
            # No lease, no share: a split nobody renews is a split nobody judges.
            _set_tag(registry_uri, contract.SPLIT_TAG, "30")
            time.sleep(POLL_S * 3)
            assert versions() == [champion] and _applied(server, "") == (0, 0)
            _lease(registry_uri, timedelta(hours=1))
            # A split of 30 %: loaded, applied, and exactly 60 of 200 requests answered by it.
            _set_tag(registry_uri, contract.SHADOW_TAG, "lots")  # not a number: 0, logged once
            _set_tag(registry_uri, contract.SPLIT_TAG, "30")
            _until(lambda: _applied(server, challenger) == (30, 0), "split applied", server)
            assert versions() == [champion, challenger]
            answered = Counter(
                http.post("/v1/predict", json={"instances": [row]}).headers[contract.VERSION_HEADER]
                for _ in range(200)
            )
            assert answered == {champion: 140, challenger: 60}, answered
            labelled = http.post(
                f"/v2/models/{MODEL}/versions/{challenger}/infer",
                json={
                    "inputs": [{"name": "features", "shape": [1, len(row)], "datatype": "FP32", "data": row}]
                },
            )
            assert labelled.status_code == 200 and labelled.json()["model_version"] == challenger
            time.sleep(POLL_S * 3)
            assert server.logs().count(f"{contract.SHADOW_TAG}='lots'") == 1, "logged once, not per poll"

            # The lease lapses (its rollout died without its cleanup): back to the champion alone.
            _lease(registry_uri, timedelta(seconds=-1))
            _until(lambda: versions() == [champion], "lapsed lease: challenger unloaded", server)
            _lease(registry_uri, timedelta(hours=1))
            _until(lambda: versions() == [champion, challenger], "renewed lease: loaded again", server)

            # Both back to 0: unloaded, the champion alone.
            _set_tag(registry_uri, contract.SPLIT_TAG, "0")
            _until(lambda: versions() == [champion], "challenger unloaded", server)
            assert _applied(server, challenger) == (0, 0) and _applied(server, "") == (0, 0)
            answered = Counter(
                http.post("/v1/predict", json={"instances": [row]}).headers[contract.VERSION_HEADER]
                for _ in range(20)
            )
            assert answered == {champion: 20}

            # A challenger whose files fail verification: never loaded, counted, the champion serves on.
            bad = _register(client, _tampered(model_dir, tmp_path / "tampered"))
            client.set_alias(NAME, "challenger", bad)
            _set_tag(registry_uri, contract.SPLIT_TAG, "50")
            failures = ("inference_model_update_failures_total", (("reason", "verify"),))
            _until(lambda: metric_samples(server).get(failures) == 1, "verify failure counted", server)
            time.sleep(POLL_S * 3)
            assert metric_samples(server)[failures] == 1, "refused for good: not fetched again"
            assert versions() == [champion] and _applied(server, bad) == (None, None)
            statuses = Counter(
                http.post("/v1/predict", json={"instances": [row]}).status_code for _ in range(50)
            )
            assert statuses == {200: 50}
    finally:
        status = server.terminate()
    assert status == 0, server.logs()[-3000:]
