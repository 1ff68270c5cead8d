"""Inference serving: our server against the servers a team would pick instead, on three model sizes.

One run makes three model versions and, for each, starts every server below as its own process (its own
process group, on 127.0.0.1), checks its answer to one request against ONNX Runtime's, drives it with
single-row requests at concurrency 1 and 32, and stops it; then it waits a moment before the next:

- ``ours``      ``python -m workloads.inference`` (the container's entry point), one process
- ``naive``     the server a user writes in fifteen lines (``benchmarks/peers/naive_server.py``): FastAPI
                on uvicorn with uvloop and httptools, ``InferenceSession.run`` inline in the handler with
                default session options (a pool of one thread per core, spinning)
- ``naive-1t``  the same with one ONNX Runtime thread
- ``litserve``  LitServe with its batching (32 rows, 2 ms)
- ``kserve``    a KServe ModelServer custom predictor (``kserve.Model``), V1 protocol
- ``mlserver``  Seldon MLServer, a custom runtime with adaptive batching (32 rows, 2 ms), V2 protocol
- ``bentoml``   BentoML with adaptive batching (32 rows)
- ``ours-w2``   ours with ``SERVE_WORKERS=2``: informative, run only when named in ``--servers``

Every server runs the version's ``model.onnx`` on ONNX Runtime's CPU provider; each peer speaks its own
request format (``benchmarks/serve_compare.py``), pre-encoded. The four framework peers cannot share the
product's venv (their pins conflict with it and with each other), so each runs in its own, built from
``benchmarks/peers/<peer>.txt`` by ``make bench-setup``; a peer whose venv is missing is reported, not
timed. So is a server that does not start or whose class for the checked row differs from ONNX
Runtime's.

Models: ``digits``, the default MLP trained by ``python -m workloads.training`` (HTTP dominates);
``mlp-1m``, ~1.1M weights (2 hidden layers of 1024); ``mlp-50m``, ~50.6M weights (4 hidden layers of
4096, model-bound). The two larger ones have random weights, written by the trainer's own exporter
(a speed test needs no accuracy).

Rounds: each round runs every server once on every cell (model, concurrency), in a rotated order; the
figures are each server's medians over the rounds, so a neighbour's burst on shared cores moves one
round, not the result. Per cell it prints ours over the best peer (the peer with the highest median
throughput): throughput (higher is better) and p99 latency (lower is better). Targets (issue 30): ours
>= 1.0x the best peer with p99 no worse in every cell; a reduced-precision variant of the 50M model
>= 1.3x the best fp32 peer at concurrency 1.

Variants: ``--variants int8`` adds ``ours[int8]``, our server on the version's dynamic int8 version
(``workloads/inference/quantize.py``), compared with the best fp32 peer on every cell. A new variant
(such as bf16) is one entry in ``VARIANTS``: a function from the fp32 version directory to the
variant's.

Baselines: ``--baseline REF`` (repeatable) adds ``ours@HASH``, ours from the ``workloads`` package of that
commit, in the same rounds: a change's before and after under the same load; shown, not judged. What
each of ours's warm-ups chose (engine, threads, spinning) ends its round's line.

The load generator speaks HTTP/1.1 over asyncio streams itself instead of using httpx: on these 2 shared
cores, against the digits model with 32 clients, httpx spent about 5.9 ms of CPU per request where this
client spends about 0.12 ms, so httpx, not the server, would have set the throughput. Requests are
pre-encoded, connections kept alive.

Drivers (``--driver own|wrk|both``, default both): every cell is measured by the client above and by
wrk (``benchmarks/wrk_driver.py``: the Debian package, found on PATH; one thread, the same pre-encoded
requests, kept-alive connections), each on the same server process, in an order rotated by round;
each driver gets its own table and ratios, and the targets must hold under both. Without wrk on PATH,
``--driver wrk`` is refused (exit 2) and ``both`` runs the own client alone, saying so. A model's
rounds run back to back, and the 1-minute load average is printed with each round (the cores are
shared).

Usage: ``make bench-serve`` (sets up the peers' venvs, then runs this; about 20 minutes on 2 cores), or
``python benchmarks/serve_bench.py --quick`` (one short round: proves every server answers and runs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import torch
from prometheus_client.parser import text_string_to_metric_families
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(REPO))

from benchmarks.serve_compare import (  # noqa: E402
    DEFAULT_SERVERS,
    OURS,
    SERVERS,
    Comparison,
    Measurement,
    ServerSpec,
    compare,
    median,
    same_answer,
)
from benchmarks.wrk_driver import DRIVERS, WrkFailedError, WrkMissingError, drivers, find_wrk  # noqa: E402
from benchmarks.wrk_driver import run_level as wrk_level  # noqa: E402
from workloads.artifacts import ONNX_FILE, load_metadata, model_version_dir  # noqa: E402
from workloads.inference.cpu import available_cpus  # noqa: E402
from workloads.inference.quantize import Reduced, quantize_version  # noqa: E402
from workloads.training.tasks import load_split_for  # noqa: E402

CONCURRENCY = (1, 32)
MAX_REQUESTS_PER_LEVEL = 50_000
SERVER_START_S = 120.0
STOP_S = 15.0
PEER_VENVS = REPO / ".venv-bench"
TARGET_FP32 = 1.0
# Issue 30: the 50M model's reduced-precision version against the best fp32 peer at concurrency 1.
TARGET_VARIANT = {("mlp-50m", 1): 1.3}


@dataclass(frozen=True)
class Timing:
    rounds: int
    warmup_s: float  # per load level, not counted
    measure_s: float  # per load level
    idle_s: float  # after a server stops, before the next starts


# Whole seconds: wrk's durations are (wrk_driver.whole_seconds), and both drivers measure alike.
FULL = Timing(rounds=3, warmup_s=1.0, measure_s=3.0, idle_s=2.0)
QUICK = Timing(rounds=1, warmup_s=0.2, measure_s=0.5, idle_s=0.5)


def _stack(n_features: int, n_classes: int, hidden: int, layers: int) -> nn.Module:
    body: list[nn.Module] = [nn.Linear(n_features, hidden), nn.ReLU()]
    for _ in range(layers - 1):
        body += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*body, nn.Linear(hidden, n_classes))


def mlp_1m(n_features: int, n_classes: int) -> nn.Module:
    """A trainer ``--model`` hook: 2 hidden layers of 1024, ~1.1M weights (the model costs about what
    a request's HTTP handling does)."""
    return _stack(n_features, n_classes, 1024, 2)


def mlp_50m(n_features: int, n_classes: int) -> nn.Module:
    """A trainer ``--model`` hook: 4 hidden layers of 4096, ~50.6M weights: a batch-1 forward streams
    ~200 MB of weights from memory, so the model, not HTTP, dominates."""
    return _stack(n_features, n_classes, 4096, 4)


@dataclass(frozen=True)
class ModelCase:
    label: str
    hook: str
    # 0: random weights, written by the trainer's own exporter without training (a speed test needs no
    # accuracy, and a minute of training would not change one timing).
    epochs: int


MODELS = (
    ModelCase("digits", "workloads.training.model:mlp", 10),
    ModelCase("mlp-1m", "benchmarks.serve_bench:mlp_1m", 0),
    ModelCase("mlp-50m", "benchmarks.serve_bench:mlp_50m", 0),
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


def reduced(precision: Reduced) -> Callable[[Path], Path]:
    """The version at ``precision`` (int8: ONNX Runtime dynamic quantization; bf16: OpenVINO at bf16),
    written beside it. No accuracy gate here (drop up to 1.0): the two larger models have random weights,
    and a speed test needs no accuracy; the product's gate is tested in tests/workloads/inference."""

    def publish(version_dir: Path) -> Path:
        return version_dir.with_name(
            quantize_version(version_dir, precision=precision, max_accuracy_drop=1.0).version
        )

    return publish


# Reduced-precision versions served by ours and compared with the best fp32 peer: name -> a function
# from the fp32 version directory to the variant's.
VARIANTS: dict[str, Callable[[Path], Path]] = {"int8": reduced("int8"), "bf16": reduced("bf16")}


@dataclass(frozen=True)
class Contender:
    """One server on one version: a row of the results (``ours[int8]`` is ours on the int8 version,
    ``ours@1a2b3c4`` ours from the source tree of commit 1a2b3c4, ``tree``)."""

    name: str
    spec: ServerSpec
    version_dir: Path
    # The source tree the server imports first: this checkout, or a baseline commit's (``--baseline``).
    tree: Path = REPO


@dataclass(frozen=True)
class Baseline:
    """Ours at another commit, run beside ours in the same interleaved rounds: a fix's before and after."""

    commit: str  # abbreviated hash
    tree: Path  # its ``workloads`` package, exported by ``git archive``

    @property
    def name(self) -> str:
        return f"{OURS}@{self.commit}"


class BaselineError(Exception):
    """A ``--baseline`` that names no commit of this repository."""


def baseline_commit(ref: str) -> str:
    """The abbreviated hash of the commit ``ref`` names; ``BaselineError`` when it names none."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "--verify", "--quiet", f"{ref}^{{commit}}"],
        check=False,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise BaselineError(f"--baseline {ref}: not a commit of {REPO}")
    return found.stdout.strip()


def export_baseline(commit: str, scratch: Path) -> Baseline:
    """The ``workloads`` package (everything our server imports) at ``commit``, exported under ``scratch``."""
    tree = scratch / f"baseline-{commit}"
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "workloads"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return Baseline(commit, tree)


def contenders(
    version_dir: Path, servers: list[str], variants: dict[str, Path], baselines: Sequence[Baseline] = ()
) -> list[Contender]:
    named = [Contender(name, SERVERS[name], version_dir) for name in servers]
    before = [Contender(b.name, SERVERS[OURS], version_dir, b.tree) for b in baselines]
    return named + before + [Contender(f"{OURS}[{v}]", SERVERS[OURS], d) for v, d in variants.items()]


# --- load generation -----------------------------------------------------------------------------------


@dataclass
class Result:
    latencies_s: list[float]
    seconds: float
    errors: int

    def measurement(self, rows_per_run: float | None = None) -> Measurement:
        return Measurement(
            throughput=len(self.latencies_s) / self.seconds,
            p50_ms=float(np.percentile(self.latencies_s, 50) * 1000),
            p99_ms=float(np.percentile(self.latencies_s, 99) * 1000),
            errors=self.errors,
            rows_per_run=rows_per_run,
        )


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    """One request on a kept-alive connection: the status and the body (by length, or chunked)."""
    writer.write(request)
    status = int((await reader.readline()).split()[1])
    length, chunked = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        return status, await reader.readexactly(length)
    body = b""
    while size := int((await reader.readline()).split(b";")[0], 16):
        body += await reader.readexactly(size)
        await reader.readline()
    await reader.readline()  # the blank line after the last (empty) chunk
    return status, body


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
            status, _ = await exchange(reader, writer, level.requests[i % len(level.requests)])
            i += 1
            if now < level.warm_until:
                continue
            if status == 200:
                result.latencies_s.append(time.perf_counter() - now)
            else:
                result.errors += 1
    finally:
        writer.close()


async def drive(port: int, requests: list[bytes], concurrency: int, timing: Timing) -> Result:
    """``concurrency`` closed-loop clients for warm-up + measured time; only the measured part counts."""
    start = time.perf_counter()
    warm_until = start + timing.warmup_s
    level = Level(port, requests, warm_until, warm_until + timing.measure_s, Result([], timing.measure_s, 0))
    await asyncio.gather(*(client(level, c) for c in range(concurrency)))
    level.result.seconds = time.perf_counter() - level.warm_until
    if not level.result.latencies_s:
        raise ServerError(f"no request succeeded at concurrency {concurrency} ({level.result.errors} errors)")
    return level.result


async def ask(port: int, request: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await exchange(reader, writer, request)
    finally:
        writer.close()


# --- servers -------------------------------------------------------------------------------------------


class ServerError(Exception):
    """A server that is not set up, does not start, or answers wrongly: reported, not timed."""


# What a server that dies or garbles its answers mid-run raises here (a reset or closed connection, an
# unparseable status line, our metrics unreadable): reported like a ServerError, not a crash of the run.
SERVER_FAILURES = (ServerError, WrkFailedError, OSError, EOFError, ValueError, httpx.HTTPError)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_command(contender: Contender, port: int, scratch: Path) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one server; every server imports this checkout first (a
    baseline: its commit's tree)."""
    spec = contender.spec
    env = dict(os.environ) | {"PYTHONPATH": str(contender.tree)} | dict(spec.env)
    if spec.venv is None:
        python = sys.executable
    else:
        python = str(PEER_VENVS / spec.venv / "bin" / "python")
        if not Path(python).exists():
            raise ServerError(f"its venv {PEER_VENVS / spec.venv} is missing: run `make bench-setup`")
        # BentoML keeps its home (and would send usage reports) outside the run's scratch otherwise.
        env |= {"BENTOML_HOME": str(scratch / "bentoml"), "BENTOML_DO_NOT_TRACK": "True"}
    if spec.ours:
        env |= {
            "SERVE_MODEL_DIR": str(contender.version_dir),
            "SERVE_HOST": "127.0.0.1",
            "SERVE_PORT": str(port),
        }
        return [python, "-m", spec.module], env
    model = ["--model", str(contender.version_dir), "--port", str(port)]
    return [python, "-m", spec.module, *spec.args, *model], env


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's whole process group (peers run workers), SIGKILL to what outlives it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(STOP_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def running(contender: Contender, scratch: Path) -> Iterator[int]:
    """The server's process group, ready (its ready path answers 200), for the block; yields its port."""
    port = free_port()
    command, env = server_command(contender, port, scratch)
    log = scratch / f"{contender.name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=scratch, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if process.poll() is not None:
                raise ServerError(f"exited with {process.returncode}:\n{_tail(log)}")
            with contextlib.suppress(httpx.TransportError):
                url = f"http://127.0.0.1:{port}{contender.spec.ready_path}"
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise ServerError(f"not ready in {SERVER_START_S:.0f} s:\n{_tail(log)}")
            time.sleep(0.2)
        yield port
    finally:
        _stop(process)


def check_answer(contender: Contender, port: int, row: list[float], reference: np.ndarray) -> None:
    """The server's class for one row must be ONNX Runtime's (default options) for the fp32 version."""
    wire = contender.spec.wire
    status, body = asyncio.run(ask(port, wire.request(row)))
    if status != 200:
        raise ServerError(f"answered {status}: {body[:300]!r}")
    try:
        scores = wire.decode(body)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ServerError(f"answer not in its format ({exc!r}): {body[:300]!r}") from exc
    if not same_answer(reference, scores):
        raise ServerError(
            f"wrong answer: scores {scores.tolist()} (class {scores.argmax()}), ONNX Runtime "
            f"{reference.tolist()} (class {reference.argmax()})"
        )


def warm_up_choice(port: int) -> str:
    """What our server's warm-up chose (engine, precision, threads, spinning: ``inference_engine_info``)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    family = next(f for f in text_string_to_metric_families(text) if f.name == "inference_engine_info")
    labels = family.samples[0].labels
    return f"{labels['engine']} {labels['precision']} {labels['threads']}t spinning {labels['spinning']}"


def batch_totals(port: int) -> tuple[float, float]:
    """(model runs, rows) so far, from our server's ``inference_batch_size`` histogram."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    family = next(f for f in text_string_to_metric_families(text) if f.name == "inference_batch_size")
    values = {s.name: s.value for s in family.samples}
    return values["inference_batch_size_count"], values["inference_batch_size_sum"]


@dataclass(frozen=True)
class Driver:
    """A load generator: ``own`` (the asyncio client above) or ``wrk`` (at ``wrk_path``)."""

    name: str
    wrk_path: str | None = None

    def measure(self, port: int, requests: list[bytes], conc: int, timing: Timing) -> Measurement:
        if self.wrk_path is None:
            return asyncio.run(drive(port, requests, conc, timing)).measurement()
        return wrk_level(self.wrk_path, port, requests, conc, timing.warmup_s, timing.measure_s).measurement()


def measure_level(
    contender: Contender, driver: Driver, port: int, requests: list[bytes], conc: int, timing: Timing
) -> Measurement:
    if not contender.spec.ours:
        return driver.measure(port, requests, conc, timing)
    runs_before, rows_before = batch_totals(port)
    measured = driver.measure(port, requests, conc, timing)
    runs_after, rows_after = batch_totals(port)
    rows_per_run = (rows_after - rows_before) / max(runs_after - runs_before, 1)
    return Measurement(measured.throughput, measured.p50_ms, measured.p99_ms, measured.errors, rows_per_run)


# --- rounds ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """One model: what its servers are, what they are sent, and what they must answer."""

    label: str
    version_dir: Path  # the fp32 version
    contenders: list[Contender]
    rows: list[list[float]]
    reference: np.ndarray  # ONNX Runtime's scores for rows[0], shape (1, classes)


# model -> driver -> contender -> concurrency -> one measurement per round
Rounds = dict[str, dict[str, dict[str, dict[int, list[Measurement]]]]]


def load_average() -> str:
    """The 1-minute load average, to print beside the figures: the cores are shared."""
    return f"load average {os.getloadavg()[0]:.2f}"


def run_rounds(
    workloads: list[Workload], timing: Timing, scratch: Path, load: list[Driver]
) -> tuple[Rounds, dict[str, dict[str, str]]]:
    """A model's rounds run back to back (so its cells' rounds share the same minutes on the shared
    cores); each round runs every server once, servers in a rotated order, each driven on every
    concurrency by every driver (drivers in an order rotated by round). A server that fails is reported
    (``failures``) and left out of the later rounds of that model."""
    rounds: Rounds = {
        w.label: {d.name: {c.name: {conc: [] for conc in CONCURRENCY} for c in w.contenders} for d in load}
        for w in workloads
    }
    failures: dict[str, dict[str, str]] = {w.label: {} for w in workloads}
    for workload in workloads:
        by_driver = rounds[workload.label]
        for r in range(timing.rounds):
            shift = r % len(workload.contenders)
            order = workload.contenders[shift:] + workload.contenders[:shift]
            drivers_now = load[r % len(load) :] + load[: r % len(load)]
            print(f"round {r + 1} {workload.label}: {load_average()}", flush=True)
            for contender in order:
                if contender.name in failures[workload.label]:
                    continue
                started = time.perf_counter()
                chose = ""
                try:
                    with running(contender, scratch) as port:
                        check_answer(contender, port, workload.rows[0], workload.reference)
                        if contender.spec.ours:
                            chose = f" [warm-up: {warm_up_choice(port)}]"
                        requests = [contender.spec.wire.request(row) for row in workload.rows]
                        for conc in CONCURRENCY:
                            for driver in drivers_now:
                                m = measure_level(contender, driver, port, requests, conc, timing)
                                by_driver[driver.name][contender.name][conc].append(m)
                except SERVER_FAILURES as exc:
                    # Not timed at all on this model: no cell keeps figures from a server that failed.
                    failures[workload.label][contender.name] = str(exc) or repr(exc)
                    for driver in load:
                        for runs in by_driver[driver.name][contender.name].values():
                            runs.clear()
                    print(
                        f"round {r + 1} {workload.label:8} {contender.name:12} FAILED: {exc!s:.2000}",
                        flush=True,
                    )
                else:
                    figures = "; ".join(
                        f"{d.name} c={conc} {runs[-1].throughput:.0f} req/s p99 {runs[-1].p99_ms:.2f} ms"
                        for d in load
                        for conc, runs in by_driver[d.name][contender.name].items()
                    )
                    took = f"({time.perf_counter() - started:.0f} s)"
                    print(
                        f"round {r + 1} {workload.label:8} {contender.name:12} {figures} {took}{chose}",
                        flush=True,
                    )
                time.sleep(timing.idle_s)
    return rounds, failures


# --- report --------------------------------------------------------------------------------------------


# model -> driver -> concurrency -> contender -> its medians
Cells = dict[str, dict[str, dict[int, dict[str, Measurement]]]]


def medians(rounds: Rounds) -> Cells:
    """model -> driver -> concurrency -> contender -> its medians, for the contenders that were timed."""
    return {
        label: {
            driver: {
                conc: {name: median(by_conc[conc]) for name, by_conc in by_name.items() if by_conc[conc]}
                for conc in CONCURRENCY
            }
            for driver, by_name in by_driver.items()
        }
        for label, by_driver in rounds.items()
    }


def print_servers(label: str, driver: str, cells: dict[int, dict[str, Measurement]]) -> None:
    print(
        f"\n{'model':8} {'driver':6} {'server':12} {'conc':>4} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}",
        end="",
    )
    print(f" {'errors':>6} {'rows/run':>8}")
    for conc, cell in cells.items():
        for name, m in cell.items():
            rows = "" if m.rows_per_run is None else f"{m.rows_per_run:.1f}"
            figures = f"{m.throughput:8.0f} {m.p50_ms:8.2f} {m.p99_ms:8.2f} {m.errors:6d} {rows:>8}"
            print(f"{label:8} {driver:6} {name:12} {conc:4d} {figures}")


def print_ceiling(label: str, version_dir: Path, cells: dict[int, dict[str, Measurement]]) -> None:
    """The model's one-row run alone, and the c=1 ratio a server with no HTTP cost would reach."""
    from workloads.inference.model import OnnxModel, load_artifact

    if "naive" not in cells[1]:
        return
    run_s = OnnxModel(load_artifact(version_dir), available_cpus()).single_row_seconds()
    per_request_s = 1 / cells[1]["naive"].throughput
    print(
        f"{label:8} one-row model run {run_s * 1000:.3f} ms (our session options), naive"
        f" {per_request_s * 1000:.3f} ms per request at c=1: ceiling for ours/naive at c=1"
        f" {per_request_s / run_s:.2f}x"
    )


def comparisons(
    cells: dict[int, dict[str, Measurement]], named: list[Contender]
) -> dict[tuple[str, int], Comparison]:
    """(ours or a variant, concurrency) -> its comparison with the best peer timed on that cell."""
    peers = [c.name for c in named if not c.spec.ours]
    ours = [c.name for c in named if c.spec.ours]
    found = {}
    for conc, cell in cells.items():
        for name in ours:
            if (c := compare(cell, name, peers)) is not None:
                found[name, conc] = c
    return found


def target_for(name: str, label: str, conc: int) -> float | None:
    """Ours's fp32 target, a variant's (``ours[bf16]``) where it has one; None for a baseline (shown, not
    judged)."""
    if name == OURS:
        return TARGET_FP32
    return TARGET_VARIANT.get((label, conc)) if name.startswith(f"{OURS}[") else None


def print_comparison(
    table: dict[tuple[str, str], dict[tuple[str, int], Comparison]],
    cells: Cells,
    judged: bool,
) -> bool:
    """The summary as a Markdown table, one row per (model, driver, ours or a variant, concurrency), and
    whether every target is met under every driver (a missing cell is not met); the table says met or
    not only when ``judged`` (not on a quick run)."""
    print(
        "\n| model | driver | server | c | req/s, p99 | best peer | its req/s, p99 | throughput | p99 |"
        " target |"
    )
    print("|---" * 10 + "|")
    all_met = True
    for (label, driver), found in table.items():
        for (name, conc), c in found.items():
            ours, best = cells[label][driver][conc][name], cells[label][driver][conc][c.best_peer]
            target = target_for(name, label, conc)
            verdict = "" if target is None else f">= {target}x"
            if judged and target is not None:
                verdict += ": met" if c.met(target) else ": NOT met"
            all_met &= target is None or c.met(target)
            figures = f"{ours.throughput:.0f}, {ours.p99_ms:.2f} ms | {c.best_peer} |"
            figures += f" {best.throughput:.0f}, {best.p99_ms:.2f} ms"
            ratios = f"{c.throughput_ratio:.2f}x | {c.p99_ratio:.2f}x"
            print(f"| {label} | {driver} | {name} | {conc} | {figures} | {ratios} | {verdict} |")
        all_met &= all((OURS, conc) in found for conc in CONCURRENCY)
    return all_met


# --- main ----------------------------------------------------------------------------------------------


def prepare(
    case: ModelCase, tmp: Path, servers: list[str], variants: list[str], baselines: list[Baseline]
) -> Workload:
    version_dir = make_model(tmp, case)
    split = load_split_for(load_metadata(version_dir).dataset)
    rows = [row.tolist() for row in split.x_test[:64].astype(np.float32)]
    session = ort.InferenceSession(str(version_dir / ONNX_FILE), providers=["CPUExecutionProvider"])
    reference = session.run(None, {session.get_inputs()[0].name: np.asarray(rows[:1], dtype=np.float32)})[0]
    size_mb = (version_dir / ONNX_FILE).stat().st_size / 2**20
    print(f"{case.label}: {case.hook}, {ONNX_FILE} {size_mb:.1f} MiB", flush=True)
    made = {name: VARIANTS[name](version_dir) for name in variants}
    return Workload(
        case.label, version_dir, contenders(version_dir, servers, made, baselines), rows, reference
    )


def run_benchmark(
    timing: Timing,
    models: list[str],
    servers: list[str],
    variants: list[str],
    load: list[Driver],
    baseline_commits: Sequence[str] = (),
) -> int:
    """0 when every server answered and ran and (on a full run) every target is met; else 1."""
    started = time.perf_counter()
    print(
        f"cpus for the servers' thread pools: {available_cpus()}; load: {CONCURRENCY} closed-loop clients "
        f"from {' and '.join(d.name for d in load)}, {timing.warmup_s}s warm-up + {timing.measure_s}s "
        f"measured per level, medians of {timing.rounds} interleaved round(s), single-row requests; "
        f"{load_average()}",
        flush=True,
    )
    judged = timing != QUICK
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        scratch = Path(tmp)
        baselines = [export_baseline(commit, scratch) for commit in baseline_commits]
        cases = [case for case in MODELS if case.label in models]
        workloads = [prepare(case, scratch / "models", servers, variants, baselines) for case in cases]
        rounds, failures = run_rounds(workloads, timing, scratch, load)
        cells = medians(rounds)
        table = {}
        for workload in workloads:
            for driver in load:
                print_servers(workload.label, driver.name, cells[workload.label][driver.name])
                label = f"{workload.label} {driver.name}"
                print_ceiling(label, workload.version_dir, cells[workload.label][driver.name])
                table[workload.label, driver.name] = comparisons(
                    cells[workload.label][driver.name], workload.contenders
                )
        met = print_comparison(table, cells, judged)
    failed = [(label, name, why) for label, by_name in failures.items() for name, why in by_name.items()]
    for label, name, why in failed:
        print(f"\nnot timed: {name} on {label}: {why.splitlines()[0] if why else ''}")
    verdict = ("met" if met else "NOT met") if judged else "not judged on a quick run"
    print(f"\ntargets {verdict}; wall time {time.perf_counter() - started:.0f} s; {load_average()}")
    return 1 if failed or (judged and not met) else 0


def _terminate(signum: int, _frame: object) -> None:
    # SIGTERM unwinds like Ctrl-C, so every running server's process group is stopped on the way out.
    raise SystemExit(128 + signum)


def _names(value: str, known: list[str], what: str) -> list[str]:
    names = [n for n in value.split(",") if n]
    if unknown := [n for n in names if n not in known]:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    model_names, server_names = [m.label for m in MODELS], list(SERVERS)
    parser.add_argument(
        "--quick", action="store_true", help="one short round: a smoke run, no targets judged"
    )
    parser.add_argument(
        "--models",
        type=lambda v: _names(v, model_names, "model"),
        default=model_names,
        help=f"comma-separated (default: {','.join(model_names)})",
    )
    parser.add_argument(
        "--servers",
        type=lambda v: _names(v, server_names, "server"),
        default=DEFAULT_SERVERS,
        help=f"comma-separated, of: {','.join(server_names)} (default: all but ours-w2)",
    )
    parser.add_argument(
        "--variants",
        type=lambda v: _names(v, list(VARIANTS), "variant"),
        default=[],
        help=f"versions of each model served by ours beside fp32, comma-separated, of: {','.join(VARIANTS)}",
    )
    parser.add_argument(
        "--driver",
        choices=DRIVERS,
        default="both",
        help="load generator: own (the asyncio client here), wrk (from PATH), or both (default; without wrk "
        "on PATH, its figures are skipped and said so)",
    )
    parser.add_argument(
        "--baseline",
        metavar="REF",
        action="append",
        default=[],
        help="also run ours from the source tree of this commit (ours@HASH), in the same interleaved rounds: "
        "a change's before and after (repeatable)",
    )
    args = parser.parse_args()
    try:
        baselines = list(dict.fromkeys(baseline_commit(ref) for ref in args.baseline))
    except BaselineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    wrk_path = find_wrk()
    try:
        names, note = drivers(args.driver, wrk_path)
    except WrkMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    if note is not None:
        print(note, file=sys.stderr)
    load = [Driver(name, wrk_path if name == "wrk" else None) for name in names]
    signal.signal(signal.SIGTERM, _terminate)
    timing = QUICK if args.quick else FULL
    sys.exit(run_benchmark(timing, args.models, args.servers, args.variants, load, baselines))


if __name__ == "__main__":
    main()
