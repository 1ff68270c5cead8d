"""A dataset hook for the early-stopping tests, importable by the trainer's own processes."""

from __future__ import annotations

from workloads.training.tasks import Dataset, digits


def digits_with_mislabelled_validation() -> Dataset:
    """digits with its own validation set: 200 of its images, each labelled as the next digit. The better
    the model reads digits, the worse its validation loss, while its test accuracy keeps rising."""
    data = digits()
    validation = (data.features[:200], (data.labels[:200] + 1) % len(data.class_names))
    return Dataset(data.features, data.labels, data.feature_names, data.class_names, validation=validation)


def keyword_only_model(*, n_features: int, n_classes: int = 10) -> object:
    """A model hook the trainer cannot call: it passes n_features and n_classes by position."""
    raise AssertionError("never called: pre-flight refuses its signature")
