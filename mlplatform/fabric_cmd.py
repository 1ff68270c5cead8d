"""``mlplatform fabric-test --local --nproc N``: the fabric test (all-reduce bus bandwidth) here.

The same ``workloads.fabric_test`` program the cluster runs as a Job on each fabric pool, under torchrun
on this machine with gloo: a check that the measurement itself works, and a baseline for the loopback.
On the cluster it runs with NCCL over the pool's fabric and fails below the fabric's floor.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from typing import Annotated

import typer

from mlplatform.errors import exit_with
from mlplatform.train_cmd import RESTART_SAFE_ENV, torchrun_command


def _size_problems(text: str) -> list[str]:
    """Why ``text`` is no --max-bytes, saying which part is wrong: the unit, the number, or the size."""
    # The train extra's module (torch imported only where it measures): only once the flags are read.
    from workloads.fabric_test import MIB, SIZE_UNITS, parse_size

    unit = text.lstrip("0123456789.")
    if unit == text:
        return [f"--max-bytes {text!r}: not a size; give a whole number of {', '.join(SIZE_UNITS)} or bytes"]
    if unit and unit not in SIZE_UNITS:
        return [f"--max-bytes {text!r}: unit {unit!r} is not one of {', '.join(SIZE_UNITS)} (or give bytes)"]
    try:
        size = parse_size(text)
    except (argparse.ArgumentTypeError, ValueError):
        return [f"--max-bytes {text!r}: a whole number of {', '.join(SIZE_UNITS)} or bytes, a multiple of 4"]
    if size < MIB:
        return [f"--max-bytes {text!r}: at least 1MiB (the sweep starts at 1MiB and doubles)"]
    return []


def fabric_test(
    local: Annotated[bool, typer.Option("--local", help="Run on this machine (the only mode here).")] = False,
    nproc: Annotated[int, typer.Option("--nproc", help="Ranks taking part in the all-reduce.")] = 2,
    max_bytes: Annotated[
        str, typer.Option("--max-bytes", help="Largest message (e.g. 64MiB, 1GiB); from 1MiB, doubling.")
    ] = "64MiB",
    iters: Annotated[int, typer.Option("--iters", help="Timed all-reduces per size.")] = 10,
) -> None:
    """Measure all-reduce algbw and busbw per message size under torchrun on this machine."""
    problems = []
    if not local:
        problems.append("only --local runs here; on the cluster the fabric test is the Job the stack deploys")
    if nproc < 2:
        problems.append(f"--nproc must be at least 2 (an all-reduce of one rank moves nothing), got {nproc}")
    if iters < 1:
        problems.append(f"--iters must be at least 1, got {iters}")
    problems += _size_problems(max_bytes)
    args = ["--max-bytes", max_bytes, "--iters", str(iters)]
    if problems:
        exit_with(problems)
    env = {**os.environ, **RESTART_SAFE_ENV, "OMP_NUM_THREADS": "1"}
    command = torchrun_command(nproc, 0, args, module="workloads.fabric_test")
    raise typer.Exit(subprocess.run(command, env=env, check=False).returncode)
