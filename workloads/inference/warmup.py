"""Which engine, thread count and spinning a version runs with: measured at warm-up, on this pod's CPUs.

No fixed threshold decides it: how fast a one-row run is (the cost at concurrency 1, where nothing
batches) depends on the model, the CPU and its limit, so warm-up times the candidates and keeps the
fastest. The candidates, in the order measured:

- ONNX Runtime with the thread budget (the CPU limit over the workers: what served before this choice
  was measured), idle pool threads sleeping, then with 1 thread: on cores shared with a load generator
  and neighbours these two differ most, either way (issue 42, the 50M-weight model at one client under
  wrk, load average 4-5 on 2 cores: 1 thread 22.5 ms a row, 2 threads 28.7 ms; on the idle machine 2
  threads are the faster);
- then OpenVINO (where installed, ``engines.py``) with the budget, ONNX Runtime spinning at the first
  count where spinning fits (below), and the rest: the powers of two between 1 and the budget, spinning
  at those where it fits, OpenVINO with fewer threads.

Spinning (``session.intra_op.allow_spinning``) is spinning within a run: a spinning candidate's session
also sets ``session.force_spinning_stop`` (``engines.session_options``), so its pool threads busy-wait
between one operator's parallel work and the next and sleep once the run returns. It is offered only at
a thread count that leaves a whole CPU free (``spinning_fits``): the thread count times the workers
below the CPUs the process may use (``cpu.available_cpus``: its affinity, ``os.sched_getaffinity(0)``,
within the cgroup's CPU quota).

How it came to this. ONNX Runtime runs n intra-op threads as the caller and n - 1 pool threads, and with
spinning alone its idle pool threads "spin waiting for work", which "provides faster inference but
consumes more CPU cycles, resources, and power" (ONNX Runtime docs, "Thread management", Thread-Pool
Spinning Behavior); a spin ran 2^20 pause instructions before the thread blocked, 3 to 47 ms by CPU
(ONNX Runtime PR #27916, which made it a duration), longer than the gap between requests, so under load
those threads never slept (measured: an idle pool thread took 0.12-0.13 of a core while the event loop
got 0.16-0.24, against 0.22-0.35 on 1 thread). At n = every CPU they kept the cores the event loop,
the model thread's hand-offs and the pod's neighbours need, and a quota was spent busy-waiting. Warm-up
cannot see that cost: it times runs back to back, where spinning only wins (the 1.1M-weight model on
the idle 2-core machine: 2 threads spinning 44 µs a row, 1 thread 66 µs). Served, that choice lost
(issue 42, under wrk at one client, load average 8-10, medians of 3 interleaved rounds: 180 req/s, 511
once it was refused, the best peer 435), hence the whole CPU left free. It costs the 50M-weight model
on a quiet 2-core machine: at one client ours ran 2 threads without spinning, 6.96 ms a row, where ONNX
Runtime's defaults (the naive server's: spinning) ran 6.26 ms, a ceiling of 0.90x before any HTTP
(0.89x served under the benchmark's own client, 0.91x under wrk).

``session.force_spinning_stop`` ("forces any TP threads spinning stop immediately when the last of
concurrent Run() call returns. Spinning is restarted on the next Run() call": ONNX Runtime's
``onnxruntime_session_options_config_keys.h``; the installed 1.31.1 reads it) ends the spin between
requests. Measured in one process per setting, a pause after each one-row run (load average 1.7-2.4 on
2 cores): the 50M-weight model, 2 ms pauses, 2 threads spinning kept 1.00 of a core busy in the pause,
with the stop 0.02-0.03, as without spinning (0.01-0.02); the 1.1M-weight model, 50 ms pauses, 0.33
against 0.001. The 1.31 alternative, ``session.intra_op.spin_duration_us`` (PR #27916: -1, the default,
the iteration count; 0 no spinning; a positive value, a spin of that many microseconds), bounds the spin
by time instead (100 µs: 0.02-0.03 of a core in the same 2 ms pauses) but still spins through any gap
shorter than it; the stop spins through none.

The stop does not make spinning at every CPU safe, measured (issue 42, ``benchmarks/README.md``: 2
threads pinned in scratch servers on the 2-core machine, load average 5-10 from other sessions, three
interleaved rounds, medians): the spin left inside a run is what loses once the cores are shared, as
spin-waiting does wherever runnable threads outnumber cores. At one client, the 1.1M-weight model served
319 req/s spinning with the stop (own client; 363 under wrk), 362 (349) spinning without it, 947 (1152)
not spinning; the 50M-weight model 19 (18) with the stop, 22 (26) not spinning. Warm-up, timing on a
quiet machine, would pick spinning there and keep it when the load came, so the whole CPU stays free.

Where building a candidate is dear (a 50M-weight model takes ~0.75 s per ONNX Runtime session on the
idle machine, over 2 s under load) the budget stops the list early, but never before the first two
(``ALWAYS_MEASURED``): with the old order and a budget spent by the first, the 50M model served on 2
threads at 45 req/s where 1 thread, measured, served 62 (medians of 3 interleaved rounds under wrk).

They run the version at its own precision only: an fp32 version is never run in bf16 (a reduced
precision is a published, accuracy-gated version of its own: ``quantize.py``), and a version whose
metadata names an engine (int8 on ONNX Runtime, bf16 on OpenVINO) only varies its threads and spinning,
as does every version on a server pinned to an engine (``SERVE_ENGINE``, ``mlplatform serve --engine``;
one whose metadata names the other engine is refused). Pinned with a thread budget of 1
(``SERVE_THREADS``), a version has one candidate and nothing to compare.
A candidate must first give the reference's outputs (ONNX Runtime on the same graph; fp32 for bf16) on a
probe batch drawn from the training histograms, within ``TOLERANCE`` of the largest output; one that
does not, or does not load, is skipped. Each is then timed against the choice so far, in pairs: a
few one-row runs of each, taken in turn (a, b, a, b, ...), medians compared; the faster wins, unless
the simpler (``simplicity``) is within ``MARGIN`` (or ``SLACK_S``) of it, and meets the next.

In pairs, because timed one after the other the load beside them decided it (issue 42, the 50M-weight
model, load average 2-3 on 2 cores): a candidate's runs take about 0.15 s, and neighbours' bursts as
long doubled a one-thread run (10.5 ms steady, 19-23 ms for 8 runs at a time, in one process); warm-up
timed one thread at 16.4-21.3 ms and two at 10.5-21.6 ms and chose two in both servers that measured
both, where served under wrk at one client one thread answered 80 and 64 req/s and two 72 and 46. A
burst now falls on both of a pair's runs alike.

Candidates are built one at a time and the loser of each pair dropped, so at most two copies of the
weights live at once; once ``choice_budget_s`` is spent no further candidate is tried (the first
``ALWAYS_MEASURED`` always are).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from workloads.artifacts import FeatureHistogram, Precision
from workloads.inference.config import ServeConfig, openvino_installed
from workloads.inference.cpu import available_cpus
from workloads.inference.engines import (
    EngineChoice,
    open_runner,
    read_openvino,
    unavailable,
)
from workloads.inference.model import ModelArtifact, OnnxModel, Rows

log = logging.getLogger("workloads.inference")

# A candidate's outputs may differ from the reference's by this fraction of the largest reference output:
# the same arithmetic in another order (threads, kernels) differs by about 1e-6 in fp32; bf16 keeps 8
# significant bits (about 0.4 % per operation), measured 0.5 % on the 50M-weight MLP.
TOLERANCE: dict[Precision, float] = {"fp32": 1e-4, "int8": 1e-4, "bf16": 3e-2}
# A simpler candidate this close to the fastest (as a fraction of its time, and at least SLACK_S) is
# chosen instead: timing noise does not buy threads or spinning. 10 µs is well under what a request
# costs around its run (HTTP, JSON: about 100 µs here), so a cheap model keeps its simplest setting.
MARGIN = 0.05
SLACK_S = 10e-6
PROBE_ROWS = 16
MIN_RUNS, MAX_RUNS = 3, 15
# Time one candidate's runs may take, beyond its first three.
RUNS_S = 0.15
# Candidates measured whatever the budget: the thread budget and one thread (``candidates``).
ALWAYS_MEASURED = 2


@dataclass(frozen=True)
class Measured:
    choice: EngineChoice
    seconds: float  # median one-row run


def thread_counts(budget: int) -> list[int]:
    """The budget, 1, then the powers of two between them."""
    between = [2**k for k in range(1, budget.bit_length()) if 2**k < budget]
    return list(dict.fromkeys([budget, 1, *between]))


def spinning_fits(threads: int, cpus: int, workers: int) -> bool:
    """Whether ``threads`` intra-op threads in each of ``workers`` processes may spin within their runs on
    ``cpus`` CPUs: a pool exists (more than 1 thread), and all of them together leave at least one CPU
    free."""
    return threads > 1 and threads * workers < cpus


def candidates(
    precision: Precision, engine: str | None, threads: int, openvino: bool, *, cpus: int, workers: int = 1
) -> list[EngineChoice]:
    """What warm-up measures for a version at ``precision`` on ``engine`` (its metadata's, or the one
    the server is pinned to, ``SERVE_ENGINE``; None: both), with a budget of ``threads``, in the order
    measured; spinning only where it fits on ``cpus`` beside the other ``workers`` (``spinning_fits``)."""

    counts = thread_counts(threads)  # the budget, 1, then the powers of two between
    sleeping = [EngineChoice("onnxruntime", precision, n, False) for n in counts]
    spinning = [
        EngineChoice("onnxruntime", precision, n, True) for n in counts if spinning_fits(n, cpus, workers)
    ]
    ort = sleeping[:2] + spinning[:1] + sleeping[2:] + spinning[1:]
    ov = [EngineChoice("openvino", precision, n) for n in counts]
    if engine == "onnxruntime":
        return ort
    if engine == "openvino":
        return ov
    return sleeping[:2] + ov[:1] + ort[2:] + ov[1:] if openvino else ort


def simplicity(choice: EngineChoice) -> tuple[bool, int, bool]:
    """Sort key, simplest first: no spinning (spinning threads take, within a run, CPU time the event loop
    and neighbours could use), fewer threads, ONNX Runtime (the engine every version runs on)."""
    return bool(choice.spinning), choice.threads, choice.engine != "onnxruntime"


def choose(measured: Sequence[Measured], margin: float = MARGIN, slack_s: float = SLACK_S) -> Measured:
    """The fastest, or the simplest candidate within ``margin`` of it (at least ``slack_s``)."""
    fastest = min(m.seconds for m in measured)
    close = [m for m in measured if m.seconds <= fastest + max(fastest * margin, slack_s)]
    return min(close, key=lambda m: simplicity(m.choice))


def probe_rows(histograms: Sequence[FeatureHistogram], rows: int = PROBE_ROWS, seed: int = 0) -> Rows:
    """Rows drawn from the training histograms (a bin by its count, uniform within it): inputs like the
    ones served, so outputs are compared where they matter."""
    rng = np.random.default_rng(seed)
    columns = []
    for hist in histograms:
        edges, counts = np.asarray(hist.bin_edges), np.asarray(hist.counts, dtype=float)
        bins = rng.choice(len(counts), size=rows, p=counts / counts.sum())
        columns.append(rng.uniform(edges[bins], edges[bins + 1]))
    return np.stack(columns, axis=1).astype(np.float32)


def one_row_seconds(models: Sequence[OnnxModel], row: Rows) -> list[float]:
    """Each model's median one-row run, their runs taken in turn (a, b, a, b, ...) after one untimed run
    each, so that whatever else runs on the cores falls on all of them alike: at least ``MIN_RUNS`` each,
    at most ``MAX_RUNS``, stopping once ``RUNS_S`` per model is spent."""
    for model in models:
        model.predict(row)
    times: list[list[float]] = [[] for _ in models]
    spent = 0.0
    while len(times[0]) < MAX_RUNS and (len(times[0]) < MIN_RUNS or spent < RUNS_S * len(models)):
        for model, runs in zip(models, times, strict=True):
            started = time.perf_counter()
            model.predict(row)
            runs.append(time.perf_counter() - started)
            spent += runs[-1]
    return [float(np.median(runs)) for runs in times]


def within(y: Rows, reference: Rows, tolerance: float) -> bool:
    """The same outputs as the reference: non-finite values exactly where it has them, and the same ones
    (a version that answers NaN for some rows is served as it is, its requests refused with 422), and
    finite values within ``tolerance`` of its largest finite value."""
    finite = np.isfinite(reference)
    if not np.array_equal(np.isfinite(y), finite):
        return False
    if not np.array_equal(y[~finite], reference[~finite], equal_nan=True):
        return False
    if not finite.any():
        return True
    scale = float(np.max(np.abs(reference[finite]))) or 1.0
    return float(np.max(np.abs(y[finite] - reference[finite]))) <= tolerance * scale


def _built(artifact: ModelArtifact, choices: Sequence[EngineChoice]) -> Iterator[OnnxModel]:
    """Each candidate, built in turn (OpenVINO reads the graph once for all of its candidates); one that
    fails to build is logged and skipped."""
    openvino_model = None
    for choice in choices:
        try:
            if choice.engine == "openvino" and openvino_model is None:
                openvino_model = read_openvino(artifact.onnx_bytes)
            yield OnnxModel(
                artifact,
                choice.threads,
                engine=choice.engine,
                spinning=bool(choice.spinning),
                openvino_model=openvino_model,
            )
        except Exception as exc:
            log.warning("warm-up: %s does not load, skipped: %s", choice.label, str(exc).splitlines()[0])


def build_model(
    artifact: ModelArtifact,
    threads: int,
    config: ServeConfig,
    on_chosen: Callable[[EngineChoice], None] | None = None,
) -> OnnxModel:
    """The version on the fastest candidate that gives the reference's outputs, warmed for
    ``config.max_batch_size``; ``on_chosen`` hears the choice. Raises ``RuntimeError`` when no candidate
    qualifies (a version published for an engine this pod cannot run, say)."""
    meta = artifact.metadata
    if config.engine is not None and meta.engine not in (None, config.engine):
        raise RuntimeError(
            f"version {meta.version} ({meta.precision}) runs on {meta.engine}, not on the engine this "
            f"server is pinned to ({config.engine})"
        )
    started = time.perf_counter()
    probe = probe_rows(meta.reference_histograms)
    # The reference is ONNX Runtime on the same graph: the first candidate for an fp32 or int8 version
    # (its thread count does not change the arithmetic beyond rounding); bf16 is compared with fp32.
    reference: Rows | None = None
    engine = meta.engine or config.engine
    choices = candidates(
        meta.precision,
        engine,
        threads,
        openvino_installed(),
        cpus=available_cpus(),
        workers=config.workers,
    )
    measured: list[Measured] = []  # every timing, in the order taken
    kept: OnnxModel | None = None  # the choice so far, timed against each later candidate
    for tried, model in enumerate(_built(artifact, choices), start=1):
        y = model.predict(probe)
        if reference is None and model.choice.engine == "onnxruntime":
            reference = y
        elif reference is None:
            fp32 = EngineChoice("onnxruntime", "fp32", 1, False)
            reference = open_runner(artifact.onnx_bytes, fp32)(probe)
        if not within(y, reference, TOLERANCE[meta.precision]):
            log.warning("warm-up: %s gives other outputs than the reference, skipped", model.choice.label)
        elif kept is None:
            kept = model
        else:
            pair = [kept, model]
            timed = [
                Measured(m.choice, s) for m, s in zip(pair, one_row_seconds(pair, probe[:1]), strict=True)
            ]
            measured += timed
            kept = pair[timed.index(choose(timed))]
        del model  # the loser, if it was, before the next is built: at most two copies of the weights
        if tried >= ALWAYS_MEASURED and time.perf_counter() - started > config.choice_budget_s:
            break
    if kept is None:
        why = unavailable(engine, meta.precision) if engine is not None else None
        raise RuntimeError(
            f"no engine runs version {meta.version} ({meta.precision}) here: {why or 'see the log'}"
        )
    if not measured:  # the one candidate that qualified: timed for the log alone
        measured = [Measured(kept.choice, one_row_seconds([kept], probe[:1])[0])]
    model = kept
    chosen = next(m for m in reversed(measured) if m.choice == model.choice)
    model.warm_up(config.max_batch_size)
    log.info(
        "warm-up chose %s: %.0f µs a row; measured %d of %d candidates in %.0f ms, in pairs: %s",
        chosen.choice.label,
        chosen.seconds * 1e6,
        len({m.choice for m in measured}),
        len(choices),
        (time.perf_counter() - started) * 1000,
        "; ".join(
            f"{a.choice.label} {a.seconds * 1e6:.0f} µs against {b.choice.label} {b.seconds * 1e6:.0f} µs"
            if b is not None
            else f"{a.choice.label} {a.seconds * 1e6:.0f} µs"
            for a, b in itertools.zip_longest(measured[::2], measured[1::2])
        ),
    )
    if on_chosen is not None:
        on_chosen(chosen.choice)
    return model
