"""The serving benchmark's pure parts (benchmarks/serve_compare.py): what each server is sent, how its
answer is read, and how a cell's figures become "ours over the best peer". No peer is installed here:
the peers run in their own venvs (make bench-setup), never in the test suite."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from benchmarks.serve_compare import (
    BENTOML,
    KSERVE_V1,
    LITSERVE,
    MLSERVER_V2,
    OURS,
    SERVERS,
    V1,
    Measurement,
    Wire,
    compare,
    median,
    same_answer,
)

REPO = Path(__file__).resolve().parents[2]
ROW = [0.0, 1.5, -2.25, 16.0]
SCORES = [[0.1, -3.0, 2.5]]


def _split(request: bytes) -> tuple[str, dict[str, str], object]:
    head, _, body = request.partition(b"\r\n\r\n")
    start, *fields = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    assert int(headers["content-length"]) == len(body), "Content-Length must match the body"
    return start, headers, json.loads(body)


@pytest.mark.parametrize(
    ("wire", "path", "body"),
    [
        # Ours and the naive server: our V1 API (workloads/inference/schemas.py PredictRequest).
        (V1, "/v1/predict", {"instances": [ROW]}),
        # LitServe: what benchmarks/peers/litserve_server.py's decode_request reads.
        (LITSERVE, "/predict", {"input": ROW}),
        # KServe V1 protocol: POST /v1/models/<name>:predict with {"instances": [...]} (KServe docs,
        # "V1 Inference Protocol").
        (KSERVE_V1, "/v1/models/model:predict", {"instances": [ROW]}),
        # Open Inference Protocol (V2) REST: a tensor is name, shape, datatype and flattened data.
        (
            MLSERVER_V2,
            "/v2/models/model/infer",
            {"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": ROW}]},
        ),
        # BentoML: a JSON object of the API method's parameters by name (benchmarks/peers/bentoml_server.py).
        (BENTOML, "/predict", {"instances": [ROW]}),
    ],
)
def test_each_server_is_sent_one_row_in_its_own_format(wire: Wire, path: str, body: object) -> None:
    start, headers, sent = _split(wire.request(ROW))
    assert start == f"POST {path} HTTP/1.1"
    assert headers["content-type"] == "application/json"
    assert sent == body


@pytest.mark.parametrize(
    ("wire", "answer"),
    [
        (V1, {"predictions": [2], "scores": SCORES}),
        (LITSERVE, {"scores": SCORES[0]}),  # one row per request: LitServe unbatches to the row
        (KSERVE_V1, {"predictions": SCORES}),
        (
            MLSERVER_V2,
            {
                "model_name": "model",
                "outputs": [{"name": "scores", "shape": [1, 3], "datatype": "FP32", "data": SCORES[0]}],
            },
        ),
        (BENTOML, SCORES),
    ],
)
def test_each_answer_reads_back_as_one_row_of_scores(wire: Wire, answer: object) -> None:
    scores = wire.decode(json.dumps(answer).encode())
    assert scores.shape == (1, 3)
    np.testing.assert_array_equal(scores, SCORES)


def test_an_answer_in_another_format_is_an_error_not_scores() -> None:
    with pytest.raises(KeyError):
        KSERVE_V1.decode(json.dumps({"scores": SCORES}).encode())


def test_the_same_answer_is_the_same_class_for_each_row() -> None:
    reference = np.array([[0.1, 0.9, 0.0], [2.0, 1.0, 0.0]])
    assert same_answer(reference, reference + 1e-3)
    assert not same_answer(reference, reference[:, ::-1])
    assert not same_answer(reference, reference[:1]), "a missing row is not the same answer"


def _m(throughput: float, p99_ms: float, errors: int = 0, rows: float | None = None) -> Measurement:
    return Measurement(
        throughput=throughput, p50_ms=p99_ms / 2, p99_ms=p99_ms, errors=errors, rows_per_run=rows
    )


def test_medians_are_taken_per_figure_and_errors_summed() -> None:
    rounds = [_m(100, 9.0, 1, 4.0), _m(300, 1.0, 0, 8.0), _m(200, 5.0, 2, 6.0)]
    assert median(rounds) == Measurement(throughput=200, p50_ms=2.5, p99_ms=5.0, errors=3, rows_per_run=6.0)
    assert median([_m(100, 2.0)]).rows_per_run is None, "a peer reports no batch size"


def test_ours_is_compared_with_the_peer_of_highest_throughput() -> None:
    cell = {OURS: _m(1200, 4.0), "naive": _m(1000, 5.0), "litserve": _m(800, 2.0), "kserve": _m(1100, 8.0)}
    c = compare(cell, OURS, ["naive", "litserve", "kserve", "mlserver"])  # mlserver was not timed
    assert c is not None
    assert c.best_peer == "kserve"
    assert c.throughput_ratio == pytest.approx(1200 / 1100)
    assert c.p99_ratio == pytest.approx(4.0 / 8.0)
    assert c.met(1.0)
    assert not c.met(1.3)


def test_p99_worse_than_the_best_peer_misses_the_target_whatever_the_throughput() -> None:
    c = compare({OURS: _m(2000, 3.0), "naive": _m(1000, 2.0)}, OURS, ["naive"])
    assert c is not None and c.throughput_ratio == 2.0
    assert not c.met(1.0)


def test_no_comparison_without_ours_or_without_a_timed_peer() -> None:
    assert compare({"naive": _m(1000, 2.0)}, OURS, ["naive"]) is None
    assert compare({OURS: _m(1000, 2.0)}, OURS, ["naive", "bentoml"]) is None


def _pins(lines: list[str]) -> dict[str, str]:
    pairs = (line.split("==") for line in lines if "==" in line and not line.startswith("#"))
    return {name.lower(): version.strip() for name, version in pairs}


def test_every_peer_has_its_frozen_venv_and_runs_the_products_onnx_runtime() -> None:
    """Each peer's venv (benchmarks/peers/<peer>.txt) pins the peer exactly, as issue 30 names them, and the
    product's own onnxruntime and numpy (pyproject.toml's serve extra): the same model run everywhere."""
    serve = _pins(
        tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["serve"]
    )
    expected = {"litserve": "0.2.19", "kserve": "0.21.0", "mlserver": "1.7.1", "bentoml": "1.4.40"}
    peers = {spec.venv for spec in SERVERS.values() if spec.venv}
    assert peers == set(expected)
    for peer in peers:
        pins = _pins((REPO / "benchmarks" / "peers" / f"{peer}.txt").read_text().splitlines())
        assert pins[peer] == expected[peer]
        assert pins["onnxruntime"] == serve["onnxruntime"]
        assert pins["numpy"] == serve["numpy"]
    for spec in SERVERS.values():
        assert importlib.util.find_spec(spec.module) is not None, spec.module
