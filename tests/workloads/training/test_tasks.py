"""The dataset API the inference side uses to rebuild a model's held-out split."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.training.config import DEFAULT_DATASET
from workloads.training.hooks import HookError
from workloads.training.tasks import (
    DatasetMismatchError,
    digits,
    load_split,
    load_split_for,
)


def test_split_is_deterministic_disjoint_and_seeded() -> None:
    a, b, other = (
        load_split(DEFAULT_DATASET, 3),
        load_split(DEFAULT_DATASET, 3),
        load_split(DEFAULT_DATASET, 4),
    )
    assert np.array_equal(a.x_test, b.x_test) and np.array_equal(a.y_train, b.y_train)
    assert not np.array_equal(a.x_test, other.x_test)
    assert a.sizes == {"train": 1438, "test": 359}
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int64
    rows = {r.tobytes() + bytes([y]) for r, y in zip(a.x_train, a.y_train, strict=True)}
    assert (
        len(rows | {r.tobytes() + bytes([y]) for r, y in zip(a.x_test, a.y_test, strict=True)})
        == len(rows) + 359
    )


def test_rebuild_from_metadata_record_verifies_hash_and_sizes() -> None:
    info = load_split(DEFAULT_DATASET, 11).info()
    assert info.sha256 == digits().sha256 and info.split_seed == 11
    assert np.array_equal(load_split_for(info).x_test, load_split(DEFAULT_DATASET, 11).x_test)
    with pytest.raises(DatasetMismatchError, match="trained on"):
        load_split_for(info.model_copy(update={"sha256": "0" * 64}))
    with pytest.raises(DatasetMismatchError, match="splits into"):
        load_split_for(info.model_copy(update={"split_sizes": {"train": 1, "test": 1}}))


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
