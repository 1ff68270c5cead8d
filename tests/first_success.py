"""README's first-success training line, run as written once per test run (tests/once.py).

Two modules read it: tests/mlplatform/test_readme.py serves the model it trained and asks it for
predictions with README's own lines, and tests/workloads/training/test_train.py's two-rank tests read
what the run printed and published (a local run under torchrun, 2 gloo ranks, the default output). One
torchrun run of 2 ranks costs about 15 CPU-s; the two used to train a run each.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mlplatform.plan import REPO_ROOT
from tests import once

RUN_TIMEOUT_S = 600


def first_success_lines() -> list[str]:
    """The README's first-success block: train, serve in the background, curl."""
    text = (REPO_ROOT / "README.md").read_text()
    block = text.split("First success on this machine", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def train_flag(name: str) -> str:
    """The value of ``--name`` on README's train line."""
    train = first_success_lines()[0]
    found = re.search(rf"\s--{re.escape(name)}\s+(\S+)", train)
    assert found, f"README's train line has no --{name}: {train}"
    return found.group(1)


@dataclass(frozen=True)
class TrainRun:
    """The train line's run: ``folder`` is where it ran (the checkout's ``.venv`` and ``examples``
    linked in, as beside a clone; the model under its ``--output``); shared, so copy before writing."""

    folder: Path
    returncode: int
    stdout: str
    stderr: str


def _train(folder: Path) -> None:
    for name in (".venv", "examples"):
        (folder / name).symlink_to(REPO_ROOT / name)
    done = subprocess.run(
        first_success_lines()[0],
        check=False,
        shell=True,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    (folder / "train.stdout").write_text(done.stdout)
    (folder / "train.stderr").write_text(done.stderr)
    (folder / "train.returncode").write_text(str(done.returncode))


def first_success_training(fallback: Path) -> TrainRun:
    """README's train line, run once per test run (in ``fallback`` outside one)."""
    folder = once.folder("readme-first-success", _train, fallback)
    return TrainRun(
        folder=folder,
        returncode=int((folder / "train.returncode").read_text()),
        stdout=(folder / "train.stdout").read_text(),
        stderr=(folder / "train.stderr").read_text(),
    )
