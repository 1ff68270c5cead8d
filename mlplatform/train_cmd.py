"""``mlplatform train --local --nproc N [trainer flags]``: the training entry point under torchrun, here.

The same ``workloads.training`` module the cluster Job runs, launched by torchrun in standalone mode (a
c10d rendezvous on a free local port) with ``--max-restarts``, so a crashed worker restarts the group and
training resumes from the newest checkpoint. Trainer flags are checked here first, so bad input exits 2
with one line before any process starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Annotated, Any

import typer

from mlplatform.errors import exit_with
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
    try:
        preflight(parse_args(ctx.args))
    except ConfigError as exc:
        problems.append(str(exc))
    if problems:
        exit_with(problems)
    # torchrun prints a banner when it sets OMP_NUM_THREADS=1 for each worker itself; share the cores.
    threads = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // nproc))}
    env = {**threads, **os.environ, **RESTART_SAFE_ENV}
    completed = subprocess.run(torchrun_command(nproc, max_restarts, ctx.args), env=env, check=False)
    raise typer.Exit(completed.returncode)
