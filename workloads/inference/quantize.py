"""Dynamic int8 quantization of a model version, written as a new version beside its parent.

``<models>/<name>/<version>`` -> ``<models>/<name>/<version>-int8``, with its own ``metadata.json``
naming the parent in ``parent_version``: the parent's files and recorded hashes are never touched. The
int8 graph carries its weights inside ``model.onnx``, so the new version holds that file and metadata.

Dynamic quantization (weights int8 ahead of time, activations quantized per batch at run time) needs no
calibration data, and it pays where a CPU model is bound by reading weights: a quarter of the bytes, and
VNNI integer dot products where the CPU has them. Accuracy is measured on the exact held-out split the
parent was measured on (rebuilt from ``metadata.dataset``, content hash verified), and recorded. A
version that loses more than ``max_accuracy_drop`` (default one point) against its parent is refused:
nothing is published, and the command says by how much it missed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic

from workloads.artifacts import ONNX_FILE, ArtifactError, ModelMetadata, write_metadata
from workloads.inference.model import load_artifact
from workloads.training.hooks import HookError
from workloads.training.tasks import Split, load_split_for

INT8_SUFFIX = "-int8"
# Test accuracy (a fraction) an int8 version may lose against its parent and still be published.
MAX_ACCURACY_DROP = 0.01


def accuracy(onnx_model: bytes | Path, split: Split) -> float:
    """Top-1 accuracy of an ONNX classifier on the split's held-out rows."""
    source = onnx_model if isinstance(onnx_model, bytes) else str(onnx_model)
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    (scores,) = session.run(None, {session.get_inputs()[0].name: split.x_test})
    return float(np.mean(np.asarray(scores).argmax(axis=1) == split.y_test))


def _quantize(onnx_bytes: bytes, target: Path) -> None:
    model = onnx.load_from_string(onnx_bytes)
    # The exporter's value_info annotates weights with their pre-transpose shapes; the quantizer rewrites
    # Gemm weights and its shape inference then rejects the stale annotations. They are optional hints.
    del model.graph.value_info[:]
    quantize_dynamic(model, target, weight_type=QuantType.QInt8)


def quantize_version(
    version_dir: Path, *, overwrite: bool = False, max_accuracy_drop: float = MAX_ACCURACY_DROP
) -> ModelMetadata:
    """Quantize the version in ``version_dir``; returns the new version's metadata.

    Raises ``ArtifactError`` if the parent does not verify, is itself quantized, the target exists
    (unless ``overwrite``), or the int8 version loses more than ``max_accuracy_drop`` of test accuracy.
    """
    if not 0 <= max_accuracy_drop <= 1:
        raise ArtifactError(f"max accuracy drop {max_accuracy_drop} must lie between 0 and 1")
    parent = load_artifact(version_dir)
    meta = parent.metadata
    if meta.version.endswith(INT8_SUFFIX):
        raise ArtifactError(f"{version_dir}: already an int8 version")
    target = version_dir.with_name(f"{meta.version}{INT8_SUFFIX}")
    if target.exists() and not overwrite:
        raise ArtifactError(f"{target} already exists; pass overwrite to replace it")
    split = load_split_for(meta.dataset)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=version_dir.parent))
    try:
        _quantize(parent.onnx_bytes, staging / ONNX_FILE)
        parent_accuracy = accuracy(parent.onnx_bytes, split)
        int8_accuracy = accuracy(staging / ONNX_FILE, split)
        if parent_accuracy - int8_accuracy > max_accuracy_drop:
            raise ArtifactError(
                f"{version_dir}: int8 test accuracy {int8_accuracy:.4f} is "
                f"{(parent_accuracy - int8_accuracy) * 100:.2f} points below the parent's "
                f"{parent_accuracy:.4f}, beyond the {max_accuracy_drop * 100:.2f}-point tolerance; "
                "not published"
            )
        written = write_metadata(staging, _int8_metadata(meta, parent_accuracy, int8_accuracy))
        # mkdtemp creates an owner-only directory; the server reads it as another (non-root) user.
        staging.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def _int8_metadata(parent: ModelMetadata, parent_accuracy: float, int8_accuracy: float) -> ModelMetadata:
    return parent.model_copy(
        update={
            "version": f"{parent.version}{INT8_SUFFIX}",
            "parent_version": parent.version,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "hyperparameters": {
                **parent.hyperparameters,
                "quantization": {
                    "method": "onnxruntime.quantization.quantize_dynamic",
                    "weight_type": "int8",
                    "onnxruntime": ort.__version__,
                },
            },
            "metrics": {
                "test_accuracy": int8_accuracy,
                "parent_test_accuracy": parent_accuracy,
                "test_accuracy_delta": int8_accuracy - parent_accuracy,
            },
            "files": {},
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.inference.quantize", description=__doc__)
    parser.add_argument("version_dir", type=Path, help="<output>/models/<name>/<version>")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing <version>-int8")
    parser.add_argument(
        "--max-accuracy-drop",
        type=float,
        default=MAX_ACCURACY_DROP,
        help=f"refuse if test accuracy falls by more than this fraction (default {MAX_ACCURACY_DROP})",
    )
    args = parser.parse_args(argv)
    try:
        written = quantize_version(
            args.version_dir, overwrite=args.overwrite, max_accuracy_drop=args.max_accuracy_drop
        )
    except (ArtifactError, HookError) as exc:
        print(exc, file=sys.stderr)
        return 2
    acc, delta = written.metrics["test_accuracy"], written.metrics["test_accuracy_delta"]
    print(f"{written.name} {written.version}: test accuracy {acc:.4f} ({delta:+.4f} vs the parent)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
