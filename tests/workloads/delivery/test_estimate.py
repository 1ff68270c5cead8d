"""The estimate's calibration (workloads/delivery/estimate.py), as pure functions: the isotonic fit is
scikit-learn's, sparse bins borrow from the pool, and an unchanged window estimates the reference."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from workloads.artifacts import ConfidenceReference
from workloads.confidence import CONFIDENCE_EDGES, reference
from workloads.delivery.estimate import PRIOR_ROWS, calibrate, estimate, isotonic, reference_accuracy


@pytest.mark.parametrize("seed", range(5))
def test_pool_adjacent_violators_is_scikit_learns_isotonic_fit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values, weights = rng.uniform(0, 1, 12), rng.integers(1, 50, 12).astype(np.float64)
    expected = IsotonicRegression().fit(np.arange(12), values, sample_weight=weights).predict(np.arange(12))
    assert isotonic(values, weights) == pytest.approx(expected)


def test_a_bin_without_test_rows_takes_the_models_own_confidence_and_a_sparse_class_the_pool() -> None:
    edges = [0.0, 0.5, 0.9, 1.0]
    # Class 0: no rows below 0.9; class 1: one wrong row at 0.5-0.9; the pool: 40 rows there, 30 right.
    found = ConfidenceReference(
        bin_edges=edges, rows=[[0, 39, 50], [0, 1, 50]], correct=[[0, 30, 50], [0, 0, 49]]
    )
    calibrated = calibrate(found)
    assert calibrated[:, 0] == pytest.approx([0.25, 0.25])  # no rows anywhere: the bin's middle
    pooled = (30 + PRIOR_ROWS * 0.7) / (40 + PRIOR_ROWS)
    assert calibrated[1, 1] == pytest.approx((0 + PRIOR_ROWS * pooled) / (1 + PRIOR_ROWS))
    assert calibrated[1, 1] > 0.5, "one wrong row does not make the bin hopeless"
    assert np.all(np.diff(calibrated, axis=1) >= 0), "more confident is never less likely right"


def test_an_unchanged_window_estimates_the_reference_and_a_less_confident_one_less() -> None:
    """Logits of a classifier whose confidence is its accuracy: rows of the same draw estimate the
    reference's accuracy within the standard error; a window of less confident rows estimates less."""
    rng = np.random.default_rng(0)

    def draw(n: int, sharpness: float) -> tuple[np.ndarray, np.ndarray]:
        logits = rng.normal(0, sharpness, (n, 10)).astype(np.float32)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        labels = np.array([rng.choice(10, p=row) for row in p])  # calibrated by construction
        return logits, labels

    logits, labels = draw(2000, 3.0)
    ref = reference(logits, labels, 10)
    calibrated = calibrate(ref)
    estimated = []
    for sharpness in (3.0, 1.5):
        live, truth = draw(1000, sharpness)
        found = estimate(reference(live, truth, 10).rows, calibrated)
        assert found is not None and found.rows == 1000
        true = float(np.mean(live.argmax(axis=1) == truth))
        assert abs(found.accuracy - true) < 3 * found.stderr + 0.02, (sharpness, found, true)
        estimated.append(found.accuracy)
    assert estimated[1] < estimated[0] - 0.1
    assert estimate(np.zeros((10, len(CONFIDENCE_EDGES) - 1)), calibrated) is None
    assert reference_accuracy(ref, calibrated) == pytest.approx(
        sum(map(sum, ref.correct)) / sum(map(sum, ref.rows)), abs=0.02
    )
