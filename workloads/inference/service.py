"""The serving state the HTTP layer reads: model, batcher, drift window, readiness and drain.

Lifecycle: created (not ready) -> ``load`` builds the session and warms it on a worker thread (ready) ->
``drain`` on SIGTERM (not ready; new requests refused; in-flight ones finish) -> stopped. While ready, a
registry alias that moves brings ``swap_in`` of the new version (``follow.py``): built and warmed beside
the serving one, then swapped in by one assignment of ``served``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from workloads.inference.auth import TokenFile
from workloads.inference.batcher import MicroBatcher
from workloads.inference.config import ServeConfig
from workloads.inference.drift import DRIFT_WINDOW_FILE, DriftMonitor
from workloads.inference.follow import Fetched, Follower, check_compatible
from workloads.inference.metrics import Metrics
from workloads.inference.model import ModelArtifact, OnnxModel, Rows
from workloads.inference.warmup import build_model

log = logging.getLogger("workloads.inference")

Scores = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Prediction:
    scores: Scores
    batch_size: int
    version: str  # the model version that computed these scores


@dataclass(frozen=True)
class Served:
    """The version serving now: a batch reads this once, so it runs and is labelled by one version."""

    artifact: ModelArtifact
    model: OnnxModel
    version: str


class Service:
    def __init__(
        self,
        config: ServeConfig,
        artifact: ModelArtifact,
        *,
        threads: int,
        token: TokenFile | None,
        shared: Path | None = None,
        version: str | None = None,
    ) -> None:
        """``shared``: the directory this process shares with the other workers (``workers.py``), where
        the metrics and the drift window live; None for a server alone in its pod. ``version``: the label
        responses and metrics carry (a registry version; default the metadata's).

        ``artifact`` stays the first version's: the request models, V2 metadata and drift reference are
        built from it, and a swapped-in version must match it (``follow.check_compatible``)."""
        self.config = config
        self.artifact = artifact
        self.version = version or artifact.metadata.version
        self.served: Served | None = None
        self.follower: Follower | None = None
        self.origin: Fetched | None = None  # the registry version it started with, for worker processes
        self.threads = threads
        self.token = token
        self.shared = shared
        meta = artifact.metadata
        self.drift = DriftMonitor(
            meta.reference_histograms,
            window=config.drift_window,
            threshold=config.drift_threshold,
            min_samples=config.drift_min_rows,
            shared=shared / DRIFT_WINDOW_FILE if shared is not None else None,
        )
        self.metrics = Metrics(
            model=meta.name,
            version=self.version,
            max_batch_size=config.max_batch_size,
            drift=self.drift,
            multiprocess=shared is not None,
        )
        self.batcher: MicroBatcher[Rows, tuple[Scores, str]] = MicroBatcher(
            self._run_batch,
            max_batch_size=config.max_batch_size,
            max_wait_s=config.max_wait_ms / 1000,
            max_queue=config.max_queue,
            deadline_s=config.deadline_ms / 1000,
            on_batch=self._observe_batch,
            on_queue=self.metrics.queue_depth.set,
            # Requests received and not yet answered: while more of them exist than the queue holds,
            # some are still being read and worth waiting for; otherwise the batch goes at once.
            pending=lambda: self.received,
        )
        self.failure: str | None = None
        self.draining = False
        self.in_flight = 0
        # Requests whose headers the HTTP layer has read and not yet answered (server.GuardedHttpTools).
        self.received = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def ready(self) -> bool:
        return self.served is not None and not self.draining

    def not_ready_reason(self) -> str:
        if self.failure is not None:
            return f"model failed to load: {self.failure}"
        return "draining" if self.draining else "model loading"

    async def load(self) -> None:
        """Build the session and warm it off the event loop, so /healthz answers while a large model loads."""
        started = time.perf_counter()
        try:
            self.served = Served(
                self.artifact, await asyncio.to_thread(self._build, self.artifact), self.version
            )
        except Exception as exc:
            self.failure = f"{type(exc).__name__}: {exc}"
            log.exception("model failed to load")
            raise
        log.info(
            "model ready: %d intra-op threads, max batch %d, max wait %.1f ms, loaded and warmed in %.0f ms",
            self.threads,
            self.config.max_batch_size,
            self.config.max_wait_ms,
            (time.perf_counter() - started) * 1000,
        )

    async def swap_in(self, fetched: Fetched) -> None:
        """Serve ``fetched`` instead of the current version: checked, built and warmed on a worker thread
        while the current one serves, then swapped in at once. Raises (the old version serving on)
        ``IncompatibleModelError`` or whatever loading it raised."""
        serving = self.served
        if serving is None:
            raise RuntimeError("no version is serving yet")
        check_compatible(serving.artifact, fetched.artifact)
        started = time.perf_counter()
        model = await asyncio.to_thread(self._build, fetched.artifact)
        self.served = Served(fetched.artifact, model, fetched.version)
        self.version = fetched.version
        self.metrics.swapped(serving.version, fetched.version)
        log.info(
            "version %s loaded and warmed in %.0f ms beside version %s, swapped in",
            fetched.version,
            (time.perf_counter() - started) * 1000,
            serving.version,
        )

    def _build(self, artifact: ModelArtifact) -> OnnxModel:
        """A warmed model on the engine, threads and spinning measured fastest for it (``warmup.py``)."""
        return build_model(artifact, self.threads, self.config, self.metrics.engine_chosen)

    def _run_batch(self, items: Sequence[Rows]) -> list[tuple[Scores, str]]:
        """One model run for a batch of requests, labelled with the version that ran it; runs on the
        batcher's worker thread."""
        served = self.served  # read once: a swap during the run does not mix versions
        if served is None:
            raise RuntimeError("requests are admitted only once the model is loaded")
        model = served.model
        x = model.batch(items)
        y = model.predict(x)
        self.drift.observe(x)
        return [(scores, served.version) for scores in model.unbatch(items, y)]

    def _observe_batch(self, rows: int) -> None:
        self.metrics.batch_size.observe(rows)

    async def predict(self, rows: Rows) -> Prediction:
        (scores, version), batch_size = await self.batcher.submit(rows, len(rows))
        return Prediction(scores, batch_size, version)

    def enter(self) -> None:
        self.in_flight += 1
        self.metrics.in_flight.inc()
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        self.metrics.in_flight.dec()
        if self.in_flight == 0:
            self._idle.set()

    async def drain(self) -> None:
        """Stop admitting, then wait for admitted requests (at least ``drain_min_s``, at most
        ``drain_timeout_s``) so that no accepted request is cut off by the shutdown that follows."""
        self.draining = True
        log.info("draining: readiness false, refusing new requests, %d in flight", self.in_flight)
        started = time.perf_counter()
        await asyncio.sleep(self.config.drain_min_s)
        try:
            await asyncio.wait_for(self._idle.wait(), self.config.drain_timeout_s)
        except TimeoutError:
            log.warning("drain timed out with %d requests in flight", self.in_flight)
        log.info("drained in %.0f ms; shutting down", (time.perf_counter() - started) * 1000)
