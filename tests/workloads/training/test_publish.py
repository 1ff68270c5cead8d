"""Publishing a model version: the first writer wins, a writer of the same recipe yields to it, another
recipe is refused, and no writer deletes or mixes into another's files.

Two writers of one version happen: a restart after the version was written but before its registration
completed (with a registry, preflight lets that restart through to register the version), and a
replacement pod started while the old one still runs (a pod on a partitioned node keeps running after it
is marked for deletion; the Job's podFailurePolicy makes the controller wait only for a *terminated* pod,
Kubernetes API ``JobSpec.podReplacementPolicy``). Found on a GPU machine: a run killed through its
torchrun agent left its worker running (torch's elastic agent starts workers in their own session,
``subprocess_handler.py``), and the restarted run then read the other writer's half-written ONNX file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from workloads.artifacts import ONNX_FILE, ModelMetadata, load_metadata
from workloads.training import export
from workloads.training.config import RunRefusedError, TrainConfig, parse_args
from workloads.training.model import Classifier, build_model
from workloads.training.tasks import Split, load_split

Writer = Callable[..., ModelMetadata]


def _run(output: Path, *flags: str) -> tuple[TrainConfig, Split, Classifier]:
    config = parse_args(["--output", str(output), "--model-name", "digits", *flags])
    split = load_split(config.dataset, config.split_seed)
    torch.manual_seed(config.seed)
    return config, split, build_model(config.model, torch.from_numpy(split.x_train), len(split.class_names))


def _leftovers(output: Path) -> list[str]:
    return sorted(p.name for p in (output / "models" / "digits").iterdir() if p.name.endswith(".partial"))


def test_a_restart_after_publishing_keeps_the_version_and_another_recipe_is_refused(tmp_path: Path) -> None:
    config, split, model = _run(tmp_path)
    first = export.write_model_version(config, split, model, {"test_accuracy": 0.5}, 1)
    onnx_bytes = (config.version_dir / ONNX_FILE).read_bytes()

    again = export.write_model_version(config, split, model, {"test_accuracy": 0.6}, 1)
    assert again == first == load_metadata(config.version_dir)

    other, _, other_model = _run(tmp_path, "--lr", "0.01")
    with pytest.raises(RunRefusedError, match="another recipe or dataset; versions are immutable"):
        export.write_model_version(other, split, other_model, {}, 1)

    assert load_metadata(config.version_dir) == first
    assert (config.version_dir / ONNX_FILE).read_bytes() == onnx_bytes
    assert _leftovers(tmp_path) == []


def test_a_writer_that_publishes_while_another_assembles_wins_and_the_other_yields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, split, model = _run(tmp_path)
    real_export = export.export_onnx
    published: list[ModelMetadata] = []

    def second_writer_publishes_first(*args: object) -> None:
        # The first writer is mid-assembly (its weights are written); the second runs start to finish.
        if not published:
            monkeypatch.setattr(export, "export_onnx", real_export)
            published.append(export.write_model_version(config, split, model, {"writer": 2.0}, 1))
        real_export(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(export, "export_onnx", second_writer_publishes_first)
    first_writer = export.write_model_version(config, split, model, {"writer": 1.0}, 1)

    assert published[0].metrics["writer"] == 2.0
    assert first_writer == published[0] == load_metadata(config.version_dir)
    assert _leftovers(tmp_path) == []
