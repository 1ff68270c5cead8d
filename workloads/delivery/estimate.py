"""A label-free accuracy estimate from the servers' confidences: confidence-based performance estimation.

NannyML's CBPE (Confidence-based Performance Estimation; NannyML's docs, "Estimation of Performance of the
Monitored Model", docs/how_it_works/performance_estimation.rst in github.com/NannyML/nannyml) estimates a
classifier's multiclass accuracy without labels "as the mean of predicted probabilities corresponding to
the predicted classes", after calibrating the scores on labelled reference data with isotonic regression.
Its stated assumptions are its limits: the probabilities are (or can be) calibrated; no covariate shift
to regions of the input space the model never saw; no concept drift (P(y|x) changes while the
confidences do not: the estimate does not move); a large enough sample.

Here, per predicted class c and top-class probability bin b (workloads/confidence.py), on the version's
held-out test split (``ConfidenceReference``, written by training into the version's metadata.json, the
same file that holds the PSI reference):

1. pooled over classes, the share of bin b's rows that were right, m-estimated towards the bin's own
   mid-probability (what the model claims; Cestnik 1990, the m-estimate Zadrozny and Elkan 2001 use to
   calibrate sparse bins) with ``PRIOR_ROWS`` pseudo-rows, then made non-decreasing over the bins by
   isotonic regression (pool-adjacent-violators; Zadrozny and Elkan 2002 for calibration);
2. per class, the same share m-estimated towards the pooled value, then isotonic: a class with few test
   rows in a bin borrows from the pool, one with many is calibrated on its own (top-label calibration
   per predicted class; Gupta and Ramdas 2022, "Top-label calibration and multiclass-to-binary
   reductions");
3. the estimate: the live window's rows per (class, bin) weighted by those probabilities, divided by its
   rows; its standard error sqrt(sum p(1 - p)) / n, the sampling error of the accuracy the window would
   show if the estimate were right (the binomial sampling error of its mean).

The estimate of the reference itself (``reference_accuracy``) is what a window is compared with: the
same map on the same rows, so an unchanged window estimates it up to the standard error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from workloads.artifacts import ConfidenceReference

# Pseudo-rows of the prior in each m-estimate: few enough that a bin with tens of test rows speaks for
# itself, enough that a bin with one or two does not swing to 0 or 1.
PRIOR_ROWS = 5.0

Floats = npt.NDArray[np.float64]


def isotonic(values: Floats, weights: Floats) -> Floats:
    """The weighted least-squares non-decreasing fit of ``values`` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(values.tolist(), weights.tolist(), strict=True):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, w2, n2), (m1, w1, n1) = blocks.pop(), blocks.pop()
            total = w1 + w2
            blocks.append([(m1 * w1 + m2 * w2) / total if total > 0 else (m1 + m2) / 2, total, n1 + n2])
    return np.concatenate([np.full(int(n), m) for m, _, n in blocks])


def calibrate(reference: ConfidenceReference) -> Floats:
    """P(the prediction is right | predicted class, confidence bin): shape (classes, bins)."""
    edges = np.asarray(reference.bin_edges)
    rows = np.asarray(reference.rows, dtype=np.float64)
    correct = np.asarray(reference.correct, dtype=np.float64)
    middle = (edges[:-1] + edges[1:]) / 2
    pooled_rows, pooled_correct = rows.sum(axis=0), correct.sum(axis=0)
    pooled = isotonic(
        (pooled_correct + PRIOR_ROWS * middle) / (pooled_rows + PRIOR_ROWS), pooled_rows + PRIOR_ROWS
    )
    per_class = (correct + PRIOR_ROWS * pooled) / (rows + PRIOR_ROWS)
    return np.stack([isotonic(per_class[c], rows[c] + PRIOR_ROWS) for c in range(len(rows))])


@dataclass(frozen=True)
class Estimate:
    """An estimated accuracy over ``rows`` predictions: never a measured one."""

    accuracy: float
    stderr: float
    rows: int


def estimate(live: npt.ArrayLike, calibrated: Floats) -> Estimate | None:
    """The estimate over ``live`` counts (classes x bins, as ``calibrate``'s); None for no rows."""
    counts = np.asarray(live, dtype=np.float64)
    n = counts.sum()
    if n <= 0:
        return None
    accuracy = float((counts * calibrated).sum() / n)
    stderr = float(np.sqrt((counts * calibrated * (1 - calibrated)).sum()) / n)
    return Estimate(accuracy, stderr, int(n))


def reference_accuracy(reference: ConfidenceReference, calibrated: Floats) -> float:
    """The estimate on the reference's own rows: what an unchanged window estimates."""
    found = estimate(reference.rows, calibrated)
    return found.accuracy if found is not None else float("nan")


def live_counts(cells: Mapping[tuple[int, int], float], shape: tuple[int, int]) -> npt.NDArray[np.int64]:
    """The servers' exported cells ((class, bin) -> rows) as a classes x bins array; cells outside the
    reference's shape (another version's classes) are ignored."""
    counts = np.zeros(shape, dtype=np.int64)
    for (cls, index), rows in cells.items():
        if 0 <= cls < shape[0] and 0 <= index < shape[1]:
            counts[cls, index] += int(rows)
    return counts
