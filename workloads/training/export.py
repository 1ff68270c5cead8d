"""Write a trained model as a model version directory (``workloads/artifacts.py`` is the contract).

The directory is assembled under a hidden name of its own beside its final place and renamed into place
only once weights, ONNX graph and metadata are all written, so readers never see a half-written version.
A version is never overwritten: the rename fails where one exists. The first writer wins, and a later one
of the same recipe on the same data (a restart after the version was written but before it was
registered; or a replacement pod while the old one still runs, as on a partitioned node) yields to it and
goes on with the published version; one of another recipe is refused.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import warnings
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import torch

from workloads import confidence
from workloads.artifacts import (
    ONNX_FILE,
    FeatureHistogram,
    ModelMetadata,
    TensorSpec,
    load_metadata,
    write_metadata,
)
from workloads.mlmodel import write_mlflow_model
from workloads.training import logs
from workloads.training.checkpoint import fsync_path
from workloads.training.config import RunRefusedError, TrainConfig
from workloads.training.model import Classifier
from workloads.training.tasks import Features, Split

WEIGHTS_FILE = "model.pt"
INPUT_NAME = "features"
OUTPUT_NAME = "logits"
HISTOGRAM_BINS = 10
# ONNX element types a model of ours can carry, by the names TensorSpec allows.
_ONNX_DTYPES: dict[int, Literal["float32", "float16", "int64"]] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.INT64: "int64",
}


def export_onnx(model: Classifier, path: Path, n_features: int) -> None:
    """Export with torch's dynamo exporter, batch dimension dynamic, weights inside the one file.

    Two messages the exporter prints on every export are not about this model, and are silenced where
    they come from: its op registry warns once per torchvision op when torchvision is absent (we use
    none), and torch.export's own pytree code trips its ``LeafSpec`` deprecation (torch 2.13).
    """
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    example = torch.zeros(2, n_features)
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
        )
        torch.onnx.export(
            model,
            (example,),
            path,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes=({0: torch.export.Dim("batch")},),
            external_data=False,
            verbose=False,
        )


def tensor_specs(path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Read input/output names, dtypes and shapes from the exported graph itself (symbolic dim -> None)."""
    graph = onnx.load(str(path), load_external_data=False).graph

    def spec(value: onnx.ValueInfoProto) -> TensorSpec:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        return TensorSpec(name=value.name, dtype=_ONNX_DTYPES[tensor.elem_type], shape=shape)

    return [spec(v) for v in graph.input], [spec(v) for v in graph.output]


def onnx_logits(path: Path, x: Features) -> npt.NDArray[np.float32]:
    """The exported graph's logits on ``x``, as ONNX Runtime (the servers' default engine) computes them."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (logits,) = session.run([OUTPUT_NAME], {INPUT_NAME: x})
    return np.asarray(logits, dtype=np.float32)


def onnx_max_abs_diff(model: Classifier, logits: npt.NDArray[np.float32], x: Features) -> float:
    """Largest absolute logit difference between ONNX Runtime's ``logits`` and PyTorch on ``x``."""
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(x)).numpy()
    return float(np.abs(logits - torch_logits).max())


def reference_histograms(split: Split) -> list[FeatureHistogram]:
    """Per-feature histograms of the training split: the baseline inference compares live traffic to."""
    histograms = []
    for column, name in enumerate(split.feature_names):
        counts, edges = np.histogram(split.x_train[:, column], bins=HISTOGRAM_BINS)
        histograms.append(FeatureHistogram(feature=name, bin_edges=edges.tolist(), counts=counts.tolist()))
    return histograms


def code_version() -> str:
    """The image's build-time version if set, else the git commit of this checkout, else the package's."""
    if version := os.environ.get("MLPLATFORM_CODE_VERSION"):
        return version
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return f"git:{described.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        try:
            return f"ml-platform=={importlib_metadata.version('ml-platform')}"
        except importlib_metadata.PackageNotFoundError:
            return "unknown"


def write_model_version(
    config: TrainConfig, split: Split, model: Classifier, metrics: dict[str, float], world_size: int
) -> ModelMetadata:
    """Write weights, ONNX and metadata, check ONNX against PyTorch, and publish the version by rename."""
    final = config.version_dir
    # A name of this writer's own: a second writer of the same version must not delete or mix into it.
    staging = final.with_name(f".{final.name}.{os.getpid()}-{os.urandom(4).hex()}.partial")
    staging.mkdir(parents=True)
    try:
        written = _assemble(config, split, model, metrics, world_size, staging)
        for path in (*staging.iterdir(), staging):
            fsync_path(path)
        try:
            staging.rename(final)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            return _published_before(config, split, final)
        fsync_path(final.parent)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _published_before(config: TrainConfig, split: Split, final: Path) -> ModelMetadata:
    """The version another writer published first: this run's result if it is the same recipe on the same
    data (the first writer's is kept, bit for bit); else a refusal, since versions are immutable."""
    published = load_metadata(final)
    if published.hyperparameters == config.hyperparameters() and published.dataset == split.info():
        logs.log_event("model_published_before", logging.WARNING, path=str(final), created=published.created)
        return published
    raise RunRefusedError(
        f"{final} already holds a model of another recipe or dataset; versions are immutable, "
        "choose a new --model-version"
    )


def _assemble(
    config: TrainConfig,
    split: Split,
    model: Classifier,
    metrics: dict[str, float],
    world_size: int,
    staging: Path,
) -> ModelMetadata:
    """Weights, ONNX graph (checked against the model), MLmodel and metadata, written into ``staging``."""
    model = model.to("cpu").eval()
    torch.save(model.state_dict(), staging / WEIGHTS_FILE)
    onnx_path = staging / ONNX_FILE
    export_onnx(model, onnx_path, len(split.feature_names))
    inputs, outputs = tensor_specs(onnx_path)
    test_logits = onnx_logits(onnx_path, split.x_test)
    diff = onnx_max_abs_diff(model, test_logits, split.x_test)
    if not diff <= config.onnx_tolerance:  # nan included
        raise RunRefusedError(
            f"ONNX export differs from the trained model by {diff:.3g} (max abs logit) on the test split,"
            f" above --onnx-tolerance {config.onnx_tolerance:g}; no model version written"
        )
    write_mlflow_model(staging, inputs, outputs)
    return write_metadata(
        staging,
        ModelMetadata(
            name=config.model_name,
            version=config.model_version,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            code_version=code_version(),
            dataset=split.info(),
            hyperparameters=config.hyperparameters(),
            world_size=world_size,
            metrics={**metrics, "onnx_max_abs_diff": diff},
            inputs=inputs,
            outputs=outputs,
            feature_names=list(split.feature_names),
            class_names=list(split.class_names),
            reference_histograms=reference_histograms(split),
            # The served graph's own confidences on the test split: the estimate's calibration.
            confidence_reference=confidence.reference(test_logits, split.y_test, test_logits.shape[1]),
        ),
    )
