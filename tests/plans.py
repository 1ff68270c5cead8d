"""Plans shared by every process of a test run: each stack config is planned once per run.

Under pytest-xdist each worker is a process of its own, with its own session fixtures. A plan one of
them makes is pickled into the run's folder (``PLANS_DIR``, made by the first pytest process of the run
and removed at its end), keyed by the stack's name and its config's exact text, under a lock on that key:
a second process asking for the same config waits for the first one's plan and reads it. Only the
config can differ between two plans of one run, as the program does not change during a run.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from mlplatform.plan import Plan

PLANS_DIR = "MLPLATFORM_TEST_PLANS"

_made: dict[str, Plan] = {}


def start(config: pytest.Config) -> None:
    """``pytest_configure``: the run's folder, inherited by xdist's workers through the environment."""
    if not hasattr(config, "workerinput"):
        os.environ[PLANS_DIR] = tempfile.mkdtemp(prefix="mlplatform-plans-")


def stop(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and PLANS_DIR in os.environ:
        shutil.rmtree(os.environ.pop(PLANS_DIR), ignore_errors=True)


def shared(stack: str, config_text: str, make: Callable[[], Plan]) -> Plan:
    """The plan of ``stack`` with the config ``config_text``: made by ``make`` once per test run."""
    key = f"{stack}-{hashlib.sha256(config_text.encode()).hexdigest()[:32]}"
    if key not in _made:
        _made[key] = _on_disk(key, make) if PLANS_DIR in os.environ else make()
    return _made[key]


def _on_disk(key: str, make: Callable[[], Plan]) -> Plan:
    path = Path(os.environ[PLANS_DIR]) / f"{key}.pickle"
    with (path.with_suffix(".lock")).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if path.is_file():
            plan: Plan = pickle.loads(path.read_bytes())
            return plan
        plan = make()
        partial = path.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL))
        partial.rename(path)
        return plan
