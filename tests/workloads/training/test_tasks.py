"""The dataset API the inference side uses to rebuild a model's held-out split."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from workloads.training.config import DEFAULT_DATASET
from workloads.training.hooks import HookError
from workloads.training.tasks import (
    Dataset,
    DatasetError,
    DatasetMismatchError,
    digits,
    load_split,
    load_split_for,
    split_dataset,
)

# digits' content hash before validation sets existed: models trained then still rebuild their test split.
DIGITS_SHA256 = "ce8026359bba2ef3c5273b41b2ff9bf9e77ff0dd832a9d3a218b5e097b5457b3"


def _rows(x: np.ndarray, y: np.ndarray) -> set[bytes]:
    return {r.tobytes() + bytes([label]) for r, label in zip(x, y, strict=True)}


def test_digits_is_scikit_learns_load_digits_read_without_importing_scikit_learn() -> None:
    """The default dataset is exactly ``sklearn.datasets.load_digits()`` (data, target, names), and loading
    it in a fresh process (what each rank does) leaves scikit-learn unimported."""
    from sklearn.datasets import load_digits

    data, bunch = digits(), load_digits()
    assert np.array_equal(data.features, bunch.data.astype(np.float32))
    assert np.array_equal(data.labels, bunch.target) and data.labels.dtype == np.int64
    assert list(data.feature_names) == list(bunch.feature_names)
    assert list(data.class_names) == [str(name) for name in bunch.target_names]
    check = (
        "import sys; from workloads.training.tasks import digits; digits(); print('sklearn' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert done.stdout == "False\n"


def test_split_is_deterministic_disjoint_and_seeded() -> None:
    a, b, other = (
        load_split(DEFAULT_DATASET, 3),
        load_split(DEFAULT_DATASET, 3),
        load_split(DEFAULT_DATASET, 4),
    )
    assert np.array_equal(a.x_test, b.x_test) and np.array_equal(a.y_train, b.y_train)
    assert not np.array_equal(a.x_test, other.x_test)
    assert not np.array_equal(a.x_val, other.x_val)
    assert a.sizes == {"train": 1258, "validation": 180, "test": 359}
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int64
    train, val, test = _rows(a.x_train, a.y_train), _rows(a.x_val, a.y_val), _rows(a.x_test, a.y_test)
    assert len(train | val | test) == len(train) + len(val) + len(test), "the three parts are disjoint"


def test_validation_is_carved_from_training_data_and_leaves_the_test_split_as_it_was() -> None:
    """The test split is the permutation's first 20% whether validation is carved or brought along, and
    the hash of a dataset without its own validation set is what it was before validation existed."""
    data = digits()
    assert data.sha256 == DIGITS_SHA256
    carved = split_dataset(data, name="d", seed=5)
    order = np.random.default_rng(5).permutation(len(data.labels))
    assert np.array_equal(carved.x_test, data.features[order[:359]])
    brought = Dataset(
        data.features,
        data.labels,
        data.feature_names,
        data.class_names,
        validation=(carved.x_val, carved.y_val),
    )
    own = split_dataset(brought, name="d", seed=5)
    assert np.array_equal(own.x_test, carved.x_test) and np.array_equal(own.x_val, carved.x_val)
    assert own.sizes == {"train": 1438, "validation": 180, "test": 359}, "nothing carved when brought along"
    assert brought.sha256 != data.sha256, "a loader's validation set is part of the data a model came from"


@pytest.mark.parametrize(
    ("validation", "message"),
    [
        ((np.zeros((3, 64), np.float32), np.zeros(2, np.int64)), "3 validation feature rows but 2 labels"),
        ((np.zeros((2, 5), np.float32), np.zeros(2, np.int64)), "5 validation feature columns but 64 names"),
        ((np.zeros((1, 64), np.float32), np.array([10])), r"validation labels must lie in \[0, 10\)"),
        ((np.zeros((0, 64), np.float32), np.zeros(0, np.int64)), "the validation set is empty"),
    ],
)
def test_a_malformed_validation_set_is_one_line(
    validation: tuple[np.ndarray, np.ndarray], message: str
) -> None:
    data = digits()
    with pytest.raises(DatasetError, match=message):
        Dataset(data.features, data.labels, data.feature_names, data.class_names, validation=validation)


def test_rebuild_from_metadata_record_verifies_hash_and_sizes() -> None:
    info = load_split(DEFAULT_DATASET, 11).info()
    assert info.sha256 == digits().sha256 and info.split_seed == 11
    assert np.array_equal(load_split_for(info).x_test, load_split(DEFAULT_DATASET, 11).x_test)
    with pytest.raises(DatasetMismatchError, match="trained on"):
        load_split_for(info.model_copy(update={"sha256": "0" * 64}))
    with pytest.raises(DatasetMismatchError, match="splits into"):
        load_split_for(info.model_copy(update={"split_sizes": {"train": 1, "validation": 1, "test": 1}}))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("digits", "not of the form module:function"),
        ("no_such_module_xyz:digits", "cannot load"),
        ("workloads.training.tasks:nope", "cannot load"),
        ("workloads.training.tasks:TEST_FRACTION", "not callable"),
        ("workloads.training.tasks:DatasetError", "not workloads.training.tasks.Dataset"),
    ],
)
def test_bad_dataset_specs_fail_with_one_line(spec: str, message: str) -> None:
    with pytest.raises(HookError, match=message) as caught:
        load_split(spec, 0)
    assert "\n" not in str(caught.value)
