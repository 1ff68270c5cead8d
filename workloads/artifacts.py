"""The model artifact contract between training (writes) and inference (reads).

Layout: ``<output>/models/<name>/<version>/`` holding ``model.onnx``, the weights and ``metadata.json``.
``metadata.json`` records the sha256 of every other file in the directory, so a reader can prove it
serves exactly what training produced; derived versions (``<version>-int8``) get their own directory and
metadata naming their parent instead of rewriting the parent's files.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

METADATA_FILE = "metadata.json"
ONNX_FILE = "model.onnx"

# The arithmetic a version was published (and its accuracy measured) at, and the engines that run it.
Precision = Literal["fp32", "int8", "bf16"]
Engine = Literal["onnxruntime", "openvino"]


class ArtifactError(Exception):
    """A model version directory that is missing, incomplete or does not match its recorded hashes."""


class DatasetInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    sha256: str
    split_seed: int
    split_sizes: dict[str, int]


class TensorSpec(BaseModel):
    """One ONNX graph input or output, as a client must shape it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    dtype: Literal["float32", "float16", "int64"]
    # None marks a dynamic dimension (the batch).
    shape: list[int | None]


class FeatureHistogram(BaseModel):
    """Reference distribution of one input feature on the training split, for drift (PSI) detection."""

    model_config = ConfigDict(extra="forbid")

    feature: str
    bin_edges: list[float]
    counts: list[int]


class ConfidenceReference(BaseModel):
    """The version's own graph on its held-out test split, binned by predicted class and top-class
    probability (workloads/confidence.py): the reference the label-free accuracy estimate is calibrated
    on (workloads/delivery/estimate.py), and the bins the servers count live predictions in."""

    model_config = ConfigDict(extra="forbid")

    split: Literal["test"] = "test"
    # Over the top-class probability (softmax of the logits), ascending, 0.0 first and 1.0 last.
    bin_edges: list[float]
    # [predicted class][bin]: test rows predicted as that class with their top probability in that bin.
    rows: list[list[int]]
    # [predicted class][bin]: of those rows, the ones whose label is the predicted class.
    correct: list[list[int]]

    @model_validator(mode="after")
    def _shapes(self) -> ConfidenceReference:
        bins = len(self.bin_edges) - 1
        if bins < 1 or self.bin_edges[0] != 0.0 or self.bin_edges[-1] != 1.0:
            raise ValueError("bin_edges: ascending from 0.0 to 1.0, at least two")
        if any(b <= a for a, b in zip(self.bin_edges, self.bin_edges[1:], strict=False)):
            raise ValueError("bin_edges must ascend")
        shapes = {len(self.rows), len(self.correct)}
        if len(shapes) != 1 or any(len(r) != bins for r in (*self.rows, *self.correct)):
            raise ValueError("rows and correct: one list of len(bin_edges) - 1 counts per class")
        pairs = (p for rs, cs in zip(self.rows, self.correct, strict=True) for p in zip(rs, cs, strict=True))
        if any(not 0 <= c <= r for r, c in pairs):
            raise ValueError("correct counts must lie between 0 and the bin's rows")
        return self


class ModelMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    name: str
    version: str
    created: str
    parent_version: str | None = None
    code_version: str
    dataset: DatasetInfo
    hyperparameters: dict[str, Any]
    world_size: int
    metrics: dict[str, float]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    feature_names: list[str]
    class_names: list[str] = Field(default_factory=list)
    reference_histograms: list[FeatureHistogram]
    # None: a version written before the estimate existed, or not a classifier; the monitor then
    # records no estimate for it.
    confidence_reference: ConfidenceReference | None = None
    files: dict[str, str] = Field(default_factory=dict, description="file name -> sha256")
    precision: Precision = Field(
        "fp32", description="the arithmetic the version was published and its test accuracy measured at"
    )
    engine: Engine | None = Field(
        None, description="the engine the version must run on; None: the fastest measured at warm-up"
    )

    @model_validator(mode="before")
    @classmethod
    def _before_precision(cls, data: Any) -> Any:
        """Metadata written before ``precision`` existed: an int8 version says so in its hyperparameters
        (``quantization``), and ran on ONNX Runtime; anything else was fp32."""
        old_int8 = isinstance(data, dict) and "quantization" in (data.get("hyperparameters") or {})
        if old_int8 and "precision" not in data:
            return {**data, "precision": "int8", "engine": "onnxruntime"}
        return data


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_version_dir(output: Path, name: str, version: str) -> Path:
    return output / "models" / name / version


def write_metadata(version_dir: Path, metadata: ModelMetadata) -> ModelMetadata:
    """Hash every file already in ``version_dir`` into the metadata and write it atomically, last.

    Writing metadata last makes its presence the commit point: a directory without it is incomplete.
    """
    files = {
        p.name: sha256_file(p)
        for p in sorted(version_dir.iterdir())
        if p.is_file() and p.name != METADATA_FILE and not p.name.startswith(".")
    }
    final = metadata.model_copy(update={"files": files})
    fd, tmp = tempfile.mkstemp(dir=version_dir, prefix=".metadata-", suffix=".tmp")
    # mkstemp creates 0600; the serving pod reads models as another user than the trainer.
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(final.model_dump_json(indent=2))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, version_dir / METADATA_FILE)
    return final


def load_metadata(version_dir: Path, *, verify: bool = True) -> ModelMetadata:
    """Read a version's metadata and, by default, check every recorded file against its hash."""
    meta_path = version_dir / METADATA_FILE
    if not meta_path.is_file():
        # A model's folder (<output>/models/<name>) given for one of its versions: name the versions.
        versions = sorted(
            (d.name for d in version_dir.iterdir() if (d / METADATA_FILE).is_file())
            if version_dir.is_dir()
            else [],
            key=lambda name: (not name.isdigit(), int(name) if name.isdigit() else 0, name),
        )
        if versions:
            raise ArtifactError(
                f"{version_dir}: a model's folder, not one version; versions found: {', '.join(versions)} "
                f"(e.g. {version_dir / versions[-1]})"
            )
        raise ArtifactError(f"{version_dir}: no {METADATA_FILE}; not a complete model version directory")
    try:
        metadata = ModelMetadata.model_validate(json.loads(meta_path.read_text()))
    except (ValueError, TypeError) as exc:
        raise ArtifactError(f"{meta_path}: invalid metadata: {exc}") from exc
    if ONNX_FILE not in metadata.files:
        raise ArtifactError(f"{meta_path}: records no {ONNX_FILE}")
    if verify:
        for name, expected in metadata.files.items():
            path = version_dir / name
            if not path.is_file():
                raise ArtifactError(f"{version_dir}: {name} is recorded in {METADATA_FILE} but missing")
            if sha256_file(path) != expected:
                raise ArtifactError(f"{version_dir}: {name} does not match its recorded sha256")
    return metadata
