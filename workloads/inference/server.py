"""Run the server: verify the model, size the thread pool, serve on uvicorn, drain on SIGTERM.

Why FastAPI on uvicorn: the service's work is one model run per batch on a worker thread; what the HTTP
layer must do is accept many concurrent requests cheaply on one event loop and let them wait for the
batch without a thread each. FastAPI (Starlette) on uvicorn does that, with pydantic validation and
Prometheus in reach, and it is what the naive baseline uses too, so the benchmark measures batching
rather than a change of framework. One worker process per pod: a second would load a second copy of
the model and split the batches; scale with replicas instead (the HPA).

SIGTERM does not stop uvicorn at once: readiness turns false, new requests get 503, and only when the
admitted ones have finished does uvicorn's own shutdown begin (close listeners, close idle connections,
stop the batcher). A second SIGINT forces the exit, as uvicorn's does.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from pydantic import ValidationError

from workloads.artifacts import ArtifactError
from workloads.inference.app import create_app
from workloads.inference.config import ServeConfig
from workloads.inference.cpu import available_cpus
from workloads.inference.gate import read_token
from workloads.inference.model import load_artifact
from workloads.inference.service import Service

log = logging.getLogger("workloads.inference")


class ModelVersionFilter(logging.Filter):
    """Stamps every log record, uvicorn's included, with the model name and version being served."""

    def __init__(self, model: str, version: str) -> None:
        super().__init__()
        self.model = model
        self.version = version

    def filter(self, record: logging.LogRecord) -> bool:
        record.model = self.model
        record.model_version = self.version
        return True


def log_config(model: str, version: str, level: str) -> dict[str, Any]:
    """One stderr handler for our logger and uvicorn's, every line carrying model and version."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"model": {"()": ModelVersionFilter, "model": model, "version": version}},
        "formatters": {
            "plain": {
                "format": "%(asctime)s %(levelname)s %(name)s model=%(model)s version=%(model_version)s "
                "%(message)s"
            }
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "plain",
                "filters": ["model"],
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            name: {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
            for name in ("workloads.inference", "uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }


def prepare(config: ServeConfig) -> Service:
    """Check everything that can be wrong before a socket opens.

    Raises ``ArtifactError`` (missing directory, bad hashes) or ``ValueError`` / ``OSError`` (an empty
    or unreadable token file), each with a one-line message.
    """
    artifact = load_artifact(config.model_dir)
    token = read_token(config.auth_token_file) if config.auth_token_file is not None else None
    threads = config.threads or available_cpus()
    return Service(config, artifact, threads=threads, token=token)


class DrainingServer(uvicorn.Server):
    """uvicorn, with SIGTERM/SIGINT starting a drain instead of an immediate shutdown."""

    def __init__(self, config: uvicorn.Config, service: Service) -> None:
        super().__init__(config)
        self.service = service
        self.failed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_requested = False
        self._drain: asyncio.Task[None] | None = None  # held so the task is not garbage-collected

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not calling super(): it would re-raise the signal after shutdown, turning a clean drain into
        # a death by SIGTERM (exit status 143) that looks like a crash to whoever reads it.
        if self.should_exit or self._drain_requested:
            if sig == signal.SIGINT:
                self.force_exit = True
            return
        if self._loop is None:  # signalled before startup: nothing admitted, nothing to drain
            self.should_exit = True
            return
        self._drain_requested = True
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain = asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        await self.service.drain()
        self.should_exit = True

    def load_failed(self) -> None:
        self.failed = True
        self.should_exit = True


# What ``ServeConfig(...)`` and ``prepare`` raise on bad input: the caller prints ``bad_input`` and exits 2.
BAD_INPUT_ERRORS = (ArtifactError, ValueError, OSError)


def bad_input(exc: Exception, field_name: Callable[[str], str]) -> list[str]:
    """One line per problem, naming settings the way the user wrote them (a flag, an env variable)."""
    if not isinstance(exc, ValidationError):
        return [str(exc).splitlines()[0] if str(exc) else type(exc).__name__]
    lines = []
    for error in exc.errors(include_url=False):
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{field_name(str(error['loc'][0]))}: {message}" if error["loc"] else message)
    return lines


def run(service: Service) -> int:
    """Serve until drained; 0 after a clean drain, 1 if the model failed to load."""
    config = service.config
    meta = service.artifact.metadata

    def load_failed() -> None:
        server.load_failed()

    uv_config = uvicorn.Config(
        create_app(service, on_load_failure=load_failed),
        host=config.host,
        port=config.port,
        ssl_certfile=config.tls_cert_file,
        ssl_keyfile=config.tls_key_file,
        access_log=config.access_log,
        log_config=log_config(meta.name, meta.version, config.log_level),
        timeout_graceful_shutdown=int(config.drain_timeout_s) + 5,
        server_header=False,
    )
    server = DrainingServer(uv_config, service)
    server.run()
    return 1 if server.failed else 0
