"""Reduced-precision versions (int8, bf16): a new version beside its parent, accuracy measured, and
published only within a point of the parent's."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from workloads.artifacts import ArtifactError, load_metadata, sha256_file
from workloads.inference import engines, quantize
from workloads.inference.quantize import quantize_version


def test_int8_version_names_its_parent_and_keeps_accuracy(model_dir: Path, int8_dir: Path) -> None:
    parent, int8 = load_metadata(model_dir), load_metadata(int8_dir)  # both verify their hashes
    assert int8_dir.parent == model_dir.parent
    assert (int8.version, int8.parent_version) == ("1-int8", "1")
    assert int8.dataset == parent.dataset
    assert int8.hyperparameters["quantization"]["weight_type"] == "int8"
    assert int8.metrics["parent_test_accuracy"] == pytest.approx(parent.metrics["test_accuracy"], abs=1e-6)
    assert abs(int8.metrics["test_accuracy_delta"]) <= 0.01
    # The label-free estimate's reference is its own graph's, at int8 (docs/lifecycle.md): its right rows
    # are its own test accuracy.
    reference = int8.confidence_reference
    assert reference is not None
    rows, right = sum(map(sum, reference.rows)), sum(map(sum, reference.correct))
    assert (rows, right / rows) == (parent.dataset.split_sizes["test"], int8.metrics["test_accuracy"])
    assert (int8_dir / "model.onnx").stat().st_size < (model_dir / "model.onnx").stat().st_size


def test_the_parent_is_untouched(model_dir: Path, int8_dir: Path) -> None:
    parent = load_metadata(model_dir)
    assert parent.parent_version is None
    assert {name: sha256_file(model_dir / name) for name in parent.files} == parent.files


def test_refuses_to_overwrite_or_to_quantize_twice(model_dir: Path, int8_dir: Path) -> None:
    with pytest.raises(ArtifactError, match="already exists"):
        quantize_version(model_dir)
    with pytest.raises(ArtifactError, match=r"already a reduced-precision version \(int8\)"):
        quantize_version(int8_dir)


def test_refuses_a_parent_whose_files_do_not_match(model_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "models" / "digits" / "1"
    shutil.copytree(model_dir, copy)
    with (copy / "model.onnx").open("ab") as fh:
        fh.write(b"\0")
    with pytest.raises(ArtifactError, match="sha256"):
        quantize_version(copy)
    assert not (copy.parent / "1-int8").exists()


def test_refuses_to_publish_an_int8_version_that_loses_accuracy(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quantization that wrecks the weights (here: every weight zeroed after a real quantization) is
    measured on the held-out split and refused, and nothing appears beside the parent."""
    copy = tmp_path / "models" / "digits" / "1"
    shutil.copytree(model_dir, copy)
    real = quantize._quantize

    def wrecked(onnx_bytes: bytes, target: Path) -> None:
        real(onnx_bytes, target)
        model = onnx.load(target)
        for tensor in model.graph.initializer:
            zero = numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(tensor)), tensor.name)
            tensor.CopyFrom(zero)
        onnx.save(model, target)

    monkeypatch.setattr(quantize, "_quantize", wrecked)
    with pytest.raises(ArtifactError, match=r"points below the parent's .* beyond the 1.00-point tolerance"):
        quantize_version(copy)
    assert sorted(p.name for p in copy.parent.iterdir()) == ["1"]
    # A tolerance that admits the loss publishes it: the threshold is the user's to set.
    assert quantize_version(copy, max_accuracy_drop=1.0).parent_version == "1"


def test_a_tolerance_outside_0_to_1_is_one_line_and_exit_2(model_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "models" / "digits" / "1"
    shutil.copytree(model_dir, copy)
    done = subprocess.run(
        [sys.executable, "-m", "workloads.inference.quantize", str(copy), "--max-accuracy-drop", "2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr.strip()) == (2, "max accuracy drop 2.0 must lie between 0 and 1")


def test_a_bf16_version_records_precision_engine_and_accuracy(model_dir: Path, bf16_dir: Path) -> None:
    parent, bf16 = load_metadata(model_dir), load_metadata(bf16_dir)
    assert (bf16.version, bf16.parent_version, bf16.precision, bf16.engine) == (
        "1-bf16",
        "1",
        "bf16",
        "openvino",
    )
    assert bf16.hyperparameters["inference_precision"]["hint"] == "bf16"
    assert bf16.metrics["parent_test_accuracy"] == pytest.approx(parent.metrics["test_accuracy"], abs=1e-6)
    assert abs(bf16.metrics["test_accuracy_delta"]) <= 0.01
    # The same graph: OpenVINO computes it at bf16 when asked.
    assert sha256_file(bf16_dir / "model.onnx") == parent.files["model.onnx"]


def test_refuses_to_publish_a_bf16_version_that_drifts(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planted drift: the bf16 graph's weights perturbed until accuracy falls; refused in one line, with
    the same tolerance as int8, and nothing appears beside the parent."""
    if (reason := engines.unavailable("openvino", "bf16")) is not None:
        pytest.skip(reason)
    copy = tmp_path / "models" / "digits" / "1"
    shutil.copytree(model_dir, copy)

    def drifting(onnx_bytes: bytes, target: Path) -> None:
        model = onnx.load_from_string(onnx_bytes)
        rng = np.random.default_rng(0)
        for tensor in model.graph.initializer:
            weights = numpy_helper.to_array(tensor)
            noisy = weights + rng.normal(scale=3 * float(np.std(weights)), size=weights.shape)
            tensor.CopyFrom(numpy_helper.from_array(noisy.astype(weights.dtype), tensor.name))
        onnx.save(model, target)

    monkeypatch.setattr(quantize, "_bf16_graph", drifting)
    with pytest.raises(ArtifactError) as refused:
        quantize_version(copy, precision="bf16")
    assert re.fullmatch(
        r".*/1: bf16 test accuracy 0\.\d{4} is \d+\.\d\d points below the parent's 0\.\d{4}, "
        r"beyond the 1\.00-point tolerance; not published",
        str(refused.value),
    )
    assert sorted(p.name for p in copy.parent.iterdir()) == ["1"]


def test_a_bf16_version_is_not_measured_without_native_bf16(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "models" / "digits" / "1"
    shutil.copytree(model_dir, copy)
    monkeypatch.setattr(engines, "native_bf16", lambda: False)
    with pytest.raises(
        ArtifactError, match="cannot measure a bf16 version here: this CPU has no native bf16"
    ):
        quantize_version(copy, precision="bf16")
    assert sorted(p.name for p in copy.parent.iterdir()) == ["1"]
