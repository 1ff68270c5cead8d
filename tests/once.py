"""What a test run makes once and shares between its processes: each stack config's plan, the trained model.

Under pytest-xdist each worker is a process of its own, with its own session fixtures. What one of them
makes goes into the run's folder (``RUN_DIR``, made by the first pytest process of the run and removed
at its end) under a lock on its key: a second process asking for the same thing waits for the first
one's and reads it. A plan is pickled, keyed by the stack's name and its config's exact text: for the
session fixtures' plans (`planned`, `cloud_plan`, the judges' stacks) only the config differs, while a
test's own plan may also depend on what the test changed (the mocks, an environment variable), so
``plan_config`` shares only when asked to.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mlplatform.plan import Plan

RUN_DIR = "MLPLATFORM_TEST_RUN_DIR"

_made: dict[str, Plan] = {}


def start(config: pytest.Config) -> None:
    """``pytest_configure``: the run's folder, inherited by xdist's workers through the environment."""
    if not hasattr(config, "workerinput"):
        os.environ[RUN_DIR] = tempfile.mkdtemp(prefix="mlplatform-test-run-")


def stop(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and RUN_DIR in os.environ:
        shutil.rmtree(os.environ.pop(RUN_DIR), ignore_errors=True)


def plan(stack: str, config_text: str, make: Callable[[], Plan]) -> Plan:
    """The plan of ``stack`` with the config ``config_text``: made by ``make`` once per test run."""
    key = f"{stack}-{hashlib.sha256(config_text.encode()).hexdigest()[:32]}"
    if key not in _made:
        _made[key] = _on_disk(key, make) if RUN_DIR in os.environ else make()
    return _made[key]


def _on_disk(key: str, make: Callable[[], Plan]) -> Plan:
    path = Path(os.environ[RUN_DIR]) / f"{key}.pickle"
    with _locked(path):
        if path.is_file():
            made: Plan = pickle.loads(path.read_bytes())
            return made
        made = make()
        partial = path.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(made, protocol=pickle.HIGHEST_PROTOCOL))
        partial.rename(path)
        return made


def folder(key: str, make: Callable[[Path], None], fallback: Path) -> Path:
    """A folder ``make`` filled once per test run (in ``fallback``, a fresh folder, outside a run).
    Shared: copy it before writing in or beside it."""
    if RUN_DIR not in os.environ:
        make(fallback)
        return fallback
    path = Path(os.environ[RUN_DIR]) / key
    with _locked(path):
        if not path.is_dir():
            partial = path.with_name(f"{key}.partial")
            shutil.rmtree(partial, ignore_errors=True)  # what a process that died making it left
            partial.mkdir()
            make(partial)
            partial.rename(path)
    return path


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.with_name(f"{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield
