"""The champion's latency with and without a shadow (issue 29: a shadow keeps the champion's p99 within
10 %), measured side by side on real processes.

One MLflow 3.17.2 server on loopback (SQLite, job execution off, its own process group: the test
suite's), the digits model trained by the real trainer and registered twice (``@champion`` and
``@challenger``), and the inference container's entry point following ``models:/NAME@champion`` with
one ONNX Runtime thread. Phases with the shadow off (tag 0: the champion alone, as without a rollout)
and on (the rollout's default
``shadowPercent``, workloads/delivery/plan.py) alternate, the order flipped every round so that a slow
drift of the machine falls on both; each phase waits until the server reports the setting applied, then
drives ``CONCURRENCY`` closed-loop clients (benchmarks/serve_bench.py's load generator: pre-encoded
single-row requests on kept-alive connections). Printed: each phase's p99, the pooled p99 of each
condition, their ratio, the median of the per-round ratios, and the share of requests the shadow
compared (so a shadow that silently did nothing cannot pass).

Usage: ``python benchmarks/shadow_bench.py [--rounds N] [--seconds S]`` (about a minute with the
defaults, plus training the digits model once).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.serve_bench import FULL, MODELS, Timing, drive, make_model  # noqa: E402
from tests.workloads.inference.serving import Server, metric_samples, serve_alias, wait_ready  # noqa: E402
from tests.workloads.registry.conftest import _serve as mlflow_server  # noqa: E402
from workloads.artifacts import load_metadata  # noqa: E402
from workloads.delivery import contract  # noqa: E402
from workloads.delivery.plan import RolloutPlan  # noqa: E402
from workloads.registry.client import RegistryClient  # noqa: E402
from workloads.registry.rollout import CHALLENGER, CHAMPION  # noqa: E402
from workloads.training.tasks import load_split_for  # noqa: E402

# One client (the champion idle between requests: the shadow's copies run) and eight (busy: copies wait
# for idle moments, or are dropped).
CONCURRENCY = (1, 8)
TARGET = 1.10  # issue 29: the champion's p99 within 10 % with a shadow running


def register(client: RegistryClient, name: str, version_dir: Path) -> str:
    """A new version of ``name`` from ``version_dir``'s files, uploaded through the registry's proxy."""
    client.ensure_registered_model(name)
    run = client.create_run(client.experiment_id(name), "shadow-bench", {})
    source = run["info"]["artifact_uri"] + "/model"
    client.upload(source, version_dir)
    return client.create_version(name, source, run["info"]["run_id"], {}).version


def applied(server: Server, name: str, challenger: str) -> float | None:
    """The shadow percent the server applies to ``challenger`` now (None: not loaded)."""
    return metric_samples(server).get((contract.SHADOW_APPLIED, (("model", name), ("version", challenger))))


def compared(server: Server, name: str, challenger: str) -> float:
    key = (contract.SHADOW_REQUESTS, (("model", name), ("outcome", "compared"), ("version", challenger)))
    return metric_samples(server).get(key, 0.0)


def set_shadow(client: RegistryClient, name: str, server: Server, challenger: str, percent: int) -> None:
    client.set_model_tag(name, contract.SHADOW_TAG, str(percent))
    deadline = time.monotonic() + 30
    # Off: the server unloads the challenger (both tags 0), so its series says 0 or is not there yet.
    while (applied(server, name, challenger) or 0) != percent:
        if time.monotonic() > deadline:
            raise SystemExit(f"the server did not apply shadow {percent} % within 30 s")
        time.sleep(0.1)


@dataclass(frozen=True)
class Fleet:
    client: RegistryClient
    name: str
    server: Server
    challenger: str
    requests: list[bytes]


def measure(fleet: Fleet, concurrency: int, timing: Timing, shadow_percent: int) -> str:
    """Alternating phases without and with the shadow at ``concurrency``; the summary line."""
    port = int(fleet.server.url.rsplit(":", 1)[1])
    p99: dict[int, list[float]] = {0: [], shadow_percent: []}
    latencies: dict[int, list[float]] = {0: [], shadow_percent: []}
    requests_on = copies = 0.0
    for round_ in range(timing.rounds):
        for percent in (0, shadow_percent) if round_ % 2 == 0 else (shadow_percent, 0):
            set_shadow(fleet.client, fleet.name, fleet.server, fleet.challenger, percent)
            before = compared(fleet.server, fleet.name, fleet.challenger)
            result = asyncio.run(drive(port, fleet.requests, concurrency, timing))
            if result.errors:
                raise SystemExit(f"{result.errors} requests failed with shadow {percent} %")
            latencies[percent] += result.latencies_s
            p99[percent].append(float(np.percentile(result.latencies_s, 99)) * 1000)
            if percent:
                copies += compared(fleet.server, fleet.name, fleet.challenger) - before
                requests_on += len(result.latencies_s)
            print(f"c={concurrency} round {round_ + 1} shadow {percent:3d} %: p99 {p99[percent][-1]:.2f} ms")
    pooled = {p: float(np.percentile(v, 99)) * 1000 for p, v in latencies.items()}
    paired = statistics.median(on / off for on, off in zip(p99[shadow_percent], p99[0], strict=True))
    ratio = pooled[shadow_percent] / pooled[0]
    return (
        f"champion p99 at concurrency {concurrency}: without shadow {pooled[0]:.2f} ms, with a "
        f"{shadow_percent} % shadow {pooled[shadow_percent]:.2f} ms: {ratio:.3f}x pooled, "
        f"{paired:.3f}x median per round (target <= {TARGET:.2f}); the shadow compared "
        f"{copies / requests_on:.1%} of the requests (the rest dropped: copies run only while the "
        "champion is idle)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per phase")
    args = parser.parse_args()
    timing = Timing(rounds=args.rounds, warmup_s=FULL.warmup_s, measure_s=args.seconds, idle_s=0)
    shadow_percent = RolloutPlan().shadow_percent
    with tempfile.TemporaryDirectory(prefix="shadow-bench-") as scratch:
        tmp = Path(scratch)
        digits = next(case for case in MODELS if case.label == "digits")
        version_dir = make_model(tmp / "out", digits)
        name = load_metadata(version_dir).name
        rows = load_split_for(load_metadata(version_dir).dataset).x_test.astype(np.float32)
        requests = [
            (
                f"POST /v1/predict HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n"
            ).encode()
            + body
            for body in (json.dumps({"instances": [row.tolist()]}).encode() for row in rows)
        ]
        (tmp / "mlflow").mkdir()
        with contextlib.contextmanager(mlflow_server)(tmp / "mlflow", [], {}) as registry:
            client = RegistryClient(registry)
            client.set_alias(name, CHAMPION, register(client, name, version_dir))
            challenger = register(client, name, version_dir)
            client.set_alias(name, CHALLENGER, challenger)
            env = {"PATH": "/usr/bin:/bin", "SERVE_THREADS": "1"}
            (tmp / "server").mkdir()
            server = serve_alias(env, registry, f"models:/{name}@champion", 0.2, tmp / "server")
            try:
                wait_ready(server)
                fleet = Fleet(client, name, server, challenger, requests)
                summaries = [measure(fleet, c, timing, shadow_percent) for c in CONCURRENCY]
            finally:
                server.terminate()
    print("\n" + "\n".join(summaries))


if __name__ == "__main__":
    main()
