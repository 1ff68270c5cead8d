"""Every process a test run starts dies with the run, even when pytest itself is killed.

A test's own teardown stops what it started, but a pytest killed by a time limit, SIGKILL or the OOM
killer runs no teardown, and its servers (MLflow and its uvicorn child, inference servers, torchrun's
workers, each in its own session) would keep running. So the first pytest process of a run (not an
xdist worker) marks the run and starts a reaper beside it:

- the mark is ``MLPLATFORM_TEST_RUN=<uuid>`` in ``os.environ``, which every process started from then on
  inherits (xdist's workers, the servers, the grandchildren they start themselves);
- the reaper runs in its own session (a Ctrl-C or a kill of pytest's process group does not reach it),
  and every ``POLL_S`` records the descendants of the pytest process (pid and start time, from /proc),
  which covers a child started with an environment of its own (at a normal end all of them; at a kill,
  those that ran for a poll);
- when pytest ends, by any means, the reaper sees the end of its pipe (or pytest gone from /proc) and
  ends every recorded descendant and every process carrying the mark: SIGTERM, then SIGKILL after
  ``GRACE_S``. At a normal end that is nothing, as each fixture stops its own; what it did end it names
  on stderr, as a leak to fix.

Linux only (/proc).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

MARK = "MLPLATFORM_TEST_RUN"
POLL_S = 0.5
GRACE_S = 5.0
# How long a normal end waits for the reaper's sweep, so `make test` goes on with nothing left behind.
SWEEP_BUDGET_S = 30.0

_REAPER = pytest.StashKey[tuple[subprocess.Popen[bytes], int]]()


def start(config: pytest.Config) -> None:
    """``pytest_configure``: mark the run and start its reaper (in the first pytest process only)."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller's reaper covers it
        return
    os.environ[MARK] = uuid.uuid4().hex
    read_end, write_end = os.pipe()
    reaper = subprocess.Popen(
        [sys.executable, __file__, os.environ[MARK], str(os.getpid())],
        stdin=read_end,
        start_new_session=True,
    )
    os.close(read_end)
    config.stash[_REAPER] = (reaper, write_end)


def stop(config: pytest.Config) -> None:
    """``pytest_unconfigure``: end the run; the reaper sweeps what is left, and this waits for it."""
    if _REAPER not in config.stash:
        return
    reaper, write_end = config.stash[_REAPER]
    os.close(write_end)
    try:
        reaper.wait(SWEEP_BUDGET_S)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time in clock ticks) of a live process, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces and parentheses: the fields follow the last one.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _descendants(root: int) -> dict[int, int]:
    """pid → start time of every living descendant of ``root``."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None and stat[1] != "Z":
            children.setdefault(stat[0], []).append(pid)
            started[pid] = stat[2]
    found: dict[int, int] = {}
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found[pid] = started[pid]
        stack.extend(children.get(pid, []))
    return found


def _marked(mark: str) -> dict[int, int]:
    """pid → start time of every living process whose environment carries the run's mark."""
    needle = f"{MARK}={mark}".encode()
    found: dict[int, int] = {}
    for pid in _pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        stat = _stat(pid)
        if needle in environ.split(b"\0") and stat is not None and stat[1] != "Z":
            found[pid] = stat[2]
    return found


def _alive(pid: int, started: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z" and stat[2] == started


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
    except OSError:
        return "?"


def sweep(targets: dict[int, int]) -> list[str]:
    """SIGTERM every target still alive (the same pid and start time), SIGKILL what outlives ``GRACE_S``;
    returns the command lines of what it signalled."""
    targets = {pid: started for pid, started in targets.items() if pid != os.getpid()}
    ended = [_command(pid) for pid, started in targets.items() if _alive(pid, started)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, started in targets.items():
            if _alive(pid, started):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(_alive(p, s) for p, s in targets.items()):
            time.sleep(0.05)
    return ended


def watch(mark: str, pytest_pid: int) -> None:
    """The reaper: record pytest's descendants until pytest ends, then end them and the marked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is pytest's to handle; the sweep follows it
    pytest_started = (_stat(pytest_pid) or (0, "", -1))[2]
    seen: dict[int, int] = {}
    while _alive(pytest_pid, pytest_started):
        seen |= _descendants(pytest_pid)
        ready, _, _ = select.select([sys.stdin.fileno()], [], [], POLL_S)
        if ready and not os.read(sys.stdin.fileno(), 1024):
            break  # pytest closed its end: a normal end, or its death
    seen |= _descendants(pytest_pid)  # at a normal end pytest still runs: all it started, however recent
    ended = sweep(seen | _marked(mark))
    if ended:
        lines = "\n".join(f"  {command}" for command in ended)
        print(f"reaper: ended {len(ended)} process(es) the test run left running:\n{lines}", file=sys.stderr)


if __name__ == "__main__":
    watch(sys.argv[1], int(sys.argv[2]))
