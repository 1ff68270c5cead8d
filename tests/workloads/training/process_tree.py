"""A torchrun run's processes as the tests reach them. torchrun starts each worker in a session of its own
(torch 2.13 ``torch/distributed/elastic/multiprocessing/subprocess_handler``: ``start_new_session=True``),
and ``mlplatform train`` starts torchrun in one of its own, so killing the process group of the command
or of an agent leaves the processes under it running."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def children(pid: int) -> list[int]:
    """The live children of ``pid`` (none once it is gone)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def kill_tree(root: int) -> None:
    """SIGKILL ``root``'s process group and every process under it, top down (no agent outlives its
    workers to restart one): what losing the machine or the pod does to them. ``root`` must not have been
    reaped yet (its pid could be another process's)."""
    tree = [root]
    for pid in tree:
        tree.extend(children(pid))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(root, signal.SIGKILL)
    for pid in tree[1:]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
