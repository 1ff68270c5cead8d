"""The server's Prometheus metrics, on a registry of its own.

A registry per server (not the process-global default) so several servers can live in one process
(tests, the benchmark) without colliding on metric names.

With several worker processes (``SERVE_WORKERS``, see ``workers.py``) prometheus-client runs in its
multiprocess mode: every process writes its samples to files in a directory private to the pod, and
``/metrics``, whichever worker answers it, merges them. So counters and histograms add up over the
workers; the in-flight and queue gauges are kept up to date as they change (not computed at scrape
time, which would show only the scraping worker's own) and summed over the live workers; drift is read
from the window the workers share.

Label children are bound once, here: ``Counter.labels(...)`` takes a lock and builds a key on every call,
which profiled at tens of microseconds per request, against a model run of nine.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

from workloads.inference.drift import DriftCollector, DriftMonitor
from workloads.inference.engines import EngineChoice

ERROR_REASONS = (
    "validation",
    "payload_too_large",
    "body_timeout",
    "unauthorized",
    "not_ready",
    "draining",
    "overloaded",
    "non_finite_output",
    "internal",
)
# Why a new model version is not served (the old one serves on): workloads/inference/follow.py.
UPDATE_FAILURES = ("resolve", "download", "verify", "incompatible", "load")
# Route labels (see ``gate.route_of``): V2 paths carry the model name, counted under one label each.
ROUTES = ("/v1/predict", "/v1/drift", "/metrics", "/v2/infer", "/v2/models", "other")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _batch_buckets(max_batch_size: int) -> tuple[float, ...]:
    """Powers of two up to the maximum, so a histogram shows how full the batches run."""
    buckets, size = [], 1
    while size < max_batch_size:
        buckets.append(float(size))
        size *= 2
    return (*buckets, float(max_batch_size))


class Metrics:
    def __init__(
        self,
        *,
        model: str,
        version: str,
        max_batch_size: int,
        drift: DriftMonitor,
        multiprocess: bool = False,
    ) -> None:
        reg = CollectorRegistry()
        self.latency = Histogram(
            "inference_request_duration_seconds",
            "Time from request arrival to response, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.responses = Counter(
            "inference_responses_total", "Responses by route and status code", ["route", "code"], registry=reg
        )
        self.errors = Counter(
            "inference_errors_total",
            "Refused or failed requests by reason (" + ", ".join(ERROR_REASONS) + ")",
            ["reason"],
            registry=reg,
        )
        self.batch_size = Histogram(
            "inference_batch_size", "Rows per model run", buckets=_batch_buckets(max_batch_size), registry=reg
        )
        self.in_flight = Gauge(
            "inference_in_flight_requests",
            "Requests being handled",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.queue_depth = Gauge(
            "inference_queue_depth", "Requests waiting for a batch", registry=reg, multiprocess_mode="livesum"
        )
        self.model = model
        self.info = Gauge(
            "inference_model_info",
            "The model version served (1), and versions served before (0)",
            ["model", "version"],
            registry=reg,
            multiprocess_mode="max",
        )
        self.info.labels(model, version).set(1)
        self.engine = Gauge(
            "inference_engine_info",
            "How the served version runs, as measured and chosen at warm-up (1), and versions served "
            "before (0): engine, precision, intra-op threads, spinning",
            ["model", "version", "engine", "precision", "threads", "spinning"],
            registry=reg,
            multiprocess_mode="max",
        )
        self._engine_row: tuple[str, ...] | None = None  # the labels set to 1
        self._built: EngineChoice | None = None  # the choice of the version built last
        self.swaps = Counter(
            "inference_model_swaps_total", "New model versions swapped in while serving", registry=reg
        )
        failures = Counter(
            "inference_model_update_failures_total",
            "New model versions not served, the old one serving on, by reason ("
            + ", ".join(UPDATE_FAILURES)
            + ")",
            ["reason"],
            registry=reg,
        )
        self.update_failures = {reason: failures.labels(reason) for reason in UPDATE_FAILURES}
        # What /metrics exposes: this registry, or in multiprocess mode the merge of every worker's files
        # (the metrics above must then not be registered with it too, or they would appear twice).
        self.registry = reg
        if multiprocess:
            self.registry = CollectorRegistry()
            MultiProcessCollector(self.registry)  # type: ignore[no-untyped-call]
        self.drift = DriftCollector(drift, model, version)
        self.registry.register(self.drift)
        self.error = {reason: self.errors.labels(reason) for reason in ERROR_REASONS}
        self.route_latency = {route: self.latency.labels(route) for route in ROUTES}
        self._responses: dict[tuple[str, int], Counter] = {}

    def swapped(self, old: str, new: str) -> None:
        """The served version changed: the info series and the drift scores follow it."""
        self.info.labels(self.model, old).set(0)
        self.info.labels(self.model, new).set(1)
        self.drift.version = new
        self._engine_serves(new)
        self.swaps.inc()

    def engine_chosen(self, choice: EngineChoice) -> None:
        """A version was built on ``choice``: shown at once for the first version, at its swap for the
        next ones (built beside the serving version, which keeps its row until then)."""
        self._built = choice
        if self._engine_row is None:
            self._engine_serves(self.drift.version)

    def _engine_serves(self, version: str) -> None:
        if self._built is None:
            return
        if self._engine_row is not None:
            self.engine.labels(*self._engine_row).set(0)
        self._engine_row = (self.model, version, *self._built.properties().values())
        self.engine.labels(*self._engine_row).set(1)

    def responded(self, route: str, code: int) -> None:
        """Count one response; the child for a (route, code) pair is made on first sight, then reused."""
        child = self._responses.get((route, code))
        if child is None:
            child = self._responses[route, code] = self.responses.labels(route, str(code))
        child.inc()
