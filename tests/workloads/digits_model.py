"""The digits model version the inference and registry tests serve, trained once per test run
(tests/once.py) by the trainer alone, as a user runs it without torchrun (world size 1, no ``RANK``):
``python -m workloads.training`` with a cosine schedule and gradient clipping, its JSON log kept beside
the output. tests/workloads/training/test_train.py checks that run itself; the one run serves both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import once

REPO = Path(__file__).resolve().parents[2]
MODEL_NAME = "digits"
VERSION = "1"
# Beside the output's models/ and checkpoints/: the run's stdout, one JSON line per event.
LOG = "train.log"
RECIPE = ["--epochs", "10", "--lr-schedule", "cosine", "--clip-grad-norm", "1.0"]


def _train(output: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    command = [sys.executable, "-m", "workloads.training", "--output", str(output), *RECIPE]
    command += ["--model-name", MODEL_NAME, "--model-version", VERSION, "--log-format", "json"]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (output / LOG).write_text(done.stdout)


def trained(fallback: Path) -> Path:
    """The run's output folder (``fallback`` outside a test run); shared: copy it before writing in it."""
    return once.folder("digits-model", _train, fallback)
