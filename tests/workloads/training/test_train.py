"""End to end: the trainer under real torchrun (2 gloo ranks on CPU), a SIGKILLed worker, and world size 1.

Each run is a real process tree (``mlplatform train --local`` -> torchrun -> workers); assertions read the
structured log lines, the checkpoints and the model version directory the runs leave behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.first_success import first_success_lines, first_success_training, train_flag
from tests.workloads.digits_model import LOG, VERSION, trained
from tests.workloads.training.process_tree import children, kill_tree
from workloads.artifacts import ONNX_FILE, ArtifactError, load_metadata, model_version_dir
from workloads.training.checkpoint import list_checkpoints, load_checkpoint
from workloads.training.export import WEIGHTS_FILE
from workloads.training.model import Classifier, build_model
from workloads.training.tasks import Split, load_split_for

pytestmark = pytest.mark.slow

MLPLATFORM = str(Path(sys.executable).with_name("mlplatform"))
RUN_TIMEOUT_S = 120
# The shared run's model version directory and its process (output, exit status).
TwoRankRun = tuple[Path, subprocess.CompletedProcess[str]]


def mlplatform_train(output: Path, *args: str, json_log: bool = True) -> list[str]:
    """The command, with JSON log lines unless ``json_log`` is false (then the default output, text)."""
    log_format = ["--log-format", "json"] if json_log else []
    return [
        MLPLATFORM,
        "train",
        "--local",
        "--output",
        str(output),
        "--model-name",
        "digits",
        *log_format,
        *args,
    ]


def events(stdout: str) -> list[dict[str, Any]]:
    """The trainer's JSON log lines (torchrun's own lines are not JSON and are skipped)."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def named(log: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [e for e in log if e["event"] == event]


def published_model(version_dir: Path) -> tuple[Classifier, Split]:
    """A published version's weights in a fresh model (eval mode), and the split its metadata names."""
    metadata = load_metadata(version_dir)
    split = load_split_for(metadata.dataset)
    model = build_model(
        metadata.hyperparameters["model"], torch.from_numpy(split.x_train), len(split.class_names)
    )
    model.load_state_dict(torch.load(version_dir / WEIGHTS_FILE, weights_only=True))
    return model.eval(), split


# README's first-success training line (tests/first_success.py): the run the two-rank tests read.
EPOCHS = int(train_flag("epochs"))


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory: pytest.TempPathFactory) -> TwoRankRun:
    """The run the tests below read, each its own part of it: README's first-success line, 2 gloo ranks
    under torchrun with the default output a person sees, made once per test run and served by
    test_readme.py (the JSON lines are read from the SIGKILL test's 2-rank run)."""
    assert train_flag("nproc") == "2", "README's first-success run is the suite's 2-rank run"
    run = first_success_training(tmp_path_factory.mktemp("first-success"))
    assert run.returncode == 0, run.stderr[-3000:]
    output = run.folder / train_flag("output")
    done = subprocess.CompletedProcess(first_success_lines()[0], run.returncode, run.stdout, run.stderr)
    return model_version_dir(output, "digits", train_flag("model-version")), done


def test_two_gloo_ranks_learn_digits(two_rank_run: TwoRankRun) -> None:
    version_dir, done = two_rank_run
    lines = done.stdout.splitlines()
    (start,) = [line for line in lines if line.startswith("start  ")]
    assert " world_size=2 backend=gloo " in start
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == EPOCHS, "metrics are logged by rank 0 only"
    metadata = load_metadata(version_dir)
    print(f"2 gloo ranks: held-out accuracy {metadata.metrics['test_accuracy']:.4f}")
    assert metadata.world_size == 2
    assert metadata.metrics["test_accuracy"] >= 0.95
    assert metadata.dataset.split_sizes == {"train": 1258, "validation": 180, "test": 359}


def test_onnx_matches_pytorch_on_held_out_split(two_rank_run: TwoRankRun) -> None:
    """Recompute the ONNX-vs-PyTorch gap independently of the trainer, on raw (unscaled) features."""
    version_dir, _ = two_rank_run
    metadata = load_metadata(version_dir)
    model, split = published_model(version_dir)
    with torch.no_grad():
        expected = model(torch.from_numpy(split.x_test)).numpy()
    session = ort.InferenceSession(str(version_dir / ONNX_FILE), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {metadata.inputs[0].name: split.x_test})
    diff = float(np.abs(got - expected).max())
    print(f"ONNX max abs diff: recorded {metadata.metrics['onnx_max_abs_diff']}, recomputed {diff}")
    assert diff < 1e-4
    assert metadata.metrics["onnx_max_abs_diff"] < 1e-4
    assert [(t.name, t.dtype, t.shape) for t in metadata.inputs] == [("features", "float32", [None, 64])]
    assert [(t.name, t.dtype, t.shape) for t in metadata.outputs] == [("logits", "float32", [None, 10])]


def test_metadata_records_the_contract_and_hashes_verify(
    two_rank_run: TwoRankRun,
) -> None:
    version_dir, _ = two_rank_run
    metadata = load_metadata(version_dir, verify=True)
    # The MLflow Model's files (workloads/mlmodel.py) are hashed with the rest.
    mlflow_model = {"MLmodel", "conda.yaml", "python_env.yaml", "requirements.txt"}
    assert set(metadata.files) == {ONNX_FILE, WEIGHTS_FILE, *mlflow_model}
    assert metadata.dataset.name == "workloads.training.tasks:digits"
    assert metadata.hyperparameters["epochs"] == EPOCHS
    assert len(metadata.reference_histograms) == len(metadata.feature_names) == 64
    assert all(sum(h.counts) == 1258 for h in metadata.reference_histograms)
    assert metadata.code_version and metadata.class_names == [str(d) for d in range(10)]


def test_tampered_artifact_fails_verification(two_rank_run: TwoRankRun, tmp_path: Path) -> None:
    version_dir, _ = two_rank_run
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in version_dir.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    with (copy / ONNX_FILE).open("ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ArtifactError, match="does not match"):
        load_metadata(copy)


def test_existing_model_version_is_refused(two_rank_run: TwoRankRun) -> None:
    version_dir, _ = two_rank_run
    output = version_dir.parents[2]
    done = subprocess.run(
        mlplatform_train(output, "--model-version", "1"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {version_dir} already holds a model; choose a new --model-version"
    ]


def _wait_for_checkpoint(
    directory: Path, min_step: int, proc: subprocess.Popen[str], timeout_s: float
) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        steps = [step for step, _ in list_checkpoints(directory)]
        if steps and max(steps) >= min_step:
            return max(steps)
        time.sleep(0.01)
    raise AssertionError(f"no checkpoint at step >= {min_step} within {timeout_s}s")


def test_sigkilled_worker_restarts_and_resumes_from_checkpoint(tmp_path: Path) -> None:
    """Kill rank 1 with SIGKILL mid-run: torchrun restarts the group once, which resumes from a checkpoint.

    Exactly one restart: any other failure restarts a group too. This test caught one (a rank that
    finished first aborting in the interpreter's teardown, train.run); what torchrun said about each
    failure is in the assertion messages, so such a run explains itself.
    """
    args = ["--nproc", "2", "--max-restarts", "2", "--epochs", "12", "--batch-size", "32"]
    cmd = mlplatform_train(tmp_path, *args, "--checkpoint-every", "10", "--model-version", "1")
    stdout = tmp_path / "stdout.log"
    with stdout.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        try:
            seen = _wait_for_checkpoint(tmp_path / "checkpoints" / "digits" / "1", 20, proc, timeout_s=60)
            workers = [w for agent in children(proc.pid) for w in children(agent)]
            assert len(workers) == 2, f"expected 2 live workers at step {seen}, found {workers}"
            os.kill(workers[-1], signal.SIGKILL)
            _, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    failures = "\n".join(line for line in stderr.splitlines() if "exitcode" in line or "FAILED" in line)
    log = events(stdout.read_text())
    resumes = [event["step"] for event in named(log, "resumed")]
    (written,) = named(log, "model_written")
    final_step = written["metrics"]["steps"]
    print(f"killed at >= step {seen}; resumed from steps {resumes}; finished at {final_step}")
    assert len(named(log, "start")) == 2 and len(resumes) == 1, f"one restart, one resume:\n{failures}"
    assert seen <= resumes[0] < final_step, f"resumed from step {resumes[0]}, killed at >= {seen}"
    assert written["metrics"]["resumed_from_step"] == resumes[0]
    checkpoints = tmp_path / "checkpoints" / "digits" / "1"
    assert all(load_checkpoint(path) for _, path in list_checkpoints(checkpoints))
    assert not list(checkpoints.glob(".*")), "no partial checkpoint left behind"
    assert load_metadata(model_version_dir(tmp_path, "digits", "1")).metrics["test_accuracy"] >= 0.95


def test_runs_alone_without_torchrun_as_world_size_one_with_its_recipe_recorded(tmp_path: Path) -> None:
    """The exact command the inference tests use to get a real artifact (tests/workloads/digits_model.py,
    run once per test run): no torchrun, no RANK env. Its cosine schedule and gradient clipping are part
    of the recorded recipe."""
    output = trained(tmp_path)
    metadata = load_metadata(model_version_dir(output, "digits", VERSION))
    assert metadata.world_size == 1
    assert metadata.metrics["test_accuracy"] >= 0.9
    assert named(events((output / LOG).read_text()), "start")[0]["world_size"] == 1
    assert (metadata.hyperparameters["lr_schedule"], metadata.hyperparameters["clip_grad_norm"]) == (
        "cosine",
        1.0,
    )


def test_resuming_with_another_recipe_exits_2_with_one_line(tmp_path: Path) -> None:
    """An interrupted run's checkpoints resume only its own recipe; a changed --lr is refused up front."""
    cmd = mlplatform_train(tmp_path, "--epochs", "50", "--checkpoint-every", "5", "--model-version", "1")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        _wait_for_checkpoint(tmp_path / "checkpoints" / "digits" / "1", 5, proc, timeout_s=60)
    finally:
        # Interrupted as a lost machine is: all at once (killing the command's group alone left the run
        # training, orphaned, beside the rest of the suite until the test run's end).
        kill_tree(proc.pid)
        proc.wait(timeout=10)
    retry = mlplatform_train(tmp_path, "--epochs", "50", "--lr", "0.01", "--model-version", "1")
    done = subprocess.run(retry, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'checkpoints' / 'digits' / '1'} holds checkpoints of another recipe"
        " (lr=0.003); resume with the same flags or choose a new --model-version"
    ]
    assert not done.stdout


def test_local_run_prints_one_line_per_epoch_and_no_warnings(
    two_rank_run: TwoRankRun,
) -> None:
    """Default output is for people: no torchrun banner, no library warnings, a progress line per epoch
    (a checkpoint every 50 steps by default: 10 steps an epoch here)."""
    version_dir, done = two_rank_run
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    print("\n".join(lines))
    expected = ["start"]
    for epoch in range(1, EPOCHS + 1):
        expected.append(f"epoch {epoch}/{EPOCHS}")
        if epoch % 5 == 0 or epoch == EPOCHS:
            expected.append("checkpoint")
    output = Path(train_flag("output"))  # as written: relative to where it ran
    expected.append(f"model written to {model_version_dir(output, 'digits', version_dir.name)}")
    assert [line.split("  ")[0] for line in lines] == expected
    assert all("samples/s" in line for line in lines if line.startswith("epoch "))


def test_export_beyond_the_onnx_tolerance_publishes_nothing(tmp_path: Path) -> None:
    """A graph that computes other logits than the trained module (tests/workloads/training/export_hooks)
    is refused at the default tolerance, and nothing is published."""
    cmd = [sys.executable, "-m", "workloads.training", "--output", str(tmp_path), "--epochs", "1"]
    cmd += ["--model-name", "digits", "--model", "tests.workloads.training.export_hooks:skewed_mlp"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ONNX export differs from the trained model by ")
    assert line.endswith("above --onnx-tolerance 0.0001; no model version written")
    assert not (tmp_path / "models" / "digits").exists() or not any(
        (tmp_path / "models" / "digits").iterdir()
    )
