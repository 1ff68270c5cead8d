"""The suite's reaper (tests/reaper.py): what a test run starts dies with it, even when pytest is killed.

A pytest run is started as a subprocess on a test that starts what the suite's fixtures start: a server
in its own session that starts a child of its own (as ``mlflow server`` starts uvicorn). Killed with
SIGKILL (what a time limit or the OOM killer does: no teardown runs), neither survives it. A test that
returns leaving those and a process with an environment of its own (as some tests give one) running
has all three ended at the run's normal end, and named.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests import reaper

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 60.0

CONFTEST = """
from tests import reaper


def pytest_configure(config):
    reaper.start(config)


def pytest_unconfigure(config):
    reaper.stop(config)
"""

# A server in its own session that starts a child (and for `leak` a process with a bare environment);
# their pids go to PIDS once all run, then the test waits to be killed, or returns leaving them.
INNER = """
import os, subprocess, sys, time

SLEEP = "import time; time.sleep(600)"
SERVER = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {SLEEP!r}]); {SLEEP}"


def _children(pid):
    return [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]


def _start(bare):
    server = subprocess.Popen([sys.executable, "-c", SERVER], start_new_session=True)
    while not _children(server.pid):
        time.sleep(0.05)
    pids = [server.pid, *_children(server.pid)]
    if bare:
        pids.append(subprocess.Popen([sys.executable, "-c", SLEEP], env={"PATH": "/usr/bin:/bin"}).pid)
    with open(os.environ["PIDS"] + ".tmp", "w") as out:
        out.write(" ".join(map(str, pids)))
    os.rename(os.environ["PIDS"] + ".tmp", os.environ["PIDS"])


def test_killed():
    _start(bare=False)
    time.sleep(600)


def test_leak():
    _start(bare=True)
"""


def _run(tmp_path: Path, test: str) -> tuple[subprocess.Popen[str], list[int]]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER))
    pids_file = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PIDS": str(pids_file)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"test_inner.py::{test}"]
    inner = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + BUDGET_S
    while not pids_file.exists():
        assert inner.poll() is None, f"the inner run ended {inner.returncode}: {inner.communicate()[1]}"
        assert time.monotonic() < deadline, f"the inner test started nothing in {BUDGET_S}s"
        time.sleep(0.05)
    return inner, [int(pid) for pid in pids_file.read_text().split()]


def _running(pid: int) -> bool:
    stat = reaper._stat(pid)
    return stat is not None and stat[1] != "Z"


def _survivors(pids: list[int]) -> list[int]:
    """The pids still running once they all ended or ``BUDGET_S`` passed."""
    deadline = time.monotonic() + BUDGET_S
    while True:
        left = [pid for pid in pids if _running(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def test_a_killed_pytest_leaves_no_process_behind(tmp_path: Path) -> None:
    inner, pids = _run(tmp_path, "test_killed")
    assert len(pids) == 2 and all(_running(pid) for pid in pids), pids
    # The server's process group and the bare process are beyond a kill of pytest's own group.
    os.kill(inner.pid, signal.SIGKILL)
    inner.wait(BUDGET_S)
    assert _survivors(pids) == []


def test_a_normal_end_ends_what_a_test_leaked_and_names_it(tmp_path: Path) -> None:
    inner, pids = _run(tmp_path, "test_leak")
    _, stderr = inner.communicate(timeout=BUDGET_S)
    assert inner.returncode == 0, stderr
    assert _survivors(pids) == []
    assert "reaper: ended 3 process(es) the test run left running" in stderr, stderr
