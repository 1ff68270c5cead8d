"""Datasets the trainer learns from, and the deterministic held-out split both training and inference use.

A dataset is named by a ``module:function`` spec (the default is ``workloads.training.tasks:digits``). The
spec string, the split seed and the dataset's content hash are recorded in the model's metadata, so the
inference side can rebuild exactly the test split a model was measured on (``load_split_for``) and prove
it is the same data (``DatasetMismatchError`` otherwise).

The split uses numpy's PCG64 generator, whose stream numpy guarantees across versions, rather than a
library helper whose shuffling could change between releases.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from workloads.artifacts import DatasetInfo
from workloads.training.hooks import HookError, resolve

# Share of the samples held out for testing; fixed so a (spec, seed) pair names one split.
TEST_FRACTION = 0.2

Features = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]


class DatasetError(HookError):
    """A dataset loader that returns malformed data, or data too small to split."""


class DatasetMismatchError(DatasetError):
    """The data a spec loads today is not the data a model was trained on (content hash differs)."""


@dataclass(frozen=True)
class Dataset:
    """A whole in-memory classification dataset: raw (unscaled) features and integer class labels."""

    features: Features
    labels: Labels
    feature_names: tuple[str, ...]
    class_names: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.features.ndim != 2 or self.labels.ndim != 1:
            raise DatasetError("features must be 2-D [samples, features] and labels 1-D [samples]")
        if len(self.features) != len(self.labels):
            raise DatasetError(f"{len(self.features)} feature rows but {len(self.labels)} labels")
        if self.features.shape[1] != len(self.feature_names):
            columns = self.features.shape[1]
            raise DatasetError(f"{columns} feature columns but {len(self.feature_names)} names")
        if len(self.labels) and (self.labels.min() < 0 or self.labels.max() >= len(self.class_names)):
            raise DatasetError(f"labels must lie in [0, {len(self.class_names)})")

    @property
    def sha256(self) -> str:
        """Content hash over the canonical bytes (little-endian float32 features, int64 labels) and names."""
        digest = hashlib.sha256()
        digest.update(np.ascontiguousarray(self.features, dtype="<f4").tobytes())
        digest.update(np.ascontiguousarray(self.labels, dtype="<i8").tobytes())
        digest.update("\x1f".join((*self.feature_names, "\x1e", *self.class_names)).encode())
        return digest.hexdigest()


@dataclass(frozen=True)
class Split:
    """The train/test partition of one dataset, with what metadata records about it."""

    x_train: Features
    y_train: Labels
    x_test: Features
    y_test: Labels
    feature_names: tuple[str, ...]
    class_names: tuple[str, ...]
    dataset_name: str
    dataset_sha256: str
    seed: int

    @property
    def sizes(self) -> dict[str, int]:
        return {"train": len(self.y_train), "test": len(self.y_test)}

    def info(self) -> DatasetInfo:
        """The ``metadata.dataset`` record that lets a reader rebuild this split."""
        return DatasetInfo(
            name=self.dataset_name, sha256=self.dataset_sha256, split_seed=self.seed, split_sizes=self.sizes
        )


def digits() -> Dataset:
    """scikit-learn's 8x8 handwritten digits (1,797 samples, 64 pixel features): ships with the package."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return Dataset(
        features=np.asarray(bunch.data, dtype=np.float32),
        labels=np.asarray(bunch.target, dtype=np.int64),
        feature_names=tuple(str(n) for n in bunch.feature_names),
        class_names=tuple(str(n) for n in bunch.target_names),
    )


def load_dataset(spec: str) -> Dataset:
    """Call a ``module:function`` dataset loader and check it returned a ``Dataset``."""
    dataset = resolve(spec)()
    if not isinstance(dataset, Dataset):
        kind = type(dataset).__name__
        raise DatasetError(f"{spec!r} returned {kind}, not workloads.training.tasks.Dataset")
    return dataset


def split_dataset(dataset: Dataset, *, name: str, seed: int) -> Split:
    """Hold out ``TEST_FRACTION`` of the samples, chosen by a seeded permutation."""
    n = len(dataset.labels)
    n_test = max(1, round(n * TEST_FRACTION))
    if n - n_test < 1:
        raise DatasetError(f"{name!r} has {n} samples: too few to split")
    order = np.random.default_rng(seed).permutation(n)
    test, train = order[:n_test], order[n_test:]
    return Split(
        x_train=dataset.features[train],
        y_train=dataset.labels[train],
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
