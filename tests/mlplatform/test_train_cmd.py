"""``mlplatform train``: bad flags and input exit 2 with one clear line, before any process is launched.

Flag cases run the real app in-process (typer's runner); one case runs the installed console script.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform.cli import app

pytestmark = pytest.mark.slow

MLPLATFORM = str(Path(sys.executable).with_name("mlplatform"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--nproc", "2"], "error: only --local runs here; cluster training is the Job the stack deploys"),
        (["--local", "--nproc", "0"], "error: --nproc must be at least 1, got 0"),
        (["--local", "--epochs", "0"], "error: argument --epochs: invalid positive integer value: '0'"),
        (["--local", "--lr", "nan"], "error: argument --lr: invalid non-negative number value: 'nan'"),
        (
            ["--local", "--patience", "-1"],
            "error: argument --patience: invalid non-negative integer value: '-1'",
        ),
        (
            ["--local", "--dataset", "digits"],
            "error: argument --dataset: 'digits' is not of the form module:function",
        ),
        (["--local", "--model-version", "../x"], "error: argument --model-version: '../x' must be 1-63 of"),
        (["--local", "--no-such-flag", "1"], "error: unrecognized arguments: --no-such-flag 1"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], expected: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["train", *args, "--output", str(tmp_path)])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(expected)
    assert not any(tmp_path.iterdir()), "nothing is launched or written on bad input"


def test_console_script_reports_bad_input_the_same_way(tmp_path: Path) -> None:
    cmd = [MLPLATFORM, "train", "--local", "--batch-size", "-4", "--output", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: argument --batch-size: invalid positive integer value: '-4'"
    ]


def test_trainer_rejects_a_hook_it_cannot_import(tmp_path: Path) -> None:
    """Past flag parsing (form is fine), the trainer itself reports an unimportable hook: exit 2, one line."""
    cmd = [
        sys.executable,
        "-m",
        "workloads.training",
        "--output",
        str(tmp_path),
        "--model",
        "no_such_pkg:net",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --model: cannot load 'no_such_pkg:net': No module named 'no_such_pkg'"
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--dataset", "nosuch.module:fn"],
            "error: --dataset: cannot load 'nosuch.module:fn': No module named 'nosuch'",
        ),
        (
            ["--model", "workloads.training.config:DEFAULT_MODEL"],
            "error: --model: 'workloads.training.config:DEFAULT_MODEL' is not callable",
        ),
        # A hook with the wrong signature: refused in pre-flight, not by every rank and then torchrun's
        # restarts (the trainer calls --dataset with nothing, --model with n_features and n_classes).
        (
            ["--model", "workloads.training.tasks:digits"],
            "error: --model: 'workloads.training.tasks:digits' takes () but the trainer calls it with "
            "(n_features, n_classes): too many positional arguments",
        ),
        (
            ["--dataset", "workloads.training.model:mlp"],
            "error: --dataset: 'workloads.training.model:mlp' takes (n_features, n_classes) but the trainer "
            "calls it with (): missing a required argument: 'n_features'",
        ),
        (
            ["--model", "tests.workloads.training.validation_hooks:keyword_only_model"],
            "error: --model: 'tests.workloads.training.validation_hooks:keyword_only_model' takes "
            "(*, n_features, n_classes=...)",
        ),
    ],
)
def test_hooks_are_loaded_before_anything_starts(args: list[str], expected: str, tmp_path: Path) -> None:
    """Past the form check: an unimportable or non-callable hook is one line, exit 2, not a torchrun
    failure report from every rank."""
    output = tmp_path / "out"
    cmd = [MLPLATFORM, "train", "--local", "--nproc", "2", *args, "--output", str(output)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(expected)
    assert not done.stdout and not output.exists()


def test_unwritable_output_is_refused_before_training(tmp_path: Path) -> None:
    """Checked by creating it: a path under a regular file cannot be created even by root."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(app, ["train", "--local", "--output", str(blocker / "out")])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --output {blocker / 'out'} is not writable: Not a directory"
    ]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_run_ends_with_one_line_saying_how_to_resume(tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C (SIGINT to the command) or SIGTERM mid-run: every rank and torchrun stop, none of their
    tracebacks reach the user, and one line gives the command that resumes from the newest checkpoint;
    the exit status is 128 + the signal, as a shell reports a process it stopped."""
    output = tmp_path / "out"
    args = ["--output", str(output), "--epochs", "500", "--checkpoint-every", "5", "--model-name", "stop"]
    process = subprocess.Popen(
        [MLPLATFORM, "train", "--local", "--nproc", "2", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:  # the first epochs are done and checkpointed
        if line.startswith("epoch 3/"):
            break
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + sig
    assert stderr.splitlines() == [
        f"error: training stopped by {sig.name}; resume from its newest checkpoint: "
        f"mlplatform train --local --nproc 2 {' '.join(args)}"
    ]
    assert list((output / "checkpoints" / "stop").glob("*/step-*.ckpt"))


def test_more_ranks_than_cpus_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlplatform import train_cmd

    started: list[list[str]] = []

    def run(command: list[str], env: dict[str, str], again: str) -> int:
        started.append(command)
        return 0

    monkeypatch.setattr(train_cmd, "available_cpus", lambda: 2)
    monkeypatch.setattr(train_cmd, "run_stoppable", run)
    result = CliRunner().invoke(app, ["train", "--local", "--nproc", "3", "--output", str(tmp_path)])
    assert result.exit_code == 0 and started
    assert result.stderr.splitlines() == [
        "warning: --nproc 3 is more than the 2 CPUs here: ranks share cores, which is slower"
    ]
    quiet = CliRunner().invoke(app, ["train", "--local", "--nproc", "2", "--output", str(tmp_path)])
    assert quiet.exit_code == 0 and quiet.stderr == ""
