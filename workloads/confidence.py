"""Top-class confidence, counted the one way training, the servers and the drift monitor all use.

A classifier's graph outputs logits; its confidence in a row is the softmax probability of its predicted
class (the arg max). Training counts its held-out test rows by (predicted class, confidence bin) and how
many of them were right (``artifacts.ConfidenceReference``); every server counts its recent predictions
in the same bins, per version (workloads/inference/drift.py keeps them beside the input rows); the drift
monitor turns the two into a label-free accuracy estimate (workloads/delivery/estimate.py).

The bins are fixed, finer where a trained classifier puts most of its rows (above 0.9) and wide enough
below that a shifted window still lands in bins the reference has rows in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from workloads.artifacts import ConfidenceReference

CONFIDENCE_EDGES: tuple[float, ...] = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999, 1.0)


def top_class(logits: npt.NDArray[np.floating]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Each row's predicted class and its softmax probability: 1 / sum(exp(logit - max logit)), stable
    for any logits; a row with a non-finite logit gets confidence NaN (counted in no bin)."""
    scores = np.asarray(logits, dtype=np.float32)
    classes = np.argmax(scores, axis=1)
    top = np.max(scores, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        confidence = 1.0 / np.sum(np.exp(scores - top), axis=1)
    return classes.astype(np.int64), confidence.astype(np.float32)


def bin_of(confidence: npt.NDArray[np.floating], edges: Sequence[float]) -> npt.NDArray[np.int64]:
    """The bin of each confidence (the last bin includes 1.0); -1 for NaN."""
    bins = len(edges) - 1
    index = np.clip(np.searchsorted(np.asarray(edges), confidence, side="right") - 1, 0, bins - 1)
    return np.where(np.isfinite(confidence), index, -1).astype(np.int64)


def counts(
    classes: npt.NDArray[np.int64],
    confidence: npt.NDArray[np.floating],
    edges: Sequence[float],
    n_classes: int,
) -> npt.NDArray[np.int64]:
    """Rows per (predicted class, confidence bin): shape (n_classes, len(edges) - 1)."""
    bins = len(edges) - 1
    index = bin_of(confidence, edges)
    keep = (index >= 0) & (classes >= 0) & (classes < n_classes)
    flat = classes[keep] * bins + index[keep]
    return np.bincount(flat, minlength=n_classes * bins).reshape(n_classes, bins)


def reference(
    logits: npt.NDArray[np.floating], labels: npt.NDArray[np.int64], n_classes: int
) -> ConfidenceReference:
    """The held-out split's counts: its rows and the correctly classified ones, per class and bin."""
    classes, confidence = top_class(logits)
    right = classes == np.asarray(labels)
    return ConfidenceReference(
        bin_edges=list(CONFIDENCE_EDGES),
        rows=counts(classes, confidence, CONFIDENCE_EDGES, n_classes).tolist(),
        correct=counts(classes[right], confidence[right], CONFIDENCE_EDGES, n_classes).tolist(),
    )
