"""``mlplatform train --local --nproc N [trainer flags]``: the training entry point under torchrun, here.

The same ``workloads.training`` module the cluster Job runs, launched by torchrun in standalone mode (a
c10d rendezvous on a free local port) with ``--max-restarts``, so a crashed worker restarts the group and
training resumes from the newest checkpoint. Trainer flags are checked here first, so bad input exits 2
with one line before any process starts.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from types import FrameType
from typing import Annotated, Any

import typer

from mlplatform.errors import exit_with, warn
from workloads.training.config import ConfigError, parse_args, preflight

# Trainer flags (--epochs, --output, ...) are not typer options: they pass through to the trainer, which
# owns and validates them. Register with `app.command("train", context_settings=TRAIN_CONTEXT)(train)`.
TRAIN_CONTEXT: dict[str, Any] = {"allow_extra_args": True, "ignore_unknown_options": True}

# torch 2.13 + gloo: restarted ranks otherwise read a SIGKILLed worker's address from the shared
# rendezvous store and fail with "Connection refused" or hang (pytorch#135712).
RESTART_SAFE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def torchrun_command(
    nproc: int, max_restarts: int, args: list[str], module: str = "workloads.training"
) -> list[str]:
    """torchrun of ``module`` from this interpreter's environment, so workers import the same packages."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "-m",
        module,
        *args,
    ]


def train(
    ctx: typer.Context,
    local: Annotated[bool, typer.Option("--local", help="Run on this machine (the only mode here).")] = False,
    nproc: Annotated[int, typer.Option("--nproc", help="Worker processes (ranks).")] = 1,
    max_restarts: Annotated[int, typer.Option("--max-restarts", help="Group restarts after a failure.")] = 3,
) -> None:
    """Train under torchrun on this machine; other flags go to the trainer (see `-h` for them)."""
    problems = []
    if not local:
        problems.append("only --local runs here; cluster training is the Job the stack deploys")
    if nproc < 1:
        problems.append(f"--nproc must be at least 1, got {nproc}")
    if max_restarts < 0:
        problems.append(f"--max-restarts must not be negative, got {max_restarts}")
    # The workers run `python -m workloads.training` from this directory, which puts it first on their
    # sys.path: resolve the hooks here as they will (a console script's path has no such entry).
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        preflight(parse_args(ctx.args))
    except ConfigError as exc:
        problems.append(str(exc))
    if problems:
        exit_with(problems)
    cpus = available_cpus()
    if nproc > cpus:
        warn([f"--nproc {nproc} is more than the {cpus} CPUs here: ranks share cores, which is slower"])
    # torchrun prints a banner when it sets OMP_NUM_THREADS=1 for each worker itself; share the cores.
    threads = {"OMP_NUM_THREADS": str(max(1, cpus // nproc))}
    env = {**threads, **os.environ, **RESTART_SAFE_ENV}
    again = shlex.join(["mlplatform", "train", "--local", "--nproc", str(nproc), *ctx.args])
    raise typer.Exit(run_stoppable(torchrun_command(nproc, max_restarts, ctx.args), env, again))


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity, as a container's cpuset limits it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_stoppable(command: list[str], env: dict[str, str], again: str) -> int:
    """Run torchrun to its end, or stop it on Ctrl-C or SIGTERM with one line saying how to resume.

    torchrun and its workers run in a session of their own, so the terminal's Ctrl-C reaches only this
    process, which stops them all with SIGTERM (a second signal: SIGKILL). What they print on stderr
    while stopping (each rank's and torchrun's tracebacks) is dropped; the checkpoints written so far
    are whole (temp file and rename), and the same command resumes from the newest."""
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, start_new_session=True)
    stopped: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        stopped.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM if len(stopped) == 1 else signal.SIGKILL)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if not stopped:
                sys.stderr.buffer.write(line)
                sys.stderr.buffer.flush()
        code = process.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not stopped:
        return code
    name = signal.Signals(stopped[0]).name
    print(f"error: training stopped by {name}; resume from its newest checkpoint: {again}", file=sys.stderr)
    return 128 + stopped[0]
