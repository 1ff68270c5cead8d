"""The "newest dataset version" of the drift test (test_drift_monitor.py): the digits with every pixel
inverted (16 - value), the shift the test's traffic shows; a ``module:function`` dataset hook."""

from __future__ import annotations

from workloads.training.tasks import Dataset, digits


def inverted_digits() -> Dataset:
    data = digits()
    return Dataset(16 - data.features, data.labels, data.feature_names, data.class_names)
