"""wrk as the serving benchmark's second load generator: an independent C client beside our asyncio one.

``benchmarks/serve_bench.py --driver wrk`` (or ``both``) drives every server with wrk (Debian package
``wrk``, found on PATH) as well as, or instead of, its own client, so that no figure depends on one
client's costs on the 2 cores it shares with the server.

wrk (github.com/wg/wrk, 4.1.0) runs a LuaJIT script per thread (its ``SCRIPTING`` file): ``request()``
returns the raw HTTP request each time, and ``done(summary, latency, requests)`` receives the run's
summary (``duration`` in microseconds, ``requests`` completed, ``errors`` by kind: ``connect``, ``read``,
``write``, ``status`` for codes above 399, ``timeout``) and the latency statistics, whose
``latency:percentile(p)`` is in microseconds (wrk's ``scripts/report.lua`` prints them the same way).
wrk's latency distribution is the one its own summary and ``--latency`` print: after the run it adds, for
every latency of at least twice the mean interval between one connection's requests, samples at that
latency less one, two, ... intervals (``stats_correct``, src/stats.c, called from src/wrk.c), so a stall
counts as the requests it held up. Its p99 weighs a server's stalls more than the own client's does.
The script written here cycles through the same pre-encoded requests the own client sends (one row each,
on kept-alive connections) and prints one line that ``parse`` reads.

One wrk thread drives all the connections (``-t1``): like the own client's one event loop it takes at
most one of the cores, which leaves the server the most CPU wrk can. wrk has no warm-up phase and reads
durations in whole seconds (``-d 3s``), so a level is one untimed run for the warm-up, then the measured
run, each rounded up to whole seconds.

Pure apart from ``run_level`` (which starts wrk): tests/benchmarks/test_wrk_driver.py checks the script
and the parser, and runs the real wrk against a small server when it is installed.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.serve_compare import Measurement

WRK = "wrk"
DRIVERS = ("own", "wrk", "both")
# A response slower than this counts as a timeout error in wrk (its default is 2 s): generous, so a slow
# server is measured slow rather than as failing.
TIMEOUT_S = 10
RESULT_PREFIX = "serve_bench-wrk:"
_RESULT = re.compile(
    re.escape(RESULT_PREFIX)
    + r" requests=(?P<requests>\d+) duration_us=(?P<duration_us>\d+) status_errors=(?P<status>\d+)"
    r" socket_errors=(?P<socket>\d+) p50_us=(?P<p50>\d+) p99_us=(?P<p99>\d+)$",
    re.MULTILINE,
)


class WrkMissingError(Exception):
    """``--driver wrk`` asked for, and no wrk on PATH."""


class WrkFailedError(Exception):
    """wrk ran but gave no result (it exited non-zero, or printed no result line)."""


def find_wrk() -> str | None:
    """wrk's path on PATH, or None."""
    return shutil.which(WRK)


def missing_line() -> str:
    return "--driver: wrk is not on PATH (Debian: apt-get install wrk)"


def drivers(choice: str, wrk_path: str | None) -> tuple[list[str], str | None]:
    """The drivers a ``--driver`` value runs, and a note to print when ``both`` runs without wrk; raises
    ``WrkMissingError`` when wrk alone is asked for and absent."""
    if choice == "own":
        return ["own"], None
    if wrk_path is None:
        if choice == "wrk":
            raise WrkMissingError(missing_line())
        return ["own"], f"{missing_line()}: the wrk-driven figures are skipped"
    return (["wrk"], None) if choice == "wrk" else (["own", "wrk"], None)


def lua_string(raw: bytes) -> str:
    """A Lua string literal of exactly these bytes (printable ASCII as is, every other byte and the
    quote and backslash as a three-digit decimal escape: Lua's long brackets would turn CR LF into LF)."""
    out = []
    for byte in raw:
        out.append(chr(byte) if 32 <= byte < 127 and byte not in (34, 92) else f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def script(requests: list[bytes]) -> str:
    """The wrk script: each connection's next request is the next pre-encoded one, in turn; ``done``
    prints the result line (latency in microseconds)."""
    if not requests:
        raise ValueError("wrk needs at least one request to send")
    listed = ",\n".join(f"  {lua_string(r)}" for r in requests)
    return f"""-- written by benchmarks/wrk_driver.py: pre-encoded requests, sent in turn
local requests = {{
{listed}
}}
local i = 0

request = function()
  i = i % #requests + 1
  return requests[i]
end

done = function(summary, latency, _)
  local e = summary.errors
  io.write(string.format(
    "{RESULT_PREFIX} requests=%.0f duration_us=%.0f status_errors=%.0f socket_errors=%.0f"
    .. " p50_us=%.0f p99_us=%.0f\\n",
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def whole_seconds(seconds: float) -> int:
    """wrk's ``-d`` takes whole seconds: the duration rounded up, at least one."""
    return max(1, math.ceil(seconds))


def command(wrk_path: str, script_path: Path, port: int, concurrency: int, seconds: float) -> list[str]:
    return [
        wrk_path,
        "-t1",
        f"-c{concurrency}",
        f"-d{whole_seconds(seconds)}s",
        f"--timeout={TIMEOUT_S}s",
        "-s",
        str(script_path),
        f"http://127.0.0.1:{port}/",
    ]


@dataclass(frozen=True)
class WrkResult:
    requests: int  # completed, errors included
    seconds: float
    status_errors: int  # answers above 399
    socket_errors: int  # connect, read, write, timeout
    p50_ms: float
    p99_ms: float

    def measurement(self, rows_per_run: float | None = None) -> Measurement:
        """Throughput counts the successful answers only, as the own client does."""
        return Measurement(
            throughput=(self.requests - self.status_errors) / self.seconds,
            p50_ms=self.p50_ms,
            p99_ms=self.p99_ms,
            errors=self.status_errors + self.socket_errors,
            rows_per_run=rows_per_run,
        )


def parse(output: str) -> WrkResult:
    """The result line ``script``'s ``done`` printed; raises ``WrkFailedError`` when there is none or no
    request completed."""
    found = _RESULT.search(output)
    if found is None:
        raise WrkFailedError(f"wrk printed no result line: {output.strip()[-500:]!r}")
    requests = int(found["requests"])
    if requests == 0:
        raise WrkFailedError(f"wrk completed no request: {output.strip()[-500:]!r}")
    return WrkResult(
        requests=requests,
        seconds=int(found["duration_us"]) / 1e6,
        status_errors=int(found["status"]),
        socket_errors=int(found["socket"]),
        p50_ms=int(found["p50"]) / 1000,
        p99_ms=int(found["p99"]) / 1000,
    )


def _invoke(wrk_path: str, script_path: Path, port: int, concurrency: int, seconds: float) -> str:
    """One wrk run's output; raises ``WrkFailedError`` when wrk exits non-zero."""
    argv = command(wrk_path, script_path, port, concurrency, seconds)
    done = subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=whole_seconds(seconds) + 2 * TIMEOUT_S
    )
    if done.returncode != 0:
        raise WrkFailedError(
            f"wrk exited with {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}"
        )
    return done.stdout


def run(wrk_path: str, script_path: Path, port: int, concurrency: int, seconds: float) -> WrkResult:
    """One wrk run; raises ``WrkFailedError`` when it gives no result."""
    return parse(_invoke(wrk_path, script_path, port, concurrency, seconds))


def run_level(
    wrk_path: str, port: int, requests: list[bytes], concurrency: int, warmup_s: float, measure_s: float
) -> WrkResult:
    """One load level: an untimed warm-up run, then the measured one, on fresh connections each. The
    warm-up's figures are not read, so it need not complete a request: a slow server's first answers
    (the 50M-weight model, unbatched, 32 connections, on shared cores) may all come after it."""
    with tempfile.TemporaryDirectory(prefix="serve-bench-wrk-") as tmp:
        path = Path(tmp) / "requests.lua"
        path.write_text(script(requests))
        _invoke(wrk_path, path, port, concurrency, warmup_s)
        return run(wrk_path, path, port, concurrency, measure_s)
