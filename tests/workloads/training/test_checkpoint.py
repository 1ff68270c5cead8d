"""Checkpoints on a real file system: verified on load, skipped when damaged, never half-written."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from workloads.training.checkpoint import (
    CorruptCheckpointError,
    checkpoint_path,
    latest_valid,
    list_checkpoints,
    load_checkpoint,
    remove_partials,
    save_checkpoint,
)


def state(step: int) -> dict[str, object]:
    return {
        "model": {"w": torch.full((4, 4), float(step))},
        "progress": {"step": step},
        "rng": [torch.get_rng_state()],
    }


@pytest.fixture
def three(tmp_path: Path) -> Path:
    for step in (10, 20, 30):
        save_checkpoint(tmp_path, step, state(step), keep=5)
    return tmp_path


def test_round_trip_and_keep_last_k(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, state(step), keep=2)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [3, 4]
    loaded = load_checkpoint(checkpoint_path(tmp_path, 4))
    assert torch.equal(loaded["model"]["w"], torch.full((4, 4), 4.0))
    assert loaded["progress"] == {"step": 4}


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: data[:-1] + bytes([data[-1] ^ 0xFF]), id="bit-flip"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: b"not a checkpoint at all", id="garbage"),
    ],
)
def test_damaged_newest_is_skipped_with_a_warning(
    three: Path, damage: Callable[[bytes], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    newest = checkpoint_path(three, 30)
    newest.write_bytes(damage(newest.read_bytes()))
    with pytest.raises(CorruptCheckpointError):
        load_checkpoint(newest)
    with caplog.at_level(logging.WARNING, logger="workloads.training"):
        found = latest_valid(three)
    assert found is not None
    assert found[0] == 20
    assert torch.equal(found[1]["model"]["w"], torch.full((4, 4), 20.0))
    assert [r.getMessage() for r in caplog.records] == ["checkpoint_skipped"]
    assert caplog.records[0].fields["path"] == str(newest)  # type: ignore[attr-defined]


def test_no_valid_checkpoint_means_start_fresh(tmp_path: Path) -> None:
    checkpoint_path(tmp_path, 5).write_bytes(b"\0" * 100)
    assert latest_valid(tmp_path) is None
    assert latest_valid(tmp_path / "missing") is None


def test_failed_write_leaves_no_partial_file(three: Path) -> None:
    """A rename that fails (the final name is taken by a directory) must not leave a temp file behind."""
    blocker = checkpoint_path(three, 40)
    blocker.mkdir()
    (blocker / "keep").write_text("x")
    with pytest.raises(OSError):
        save_checkpoint(three, 40, state(40), keep=5)
    assert sorted(p.name for p in three.iterdir()) == sorted(
        [checkpoint_path(three, s).name for s in (10, 20, 30, 40)]
    )
    assert latest_valid(three) is not None


def test_leftover_partials_are_ignored_then_removed(three: Path) -> None:
    """What a writer killed mid-write leaves: a hidden temp file that is never taken for a checkpoint."""
    partial = three / ".step-000000040-abc.tmp"
    partial.write_bytes(checkpoint_path(three, 30).read_bytes()[:100])
    assert [step for step, _ in list_checkpoints(three)] == [10, 20, 30]
    remove_partials(three)
    assert not partial.exists()


def test_loading_refuses_pickled_code(tmp_path: Path) -> None:
    """A payload that verifies but needs arbitrary globals is refused: checkpoints load weights_only."""
    save_checkpoint(tmp_path, 1, {"bad": Path("/etc/passwd")}, keep=1)
    with pytest.raises(CorruptCheckpointError, match="not loadable"):
        load_checkpoint(checkpoint_path(tmp_path, 1))
