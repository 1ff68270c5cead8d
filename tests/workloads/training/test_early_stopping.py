"""Validation and early stopping: the rule itself, then real runs (2 gloo ranks under torchrun).

The recipe ``--min-delta 10`` makes the stop epoch known in advance: the first epoch improves on no
record at all, and no later epoch can lower the validation loss by 10, so with ``--patience 3`` the run
stops after epoch 3 (0-based) while the model is still getting better: the published weights (epoch 0)
differ from the last ones. Checkpoints every 40 steps (20 batches per epoch per rank) fall at the end
of epoch 1, mid-patience, and at the stop.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn.functional import cross_entropy

from tests.workloads.training.test_train import (
    RUN_TIMEOUT_S,
    events,
    mlplatform_train,
    named,
    published_model,
)
from workloads.artifacts import load_metadata, model_version_dir
from workloads.training.checkpoint import checkpoint_path, list_checkpoints, load_checkpoint
from workloads.training.config import RECIPE_FILE
from workloads.training.export import WEIGHTS_FILE
from workloads.training.train import EarlyStopping

REPO = Path(__file__).resolve().parents[3]
STOPPING = ["--nproc", "2", "--epochs", "20", "--patience", "3", "--min-delta", "10", "--batch-size", "32"]
STOPPING += ["--checkpoint-every", "40", "--keep-checkpoints", "10", "--model-version", "1"]


def test_patience_counts_epochs_without_a_large_enough_drop() -> None:
    record = EarlyStopping()
    for epoch, loss in enumerate([1.0, 0.95, 0.92, 0.5, 0.49, float("nan")]):
        record = record.after(epoch, loss, accuracy=0.5, min_delta=0.05)
    # 0.95 and 0.92 are within 0.05 of 1.0; 0.5 is better; 0.49 is not better enough; nan never is.
    assert (record.best_epoch, record.best_loss, record.bad_epochs) == (3, 0.5, 2)
    assert record.exhausted(2) and not record.exhausted(3)
    assert not record.exhausted(0), "patience 0 never stops"


def _run(output: Path, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        mlplatform_train(output, *args), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return events(done.stdout)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    output = tmp_path_factory.mktemp("stopped")
    return output, _run(output, *STOPPING)


def _validation_loss(version_dir: Path) -> float:
    """The published weights' validation loss, recomputed here in one process from the metadata's split."""
    model, split = published_model(version_dir)
    with torch.no_grad():
        logits = model(torch.from_numpy(split.x_val))
    return float(cross_entropy(logits, torch.from_numpy(split.y_val)))


@pytest.mark.slow
def test_both_ranks_stop_at_the_epoch_patience_runs_out(
    stopped_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    """Exit 0 within the timeout is both ranks leaving together: a rank that trained on would wait in the
    next epoch's all-reduce for a peer that already exported and left."""
    output, log = stopped_run
    epochs = named(log, "epoch")
    assert [e["epoch"] for e in epochs] == [0, 1, 2, 3]
    assert [e["best_epoch"] for e in epochs] == [0, 0, 0, 0]
    (stop,) = named(log, "early_stop")
    assert (stop["epoch"], stop["best_epoch"], stop["patience"]) == (3, 0, 3)
    metrics = load_metadata(model_version_dir(output, "digits", "1")).metrics
    assert (metrics["epochs_trained"], metrics["best_epoch"], metrics["steps"]) == (4, 0, 80)
    assert metrics["validation_loss"] == pytest.approx(epochs[0]["validation_loss"], abs=1e-6)
    assert load_metadata(model_version_dir(output, "digits", "1")).hyperparameters["patience"] == 3


@pytest.mark.slow
def test_the_published_model_is_the_best_epochs_not_the_last(
    stopped_run: tuple[Path, list[dict[str, Any]]],
) -> None:
    output, log = stopped_run
    version_dir = model_version_dir(output, "digits", "1")
    first, *_, last = (e["validation_loss"] for e in named(log, "epoch"))
    recomputed = _validation_loss(version_dir)
    print(f"validation loss: epoch 0 {first}, last {last}, published weights {recomputed}")
    assert recomputed == pytest.approx(first, rel=1e-5)
    assert last < first - 0.1, "the model kept improving, so the last weights are not the best-recorded"
    published = torch.load(version_dir / WEIGHTS_FILE, weights_only=True)
    final = load_checkpoint(checkpoint_path(output / "checkpoints" / "digits" / "1", 80))
    assert all(torch.equal(published[k], final["best_model"][k]) for k in published)
    assert not all(torch.equal(published[k], final["model"][k]) for k in published)


@pytest.mark.slow
def test_resume_mid_patience_continues_the_count_bit_identically(
    stopped_run: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """What a crash after the step-40 checkpoint leaves (that checkpoint and the recipe): the rerun must
    remember one epoch without improvement and the best weights it never trained itself, stop at the same
    epoch, and end bit-identical to the uninterrupted run."""
    output, _ = stopped_run
    source, target = output / "checkpoints" / "digits" / "1", tmp_path / "checkpoints" / "digits" / "1"
    target.mkdir(parents=True)
    for name in (RECIPE_FILE, checkpoint_path(source, 40).name):
        shutil.copy2(source / name, target / name)
    log = _run(tmp_path, *STOPPING)
    (resumed,) = named(log, "resumed")
    assert (resumed["step"], resumed["epoch"]) == (40, 2)
    assert [e["epoch"] for e in named(log, "epoch")] == [2, 3], "without the count it would train epoch 4"
    assert named(log, "early_stop")[0]["epoch"] == 3
    got = torch.load(model_version_dir(tmp_path, "digits", "1") / WEIGHTS_FILE, weights_only=True)
    want = torch.load(model_version_dir(output, "digits", "1") / WEIGHTS_FILE, weights_only=True)
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert [s for s, _ in list_checkpoints(target)] == [40, 80]
    got_final, want_final = (
        load_checkpoint(checkpoint_path(target, 80)),
        load_checkpoint(checkpoint_path(source, 80)),
    )
    assert got_final["early_stopping"] == want_final["early_stopping"]
    assert all(torch.equal(got_final["model"][k], want_final["model"][k]) for k in want_final["model"])


@pytest.mark.slow
def test_the_stop_is_decided_on_validation_never_on_the_test_split(tmp_path: Path) -> None:
    """A loader's own validation set whose loss rises as the model learns: the run stops after patience
    runs out, although the test split (true labels) improves every epoch and would never have stopped it."""
    dataset = "tests.workloads.training.validation_hooks:digits_with_mislabelled_validation"
    cmd = [sys.executable, "-m", "workloads.training", "--output", str(tmp_path), "--epochs", "20"]
    cmd += ["--patience", "2", "--dataset", dataset, "--model-name", "digits", "--log-format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    log = events(done.stdout)
    losses = [e["validation_loss"] for e in named(log, "epoch")]
    assert len(losses) == 3 and losses == sorted(losses), losses
    assert named(log, "early_stop")[0]["best_epoch"] == 0
    metadata = load_metadata(model_version_dir(tmp_path, "digits", "1"))
    assert metadata.dataset.split_sizes == {"train": 1438, "validation": 200, "test": 359}
    assert metadata.metrics["test_accuracy"] >= 0.8 and not math.isnan(metadata.metrics["test_loss"])
