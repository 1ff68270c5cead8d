"""Input drift: how far recent requests have moved from the training distribution, per feature.

Training records each feature's histogram on its training split (``FeatureHistogram`` in the model
metadata). The server keeps the last ``window`` input rows and scores each feature with the Population
Stability Index against that reference, binning live values into the reference's own bin edges (values
outside the training range land in the outermost bins, so a shift past the range still counts).

PSI = sum over bins of (live - ref) * ln(live / ref), on bin proportions. Common reading: below 0.1
stable, 0.1-0.25 moderate shift, above 0.25 a significant shift.

PSI over a small window is noise, not drift: with few rows most bins are empty or over-full by chance.
Measured on the digits model (64 features, 10-bin references), drawing in-distribution windows from the
held-out split (300 trials each, ``max PSI > 0.2`` counted as an alarm): 100 rows alarm 100% of the time,
200 rows 68%, 300 rows 14%, 500 rows 0.7%, 1000 rows 0%. So no PSI is reported, exported or alerted on
until the window holds ``min_samples`` rows (default 500, at most the window).

Each row of the window also keeps what the version answered for it: its predicted class and top-class
probability (workloads/confidence.py), counted at scrape time in the bins of the version's
``confidence_reference`` per predicted class (``inference_confidence_window_rows``): at most classes x
bins series per version, over exactly the rows PSI is computed on. The drift monitor turns them into its
label-free accuracy estimate (workloads/delivery/estimate.py); the server exports the same estimate of
its own window (``inference_estimated_accuracy``, with its rows and the test split's estimate), from the
minimum sample count on as PSI, for the alert on an estimated drop (components/kubernetes/monitoring.py).
The window keeps each row's logits beside its inputs, so the predict path only copies them; the softmax
runs at scrape time, as PSI does.

With several worker processes the window is one, shared: a file (``create_shared_window``) that every
worker maps, guarded by a file lock, holding the last ``window`` rows whichever worker served them. So
``/v1/drift`` and the drift metrics say the same from any worker, and a window fills as fast as with one
process (separate windows would each see 1/N of the traffic and take N times longer to mean anything).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import BaseModel

from workloads.artifacts import ConfidenceReference, FeatureHistogram
from workloads.confidence import counts, top_class
from workloads.delivery.contract import (
    CONFIDENCE_ROWS,
    ESTIMATE_METHOD,
    ESTIMATED_ACCURACY,
    ESTIMATED_REFERENCE,
    ESTIMATED_ROWS,
)
from workloads.delivery.estimate import Estimate, calibrate, estimate, reference_accuracy

# Proportions are floored at this before the log, so an empty bin on either side scores a large but
# finite shift instead of infinity.
PSI_EPSILON = 1e-4
DRIFT_WINDOW_FILE = "drift-window.bin"
# A shared window file: the cursor (next row to write, rows filled) as two int64, then the rows.
_CURSOR_BYTES = 16


def columns(reference: Sequence[FeatureHistogram], confidence: ConfidenceReference | None) -> int:
    """Floats a window row holds: the inputs, then the version's logits where it records a confidence
    reference (one a class), so the predict path only copies them; confidences are computed at scrape."""
    return len(reference) + (len(confidence.rows) if confidence is not None else 0)


def _window_bytes(window: int, columns: int) -> int:
    return _CURSOR_BYTES + window * columns * np.dtype(np.float32).itemsize


def create_shared_window(path: Path, window: int, columns: int) -> None:
    """An empty window file for the workers to share (zeros: no rows yet); ``columns`` as ``columns``
    says."""
    with path.open("wb") as file:
        file.truncate(_window_bytes(window, columns))


def ensure_shared_window(path: Path, window: int, columns: int) -> None:
    """The window file at ``path``, created empty by whichever worker asks first (a challenger's, which
    each worker loads on its own): sized under a private name, then linked into place, so no worker maps
    a file that is still being sized, and none empties one that another has begun to fill."""
    if path.exists():
        return
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    create_shared_window(staging, window, columns)
    try:
        os.link(staging, path)
    except FileExistsError:
        pass
    finally:
        staging.unlink()


def psi(reference_counts: npt.ArrayLike, live_counts: npt.ArrayLike) -> float:
    """Population Stability Index between two histograms over the same bins."""
    ref = np.asarray(reference_counts, dtype=np.float64)
    live = np.asarray(live_counts, dtype=np.float64)
    ref_p = np.maximum(ref / max(ref.sum(), 1.0), PSI_EPSILON)
    live_p = np.maximum(live / max(live.sum(), 1.0), PSI_EPSILON)
    return float(np.sum((live_p - ref_p) * np.log(live_p / ref_p)))


def bin_counts(values: npt.NDArray[np.float32], edges: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Counts of ``values`` in the bins between ``edges``, out-of-range values clamped to the end bins."""
    n_bins = len(edges) - 1
    index = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, n_bins - 1)
    return np.bincount(index, minlength=n_bins)


class DriftReport(BaseModel):
    """What ``/v1/drift`` returns."""

    model: str
    model_version: str
    window: int
    samples: int
    min_samples: int
    threshold: float
    # None (and ``psi`` empty) until the window holds ``min_samples`` rows.
    max_psi: float | None
    drifted: list[str]
    psi: dict[str, float]


class DriftMonitor:
    """A rolling window of input rows scored against the training histograms.

    ``observe`` runs on the batch worker thread and ``scores`` on the event loop or a metrics scrape,
    hence the lock (and, for a ``shared`` window, a lock on its file as well, across processes); both are
    cheap (a copy into a ring buffer, one histogram per feature).
    """

    def __init__(
        self,
        reference: Sequence[FeatureHistogram],
        *,
        window: int,
        threshold: float,
        min_samples: int = 1,
        shared: Path | None = None,
        confidence: ConfidenceReference | None = None,
    ) -> None:
        """``confidence``: the version's reference, whose bins the predictions are counted in (None: a
        version that records none; its predictions are not counted)."""
        if window < 1 or not 1 <= min_samples <= window:
            raise ValueError("drift window must hold at least one row, and min_samples 1..window")
        self.min_samples = min_samples
        self.features = [h.feature for h in reference]
        self.threshold = threshold
        self.window = window
        self._edges = [np.asarray(h.bin_edges, dtype=np.float64) for h in reference]
        self._ref_counts = [np.asarray(h.counts, dtype=np.int64) for h in reference]
        self._confidence = confidence
        self._outputs = len(confidence.rows) if confidence is not None else 0
        # The calibration map and the test split's own estimate, as the drift monitor derives them.
        self._calibrated = calibrate(confidence) if confidence is not None else None
        self.reference_accuracy = (
            reference_accuracy(confidence, self._calibrated)
            if confidence is not None and self._calibrated is not None
            else None
        )
        self._lock = threading.Lock()
        self._file: int | None = None
        width = columns(reference, confidence)
        if shared is None:
            storage = np.zeros(_window_bytes(window, width), dtype=np.uint8)
        else:
            storage = np.memmap(shared, dtype=np.uint8, mode="r+", shape=(_window_bytes(window, width),))
            self._file = os.open(shared, os.O_RDWR)
        # [next row to write, rows filled], then the ring of rows: in the shared file when there is one.
        self._cursor = storage[:_CURSOR_BYTES].view(np.int64)
        self._rows = storage[_CURSOR_BYTES:].view(np.float32).reshape(window, width)
        self._inputs = self._rows[:, : len(reference)]
        self._logits = self._rows[:, len(reference) :]

    def __enter__(self) -> None:
        """Hold the window: the thread lock, and the file lock of a shared window (released by the kernel
        if this process dies holding it). Methods, not a generator context manager: this is per batch."""
        self._lock.acquire()
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
        self._lock.release()

    def observe(self, batch: npt.NDArray[np.float32], logits: npt.NDArray[np.float32] | None = None) -> None:
        """Add rows to the window, with the version's ``logits`` for them (NaN where not given),
        overwriting the oldest once it is full."""
        batch = batch[-self.window :]
        n = len(batch)
        answered: npt.NDArray[np.float32] | float = np.nan
        if logits is not None and logits.shape == (len(logits), self._outputs):
            answered = logits[-n:]
        with self:
            start, filled = self._cursor.tolist()
            end = start + n
            if end <= self.window:
                self._inputs[start:end] = batch
                if self._outputs:
                    self._logits[start:end] = answered
            else:
                split = self.window - start
                self._inputs[start:] = batch[:split]
                self._inputs[: n - split] = batch[split:]
                if self._outputs:
                    whole = np.broadcast_to(answered, (n, self._outputs))
                    self._logits[start:] = whole[:split]
                    self._logits[: n - split] = whole[split:]
            self._cursor[0] = end % self.window
            self._cursor[1] = min(self.window, filled + n)

    def scores(self) -> tuple[int, dict[str, float]]:
        """Samples in the window and each feature's PSI (all 0.0 while the window is empty)."""
        with self:
            rows = self._inputs[: self._cursor[1]].copy()
        if len(rows) == 0:
            return 0, dict.fromkeys(self.features, 0.0)
        return len(rows), {
            name: psi(ref, bin_counts(rows[:, i], edges))
            for i, (name, edges, ref) in enumerate(
                zip(self.features, self._edges, self._ref_counts, strict=True)
            )
        }

    def confidence_counts(self) -> npt.NDArray[np.int64] | None:
        """The window's predictions per (predicted class, confidence bin) of the version's reference,
        computed from the logits kept with each row; None when the version records no reference."""
        if self._confidence is None:
            return None
        with self:
            logits = self._logits[: self._cursor[1]].copy()
        classes, confidence = top_class(logits)
        return counts(classes, confidence, self._confidence.bin_edges, self._outputs)

    def estimated(self, found: npt.NDArray[np.int64] | None, samples: int) -> Estimate | None:
        """The label-free estimate over the window's ``found`` confidence counts (``confidence_counts``)
        once it holds ``samples`` >= ``min_samples`` rows; None before, or for a version without a
        reference."""
        if found is None or self._calibrated is None or not self.enough(samples):
            return None
        return estimate(found, self._calibrated)

    def enough(self, samples: int) -> bool:
        return samples >= self.min_samples

    def report(self, model: str, model_version: str) -> DriftReport:
        samples, scores = self.scores()
        if not self.enough(samples):
            scores = {}
        return DriftReport(
            model=model,
            model_version=model_version,
            window=self.window,
            samples=samples,
            min_samples=self.min_samples,
            threshold=self.threshold,
            max_psi=max(scores.values()) if scores else None,
            drifted=[f for f, s in scores.items() if s > self.threshold],
            psi=scores,
        )


# The windows to export, read at each scrape: (version, monitor) for every version loaded now.
DriftSources = Callable[[], Iterable[tuple[str, DriftMonitor]]]


class DriftCollector(Collector):
    """Exports the drift scores at scrape time, so PSI is computed once per scrape, not per request.

    Every series carries the model and version, one window per loaded version, so a challenger's drift
    is told apart from the champion's; per-feature PSI appears only once a window holds enough rows to
    mean something.
    """

    def __init__(self, model: str, sources: DriftSources) -> None:
        self.model = model
        self._sources = sources

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["model", "version"]
        per_feature = GaugeMetricFamily(
            "inference_drift_psi",
            "Population Stability Index of each input feature (absent below the minimum sample count)",
            labels=[*labels, "feature"],
        )
        gauges = {
            "threshold": GaugeMetricFamily(
                "inference_drift_threshold", "PSI above which a feature counts as drifted", labels=labels
            ),
            "drifted": GaugeMetricFamily(
                "inference_drift_features_over_threshold",
                "Features whose PSI exceeds the threshold",
                labels=labels,
            ),
            "samples": GaugeMetricFamily(
                "inference_drift_window_samples", "Input rows in the drift window", labels=labels
            ),
            "min_samples": GaugeMetricFamily(
                "inference_drift_min_samples", "Rows the window needs before PSI is reported", labels=labels
            ),
        }
        confidence = GaugeMetricFamily(
            CONFIDENCE_ROWS,
            "Rows in the drift window per predicted class and top-class probability bin (the index of the"
            " version's confidence_reference bins); cells with no row are absent",
            labels=[*labels, "class", "bin"],
        )
        estimate_labels = [*labels, "estimate"]
        estimated = {
            ESTIMATED_ACCURACY: GaugeMetricFamily(
                ESTIMATED_ACCURACY,
                "Accuracy ESTIMATED from the drift window's confidences (CBPE), not measured: no label is"
                " involved (absent below the minimum sample count)",
                labels=estimate_labels,
            ),
            ESTIMATED_ROWS: GaugeMetricFamily(
                ESTIMATED_ROWS, "Rows the accuracy estimate counts", labels=estimate_labels
            ),
            ESTIMATED_REFERENCE: GaugeMetricFamily(
                ESTIMATED_REFERENCE,
                "The same estimate on the version's test split: what an unchanged window estimates",
                labels=estimate_labels,
            ),
        }
        for version, monitor in self._sources():
            found = monitor.confidence_counts()
            for (cls, index), rows in np.ndenumerate(found if found is not None else np.zeros((0, 0))):
                if rows:
                    confidence.add_metric([self.model, version, str(cls), str(index)], float(rows))
            report = monitor.report(self.model, version)
            window = monitor.estimated(found, report.samples)
            if window is not None and monitor.reference_accuracy is not None:
                method = [self.model, version, ESTIMATE_METHOD]
                estimated[ESTIMATED_ACCURACY].add_metric(method, window.accuracy)
                estimated[ESTIMATED_ROWS].add_metric(method, float(window.rows))
                estimated[ESTIMATED_REFERENCE].add_metric(method, monitor.reference_accuracy)
            for feature, score in report.psi.items():
                per_feature.add_metric([self.model, version, feature], score)
            values = {
                "threshold": report.threshold,
                "drifted": len(report.drifted),
                "samples": report.samples,
                "min_samples": report.min_samples,
            }
            for key, gauge in gauges.items():
                gauge.add_metric([self.model, version], values[key])
        yield per_feature
        yield from gauges.values()
        yield confidence
        yield from estimated.values()
