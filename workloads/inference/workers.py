"""One process, or ``SERVE_WORKERS`` processes on one port, for models cheaper than their HTTP handling.

When a model run costs microseconds, one process spends its CPU parsing HTTP and JSON on one event loop
while the pod's other CPUs idle; the GIL keeps threads from helping. N worker processes accept on the
same listening socket (bound once, here, and inherited: the kernel hands each connection to whichever
worker is waiting in ``accept``), each with its own model session, ONNX Runtime getting the CPU limit
divided between them. For a model that is the cost (the 50M-weight MLP), keep one worker: every worker
loads its own copy, and batches split N ways are smaller batches.

What the workers share, and how it stays right:

- **metrics**: prometheus-client's multiprocess mode in a directory private to this server (a fresh
  temporary directory, removed at exit, so no sample from an earlier run or another server is merged);
  counters and histograms add up over all workers, dead ones included; the in-flight and queue gauges
  are summed over the live workers (``mark_process_dead`` drops a worker's as it exits).
- **drift**: one window in a file every worker maps (``drift.create_shared_window``).
- **auth token**: each worker re-reads the token file on its own when the file changes (within
  ``auth.TOKEN_CHECK_S``), so after a rotation every worker takes the new token within a second; there is
  no state to share.

SIGTERM (and SIGINT) to this supervisor is passed to every worker as SIGTERM, and they drain at once, in
parallel: the whole drain and shutdown take no longer than one process's, inside the same grace period.
A worker that exits on its own (a crash, a model that failed to load) stops the others and the server
exits 1: the kubelet restarts the container, rather than a pod at part capacity passing for healthy.
"""

from __future__ import annotations

import logging
import logging.config
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import tempfile
import threading
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

from prometheus_client.multiprocess import mark_process_dead

from workloads.inference.config import ServeConfig
from workloads.inference.drift import DRIFT_WINDOW_FILE, columns, create_shared_window
from workloads.inference.follow import Fetched
from workloads.inference.server import Prepared, address, load_service, log_config, serve, tls_context

METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

log = logging.getLogger("workloads.inference")


def run(prepared: Prepared) -> int:
    """Serve until drained, in this process or in ``workers`` processes; 0 after a clean drain."""
    if prepared.service.config.workers == 1:
        return serve(prepared)
    return supervise(prepared)


def _worker(config: ServeConfig, sock: socket.socket, shared: Path, initial: Fetched | None) -> None:
    """A worker process's life: its own service (model, token, TLS context) on the shared socket; a
    registry model starts from the version the supervisor fetched, each worker then following the alias."""
    raise SystemExit(serve(Prepared(load_service(config, shared, initial), tls_context(config), sock)))


def supervise(prepared: Prepared) -> int:
    """Start the workers, pass on SIGTERM, wait for all; 0 when every worker drained cleanly."""
    config, artifact = prepared.service.config, prepared.service.artifact
    meta = artifact.metadata
    logging.config.dictConfig(log_config(meta.name, prepared.service.version, config.log_level))
    shared = Path(tempfile.mkdtemp(prefix="serve-workers-"))
    # Read by prometheus-client when a worker imports it: set before any worker starts.
    os.environ[METRICS_DIR_ENV] = str(shared)
    meta = artifact.metadata
    width = columns(meta.reference_histograms, meta.confidence_reference)
    create_shared_window(shared / DRIFT_WINDOW_FILE, config.drift_window, width)
    # spawn, not fork: each worker imports prometheus-client afresh, in multiprocess mode, and starts
    # without the parent's threads or locks.
    context = multiprocessing.get_context("spawn")
    workers: list[BaseProcess] = []
    stopping = threading.Event()  # set by a signal handler, between any two statements below

    def stop(sig: int | None = None, frame: FrameType | None = None) -> None:
        stopping.set()
        for worker in workers:
            if worker.pid is not None and worker.exitcode is None:
                os.kill(worker.pid, signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    try:
        for index in range(config.workers):
            if stopping.is_set():
                break
            worker = context.Process(
                target=_worker,
                args=(config, prepared.sock, shared, prepared.service.origin),
                name=f"serve-worker-{index}",
            )
            workers.append(worker)
            worker.start()
            if stopping.is_set():  # signalled while this one started: it had no pid to be sent SIGTERM yet
                stop()
        where = address(prepared)
        prepared.sock.close()  # the workers hold it now; the port is free once the last one exits
        log.info("serving with %d worker processes, listening on %s", len(workers), where)
        failed = False
        running = {worker.sentinel: worker for worker in workers}
        while running:
            for sentinel in multiprocessing.connection.wait(list(running)):
                ended = running.pop(sentinel)  # type: ignore[arg-type]  # (wait returns what it was given)
                ended.join()
                mark_process_dead(ended.pid, str(shared))  # type: ignore[no-untyped-call]
                # (killed by our SIGTERM before it installed its handlers: it had nothing to drain)
                if not stopping.is_set() or ended.exitcode not in (0, -signal.SIGTERM):
                    log.error("%s exited with status %s; stopping the server", ended.name, ended.exitcode)
                    failed = True
                    stop()
        return 1 if failed else 0
    finally:
        stop()
        shutil.rmtree(shared, ignore_errors=True)
