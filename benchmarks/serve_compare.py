"""The servers ``benchmarks/serve_bench.py`` compares, what each is sent and answers, and the comparison.

Pure: no process, socket or model here, so ``tests/benchmarks/`` checks it without the peers installed.

Each server speaks its own request format, as its documentation writes one, for one row of features:

- ours and the naive server: ``POST /v1/predict`` ``{"instances": [[...]]}`` -> ``{"scores": [[...]]}``
- LitServe: ``POST /predict`` ``{"input": [...]}`` -> ``{"scores": [...]}`` (what our ``LitAPI`` decodes)
- KServe (V1 protocol): ``POST /v1/models/model:predict`` ``{"instances": [[...]]}`` ->
  ``{"predictions": [[...]]}``
- MLServer (V2 protocol): ``POST /v2/models/model/infer`` with one FP32 tensor of shape [1, features] ->
  ``{"outputs": [{"shape": [1, classes], "data": [...]}]}``
- BentoML: ``POST /predict`` ``{"instances": [[...]]}`` (the API's parameter by name) -> ``[[...]]``
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

# The model name KServe and MLServer route by (benchmarks/peers/common.py serves it under this name).
PEER_MODEL_NAME = "model"

Row = list[float]


@dataclass(frozen=True)
class Wire:
    """One server's request format: where a row is POSTed, how it is written, how scores come back."""

    path: str
    body: Callable[[Row], Any]
    scores: Callable[[Any], npt.NDArray[np.float64]]

    def request(self, row: Row) -> bytes:
        """The whole HTTP/1.1 request, pre-encoded once so the load generator spends nothing on JSON."""
        body = json.dumps(self.body(row)).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    def decode(self, answer: bytes) -> npt.NDArray[np.float64]:
        """The score rows a response body carries, shaped (rows, classes)."""
        return np.atleast_2d(np.asarray(self.scores(json.loads(answer)), dtype=np.float64))


def _v2_scores(answer: Any) -> npt.NDArray[np.float64]:
    output = answer["outputs"][0]
    return np.reshape(np.asarray(output["data"], dtype=np.float64), output["shape"])


V1 = Wire("/v1/predict", lambda row: {"instances": [row]}, lambda answer: np.asarray(answer["scores"]))
LITSERVE = Wire("/predict", lambda row: {"input": row}, lambda answer: np.asarray(answer["scores"]))
KSERVE_V1 = Wire(
    f"/v1/models/{PEER_MODEL_NAME}:predict",
    lambda row: {"instances": [row]},
    lambda answer: np.asarray(answer["predictions"]),
)
MLSERVER_V2 = Wire(
    f"/v2/models/{PEER_MODEL_NAME}/infer",
    lambda row: {"inputs": [{"name": "input", "shape": [1, len(row)], "datatype": "FP32", "data": row}]},
    _v2_scores,
)
BENTOML = Wire("/predict", lambda row: {"instances": [row]}, np.asarray)


@dataclass(frozen=True)
class ServerSpec:
    """One server: ``python -m module *args --model DIR --port P`` with the interpreter of ``venv``."""

    name: str
    # A peer's own venv under .venv-bench/ (make bench-setup); None: the product's venv.
    venv: str | None
    module: str
    args: tuple[str, ...]
    ready_path: str
    wire: Wire
    # Ours (the product), as opposed to a peer it is compared with.
    ours: bool = False
    # Environment variables it is started with (ours reads SERVE_* settings).
    env: tuple[tuple[str, str], ...] = ()


OURS = "ours"
SERVERS = {
    spec.name: spec
    for spec in (
        # Ours takes its settings from SERVE_* variables (the container's entry point), not arguments.
        ServerSpec(OURS, None, "workloads.inference", (), "/readyz", V1, ours=True),
        ServerSpec("naive", None, "benchmarks.peers.naive_server", (), "/readyz", V1),
        ServerSpec("naive-1t", None, "benchmarks.peers.naive_server", ("--threads", "1"), "/readyz", V1),
        ServerSpec("litserve", "litserve", "benchmarks.peers.litserve_server", (), "/health", LITSERVE),
        ServerSpec("kserve", "kserve", "benchmarks.peers.kserve_server", (), "/v2/health/ready", KSERVE_V1),
        ServerSpec(
            "mlserver", "mlserver", "benchmarks.peers.mlserver_server", (), "/v2/health/ready", MLSERVER_V2
        ),
        ServerSpec("bentoml", "bentoml", "benchmarks.peers.bentoml_server", (), "/readyz", BENTOML),
        # Two worker processes: informative (benchmarks/README.md), not run unless named in --servers.
        ServerSpec(
            "ours-w2",
            None,
            "workloads.inference",
            (),
            "/readyz",
            V1,
            ours=True,
            env=(("SERVE_WORKERS", "2"),),
        ),
    )
}
DEFAULT_SERVERS = [name for name in SERVERS if name != "ours-w2"]
PEER_VENVS = sorted({spec.venv for spec in SERVERS.values() if spec.venv})


@dataclass(frozen=True)
class Measurement:
    """One server on one cell (model, concurrency) in one round."""

    throughput: float  # requests per second
    p50_ms: float
    p99_ms: float
    errors: int  # non-200 answers
    # Rows per model run, from the server's own metrics (ours only: the peers do not all say).
    rows_per_run: float | None = None


def median(rounds: Sequence[Measurement]) -> Measurement:
    """Each figure's median over the rounds (taken separately: a round's p99 and throughput may differ
    in which round is the middle one); errors are summed."""
    batches = [m.rows_per_run for m in rounds if m.rows_per_run is not None]
    return Measurement(
        throughput=statistics.median(m.throughput for m in rounds),
        p50_ms=statistics.median(m.p50_ms for m in rounds),
        p99_ms=statistics.median(m.p99_ms for m in rounds),
        errors=sum(m.errors for m in rounds),
        rows_per_run=statistics.median(batches) if batches else None,
    )


@dataclass(frozen=True)
class Comparison:
    """Ours (or one of our variants) against the best peer on one cell."""

    ours: str
    best_peer: str
    throughput_ratio: float  # ours / best peer: higher is better
    p99_ratio: float  # ours / best peer: lower is better

    def met(self, min_throughput_ratio: float) -> bool:
        return self.throughput_ratio >= min_throughput_ratio and self.p99_ratio <= 1.0


def compare(cell: Mapping[str, Measurement], ours: str, peers: Iterable[str]) -> Comparison | None:
    """``ours`` over the peer with the highest median throughput on this cell; None when ours or every
    peer is missing (not set up, failed to start, answered wrongly)."""
    timed = [peer for peer in peers if peer in cell]
    if ours not in cell or not timed:
        return None
    best = max(timed, key=lambda peer: cell[peer].throughput)
    return Comparison(
        ours=ours,
        best_peer=best,
        throughput_ratio=cell[ours].throughput / cell[best].throughput,
        p99_ratio=cell[ours].p99_ms / cell[best].p99_ms,
    )


def same_answer(reference: npt.NDArray[np.floating[Any]], answer: npt.NDArray[np.floating[Any]]) -> bool:
    """Whether a server's scores for a row give the reference's class for each row (the argmax)."""
    return answer.shape == reference.shape and bool(
        np.array_equal(answer.argmax(axis=1), reference.argmax(axis=1))
    )
