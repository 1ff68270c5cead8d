"""Reduced-precision versions of a model version (int8, bf16), each written as a new version beside its
parent.

``<models>/<name>/<version>`` -> ``<models>/<name>/<version>-int8`` (or ``-bf16``), with its own
``metadata.json`` naming the parent in ``parent_version`` and recording its ``precision``, the
``engine`` it runs on and its measured accuracy: the parent's files and recorded hashes are never
touched. The new version holds its ``model.onnx`` and metadata.

- int8: dynamic quantization (weights int8 ahead of time, activations quantized per batch at run time)
  needs no calibration data, and it pays where a CPU model is bound by reading weights: a quarter of the
  bytes, and VNNI integer dot products where the CPU has them. Runs on ONNX Runtime.
- bf16: the parent's graph, run by OpenVINO's CPU runtime at ``INFERENCE_PRECISION_HINT`` bf16 (half the
  bytes read per weight, AVX512-BF16 / AMX-BF16 arithmetic). Published only from a machine whose CPU has
  native bf16, so its accuracy is measured on the arithmetic that will serve it; a server without
  OpenVINO or native bf16 refuses to load it (``model.verify_model``) rather than serve it at fp32.

Accuracy is measured on the exact held-out split the parent was measured on (rebuilt from
``metadata.dataset``, content hash verified), and recorded. A version that loses more than
``max_accuracy_drop`` (default one point) against its parent is refused: nothing is published, and the
command says by how much it missed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

from workloads import confidence
from workloads.artifacts import (
    ONNX_FILE,
    ArtifactError,
    ConfidenceReference,
    Engine,
    ModelMetadata,
    write_metadata,
)
from workloads.inference.cpu import available_cpus
from workloads.inference.engines import EngineChoice, open_runner, unavailable
from workloads.inference.model import load_artifact
from workloads.training.hooks import HookError
from workloads.training.tasks import Split, load_split_for

Reduced = Literal["int8", "bf16"]
# The engine each reduced precision runs on.
ENGINES: dict[Reduced, Engine] = {"int8": "onnxruntime", "bf16": "openvino"}
# Test accuracy (a fraction) a reduced-precision version may lose against its parent and still be published.
MAX_ACCURACY_DROP = 0.01


def test_logits(
    onnx_model: bytes | Path, split: Split, precision: Reduced | Literal["fp32"] = "fp32"
) -> npt.NDArray[np.float32]:
    """An ONNX classifier's logits on the split's held-out rows, run on the engine that serves
    ``precision`` (ONNX Runtime for fp32 and int8)."""
    onnx_bytes = onnx_model if isinstance(onnx_model, bytes) else onnx_model.read_bytes()
    engine: Engine = "onnxruntime" if precision == "fp32" else ENGINES[precision]
    run = open_runner(onnx_bytes, EngineChoice(engine, precision, available_cpus(), False))
    return np.asarray(run(split.x_test), dtype=np.float32)


def accuracy(logits: npt.NDArray[np.float32], split: Split) -> float:
    """Top-1 accuracy of held-out ``logits`` against the split's labels."""
    return float(np.mean(logits.argmax(axis=1) == split.y_test))


def _quantize(onnx_bytes: bytes, target: Path) -> None:
    model = onnx.load_from_string(onnx_bytes)
    # The exporter's value_info annotates weights with their pre-transpose shapes; the quantizer rewrites
    # Gemm weights and its shape inference then rejects the stale annotations. They are optional hints.
    del model.graph.value_info[:]
    quantize_dynamic(model, target, weight_type=QuantType.QInt8)


def _bf16_graph(onnx_bytes: bytes, target: Path) -> None:
    """The parent's graph as it is: OpenVINO computes it in bf16 when asked (``INFERENCE_PRECISION_HINT``)."""
    target.write_bytes(onnx_bytes)


def _write_graph(precision: Reduced, onnx_bytes: bytes, target: Path) -> None:
    (_quantize if precision == "int8" else _bf16_graph)(onnx_bytes, target)


def quantize_version(
    version_dir: Path,
    *,
    precision: Reduced = "int8",
    overwrite: bool = False,
    max_accuracy_drop: float = MAX_ACCURACY_DROP,
) -> ModelMetadata:
    """Publish the version in ``version_dir`` at ``precision``; returns the new version's metadata.

    Raises ``ArtifactError`` if the parent does not verify, is itself at a reduced precision, the target
    exists (unless ``overwrite``), the precision's engine cannot run here (bf16 without OpenVINO or a CPU
    with native bf16), or the new version loses more than ``max_accuracy_drop`` of test accuracy.
    """
    if not 0 <= max_accuracy_drop <= 1:
        raise ArtifactError(f"max accuracy drop {max_accuracy_drop} must lie between 0 and 1")
    parent = load_artifact(version_dir)
    meta = parent.metadata
    if meta.precision != "fp32":
        raise ArtifactError(f"{version_dir}: already a reduced-precision version ({meta.precision})")
    reason = unavailable(ENGINES[precision], precision)
    if reason is not None:
        raise ArtifactError(f"{version_dir}: cannot measure a {precision} version here: {reason}")
    target = version_dir.with_name(f"{meta.version}-{precision}")
    if target.exists() and not overwrite:
        raise ArtifactError(f"{target} already exists; pass overwrite to replace it")
    split = load_split_for(meta.dataset)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=version_dir.parent))
    try:
        _write_graph(precision, parent.onnx_bytes, staging / ONNX_FILE)
        parent_accuracy = accuracy(test_logits(parent.onnx_bytes, split), split)
        reduced = test_logits(staging / ONNX_FILE, split, precision)
        reduced_accuracy = accuracy(reduced, split)
        if parent_accuracy - reduced_accuracy > max_accuracy_drop:
            raise ArtifactError(
                f"{version_dir}: {precision} test accuracy {reduced_accuracy:.4f} is "
                f"{(parent_accuracy - reduced_accuracy) * 100:.2f} points below the parent's "
                f"{parent_accuracy:.4f}, beyond the {max_accuracy_drop * 100:.2f}-point tolerance; "
                "not published"
            )
        written = write_metadata(
            staging,
            _reduced_metadata(
                meta,
                precision,
                parent_accuracy,
                reduced_accuracy,
                # The label-free estimate's calibration on this version's own arithmetic.
                confidence.reference(reduced, split.y_test, reduced.shape[1]),
            ),
        )
        # mkdtemp creates an owner-only directory; the server reads it as another (non-root) user.
        staging.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def _how(precision: Reduced) -> dict[str, Any]:
    """How the reduced version computes, recorded in its hyperparameters."""
    if precision == "int8":
        return {
            "quantization": {
                "method": "onnxruntime.quantization.quantize_dynamic",
                "weight_type": "int8",
                "onnxruntime": ort.__version__,
            }
        }
    import openvino

    return {"inference_precision": {"engine": "openvino", "hint": "bf16", "openvino": openvino.__version__}}


def _reduced_metadata(
    parent: ModelMetadata,
    precision: Reduced,
    parent_accuracy: float,
    accuracy: float,
    confidence_reference: ConfidenceReference,
) -> ModelMetadata:
    return parent.model_copy(
        update={
            "confidence_reference": confidence_reference,
            "version": f"{parent.version}-{precision}",
            "parent_version": parent.version,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "precision": precision,
            "engine": ENGINES[precision],
            "hyperparameters": {**parent.hyperparameters, **_how(precision)},
            "metrics": {
                "test_accuracy": accuracy,
                "parent_test_accuracy": parent_accuracy,
                "test_accuracy_delta": accuracy - parent_accuracy,
            },
            "files": {},
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.inference.quantize", description=__doc__)
    parser.add_argument("version_dir", type=Path, help="<output>/models/<name>/<version>")
    parser.add_argument(
        "--precision",
        choices=list(ENGINES),
        default="int8",
        help="int8 (ONNX Runtime) or bf16 (OpenVINO, on a CPU with native bf16); default int8",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing <version>-<precision>")
    parser.add_argument(
        "--max-accuracy-drop",
        type=float,
        default=MAX_ACCURACY_DROP,
        help=f"refuse if test accuracy falls by more than this fraction (default {MAX_ACCURACY_DROP})",
    )
    args = parser.parse_args(argv)
    try:
        written = quantize_version(
            args.version_dir,
            precision=args.precision,
            overwrite=args.overwrite,
            max_accuracy_drop=args.max_accuracy_drop,
        )
    except (ArtifactError, HookError) as exc:
        print(exc, file=sys.stderr)
        return 2
    acc, delta = written.metrics["test_accuracy"], written.metrics["test_accuracy_delta"]
    print(f"{written.name} {written.version}: test accuracy {acc:.4f} ({delta:+.4f} vs the parent)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
