"""mlplatform.parallel: shares of the stacks in other processes come back in order, their stderr with them."""

from __future__ import annotations

import os
import sys

import pytest

from mlplatform.parallel import cpus, spread


def _pids(items: list[int]) -> list[tuple[int, int]]:
    """Each item with the process that handled it, saying so on stderr."""
    for item in items:
        print(f"item {item}", file=sys.stderr)
    return [(item, os.getpid()) for item in items]


@pytest.mark.skipif(cpus() < 2, reason="one CPU: everything runs in this process")
def test_shares_run_in_other_processes_and_come_back_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    done = spread(list(range(5)), _pids)
    assert [item for item, _ in done] == [0, 1, 2, 3, 4]
    assert {pid for _, pid in done} - {os.getpid()}, "no item was handled by another process"
    assert {pid for item, pid in done if item % cpus() == 0} == {os.getpid()}
    # A worker's stderr is this process's (the CLI's progress lines under CliRunner, pytest's capture).
    assert sorted(capsys.readouterr().err.splitlines()) == [f"item {item}" for item in range(5)]


def test_one_item_runs_here() -> None:
    assert spread([7], _pids) == [(7, os.getpid())]
