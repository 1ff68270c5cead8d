"""``SERVE_WORKERS=2``: two real worker processes on one port, driven over 127.0.0.1.

Which worker answers a connection is the kernel's choice, so each is made to serve alone by stopping the
other (SIGSTOP: a stopped process does not accept, and the other takes every connection). That shows both
serve, and lets the test know exactly how many requests each one answered: the metrics, the drift window
and a token rotation must then add up over both, whichever worker answers the question.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from workloads.training.tasks import Split

from .serving import Launch, Server, client_loop, metric_samples

PREDICT_200 = ("inference_responses_total", (("code", "200"), ("route", "/v1/predict")))


def worker_pids(server: Server) -> list[int]:
    """The supervisor's worker processes (not multiprocessing's resource tracker, also its child)."""
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


@contextmanager
def alone(server: Server, worker: int) -> Iterator[None]:
    """Only ``worker`` accepts connections for the duration: the other workers are stopped."""
    others = [pid for pid in worker_pids(server) if pid != worker]
    for pid in others:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in others:
            os.kill(pid, signal.SIGCONT)


def predict(server: Server, token: str, rows: list[list[float]]) -> list[int]:
    """One request per row, each on a connection of its own (so the kernel picks a worker each time)."""
    statuses = []
    for row in rows:
        with server.client({"authorization": f"Bearer {token}"}) as client:
            statuses.append(client.post("/v1/predict", json={"instances": [row]}).status_code)
    return statuses


def test_two_workers_each_serve_and_metrics_drift_and_token_add_up(
    launch: Launch, model_dir: Path, held_out: Split, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    server = launch(model_dir, workers=2, auth_token_file=token_file, drift_window=100, drift_min_samples=10)
    assert "serving with 2 worker processes" in server.logs()
    workers = worker_pids(server)
    assert len(workers) == 2, workers
    rows = held_out.x_test[:20].tolist()

    for worker, part in zip(workers, (rows[:7], rows[7:]), strict=True):
        with alone(server, worker):
            assert predict(server, "first-token", part) == [200] * len(part)

    auth = {"authorization": "Bearer first-token"}
    samples = metric_samples(server, auth)
    assert samples[PREDICT_200] == 20, "both workers' responses, counted in one /metrics"
    assert samples[("inference_batch_size_sum", ())] == 20
    assert samples[("inference_in_flight_requests", ())] == 0
    assert samples[("inference_model_info", (("model", "digits"), ("version", "1")))] == 1
    for worker in workers:  # the same shared drift window, whichever worker answers
        with alone(server, worker), server.client(auth) as client:
            assert client.get("/v1/drift").json()["samples"] == 20

    rotated = tmp_path / "token.new"  # a Secret update swaps the file
    rotated.write_text("second-token\n")
    rotated.replace(token_file)
    time.sleep(1.2)  # auth.TOKEN_CHECK_S: each worker looks at the file at most once a second
    for worker in workers:
        with alone(server, worker):
            assert predict(server, "second-token", rows[:1]) == [200]
            assert predict(server, "first-token", rows[:1]) == [401]


def test_sigterm_drains_every_worker_within_the_deadline(
    launch: Launch, model_dir: Path, held_out: Split
) -> None:
    # drain_min_s: every client, however starved of CPU, is answered 503 before the listener closes (a
    # connection still in the closed listener's backlog is reset: seen once on a machine at load 15).
    server = launch(model_dir, workers=2, drain_min_s=2.0, drain_timeout_s=5, shutdown_timeout_s=2)
    port = int(server.url.rsplit(":", 1)[1])
    rows = held_out.x_test[:16].tolist()
    outcomes: Counter[str] = Counter()

    async def load_then_terminate() -> float:
        limits = httpx.Limits(max_connections=16)
        async with server.async_client(limits) as client:
            clients = [asyncio.create_task(client_loop(client, row, outcomes)) for row in rows]
            await asyncio.sleep(1.0)
            server.process.send_signal(signal.SIGTERM)
            terminated = time.monotonic()
            await asyncio.wait_for(asyncio.gather(*clients), timeout=20)
            await asyncio.to_thread(server.exit_status, 20)
            return time.monotonic() - terminated

    took = asyncio.run(load_then_terminate())
    assert server.process.returncode == 0, server.logs()
    assert not [o for o in outcomes if o.startswith("lost")], outcomes
    assert outcomes["completed"] > 0, outcomes
    # Both workers drained (in parallel), and all of it inside drain_timeout + shutdown_timeout.
    assert len(re.findall(r"drained in \d+ ms", server.logs())) == 2, server.logs()
    assert took < 5 + 2, took
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
