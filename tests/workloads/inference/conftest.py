"""Fixtures for the inference tests: a model trained by the real trainer, and real servers on loopback.

The model comes from exactly what a user runs (``python -m workloads.training``), once per session; the
servers are ``python -m workloads.inference`` subprocesses configured by ``SERVE_*`` variables, as the
container is, so SIGTERM, sockets and ONNX Runtime are all real.
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.certificates import self_signed
from tests.workloads.digits_model import MODEL_NAME, VERSION, trained
from workloads.artifacts import ONNX_FILE, load_metadata, model_version_dir, write_metadata
from workloads.inference.quantize import quantize_version
from workloads.training.tasks import Split, load_split_for

from .serving import PINNED, Launch, Server, free_port, wait_ready

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A digits model version trained by the real trainer (single process), as a user would: once per
    test run (tests/workloads/digits_model.py), copied into this process's own folder, as fixtures
    write beside it."""
    output = tmp_path_factory.mktemp("artifacts")
    shutil.copytree(trained(tmp_path_factory.mktemp("trained")), output, dirs_exist_ok=True)
    return model_version_dir(output, MODEL_NAME, VERSION)


@pytest.fixture(scope="session")
def int8_dir(model_dir: Path) -> Path:
    quantize_version(model_dir)
    return model_dir.with_name("1-int8")


@pytest.fixture(scope="session")
def non_finite_dir(model_dir: Path) -> Path:
    """A faulty version of the same model: its graph multiplies the output by +inf, so every score is
    inf or NaN, as an overflowing model's would be; the same inputs, outputs and classes (servable in
    the champion's place), its files hashed into its metadata as the trainer would."""
    faulty = model_dir.with_name("1-non-finite")
    faulty.mkdir()
    graph = onnx.load(str(model_dir / ONNX_FILE))
    output = graph.graph.output[0].name
    for node in graph.graph.node:
        node.output[:] = [f"{name}-raw" if name == output else name for name in node.output]
    graph.graph.initializer.append(numpy_helper.from_array(np.array([np.inf], np.float32), "infinity"))
    graph.graph.node.append(helper.make_node("Mul", [f"{output}-raw", "infinity"], [output]))
    onnx.save(graph, str(faulty / ONNX_FILE))
    write_metadata(faulty, load_metadata(model_dir))
    return faulty


@pytest.fixture(scope="session")
def held_out(model_dir: Path) -> Split:
    """The exact test split the model was measured on, rebuilt from its metadata."""
    return load_split_for(load_metadata(model_dir).dataset)


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, for servers launched with TLS."""
    return self_signed(tmp_path_factory.mktemp("tls"), "/CN=127.0.0.1", "IP:127.0.0.1")


@pytest.fixture(scope="session")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launch]:
    """``launch(model_dir, max_wait_ms=20, ...)`` starts a server on a free loopback port and waits until
    it is ready; every server still running at the end of the session gets SIGTERM. Its engine and
    threads are ``PINNED`` unless ``measured`` (warm-up measures them, as by default)."""
    started: list[Server] = []

    def start(
        model: Path,
        *,
        scheme: str = "http",
        verify: ssl.SSLContext | bool = True,
        measured: bool = False,
        **settings: object,
    ) -> Server:
        port = free_port()
        log = tmp_path_factory.mktemp("server") / "server.log"
        env = {
            **os.environ,
            **({} if measured else PINNED),
            "SERVE_MODEL_DIR": str(model),
            "SERVE_HOST": "127.0.0.1",
            "SERVE_PORT": str(port),
        }
        env |= {f"SERVE_{k.upper()}": str(v) for k, v in settings.items()}
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "workloads.inference"], cwd=REPO, env=env, stdout=sink, stderr=sink
            )
        server = Server(f"{scheme}://127.0.0.1:{port}", process, log, verify)
        started.append(server)
        wait_ready(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
    for server in started:
        try:
            server.process.wait(30)
        except subprocess.TimeoutExpired:
            server.process.kill()


@pytest.fixture(scope="session")
def server(launch: Launch, model_dir: Path) -> Server:
    """The shared server: a 20 ms batching window so concurrent test requests visibly share runs; its
    engine and threads measured at warm-up, as a server's are by default."""
    return launch(model_dir, max_wait_ms=20, measured=True)


@pytest.fixture(scope="session")
def bf16_dir(model_dir: Path) -> Path:
    """The bf16 version of the model (OpenVINO at bf16); skipped where this machine cannot measure one."""
    from workloads.inference.engines import unavailable

    reason = unavailable("openvino", "bf16")
    if reason is not None:
        pytest.skip(f"no bf16 version here: {reason}")
    quantize_version(model_dir, precision="bf16")
    return model_dir.with_name("1-bf16")
