"""The serving state the HTTP layer reads: the champion and, during a rollout, a challenger beside it,
each a ``Track`` with its own batcher and drift window; readiness and drain.

Lifecycle: created (not ready) -> ``load`` builds the session and warms it on a worker thread (ready) ->
``drain`` on SIGTERM (not ready; new requests refused; in-flight ones finish) -> stopped. While ready, a
registry alias that moves brings ``swap_in`` of the new version (``follow.py``): built and warmed beside
the serving one, then swapped in by one assignment of the champion track's ``served``.

Progressive delivery (docs/delivery.md, ``workloads.delivery.contract``): while the registry's split or
shadow tag is above 0, ``follow.py`` loads the ``@challenger`` version as a second track
(``load_challenger``) and ``apply`` sets the shares. ``route`` sends exactly ``split`` percent of the
requests to it (``split.py``); ``copy_to_shadow`` queues a copy of a sample of the champion's answered
requests for ``run_shadow``, which compares the two versions in the background, after the champion has
answered and only while the champion's batcher is idle. With no challenger loaded, routing is one
``None`` check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from workloads.delivery.contract import ROLES, Role
from workloads.inference.auth import TokenFile
from workloads.inference.batcher import MicroBatcher
from workloads.inference.config import ServeConfig
from workloads.inference.drift import DRIFT_WINDOW_FILE, DriftMonitor, columns, ensure_shared_window
from workloads.inference.follow import Fetched, Follower, check_compatible
from workloads.inference.metrics import Metrics, ShadowMetrics, VersionMetrics
from workloads.inference.model import ModelArtifact, OnnxModel, Rows
from workloads.inference.split import Share
from workloads.inference.warmup import build_model

log = logging.getLogger("workloads.inference")

Scores = npt.NDArray[np.float32]
CHAMPION, CHALLENGER = ROLES
# How often the shadow worker looks again whether the champion's batcher has gone idle.
SHADOW_BACKOFF_S = 0.001
# How long the first copy of a shadow batch waits for company (run_shadow).
SHADOW_GATHER_S = 0.02


@dataclass(frozen=True)
class Prediction:
    scores: Scores
    batch_size: int
    version: str  # the model version that computed these scores


@dataclass(frozen=True)
class Served:
    """A loaded version: a batch reads this once, so it runs and is labelled by one version."""

    artifact: ModelArtifact
    model: OnnxModel
    version: str


class Track:
    """One version serving in one role: its session, its own batcher (a batch never mixes versions), its
    own drift window and its per-version metric series."""

    def __init__(
        self,
        role: Role,
        version: str,
        drift: DriftMonitor,
        metrics: Metrics,
        config: ServeConfig,
        *,
        served: Served | None = None,
        max_wait_s: float,
        pending: Callable[[], int] | None = None,
        on_queue: Callable[[int], None] | None = None,
    ) -> None:
        """``max_wait_s``, ``pending``, ``on_queue``: this role's ``MicroBatcher`` settings."""
        self.role = role
        self.version = version
        self.served = served
        self.drift = drift
        self.metrics = VersionMetrics(metrics, version, role)
        self.shadow = ShadowMetrics(metrics, version) if role == CHALLENGER else None
        self.batcher: MicroBatcher[Rows, tuple[Scores, str]] = MicroBatcher(
            self._run_batch,
            max_batch_size=config.max_batch_size,
            max_wait_s=max_wait_s,
            max_queue=config.max_queue,
            deadline_s=config.deadline_ms / 1000,
            on_batch=metrics.batch_size.observe,
            on_queue=on_queue,
            pending=pending,
        )

    def serve(self, served: Served, metrics: Metrics) -> None:
        """Serve ``served`` from the next batch on (the champion's swap)."""
        self.served = served
        self.version = served.version
        self.metrics = VersionMetrics(metrics, served.version, self.role)

    def _run_batch(self, items: Sequence[Rows]) -> list[tuple[Scores, str]]:
        """One model run for a batch of requests, labelled with the version that ran it; runs on the
        batcher's worker thread (or inline on the event loop)."""
        served = self.served  # read once: a swap during the run does not mix versions
        if served is None:
            raise RuntimeError("requests are admitted only once the model is loaded")
        model = served.model
        x = model.batch(items)
        y = model.predict(x)
        self.drift.observe(x, y)
        return [(scores, served.version) for scores in model.unbatch(items, y)]

    async def predict(self, rows: Rows) -> Prediction:
        (scores, version), batch_size = await self.batcher.submit(rows, len(rows))
        return Prediction(scores, batch_size, version)


@dataclass(frozen=True)
class ShadowCopy:
    """A champion request's rows and answer, waiting to be compared with the challenger's."""

    rows: Rows
    scores: Scores
    champion: Served
    challenger: Track


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
        the metrics and the drift windows live; None for a server alone in its pod. ``version``: the label
        responses and metrics carry (a registry version; default the metadata's).

        ``artifact`` stays the first version's: the request models, V2 metadata and drift reference are
        built from it, and a swapped-in version must match it (``follow.check_compatible``)."""
        self.config = config
        self.artifact = artifact
        self.follower: Follower | None = None
        self.origin: Fetched | None = None  # the registry version it started with, for worker processes
        self.threads = threads
        self.token = token
        self.shared = shared
        self.metrics = Metrics(
            model=artifact.metadata.name,
            max_batch_size=config.max_batch_size,
            drift=self._drift_sources,
            multiprocess=shared is not None,
        )
        version = version or artifact.metadata.version
        self.metrics.info.labels(artifact.metadata.name, version).set(1)
        self.champion = Track(
            CHAMPION,
            version,
            self._drift_monitor(artifact, DRIFT_WINDOW_FILE),
            self.metrics,
            config,
            max_wait_s=config.max_wait_ms / 1000,
            on_queue=self.metrics.queue_depth.set,
            # Requests received and not yet answered: while more of them exist than the queue holds,
            # some are still being read and worth waiting for; otherwise the batch goes at once.
            pending=lambda: self.received,
        )
        self.challenger: Track | None = None
        self.split = Share()  # of routed requests, to the challenger
        self.shadow = Share()  # of the champion's routed requests, copied to the challenger
        self._shadow_queue: asyncio.Queue[ShadowCopy] = asyncio.Queue(config.shadow_queue)
        self.failure: str | None = None
        self.draining = False
        self.in_flight = 0
        # Requests whose headers the HTTP layer has read and not yet answered (server.GuardedHttpTools).
        self.received = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def served(self) -> Served | None:
        return self.champion.served

    @property
    def version(self) -> str:
        """The champion's version."""
        return self.champion.version

    @property
    def ready(self) -> bool:
        return self.champion.served is not None and not self.draining

    def not_ready_reason(self) -> str:
        if self.failure is not None:
            return f"model failed to load: {self.failure}"
        return "draining" if self.draining else "model loading"

    def tracks(self) -> Iterator[Track]:
        """The loaded tracks, champion first."""
        if self.champion.served is not None:
            yield self.champion
        if (challenger := self.challenger) is not None:
            yield challenger

    def track_for(self, version: str) -> Track | None:
        """The loaded track serving ``version`` (the V2 versioned path)."""
        return next((track for track in self.tracks() if track.version == version), None)

    def route(self, key: str | None) -> Track:
        """The track that answers a prediction: the challenger for exactly ``split`` percent of them
        (``split.py``), by ``key`` when the client sends one."""
        challenger = self.challenger
        if challenger is None:
            return self.champion
        chosen = self.split.take() if key is None else self.split.takes_key(key)
        return challenger if chosen else self.champion

    def _drift_sources(self) -> list[tuple[str, DriftMonitor]]:
        return [(track.version, track.drift) for track in self.tracks()]

    def _drift_monitor(self, artifact: ModelArtifact, file: str) -> DriftMonitor:
        """A version's drift window against its own training reference; in ``file`` of the directory the
        workers share, if any, so every worker fills the same window."""
        path = None
        if self.shared is not None:
            path = self.shared / file
            width = columns(artifact.metadata.reference_histograms, artifact.metadata.confidence_reference)
            ensure_shared_window(path, self.config.drift_window, width)
        return DriftMonitor(
            artifact.metadata.reference_histograms,
            window=self.config.drift_window,
            threshold=self.config.drift_threshold,
            min_samples=self.config.drift_min_rows,
            shared=path,
            confidence=artifact.metadata.confidence_reference,
        )

    async def load(self) -> None:
        """Build the session and warm it off the event loop, so /healthz answers while a large model loads."""
        started = time.perf_counter()
        try:
            model = await asyncio.to_thread(self._build, self.artifact)
        except Exception as exc:
            self.failure = f"{type(exc).__name__}: {exc}"
            log.exception("model failed to load")
            raise
        self.champion.served = Served(self.artifact, model, self.version)
        self.metrics.engine(self.version, model.choice)
        log.info(
            "model ready: %s, max batch %d, max wait %.1f ms, loaded and warmed in %.0f ms",
            model.choice.label,
            self.config.max_batch_size,
            self.config.max_wait_ms,
            (time.perf_counter() - started) * 1000,
        )

    async def swap_in(self, fetched: Fetched) -> None:
        """Serve ``fetched`` instead of the current version: checked, built and warmed on a worker thread
        while the current one serves, then swapped in at once. Raises (the old version serving on)
        ``IncompatibleModelError`` or whatever loading it raised."""
        serving, model, started = await self._beside_champion(fetched)
        self._serve_as_champion(Served(fetched.artifact, model, fetched.version))
        log.info(
            "version %s loaded and warmed in %.0f ms beside version %s, swapped in",
            fetched.version,
            (time.perf_counter() - started) * 1000,
            serving.version,
        )

    async def _beside_champion(self, fetched: Fetched) -> tuple[Served, OnnxModel, float]:
        """``fetched`` checked against the serving champion, then built and warmed on a worker thread
        while the champion serves; the champion, the model and when the build started."""
        serving = self.champion.served
        if serving is None:
            raise RuntimeError("no version is serving yet")
        check_compatible(serving.artifact, fetched.artifact)
        started = time.perf_counter()
        return serving, await asyncio.to_thread(self._build, fetched.artifact), started

    def _serve_as_champion(self, served: Served) -> None:
        old = self.champion.version
        self.champion.serve(served, self.metrics)
        self.metrics.swapped(old, served.version)
        self.metrics.engine(served.version, served.model.choice)
        if old != served.version:
            self.metrics.engine(old, None)

    async def promote_challenger(self) -> None:
        """The champion alias moved onto the loaded challenger: its warmed session serves as the champion
        from the next batch, and the challenger track goes."""
        challenger = self.challenger
        assert challenger is not None and challenger.served is not None
        self._serve_as_champion(challenger.served)
        log.info("challenger version %s promoted in place: serving as the champion", challenger.version)
        await self.unload_challenger()

    async def load_challenger(self, fetched: Fetched) -> None:
        """Serve ``fetched`` as the challenger, beside the champion: checked against the champion, built
        and warmed on a worker thread, then routable at once (``apply`` sets its shares). Raises
        ``IncompatibleModelError`` or whatever loading it raised, the champion serving alone on."""
        serving, model, started = await self._beside_champion(fetched)
        track = Track(
            CHALLENGER,
            fetched.version,
            self._drift_monitor(fetched.artifact, f"drift-window-{fetched.version}.bin"),
            self.metrics,
            self.config,
            served=Served(fetched.artifact, model, fetched.version),
            # Most requests go to the champion: waiting for company would only delay the challenger's.
            max_wait_s=0,
            # The champion's rule for running inline (nothing else received, so it holds nobody up): the
            # rollout's p99 gate compares the two versions, so both must be measured on the same path (a
            # thread hop on the challenger's alone made the same model 4-9x slower in the trial).
            pending=lambda: self.received,
        )
        track.batcher.start()
        self.metrics.engine(fetched.version, model.choice)
        previous, self.challenger = self.challenger, track
        log.info(
            "challenger version %s loaded and warmed in %.0f ms beside champion version %s",
            fetched.version,
            (time.perf_counter() - started) * 1000,
            serving.version,
        )
        if previous is not None:
            await self._retire(previous)

    async def unload_challenger(self) -> None:
        """Route nothing more to the challenger; its batches finish, then its thread stops."""
        track = self.challenger
        if track is None:
            return
        self.challenger = None
        self.apply(0, 0)
        if track.version != self.champion.version:  # not promoted in place
            self.metrics.engine(track.version, None)
        await self._retire(track)
        log.info("challenger version %s unloaded; version %s serves alone", track.version, self.version)

    async def _retire(self, track: Track) -> None:
        while not track.batcher.idle:  # requests routed to it before it was replaced
            await asyncio.sleep(SHADOW_BACKOFF_S)
        await track.batcher.stop()

    def apply(self, split: int, shadow: int) -> None:
        """The shares in force from the next request: 0 while no challenger is loaded."""
        challenger = self.challenger
        if challenger is None:
            split = shadow = 0
        self.split.percent, self.shadow.percent = split, shadow
        self.metrics.applied(split, shadow, challenger.version if challenger is not None else "")

    def copy_to_shadow(self, rows: Rows, prediction: Prediction) -> None:
        """After the champion answered a routed request: a copy for ``run_shadow``, for ``shadow``
        percent of them, or dropped (and counted) when the queue is full."""
        challenger, champion = self.challenger, self.champion.served
        if challenger is None or champion is None or not self.shadow.take():
            return
        try:
            self._shadow_queue.put_nowait(ShadowCopy(rows, prediction.scores, champion, challenger))
        except asyncio.QueueFull:
            assert challenger.shadow is not None
            challenger.shadow.outcome["dropped"].inc()

    async def run_shadow(self) -> None:
        """Compare queued copies in batches, each only while the champion's batcher is idle: after the
        first copy of a batch, wait ``SHADOW_GATHER_S`` for company (up to the maximum batch size), then
        run the batch's rows on both versions in one call each on a worker thread (the same rows, one
        after the other, timed) and compare each copy's answer from the challenger with what the
        champion answered. One wake-up of the event loop per batch, not per copy: with a copy per
        request, the loop's own share of the work (the hand-off to the thread and back) delayed the
        champion's next request. A challenger that fails or answers non-finite scores is counted
        (``failed``); the client saw the champion's answer."""
        while True:
            try:
                await self._shadow_batch()
            except Exception:  # the shadow must never stop for good: the champion serves on regardless
                log.exception("shadow batch")

    async def _shadow_batch(self) -> None:
        """One batch of ``run_shadow``."""
        batch = [await self._shadow_queue.get()]
        await asyncio.sleep(SHADOW_GATHER_S)
        while len(batch) < self.config.max_batch_size and not self._shadow_queue.empty():
            batch.append(self._shadow_queue.get_nowait())
        while not self.champion.batcher.idle:
            await asyncio.sleep(SHADOW_BACKOFF_S)
        challenger, champion = self.challenger, self.champion.served
        current: list[ShadowCopy] = []
        for copy in batch:
            if copy.challenger is challenger and copy.champion is champion:
                current.append(copy)
            elif copy.challenger.shadow is not None:  # unloaded, replaced or swapped meanwhile
                copy.challenger.shadow.outcome["dropped"].inc()
        if not current:
            return
        metrics = current[0].challenger.shadow
        assert metrics is not None
        try:
            theirs, champion_s, challenger_s = await asyncio.to_thread(_shadow_run, current)
        except Exception as exc:
            metrics.outcome["failed"].inc(len(current))
            log.debug("shadow batch failed on version %s: %s", current[0].challenger.version, exc)
            return
        # Here, on the event loop, in a few vectorised steps: pure Python on the worker thread would
        # hold the interpreter lock for up to its switch interval (5 ms) against the champion's requests.
        ours = np.concatenate([c.scores for c in current])
        ends = np.cumsum([len(c.rows) for c in current])
        starts = np.concatenate([[0], ends[:-1]])
        finite = np.logical_and.reduceat(np.isfinite(theirs).all(axis=1), starts)
        agree = np.logical_and.reduceat(theirs.argmax(axis=1) == ours.argmax(axis=1), starts)
        gap = np.maximum.reduceat(np.abs(np.where(np.isfinite(theirs), theirs, 0) - ours).max(axis=1), starts)
        metrics.outcome["failed"].inc(int((~finite).sum()))
        metrics.outcome["compared"].inc(int(finite.sum()))
        metrics.agreed.inc(int((finite & agree).sum()))
        for difference in gap[finite]:
            metrics.difference.observe(float(difference))
        metrics.run[CHAMPION].observe(champion_s)
        metrics.run[CHALLENGER].observe(challenger_s)

    def _build(self, artifact: ModelArtifact) -> OnnxModel:
        """A warmed model on the engine, threads and spinning measured fastest for it (``warmup.py``)."""
        return build_model(artifact, self.threads, self.config)

    def enter(self) -> None:
        self.in_flight += 1
        self.metrics.in_flight.inc()
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        self.metrics.in_flight.dec()
        if self.in_flight == 0:
            self._idle.set()

    async def stop(self) -> None:
        """Stop the tracks' batchers (the server's shutdown, after the drain)."""
        for track in (self.champion, self.challenger):
            if track is not None:
                await track.batcher.stop()

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


def _shadow_run(copies: list[ShadowCopy]) -> tuple[Scores, float, float]:
    """On a worker thread: the copies' rows (one version pair) as one batch on the champion, then on the
    challenger (whose drift window sees them: they are live inputs it would serve); the challenger's
    scores and both run times."""
    first = copies[0]
    challenger = first.challenger.served
    assert challenger is not None
    rows = np.concatenate([c.rows for c in copies])
    started = time.perf_counter()
    first.champion.model.predict(rows)
    middle = time.perf_counter()
    theirs = challenger.model.predict(rows)
    ended = time.perf_counter()
    first.challenger.drift.observe(rows, theirs)
    return theirs, middle - started, ended - middle
