"""Helpers for driving a real server subprocess from tests: the handle, readiness, metrics."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

# The engine and thread budget pinned (``SERVE_ENGINE``, ``SERVE_THREADS``: docs/inference.md) for the
# servers of tests that are not about warm-up's choice: one candidate, nothing to measure (warmup.py),
# where measuring ONNX Runtime on 2 threads and 1 and OpenVINO on each cost a start about 0.2 CPU-s.
# The shared ``server`` fixture (conftest.py) and test_engines.py keep the measured choice.
PINNED = {"SERVE_ENGINE": "onnxruntime", "SERVE_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    verify: ssl.SSLContext | bool = True

    def logs(self) -> str:
        return self.log.read_text()

    def client(self, headers: dict[str, str] | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.verify, timeout=10, headers=headers)

    def async_client(self, limits: httpx.Limits | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            verify=self.verify,
            timeout=10,
            limits=limits or httpx.Limits(max_connections=64),
        )

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM, as the kubelet sends it; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.exit_status(timeout)

    def exit_status(self, timeout: float) -> int:
        """The exit status within ``timeout``; a server still running then fails with its log's tail."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"server still running {timeout:.0f} s later:\n{self.logs()[-3000:]}"
            ) from None


Launch = Callable[..., Server]


def wait_ready(server: Server, deadline_s: float = 30) -> None:
    deadline = time.monotonic() + deadline_s
    with server.client() as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise AssertionError(f"server exited {server.process.returncode}:\n{server.logs()}")
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    raise AssertionError(f"server not ready in {deadline_s}s:\n{server.logs()}")


def metric_samples(
    server: Server, headers: dict[str, str] | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on /metrics, keyed by name and sorted labels."""
    with server.client(headers) as client:
        text = client.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def client_loop(client: httpx.AsyncClient, row: list[float], outcomes: Counter[str]) -> None:
    """Send requests back to back until the server turns this client away.

    A 503 while draining is a refusal the client acts on as a load balancer would (go elsewhere: stop
    here); a refused connection means the listener is closed. Anything else that is not a 200 (a reset,
    an empty reply, a 5xx) would be an accepted request the server lost, and fails the test.
    """
    while True:
        try:
            response = await client.post("/v1/predict", json={"instances": [row]})
        except httpx.ConnectError:
            outcomes["refused: connection"] += 1
            return
        except httpx.TransportError as exc:
            outcomes[f"lost: {type(exc).__name__}"] += 1
            return
        if response.status_code == 200:
            outcomes["completed"] += 1
            continue
        draining = response.status_code == 503 and response.json()["error"] == "draining"
        outcomes["refused: 503 draining" if draining else f"lost: HTTP {response.status_code}"] += 1
        return


def serve_alias(
    env: Mapping[str, str], registry: str, model_uri: str, poll_s: float, tmp_path: Path
) -> Server:
    """The inference container's entry point (``python -m workloads.inference``) following a registry
    alias, configured as the Deployment configures it (engine and threads ``PINNED`` unless ``env`` sets
    them), on a free port; its output in ``serve.log``."""
    port = free_port()
    log = tmp_path / "serve.log"
    settings = {
        **PINNED,
        **env,
        "MLFLOW_TRACKING_URI": registry,
        "SERVE_MODEL_URI": model_uri,
        "SERVE_POLL_INTERVAL_S": str(poll_s),
        "SERVE_PORT": str(port),
        "SERVE_MODEL_CACHE_DIR": str(tmp_path / "cache"),
    }
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "workloads.inference"],
            cwd=Path(__file__).resolve().parents[3],
            env=settings,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Server(f"http://127.0.0.1:{port}", process, log)
