"""The "newest dataset versions" of the drift test (test_drift_monitor.py), ``module:function`` dataset
hooks: the digits with every pixel inverted (16 - value), the shift the test's traffic shows; and the same
rows with every label wrong (the next class), a dataset broken upstream, whose model must not serve."""

from __future__ import annotations

from workloads.training.tasks import Dataset, digits


def inverted_digits() -> Dataset:
    data = digits()
    return Dataset(16 - data.features, data.labels, data.feature_names, data.class_names)


def mislabelled_inverted_digits() -> Dataset:
    data = inverted_digits()
    labels = (data.labels + 1) % len(data.class_names)
    return Dataset(data.features, labels, data.feature_names, data.class_names)
