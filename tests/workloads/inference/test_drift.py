"""PSI and the rolling window, on the real model's reference histograms and held-out split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workloads.artifacts import ConfidenceReference, FeatureHistogram, load_metadata
from workloads.delivery.contract import (
    CONFIDENCE_ROWS,
    ESTIMATED_ACCURACY,
    ESTIMATED_REFERENCE,
    ESTIMATED_ROWS,
)
from workloads.delivery.estimate import calibrate, estimate, reference_accuracy
from workloads.inference.drift import (
    DriftCollector,
    DriftMonitor,
    bin_counts,
    columns,
    create_shared_window,
    psi,
)
from workloads.training.tasks import Split


def test_psi_is_zero_for_identical_distributions_and_grows_with_the_shift() -> None:
    ref = [10, 20, 40, 20, 10]
    assert psi(ref, [5, 10, 20, 10, 5]) == pytest.approx(0.0)
    mild, strong = psi(ref, [10, 25, 40, 15, 10]), psi(ref, [0, 0, 10, 30, 60])
    assert 0 < mild < 0.1
    assert strong > 1


def test_values_outside_the_training_range_land_in_the_end_bins() -> None:
    edges = np.array([0.0, 1.0, 2.0, 3.0])
    values = np.array([-5.0, 0.0, 1.5, 3.0, 99.0], dtype=np.float32)
    assert bin_counts(values, edges).tolist() == [2, 1, 2]


def test_the_window_keeps_only_the_latest_rows() -> None:
    reference = [FeatureHistogram(feature="x", bin_edges=[0.0, 1.0, 2.0], counts=[50, 50])]
    monitor = DriftMonitor(reference, window=4, threshold=0.2)
    assert monitor.scores() == (0, {"x": 0.0})

    def rows(*values: float) -> np.ndarray:
        return np.array(values, dtype=np.float32).reshape(-1, 1)

    monitor.observe(rows(0.5, 0.5, 0.5))
    monitor.observe(rows(1.5, 1.5, 1.5))  # wraps: the latest four are one low, three high
    assert monitor.scores()[0] == 4
    assert monitor.scores()[1]["x"] == pytest.approx(psi([50, 50], [1, 3]))
    monitor.observe(rows(0.5, 0.5))  # two low, two high: back to the reference shape
    assert monitor.scores()[1]["x"] == pytest.approx(0.0)
    monitor.observe(rows(*[1.5] * 10))  # more rows than the window: only the last four count
    assert monitor.report("m", "1").drifted == ["x"]


def test_workers_sharing_a_window_file_see_one_window(tmp_path: Path) -> None:
    """Two monitors on one file (as two worker processes map it): rows either observes fill one ring."""
    reference = [FeatureHistogram(feature="x", bin_edges=[0.0, 1.0, 2.0], counts=[50, 50])]
    shared = tmp_path / "window"
    create_shared_window(shared, window=4, columns=1)
    first, second = (DriftMonitor(reference, window=4, threshold=0.2, shared=shared) for _ in range(2))
    first.observe(np.full((3, 1), 0.5, dtype=np.float32))
    second.observe(np.full((3, 1), 1.5, dtype=np.float32))  # wraps over the first's oldest rows
    for monitor in (first, second):
        samples, scores = monitor.scores()
        assert samples == 4
        assert scores["x"] == pytest.approx(psi([50, 50], [1, 3]))


def test_held_out_inputs_stay_under_the_threshold_and_shifted_ones_cross_it(
    model_dir: Path, held_out: Split
) -> None:
    reference = load_metadata(model_dir).reference_histograms
    monitor = DriftMonitor(reference, window=len(held_out.x_test), threshold=0.2)
    monitor.observe(held_out.x_test)
    max_psi = monitor.report("digits", "1").max_psi
    assert max_psi is not None and max_psi < 0.2
    monitor.observe(held_out.x_test + 4.0)  # brighter strokes everywhere
    report = monitor.report("digits", "1")
    assert len(report.drifted) == len(reference)


def test_no_psi_below_the_minimum_sample_count(model_dir: Path, held_out: Split) -> None:
    reference = load_metadata(model_dir).reference_histograms
    monitor = DriftMonitor(reference, window=1000, threshold=0.2, min_samples=300)
    monitor.observe(held_out.x_test[:299] + 4.0)  # shifted, but too few rows to say so
    report = monitor.report("digits", "1")
    assert (report.samples, report.max_psi, report.drifted, report.psi) == (299, None, [], {})
    monitor.observe(held_out.x_test[:1] + 4.0)
    assert len(monitor.report("digits", "1").drifted) == len(reference)


def test_the_window_counts_its_predictions_in_the_reference_bins_for_every_worker(tmp_path: Path) -> None:
    """Each row's logits ride in the same ring as its inputs, counted by predicted class and top-class
    probability at scrape time (issue 40's label-free estimate): two workers on one file count one
    window, the oldest rows drop out with their inputs, and the collector exports the non-empty (class,
    bin) cells of each version."""
    reference = [FeatureHistogram(feature="x", bin_edges=[0.0, 1.0, 2.0], counts=[50, 50])]
    edges = [0.0, 0.5, 0.9, 1.0]
    confidence = ConfidenceReference(bin_edges=edges, rows=[[1, 1, 1]] * 2, correct=[[0, 1, 1]] * 2)
    shared = tmp_path / "window"
    create_shared_window(shared, window=4, columns=columns(reference, confidence))
    first, second = (
        DriftMonitor(reference, window=4, threshold=0.2, shared=shared, confidence=confidence)
        for _ in range(2)
    )
    x = np.full((2, 1), 0.5, dtype=np.float32)
    # Softmax of logits (ln 1, ln 19): class 1 at 0.95 (the top bin); (ln 3, ln 1): class 0 at 0.75.
    first.observe(x, np.log(np.array([[1.0, 19.0], [3.0, 1.0]], dtype=np.float32)))
    second.observe(x, np.log(np.array([[1.0, 19.0], [1.0, 1.0]], dtype=np.float32)))
    # Class 0 at 0.75 and at 0.5 (a tie goes to the first class), class 1 twice at 0.95.
    expected = [[0, 2, 0], [0, 0, 2]]
    for monitor in (first, second):
        found = monitor.confidence_counts()
        assert found is not None and found.tolist() == expected
    # The oldest row (class 1 at 0.95) drops out; a row whose answer is not known is counted nowhere.
    second.observe(x[:1], None)
    found = first.confidence_counts()
    assert found is not None and found.tolist() == [[0, 2, 0], [0, 0, 1]]
    cells = {
        (sample.labels["class"], sample.labels["bin"]): sample.value
        for family in DriftCollector("m", lambda: [("7", first)]).collect()
        if family.name == CONFIDENCE_ROWS
        for sample in family.samples
    }
    assert cells == {("0", "1"): 2.0, ("1", "2"): 1.0}
    # A batch that wraps round the ring replaces every row, logits included.
    second.observe(np.full((4, 1), 0.5, dtype=np.float32), np.log(np.array([[1.0, 19.0]] * 4, np.float32)))
    found = first.confidence_counts()
    assert found is not None and found.tolist() == [[0, 0, 0], [0, 0, 4]]
    assert DriftMonitor(reference, window=4, threshold=0.2).confidence_counts() is None


def test_the_estimate_is_exported_from_the_minimum_rows_on_as_the_monitor_computes_it() -> None:
    """The server's own window estimate (for the alert, components/kubernetes/monitoring.py) is the drift
    monitor's formula (workloads/delivery/estimate.py) on the same counts, labelled an estimate, and
    absent while the window is below the minimum sample count, as PSI is."""
    reference = [FeatureHistogram(feature="x", bin_edges=[0.0, 1.0, 2.0], counts=[50, 50])]
    confidence = ConfidenceReference(
        bin_edges=[0.0, 0.5, 0.9, 1.0], rows=[[4, 10, 30], [2, 12, 40]], correct=[[1, 7, 29], [1, 8, 39]]
    )
    monitor = DriftMonitor(reference, window=10, threshold=0.2, min_samples=3, confidence=confidence)
    x = np.full((2, 1), 0.5, dtype=np.float32)
    logits = np.log(np.array([[1.0, 19.0], [3.0, 1.0]], dtype=np.float32))

    def exported() -> dict[str, tuple[dict[str, str], float]]:
        return {
            family.name: (sample.labels, sample.value)
            for family in DriftCollector("m", lambda: [("7", monitor)]).collect()
            if family.name in (ESTIMATED_ACCURACY, ESTIMATED_ROWS, ESTIMATED_REFERENCE)
            for sample in family.samples
        }

    monitor.observe(x, logits)
    assert exported() == {}, "two rows, under the minimum of three: no estimate"
    monitor.observe(x, logits)
    calibrated = calibrate(confidence)
    counts = monitor.confidence_counts()
    assert counts is not None
    found = estimate(counts, calibrated)
    assert found is not None
    labels = {"model": "m", "version": "7", "estimate": "cbpe"}
    assert exported() == {
        ESTIMATED_ACCURACY: (labels, found.accuracy),
        ESTIMATED_ROWS: (labels, 4.0),
        ESTIMATED_REFERENCE: (labels, reference_accuracy(confidence, calibrated)),
    }
