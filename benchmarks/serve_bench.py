"""Inference serving: our server (micro-batching, ONNX Runtime) against a naive per-request PyTorch server.

One run makes two model versions, quantizes both, starts each server as its own process on 127.0.0.1
and drives it with single-row requests at several concurrencies, printing throughput and p50/p99 latency
with the ratios:

- ``ours``      ``python -m workloads.inference`` (the container's entry point), fp32 model
- ``baseline``  the same framework (FastAPI on uvicorn), worker count (1), request schema and parsing,
                running one PyTorch eager forward per request, no batching
- ``ours-int8`` our server with the ``<version>-int8`` model

Models: ``tiny``, the default digits MLP trained by ``python -m workloads.training`` (HTTP dominates:
the target is to be no slower than the baseline at concurrency 32), and ``wide``, a compute-bound MLP
(``wide_mlp``, random weights, over 1 ms per sample in eager PyTorch) exported by the trainer's
exporter: targets >= 3x the baseline's throughput at concurrency 32 with p99 no worse, int8 >= 1.5x
fp32 throughput; and int8 accuracy on the default task within 1 point of fp32.

The load generator speaks HTTP/1.1 over asyncio streams itself instead of using httpx: on these 2 shared
cores, against the tiny model with 32 clients, httpx spent about 5.9 ms of CPU per request where this
client spends about 0.12 ms and the server 0.6-1.5 ms (measured while writing this), so httpx, not the
server, would have set the throughput. Requests are pre-encoded, connections kept alive.

Usage: ``python benchmarks/serve_bench.py`` (about 3 minutes on 2 cores). The baseline server is this file
too: ``python benchmarks/serve_bench.py baseline --model DIR --port P``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt
import torch
import uvicorn
from fastapi import FastAPI, Request, Response
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(REPO))

from workloads.artifacts import load_metadata, model_version_dir  # noqa: E402
from workloads.inference.cpu import available_cpus  # noqa: E402
from workloads.inference.model import load_artifact  # noqa: E402
from workloads.inference.schemas import PredictResponse, request_model, validation_error  # noqa: E402
from workloads.training.tasks import Split, load_split_for  # noqa: E402

CONCURRENCY = (1, 8, 32)
WARMUP_S = 0.5
MEASURE_S = 2.5
ROUNDS = 2
MAX_REQUESTS_PER_LEVEL = 50_000
SERVER_START_S = 60.0
WIDE_HIDDEN = 4096
WIDE_LAYERS = 4


def wide_mlp(n_features: int, n_classes: int) -> nn.Module:
    """The compute-bound model (a trainer ``--model`` hook): 4 hidden layers of 4096, ~50.6M weights.

    Big enough that the model, not HTTP, dominates: a batch-1 forward streams ~200 MB of weights from
    memory, and even batched the matrix products outweigh a request's HTTP handling, which is what lets
    int8 show its speed through the whole server rather than only in the kernel.
    """
    layers: list[nn.Module] = [nn.Linear(n_features, WIDE_HIDDEN), nn.ReLU()]
    for _ in range(WIDE_LAYERS - 1):
        layers += [nn.Linear(WIDE_HIDDEN, WIDE_HIDDEN), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDE_HIDDEN, n_classes))


@dataclass(frozen=True)
class ModelCase:
    label: str
    hook: str
    # 0: random weights, written by the trainer's own exporter without training (a speed test needs no
    # accuracy, and a minute of training would not change one timing).
    epochs: int


MODELS = (
    ModelCase("tiny", "workloads.training.model:mlp", 10),
    ModelCase("wide", "benchmarks.serve_bench:wide_mlp", 0),
)


# --- models ------------------------------------------------------------------------------------------


def make_model(output: Path, case: ModelCase) -> Path:
    """A model version from the real trainer, as a user makes one, or (epochs 0) its exporter alone."""
    flags = ["--output", str(output), "--model", case.hook]
    flags += ["--model-name", case.label, "--model-version", "1"]
    if case.epochs:
        command = [sys.executable, "-m", "workloads.training", *flags, "--epochs", str(case.epochs)]
        subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    else:
        export_untrained(flags)
    return model_version_dir(output, case.label, "1")


def export_untrained(flags: list[str]) -> None:
    from workloads.training.config import parse_args
    from workloads.training.export import write_model_version
    from workloads.training.model import build_model
    from workloads.training.tasks import load_split

    config = parse_args(flags)
    split = load_split(config.dataset, config.split_seed)
    torch.manual_seed(config.seed)
    model = build_model(config.model, torch.from_numpy(split.x_train), len(split.class_names))
    write_model_version(config, split, model, {}, world_size=1)


def quantize(version_dir: Path) -> Path:
    command = [sys.executable, "-m", "workloads.inference.quantize", str(version_dir)]
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    return version_dir.with_name(version_dir.name + "-int8")


def load_torch_model(version_dir: Path) -> nn.Module:
    """The trained PyTorch module from the version's weights file, built by its recorded model hook."""
    from workloads.training.hooks import resolve
    from workloads.training.model import Classifier, Standardize

    meta = load_metadata(version_dir)
    n_features = len(meta.feature_names)
    body = resolve(str(meta.hyperparameters["model"]))(n_features, len(meta.class_names))
    model = Classifier(Standardize(torch.zeros(n_features), torch.ones(n_features)), body)  # type: ignore[arg-type]
    model.load_state_dict(torch.load(version_dir / "model.pt", weights_only=True))
    return model.eval()


def eager_ms_per_sample(version_dir: Path, x: npt.NDArray[np.float32]) -> tuple[float, float]:
    """Batch-1 eager forward time (min, median), what the baseline pays per request before any HTTP.

    Both, because on shared cores the median includes waits for a descheduled intra-op thread.
    """
    torch.set_num_threads(available_cpus())
    model = load_torch_model(version_dir)
    rows = [torch.from_numpy(x[i : i + 1]) for i in range(50)]
    times = []
    with torch.inference_mode():
        for row in rows[:10] + rows:  # the first ten warm up
            start = time.perf_counter()
            model(row)
            times.append(time.perf_counter() - start)
    return float(np.min(times[10:]) * 1000), float(np.median(times[10:]) * 1000)


# --- the naive baseline server -------------------------------------------------------------------------


def serve_baseline(version_dir: Path, port: int) -> None:
    """FastAPI on uvicorn, one worker, our request schema and parsing, one eager forward per request.

    The forward runs in Starlette's threadpool (what FastAPI does with a plain ``def`` endpoint), so
    requests overlap as a naive server's would, without batching.
    """
    meta = load_artifact(version_dir).metadata
    torch.set_num_threads(available_cpus())
    model = load_torch_model(version_dir)
    body_model = request_model(len(meta.feature_names), 32)
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    def forward(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        with torch.inference_mode():
            out: npt.NDArray[np.float32] = model(torch.from_numpy(rows)).numpy()
            return out

    @app.get("/readyz")
    async def readyz() -> Response:
        return Response(content='{"ready": true}', media_type="application/json")

    @app.post("/v1/predict")
    async def predict(request: Request) -> Response:
        try:
            payload = body_model.model_validate_json(await request.body())
        except ValidationError as exc:
            return Response(validation_error(exc).model_dump_json(), 422, media_type="application/json")
        scores = await run_in_threadpool(forward, np.asarray(payload.instances, dtype=np.float32))
        classes = scores.argmax(axis=1).tolist()
        response = PredictResponse(
            model=meta.name,
            model_version=meta.version,
            batch_size=len(classes),
            predictions=classes,
            labels=[meta.class_names[c] for c in classes],
            scores=scores.tolist(),
        )
        return Response(response.model_dump_json(), media_type="application/json")

    uvicorn.run(app, host="127.0.0.1", port=port, workers=1, log_level="warning", access_log=False)


# --- load generation -----------------------------------------------------------------------------------


@dataclass
class Result:
    latencies_s: list[float]
    seconds: float
    errors: int
    mean_batch: float | None = None  # rows per model run, from the server's own metrics (ours only)

    @property
    def throughput(self) -> float:
        return len(self.latencies_s) / self.seconds

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q) * 1000)


def encode_requests(x: npt.NDArray[np.float32], count: int = 64) -> list[bytes]:
    """Pre-encoded single-row POSTs of held-out inputs, so the client spends nothing on JSON."""
    requests = []
    for row in x[:count]:
        body = json.dumps({"instances": [row.tolist()]}).encode()
        head = "POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        requests.append(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return requests


async def post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> int:
    """One request on a kept-alive connection; returns the status (bodies always carry a length here)."""
    writer.write(request)
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


@dataclass
class Level:
    """One load level in progress: where to send, what, until when, and what came back."""

    port: int
    requests: list[bytes]
    warm_until: float
    until: float
    result: Result


async def client(level: Level, offset: int) -> None:
    """A closed-loop client on its own kept-alive connection, cycling through the requests."""
    reader, writer = await asyncio.open_connection("127.0.0.1", level.port)
    result, i = level.result, offset
    try:
        while (now := time.perf_counter()) < level.until and len(result.latencies_s) < MAX_REQUESTS_PER_LEVEL:
            status = await post(reader, writer, level.requests[i % len(level.requests)])
            i += 1
            if now < level.warm_until:
                continue
            if status == 200:
                result.latencies_s.append(time.perf_counter() - now)
            else:
                result.errors += 1
    finally:
        writer.close()


async def drive(port: int, requests: list[bytes], concurrency: int) -> Result:
    """``concurrency`` closed-loop clients for WARMUP_S + MEASURE_S; only the measured part counts."""
    start = time.perf_counter()
    level = Level(port, requests, start + WARMUP_S, start + WARMUP_S + MEASURE_S, Result([], MEASURE_S, 0))
    await asyncio.gather(*(client(level, c) for c in range(concurrency)))
    level.result.seconds = time.perf_counter() - level.warm_until
    if not level.result.latencies_s:
        raise RuntimeError(
            f"no request succeeded at concurrency {concurrency} ({level.result.errors} errors)"
        )
    return level.result


# --- orchestration -------------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str], port: int) -> Iterator[None]:
    """A server process, ready (its /readyz answers 200) for the duration of the block."""
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{command} exited: {process.stderr.read().decode() if process.stderr else ''}"
                )
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command} not ready in {SERVER_START_S}s")
            time.sleep(0.1)
        yield
    finally:
        process.terminate()
        process.wait(60)


def server_command(kind: str, version_dir: Path, port: int) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    if kind == "baseline":
        return [sys.executable, __file__, "baseline", "--model", str(version_dir), "--port", str(port)], env
    env |= {"SERVE_MODEL_DIR": str(version_dir), "SERVE_HOST": "127.0.0.1", "SERVE_PORT": str(port)}
    return [sys.executable, "-m", "workloads.inference"], env


def batch_totals(port: int) -> tuple[float, float]:
    """(model runs, rows) so far, from our server's ``inference_batch_size`` histogram."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    family = next(f for f in text_string_to_metric_families(text) if f.name == "inference_batch_size")
    values = {s.name: s.value for s in family.samples}
    return values["inference_batch_size_count"], values["inference_batch_size_sum"]


def drive_and_count_batches(kind: str, port: int, requests: list[bytes], concurrency: int) -> Result:
    if kind == "baseline":
        return asyncio.run(drive(port, requests, concurrency))
    runs_before, rows_before = batch_totals(port)
    result = asyncio.run(drive(port, requests, concurrency))
    runs_after, rows_after = batch_totals(port)
    result.mean_batch = (rows_after - rows_before) / max(runs_after - runs_before, 1)
    return result


def measure(servers: dict[str, Path], requests: list[bytes]) -> dict[str, dict[int, Result]]:
    """Every server at every concurrency, ROUNDS times, interleaved; each keeps its best round.

    The 2 cores are shared, so a neighbour's burst can halve one measurement. Interleaving spreads such
    bursts over all servers alike, and the best of the rounds is the least disturbed estimate of each.
    """
    results: dict[str, dict[int, Result]] = {kind: {} for kind in servers}
    with contextlib.ExitStack() as stack:
        ports = {}
        for kind, version_dir in servers.items():
            ports[kind] = free_port()
            stack.enter_context(running(*server_command(kind, version_dir, ports[kind]), ports[kind]))
        for concurrency in CONCURRENCY:
            for _ in range(ROUNDS):
                for kind, port in ports.items():
                    result = drive_and_count_batches(kind, port, requests, concurrency)
                    best = results[kind].get(concurrency)
                    if best is None or result.throughput > best.throughput:
                        results[kind][concurrency] = result
    return results


def print_table(label: str, results: dict[str, dict[int, Result]]) -> None:
    print(f"\n{'model':6} {'server':10} {'conc':>4} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}"
          f" {'rows/run':>8} {'thr vs base':>11} {'p99 vs base':>11}")  # fmt: skip
    for kind, by_conc in results.items():
        for conc, r in by_conc.items():
            base = results["baseline"][conc]
            rows_per_run = "1 (none)" if r.mean_batch is None else f"{r.mean_batch:.1f}"
            thr_ratio, p99_ratio = (
                r.throughput / base.throughput,
                r.percentile_ms(99) / base.percentile_ms(99),
            )
            print(
                f"{label:6} {kind:10} {conc:4d} {r.throughput:8.0f} {r.percentile_ms(50):8.2f} "
                f"{r.percentile_ms(99):8.2f} {r.errors:6d} {rows_per_run:>8} "
                f"{thr_ratio:10.2f}x {p99_ratio:10.2f}x"
            )


def report_targets(
    results: dict[str, dict[str, dict[int, Result]]], accuracy: dict[str, float], wide_eager_ms: float
) -> None:
    top = CONCURRENCY[-1]
    tiny, wide = results["tiny"], results["wide"]
    tiny_speedup = tiny["ours"][top].throughput / tiny["baseline"][top].throughput
    wide_speedup = wide["ours"][top].throughput / wide["baseline"][top].throughput
    wide_p99 = wide["ours"][top].percentile_ms(99) / wide["baseline"][top].percentile_ms(99)
    int8_speedup = wide["ours-int8"][top].throughput / wide["ours"][top].throughput
    delta = (accuracy["int8"] - accuracy["fp32"]) * 100
    accuracies = f"{accuracy['int8']:.4f} vs {accuracy['fp32']:.4f}"
    checks = [
        ("wide: eager PyTorch ms per sample, batch 1, best", wide_eager_ms, ">= 1", wide_eager_ms >= 1),
        (f"tiny: ours / baseline throughput at {top}", tiny_speedup, ">= 1", tiny_speedup >= 1),
        (f"wide: ours / baseline throughput at {top}", wide_speedup, ">= 3", wide_speedup >= 3),
        (f"wide: ours / baseline p99 at {top}", wide_p99, "<= 1", wide_p99 <= 1),
        (f"wide: int8 / fp32 throughput at {top}", int8_speedup, ">= 1.5", int8_speedup >= 1.5),
        (f"tiny: int8 - fp32 test accuracy, points ({accuracies})", delta, "within 1", abs(delta) <= 1),
    ]
    print("\ntargets:")
    for name, value, target, met in checks:
        print(f"  {name}: {value:.2f} ({target}) -> {'met' if met else 'NOT met'}")


def run_benchmark() -> None:
    started = time.perf_counter()
    print(f"cpus for the servers' thread pools: {available_cpus()}; load: {CONCURRENCY} closed-loop clients, "
          f"{WARMUP_S}s warm-up + {MEASURE_S}s measured per level, best of {ROUNDS} interleaved rounds, "
          "single-row requests")  # fmt: skip
    results: dict[str, dict[str, dict[int, Result]]] = {}
    accuracy: dict[str, float] = {}
    eager: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        for case in MODELS:
            fp32 = make_model(Path(tmp), case)
            int8 = quantize(fp32)
            split: Split = load_split_for(load_metadata(fp32).dataset)
            requests = encode_requests(split.x_test)
            eager_min, eager_median = eager_ms_per_sample(fp32, split.x_test)
            eager[case.label] = eager_min
            size_mb = (fp32 / "model.onnx").stat().st_size / 2**20
            print(f"\n{case.label}: {case.hook}, model.onnx {size_mb:.1f} MiB, eager PyTorch batch 1: "
                  f"{eager_min:.2f} ms/sample min, {eager_median:.2f} median")  # fmt: skip
            if case.label == "tiny":
                int8_meta = load_metadata(int8)
                accuracy = {
                    "fp32": int8_meta.metrics["parent_test_accuracy"],
                    "int8": int8_meta.metrics["test_accuracy"],
                }
            results[case.label] = measure({"baseline": fp32, "ours": fp32, "ours-int8": int8}, requests)
            print_table(case.label, results[case.label])
    report_targets(results, accuracy, eager["wide"])
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command")
    baseline = sub.add_parser("baseline", help="serve the naive baseline (used by the benchmark itself)")
    baseline.add_argument("--model", type=Path, required=True)
    baseline.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    if args.command == "baseline":
        serve_baseline(args.model, args.port)
    else:
        run_benchmark()


if __name__ == "__main__":
    main()
