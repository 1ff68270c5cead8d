"""The server's Prometheus metrics, on a registry of its own.

A registry per server (not the process-global default) so several servers can live in one process
(tests, the benchmark) without colliding on metric names.

With several worker processes (``SERVE_WORKERS``, see ``workers.py``) prometheus-client runs in its
multiprocess mode: every process writes its samples to files in a directory private to the pod, and
``/metrics``, whichever worker answers it, merges them. So counters and histograms add up over the
workers; the in-flight and queue gauges are kept up to date as they change (not computed at scrape
time, which would show only the scraping worker's own) and summed over the live workers; drift is read
from the window the workers share.

Prediction routes are also counted per version after routing (``workloads.delivery.contract``): the
responses, errors and latency of each loaded version in its role (champion or challenger), the shadow
comparisons, and the split and shadow sample each process applies now, so a rollout reads from any
replica what each version did and what that replica is doing. The applied settings are gauges of the
smallest value over the live workers: a pod reports a new setting once all its workers apply it.

Label children are bound once, here: ``Counter.labels(...)`` takes a lock and builds a key on every call,
which profiled at tens of microseconds per request, against a model run of nine.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

from workloads.delivery import contract
from workloads.delivery.contract import Role
from workloads.inference.drift import DriftCollector, DriftSources
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
# One model run of a shadow copy's rows: microseconds for a small model, tens of milliseconds for a large.
RUN_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# The largest |champion score - challenger score| over a shadow copy's rows (logits or probabilities).
DIFFERENCE_BUCKETS = (1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0)


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
        max_batch_size: int,
        drift: DriftSources,
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
        self.engine_info = Gauge(
            "inference_engine_info",
            "How each loaded version runs, as measured and chosen at warm-up (1), and versions loaded "
            "before (0): engine, precision, intra-op threads, spinning",
            ["model", "version", "engine", "precision", "threads", "spinning"],
            registry=reg,
            multiprocess_mode="max",
        )
        self._engine_rows: dict[str, tuple[str, ...]] = {}  # loaded version -> its labels, set to 1
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
        per_version = ["model", "version", "role"]
        self.version_responses = Counter(
            contract.VERSION_RESPONSES,
            "Prediction responses after routing, by the version that answered, its role and status code",
            [*per_version, "code"],
            registry=reg,
        )
        self.version_errors = Counter(
            contract.VERSION_ERRORS,
            "Prediction errors after routing, by version, role and reason",
            [*per_version, "reason"],
            registry=reg,
        )
        self.version_latency = Histogram(
            contract.VERSION_LATENCY,
            "Time from routing a prediction to its response, by version and role",
            per_version,
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.shadow_requests = Counter(
            contract.SHADOW_REQUESTS,
            "Champion requests copied to the challenger, by outcome ("
            + ", ".join(contract.SHADOW_OUTCOMES)
            + ")",
            ["model", "version", "outcome"],
            registry=reg,
        )
        self.shadow_agreed = Counter(
            contract.SHADOW_AGREED,
            "Compared shadow copies whose every row got the same label from both versions",
            ["model", "version"],
            registry=reg,
        )
        self.shadow_difference = Histogram(
            contract.SHADOW_DIFFERENCE,
            "Largest absolute score difference between the versions over a compared copy's rows",
            ["model", "version"],
            buckets=DIFFERENCE_BUCKETS,
            registry=reg,
        )
        self.shadow_latency = Histogram(
            contract.SHADOW_LATENCY,
            "One model run of a shadow batch's rows (the same rows) on each version, by role",
            ["model", "version", "role"],
            buckets=RUN_BUCKETS,
            registry=reg,
        )
        self.split_applied = Gauge(
            contract.SPLIT_APPLIED,
            "Percent of requests this server routes to the challenger now (version: the challenger's)",
            ["model", "version"],
            registry=reg,
            multiprocess_mode="livemin",
        )
        self.shadow_applied = Gauge(
            contract.SHADOW_APPLIED,
            "Percent of champion requests this server copies to the challenger now",
            ["model", "version"],
            registry=reg,
            multiprocess_mode="livemin",
        )
        self._applied_version = ""
        self.applied(0, 0, "")
        # What /metrics exposes: this registry, or in multiprocess mode the merge of every worker's files
        # (the metrics above must then not be registered with it too, or they would appear twice).
        self.registry = reg
        if multiprocess:
            self.registry = CollectorRegistry()
            MultiProcessCollector(self.registry)  # type: ignore[no-untyped-call]
        self.registry.register(DriftCollector(model, drift))
        self.error = {reason: self.errors.labels(reason) for reason in ERROR_REASONS}
        self.route_latency = {route: self.latency.labels(route) for route in ROUTES}
        self._responses: dict[tuple[str, int], Counter] = {}

    def swapped(self, old: str, new: str) -> None:
        """The served version changed: the info series follows it."""
        self.info.labels(self.model, old).set(0)
        self.info.labels(self.model, new).set(1)
        self.swaps.inc()

    def engine(self, version: str, choice: EngineChoice | None) -> None:
        """Version ``version`` is loaded (champion or challenger) and runs on ``choice``; None: it is
        no longer loaded, and its row says 0."""
        row = self._engine_rows.pop(version, None)
        if row is not None:
            self.engine_info.labels(*row).set(0)
        if choice is not None:
            self._engine_rows[version] = (self.model, version, *choice.properties().values())
            self.engine_info.labels(*self._engine_rows[version]).set(1)

    def applied(self, split: int, shadow: int, version: str) -> None:
        """The split and shadow sample now applied, to challenger ``version`` ("" and 0 when none is
        loaded); the series of a challenger no longer loaded says 0, as nothing goes to it any more."""
        if version != self._applied_version:
            self.split_applied.labels(self.model, self._applied_version).set(0)
            self.shadow_applied.labels(self.model, self._applied_version).set(0)
            self._applied_version = version
        self.split_applied.labels(self.model, version).set(split)
        self.shadow_applied.labels(self.model, version).set(shadow)

    def responded(self, route: str, code: int) -> None:
        """Count one response; the child for a (route, code) pair is made on first sight, then reused."""
        child = self._responses.get((route, code))
        if child is None:
            child = self._responses[route, code] = self.responses.labels(route, str(code))
        child.inc()


class VersionMetrics:
    """The prediction-route series of one loaded version in one role, children bound once."""

    def __init__(self, metrics: Metrics, version: str, role: Role) -> None:
        labels = (metrics.model, version, role)
        self.version = version
        self.latency = metrics.version_latency.labels(*labels)
        self.errors = {reason: metrics.version_errors.labels(*labels, reason) for reason in ERROR_REASONS}
        self._family = metrics.version_responses
        self._labels = labels
        self._responses: dict[int, Counter] = {}

    def answered(self, code: int, seconds: float) -> None:
        child = self._responses.get(code)
        if child is None:
            child = self._responses[code] = self._family.labels(*self._labels, str(code))
        child.inc()
        self.latency.observe(seconds)


class ShadowMetrics:
    """The shadow series of one challenger version."""

    def __init__(self, metrics: Metrics, version: str) -> None:
        labels = (metrics.model, version)
        self.outcome = {
            outcome: metrics.shadow_requests.labels(*labels, outcome) for outcome in contract.SHADOW_OUTCOMES
        }
        self.agreed = metrics.shadow_agreed.labels(*labels)
        self.difference = metrics.shadow_difference.labels(*labels)
        self.run = {role: metrics.shadow_latency.labels(*labels, role) for role in contract.ROLES}
