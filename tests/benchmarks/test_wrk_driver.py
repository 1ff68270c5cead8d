"""The serving benchmark's wrk driver (benchmarks/wrk_driver.py): which drivers a ``--driver`` value runs,
that wrk sends exactly the pre-encoded requests, and that its result line is read back, errors included.

The tests that need wrk run the real one (Debian's ``wrk``) for one second against a small server in this
process; where wrk is not installed they skip, saying so (CI does not install it: the benchmark is never
part of the suite's requirements)."""

from __future__ import annotations

import itertools
import os
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.serve_compare import V1
from benchmarks.wrk_driver import (
    RESULT_PREFIX,
    WrkFailedError,
    WrkMissingError,
    drivers,
    find_wrk,
    parse,
    run,
    run_level,
    script,
)
from tests.http_stub import InThread

REPO = Path(__file__).resolve().parents[2]
WRK = find_wrk()
needs_wrk = pytest.mark.skipif(WRK is None, reason="wrk is not on PATH (Debian: apt-get install wrk)")
# Two requests that differ in their bytes, one of which the server refuses (a 503, counted by wrk).
ACCEPTED = V1.request([0.0, 1.5, -2.25, 16.0])
REFUSED = V1.request([9.0, 9.0, 9.0, 9.0])


def test_own_runs_alone_and_wrk_alone_needs_wrk() -> None:
    assert drivers("own", None) == (["own"], None)
    assert drivers("wrk", "/usr/bin/wrk") == (["wrk"], None)
    assert drivers("both", "/usr/bin/wrk") == (["own", "wrk"], None)
    with pytest.raises(WrkMissingError, match="wrk is not on PATH"):
        drivers("wrk", None)


def test_both_without_wrk_runs_the_own_client_and_says_wrk_is_skipped() -> None:
    names, note = drivers("both", None)
    assert names == ["own"]
    assert note is not None and "wrk is not on PATH" in note and "skipped" in note


def test_asking_for_wrk_without_it_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Bad input (the developer guide): one clear line naming the flag, exit 2, nothing run."""
    env = dict(os.environ, PATH=str(tmp_path))  # an empty directory: no wrk
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "serve_bench.py"), "--driver", "wrk"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --driver: wrk is not on PATH (Debian: apt-get install wrk)"
    ]
    assert done.stdout == ""


def test_a_run_without_a_result_line_or_a_completed_request_is_a_failure() -> None:
    with pytest.raises(WrkFailedError, match="no result line"):
        parse("unable to connect to 127.0.0.1:1 Connection refused\n")
    empty = (
        f"{RESULT_PREFIX} requests=0 duration_us=1000000 status_errors=0 socket_errors=0 p50_us=0 p99_us=0"
    )
    with pytest.raises(WrkFailedError, match="no request"):
        parse(empty)


def test_the_result_line_is_read_in_whole_microseconds_or_not_at_all() -> None:
    """Whole numbers only: a latency over a second once came out of ``%g`` as ``2.40999e+06`` and was
    read as 2.4 µs."""
    line = f"{RESULT_PREFIX} requests=63 duration_us=3016403 status_errors=1 socket_errors=2 p50_us=1077640"
    result = parse(f"Running 3s test\n{line} p99_us=2409988\nRequests/sec: 20.89\n")
    assert (result.requests, result.status_errors, result.socket_errors) == (63, 1, 2)
    assert (result.seconds, result.p50_ms, result.p99_ms) == (3.016403, 1077.64, 2409.988)
    with pytest.raises(WrkFailedError, match="no result line"):
        parse(f"{line} p99_us=2.40999e+06\n")


class _Recorder(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[bytes] = []
        self.lock = threading.Lock()
        # Every answer waits until then (time.monotonic()): a server slower than a warm-up run.
        self.answers_from = 0.0


class _Handler(socketserver.StreamRequestHandler):
    """Keep-alive HTTP/1.1: reads each request whole (head, then Content-Length bytes), records it, and
    answers 200, or 503 to ``REFUSED``."""

    server: _Recorder

    def handle(self) -> None:
        while head := self._head():
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            request = head + self.rfile.read(length)
            with self.server.lock:
                self.server.received.append(request)
            status = b"503 Service Unavailable" if request == REFUSED else b"200 OK"
            threading.Event().wait(max(0.0, self.server.answers_from - time.monotonic()))
            self.wfile.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\n{}")

    def _head(self) -> bytes:
        head = b""
        while (line := self.rfile.readline()) not in (b"", b"\r\n"):
            head += line
        return head + b"\r\n" if head else b""


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    with InThread(_Recorder()) as server:
        yield server


@needs_wrk
def test_wrk_sends_the_pre_encoded_requests_in_turn_and_counts_refusals(
    recorder: _Recorder, tmp_path: Path
) -> None:
    path = tmp_path / "requests.lua"
    path.write_text(script([ACCEPTED, REFUSED]))
    assert WRK is not None
    result = run(WRK, path, recorder.server_address[1], concurrency=1, seconds=1)
    received = recorder.received
    # Byte for byte what the own client sends (CR LF kept), in turn on the one connection (where the turn
    # starts is wrk's: it calls request() once before the run to check the script, src/wrk.c).
    assert len(received) >= 10
    assert set(received) == {ACCEPTED, REFUSED}
    assert all(a != b for a, b in itertools.pairwise(received))
    # wrk counts what it completed: every request the server answered but at most the one in flight.
    assert len(received) - 1 <= result.requests <= len(received)
    assert abs(result.status_errors - result.requests / 2) <= 1
    assert result.socket_errors == 0
    assert 0.9 <= result.seconds <= 1.5
    assert 0 < result.p50_ms <= result.p99_ms
    measured = result.measurement()
    assert measured.throughput == pytest.approx((result.requests - result.status_errors) / result.seconds)
    assert measured.errors == result.status_errors


@needs_wrk
def test_a_level_s_warm_up_may_complete_no_request_its_measured_run_must(recorder: _Recorder) -> None:
    """Issue 42: the naive server on the 50M-weight model answered none of 32 connections within wrk's
    1 s warm-up run, and that warm-up's empty result left the server out of the whole model. Planted: no
    answer before 1.3 s from now; the warm-up run (1 s) completes none, the measured run (1 s) many."""
    assert WRK is not None
    recorder.answers_from = time.monotonic() + 1.3
    result = run_level(WRK, recorder.server_address[1], [ACCEPTED], 4, warmup_s=1, measure_s=1)
    assert result.requests > 4 and result.status_errors == 0
