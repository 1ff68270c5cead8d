"""Datasets the trainer learns from, and the deterministic held-out splits both training and inference use.

A dataset is named by a ``module:function`` spec (the default is ``workloads.training.tasks:digits``). The
spec string, the split seed and the dataset's content hash are recorded in the model's metadata, so the
inference side can rebuild exactly the test split a model was measured on (``load_split_for``) and prove
it is the same data (``DatasetMismatchError`` otherwise).

Three disjoint parts: the test split (held out for the reported metric only), a validation split (the
trainer's early-stopping and best-epoch decisions) and the rest for training. The test split is carved
first, from the seeded permutation alone, so adding validation never changed which samples are tested; a
loader that ships its own validation set passes it in ``Dataset.validation`` and nothing is carved.

The split uses numpy's PCG64 generator, whose stream numpy guarantees across versions, rather than a
library helper whose shuffling could change between releases.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from workloads.artifacts import DatasetInfo
from workloads.training.hooks import DATASET_HOOK_ARGS, HookError, resolve

# Shares of the samples held out for testing and for validation; fixed so a (spec, seed) pair names one split.
TEST_FRACTION = 0.2
VALIDATION_FRACTION = 0.1

Features = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]


class DatasetError(HookError):
    """A dataset loader that returns malformed data, or data too small to split."""


class DatasetMismatchError(DatasetError):
    """The data a spec loads today is not the data a model was trained on (content hash differs)."""


@dataclass(frozen=True)
class Dataset:
    """A whole in-memory classification dataset: raw (unscaled) features and integer class labels.

    ``validation``: the loader's own validation (features, labels), kept apart from ``features`` and
    ``labels``, which then supply the test and training splits only.
    """

    features: Features
    labels: Labels
    feature_names: tuple[str, ...]
    class_names: tuple[str, ...]
    validation: tuple[Features, Labels] | None = None

    def __post_init__(self) -> None:
        self._check(self.features, self.labels, "")
        if self.validation is not None:
            self._check(*self.validation, "validation ")
            if not len(self.validation[1]):
                raise DatasetError("the validation set is empty")

    def _check(self, features: Features, labels: Labels, part: str) -> None:
        if features.ndim != 2 or labels.ndim != 1:
            raise DatasetError(f"{part}features must be 2-D [samples, features] and labels 1-D [samples]")
        if len(features) != len(labels):
            raise DatasetError(f"{len(features)} {part}feature rows but {len(labels)} labels")
        if features.shape[1] != len(self.feature_names):
            raise DatasetError(
                f"{features.shape[1]} {part}feature columns but {len(self.feature_names)} names"
            )
        if len(labels) and (labels.min() < 0 or labels.max() >= len(self.class_names)):
            raise DatasetError(f"{part}labels must lie in [0, {len(self.class_names)})")

    @property
    def sha256(self) -> str:
        """Content hash over the canonical bytes (little-endian float32 features, int64 labels) and names."""
        digest = hashlib.sha256()
        digest.update(np.ascontiguousarray(self.features, dtype="<f4").tobytes())
        digest.update(np.ascontiguousarray(self.labels, dtype="<i8").tobytes())
        digest.update("\x1f".join((*self.feature_names, "\x1e", *self.class_names)).encode())
        if self.validation is not None:  # absent, the hash is what it was before validation sets existed
            digest.update(b"\x1dvalidation")
            digest.update(np.ascontiguousarray(self.validation[0], dtype="<f4").tobytes())
            digest.update(np.ascontiguousarray(self.validation[1], dtype="<i8").tobytes())
        return digest.hexdigest()


@dataclass(frozen=True)
class Split:
    """The train/validation/test partition of one dataset, with what metadata records about it."""

    x_train: Features
    y_train: Labels
    x_val: Features
    y_val: Labels
    x_test: Features
    y_test: Labels
    feature_names: tuple[str, ...]
    class_names: tuple[str, ...]
    dataset_name: str
    dataset_sha256: str
    seed: int

    @property
    def sizes(self) -> dict[str, int]:
        return {"train": len(self.y_train), "validation": len(self.y_val), "test": len(self.y_test)}

    def info(self) -> DatasetInfo:
        """The ``metadata.dataset`` record that lets a reader rebuild this split."""
        return DatasetInfo(
            name=self.dataset_name, sha256=self.dataset_sha256, split_seed=self.seed, split_sizes=self.sizes
        )


def digits() -> Dataset:
    """scikit-learn's 8x8 handwritten digits (1,797 samples, 64 pixel features): the file that ships with
    the package, read as ``sklearn.datasets.load_digits`` reads it (scikit-learn 1.9.1 ``_base.py``:
    ``np.loadtxt`` of ``data/digits.csv.gz``, the last column the digit; features ``pixel_<row>_<col>``)
    without importing scikit-learn, whose import (scipy's with it) cost every rank 1.3 CPU-s. The content
    hash in each model's metadata, and a test against ``load_digits``, hold it to the same data."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise DatasetError("the digits dataset ships with scikit-learn, which is not installed")
    with gzip.open(Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz", "rt") as text:
        data = np.loadtxt(text, delimiter=",")
    return Dataset(
        features=np.asarray(data[:, :-1], dtype=np.float32),
        labels=np.asarray(data[:, -1], dtype=np.int64),
        feature_names=tuple(f"pixel_{row}_{column}" for row in range(8) for column in range(8)),
        class_names=tuple(str(digit) for digit in range(10)),
    )


def load_dataset(spec: str) -> Dataset:
    """Call a ``module:function`` dataset loader and check it returned a ``Dataset``."""
    dataset = resolve(spec, DATASET_HOOK_ARGS)()
    if not isinstance(dataset, Dataset):
        kind = type(dataset).__name__
        raise DatasetError(f"{spec!r} returned {kind}, not workloads.training.tasks.Dataset")
    return dataset


def split_dataset(dataset: Dataset, *, name: str, seed: int) -> Split:
    """Hold out ``TEST_FRACTION`` of the samples for testing, then (unless the loader brought its own)
    ``VALIDATION_FRACTION`` for validation, both from one seeded permutation."""
    n = len(dataset.labels)
    n_test = max(1, round(n * TEST_FRACTION))
    n_val = 0 if dataset.validation is not None else max(1, round(n * VALIDATION_FRACTION))
    if n - n_test - n_val < 1:
        raise DatasetError(f"{name!r} has {n} samples: too few to split")
    order = np.random.default_rng(seed).permutation(n)
    test, val, train = order[:n_test], order[n_test : n_test + n_val], order[n_test + n_val :]
    x_val, y_val = dataset.validation or (dataset.features[val], dataset.labels[val])
    return Split(
        x_train=dataset.features[train],
        y_train=dataset.labels[train],
        x_val=x_val,
        y_val=y_val,
        x_test=dataset.features[test],
        y_test=dataset.labels[test],
        feature_names=dataset.feature_names,
        class_names=dataset.class_names,
        dataset_name=name,
        dataset_sha256=dataset.sha256,
        seed=seed,
    )


def load_split(name: str, seed: int, *, expected_sha256: str | None = None) -> Split:
    """Load dataset ``name`` (a ``module:function`` spec) and split it with ``seed``.

    With ``expected_sha256`` (``metadata.dataset.sha256``) the data must be byte-for-byte what the model
    was trained on; a changed dataset would make any accuracy measured on it meaningless.
    """
    dataset = load_dataset(name)
    if expected_sha256 is not None and dataset.sha256 != expected_sha256:
        raise DatasetMismatchError(
            f"{name!r} now hashes to {dataset.sha256}, but the model was trained on {expected_sha256}"
        )
    return split_dataset(dataset, name=name, seed=seed)


def load_split_for(info: DatasetInfo) -> Split:
    """Rebuild the exact split recorded in ``metadata.dataset``, verifying content hash and sizes."""
    split = load_split(info.name, info.split_seed, expected_sha256=info.sha256)
    if split.sizes != info.split_sizes:
        raise DatasetMismatchError(
            f"{info.name!r} splits into {split.sizes}, metadata records {info.split_sizes}"
        )
    return split
