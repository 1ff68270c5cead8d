"""The real server on loopback: predictions, batching, refusals, probes, metrics, drift, auth and TLS."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from workloads.artifacts import load_metadata
from workloads.inference.app import create_app
from workloads.inference.config import ServeConfig
from workloads.inference.server import load_service
from workloads.training.tasks import Split

from .serving import Launch, Server, metric_samples

N_FEATURES = 64


def chunks(x: np.ndarray, size: int = 32) -> Iterator[list[list[float]]]:
    for start in range(0, len(x), size):
        yield x[start : start + size].tolist()


def test_predictions_are_the_models_and_carry_its_version(
    server: Server, model_dir: Path, held_out: Split
) -> None:
    meta = load_metadata(model_dir)
    session = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"features": held_out.x_test})
    predictions: list[int] = []
    with server.client() as client:
        for rows in chunks(held_out.x_test):
            body = client.post("/v1/predict", json={"instances": rows}).json()
            assert (body["model"], body["model_version"]) == ("digits", "1")
            predictions += body["predictions"]
            assert body["labels"] == [meta.class_names[p] for p in body["predictions"]]
    assert predictions == np.asarray(expected).argmax(axis=1).tolist()
    accuracy = float(np.mean(np.array(predictions) == held_out.y_test))
    assert accuracy == pytest.approx(meta.metrics["test_accuracy"], abs=1e-6)


def test_concurrent_requests_are_batched(server: Server, held_out: Split) -> None:
    before = metric_samples(server)

    async def fire() -> list[int]:
        async with server.async_client() as client:
            responses = await asyncio.gather(
                *(
                    client.post("/v1/predict", json={"instances": [row]})
                    for row in held_out.x_test[:32].tolist()
                )
            )
        assert all(r.status_code == 200 for r in responses)
        return [r.json()["batch_size"] for r in responses]

    sizes = asyncio.run(fire())
    after = metric_samples(server)
    runs = after[("inference_batch_size_count", ())] - before[("inference_batch_size_count", ())]
    rows = after[("inference_batch_size_sum", ())] - before[("inference_batch_size_sum", ())]
    assert rows == 32
    assert runs < 32, "32 concurrent requests must not take 32 model runs"
    assert max(sizes) > 1


ONES = [1.0] * N_FEATURES


def rows(*instances: object) -> bytes:
    return json.dumps({"instances": list(instances)}).encode()


def raw_row(first: bytes, last: bytes = b"1") -> bytes:
    """A one-row body written by hand, for values ``json.dumps`` will not write (NaN, Infinity, 1e999)."""
    return b'{"instances": [[' + first + b", 1" * (N_FEATURES - 2) + b", " + last + b"]]}"


BAD_BODIES = [
    ("malformed JSON", b'{"instances": [[1, 2', 422, "body: Invalid JSON"),
    ("not an object", b"[1, 2, 3]", 422, "body: Input should be an object"),
    ("empty body", b"", 422, "body: Invalid JSON"),
    ("missing field", b'{"rows": []}', 422, "instances: Field required"),
    ("no instances", rows(), 422, "instances: List should have at least 1 item"),
    ("short row", rows(ONES[:-1]), 422, "instances[0]: List should have at least 64"),
    ("long row", rows([*ONES, 1.0]), 422, "instances[0]: List should have at most 64"),
    (
        "flat row",
        rows(*ONES[:4]),
        422,
        "instances: each instance must be a list of 64 numbers (one row); got one",
    ),
    # Newcomer review h11: one row sent flat was told to send fewer rows ("at most 32 items").
    ("one row sent flat", rows(*ONES), 422, "got one flat list of 64 numbers: send [[...]] for one row"),
    ("too many rows", rows(*[ONES] * 33), 422, "instances: List should have at most 32"),
    ("string value", rows([*ONES[:-1], "7"]), 422, "instances[0][63]: Input should be a valid number"),
    ("boolean value", rows([True, *ONES[1:]]), 422, "instances[0][0]: Input should be a valid number"),
    ("null value", rows([None, *ONES[1:]]), 422, "instances[0][0]: Input should be a valid number"),
    ("NaN", raw_row(b"NaN"), 422, "instances[0][0]: Input should be a finite number"),
    ("Infinity", raw_row(b"1", b"-Infinity"), 422, "instances[0][63]: Input should be a finite number"),
    ("overflow to inf", raw_row(b"1e999"), 422, "instances[0][0]: Input should be a finite number"),
    ("unknown field", json.dumps({"instances": [ONES], "debug": True}).encode(), 422, "debug: Extra inputs"),
    ("oversized", rows(*[ONES] * 4000), 413, "request body exceeds"),
]


@pytest.mark.parametrize(("case", "body", "status", "message"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_requests_get_a_4xx_naming_the_field(
    server: Server, case: str, body: bytes, status: int, message: str
) -> None:
    with server.client() as client:
        response = client.post("/v1/predict", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, (case, response.text)
    assert message in response.json()["error"]


@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        # Newcomer review h17, h18: Starlette's {"detail": ...} in place of the API's schema, and no hint.
        ("GET", "/v1/predict", 405, "GET /v1/predict: method not allowed; use POST"),
        ("POST", "/v1/predit", 404, "/v1/predit: no such route; did you mean /v1/predict?"),
    ],
)
def test_a_wrong_method_or_route_is_told_what_would_work(
    server: Server, method: str, path: str, status: int, message: str
) -> None:
    with server.client() as client:
        response = client.request(method, path, json={"instances": [ONES]})
    assert response.status_code == status, response.text
    assert response.json() == {"error": message, "fields": []}


def test_an_oversized_body_without_a_length_is_cut_off_too(server: Server) -> None:
    def stream() -> Iterator[bytes]:
        yield b'{"instances": [['
        for _ in range(200):
            yield b"1," * 5000

    with server.client() as client:
        response = client.post("/v1/predict", content=stream())  # chunked: no Content-Length
    assert response.status_code == 413


def test_after_all_that_the_server_still_serves_and_counted_every_refusal(server: Server) -> None:
    with server.client() as client:
        assert client.post("/v1/predict", json={"instances": [[0.0] * N_FEATURES]}).status_code == 200
    metrics = metric_samples(server)
    codes = {labels[0][1]: v for (name, labels), v in metrics.items() if name == "inference_responses_total"}
    assert not any(code.startswith("5") for code in codes), codes
    assert metrics[("inference_errors_total", (("reason", "validation"),))] >= 16
    assert metrics[("inference_errors_total", (("reason", "payload_too_large"),))] >= 2
    assert metrics[("inference_model_info", (("model", "digits"), ("version", "1")))] == 1
    assert (
        "inference_request_duration_seconds_bucket",
        (("le", "0.005"), ("route", "/v1/predict")),
    ) in metrics


DIGITS_V1 = (("model", "digits"), ("version", "1"))


def test_probes_and_drift_endpoint_without_enough_samples_for_psi(server: Server) -> None:
    """Hardening item 6: a window of a few hundred rows reports (and alerts on) no PSI at all."""
    with server.client() as client:
        assert client.get("/healthz").json()["model_version"] == "1"
        assert client.get("/readyz").json() == {"ready": True, "model_version": "1"}
        drift = client.get("/v1/drift").json()
    assert drift["threshold"] == 0.2
    assert drift["samples"] < drift["min_samples"] == 500
    assert (drift["psi"], drift["max_psi"], drift["drifted"]) == ({}, None, [])
    samples = metric_samples(server)
    assert not [key for key in samples if key[0] == "inference_drift_psi"]
    assert samples[("inference_drift_features_over_threshold", DIGITS_V1)] == 0
    assert samples[("inference_drift_min_samples", DIGITS_V1)] == 500


def test_drift_score_crosses_the_threshold_only_for_shifted_inputs(
    launch: Launch, model_dir: Path, held_out: Split
) -> None:
    window = len(held_out.x_test)
    server = launch(model_dir, drift_window=window, drift_threshold=0.2)

    def send_and_score(x: np.ndarray) -> tuple[dict[str, Any], float]:
        with server.client() as client:
            for rows in chunks(x):
                assert client.post("/v1/predict", json={"instances": rows}).status_code == 200
            report = client.get("/v1/drift").json()
        return report, metric_samples(server)[("inference_drift_features_over_threshold", DIGITS_V1)]

    report, over = send_and_score(held_out.x_test)
    assert report["samples"] == window
    assert report["max_psi"] < 0.2 and report["drifted"] == [] and over == 0
    report, over = send_and_score(held_out.x_test + 4.0)  # brighter strokes: every pixel shifts
    assert report["max_psi"] > 0.2 and over == N_FEATURES == len(report["drifted"])


def test_the_int8_version_serves_under_its_own_version(
    launch: Launch, int8_dir: Path, held_out: Split
) -> None:
    server = launch(int8_dir)
    with server.client() as client:
        body = client.post("/v1/predict", json={"instances": held_out.x_test[:4].tolist()}).json()
    assert body["model_version"] == "1-int8"


def test_not_ready_until_loaded(model_dir: Path) -> None:
    """In process, without the lifespan that loads the model: probes and the API say why they refuse."""
    app = create_app(load_service(ServeConfig(model_dir=model_dir)))

    async def probe() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return (
                await client.get("/healthz"),
                await client.get("/readyz"),
                await client.post("/v1/predict", json={"instances": [[0.0] * N_FEATURES]}),
            )

    health, ready, predict = asyncio.run(probe())
    assert health.status_code == 200
    assert (ready.status_code, ready.json()["error"]) == (503, "model loading")
    assert predict.status_code == 503


def test_on_loaded_runs_once_when_the_model_is_ready(model_dir: Path) -> None:
    """The hook the process runner freezes start-up's objects on (``server.freeze_startup_objects``,
    issue 42: a full collection of them stopped the server for 117-159 ms): after loading, once."""
    service = load_service(ServeConfig(model_dir=model_dir))
    seen: list[bool] = []
    app = create_app(service, on_loaded=lambda: seen.append(service.ready), load_first=True)

    async def run() -> list[bool]:
        async with app.app.router.lifespan_context(app.app):  # type: ignore[attr-defined]
            await asyncio.sleep(0)  # (a done callback runs on the loop's next turn)
            return list(seen)

    assert asyncio.run(run()) == [True]


def test_bearer_token_and_tls(
    launch: Launch, model_dir: Path, tls_files: tuple[Path, Path], tmp_path: Path
) -> None:
    cert, key = tls_files
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")  # mounted secrets often end in a newline
    server = launch(
        model_dir,
        scheme="https",
        verify=ssl.create_default_context(cafile=cert),
        auth_token_file=token_file,
        tls_cert_file=cert,
        tls_key_file=key,
    )
    body = {"instances": [[0.0] * N_FEATURES]}
    with server.client() as client:
        assert client.get("/healthz").status_code == 200  # probes need no token
        missing = client.post("/v1/predict", json=body)
        wrong = client.post("/v1/predict", json=body, headers={"authorization": "Bearer s3cret-tokeN"})
        right = client.post("/v1/predict", json=body, headers={"authorization": "Bearer s3cret-token"})
        unparsed = client.post("/v1/predict", content=b"{not json", headers={"authorization": "Basic x"})
    assert (missing.status_code, missing.headers["www-authenticate"]) == (401, "Bearer")
    assert wrong.status_code == 401
    assert unparsed.status_code == 401, "authentication comes before the body is parsed"
    assert right.status_code == 200
    with pytest.raises(httpx.TransportError), httpx.Client(timeout=5) as plain:
        plain.get(server.url.replace("https://", "http://") + "/healthz")
    # TLS 1.3 only: a client that stops at 1.2 cannot connect.
    old_tls = ssl.create_default_context(cafile=cert)
    old_tls.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(httpx.ConnectError), httpx.Client(verify=old_tls, timeout=5) as old:
        old.get(server.url + "/healthz")

    # /metrics carries the drift scores /v1/drift protects: the same token, re-read when it rotates.
    def metrics(token: str) -> int:
        with server.client({"authorization": f"Bearer {token}"}) as client:
            return client.get("/metrics").status_code

    assert metrics("wrong") == 401
    assert metrics("s3cret-token") == 200
    rotated = tmp_path / "token.new"  # a Secret update swaps the file, as the kubelet's symlink swap does
    rotated.write_text("rotated-token\n")
    rotated.replace(token_file)
    deadline = time.monotonic() + 5
    while metrics("rotated-token") != 200:
        assert time.monotonic() < deadline, "the rotated token was not picked up"
        time.sleep(0.2)
    assert metrics("s3cret-token") == 401
