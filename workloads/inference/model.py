"""One model version, loaded for serving: verified bytes, one engine running them, batch hooks.

Loading reads ``model.onnx`` once, checks those exact bytes against the sha256 recorded in
``metadata.json`` and hands the same bytes to the engine (``engines.py``), so the graph that runs is the
graph that was verified (no window for the file to change between check and load).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from workloads.artifacts import (
    METADATA_FILE,
    ONNX_FILE,
    ArtifactError,
    Engine,
    ModelMetadata,
    load_metadata,
)
from workloads.inference.engines import EngineChoice, open_runner, session_options, unavailable

Rows = npt.NDArray[np.float32]


@dataclass(frozen=True)
class ModelArtifact:
    """A verified model version: its metadata and the ONNX bytes that matched the recorded hash."""

    metadata: ModelMetadata
    onnx_bytes: bytes

    @property
    def n_features(self) -> int:
        return len(self.metadata.feature_names)


def load_artifact(version_dir: Path) -> ModelArtifact:
    """Read and verify a model version directory; raises ``ArtifactError`` with a one-line reason."""
    if not version_dir.is_dir():
        raise ArtifactError(f"{version_dir}: not a directory")
    metadata = load_metadata(version_dir, verify=True)
    onnx_bytes = (version_dir / ONNX_FILE).read_bytes()
    if hashlib.sha256(onnx_bytes).hexdigest() != metadata.files[ONNX_FILE]:
        raise ArtifactError(f"{version_dir}: {ONNX_FILE} changed while it was being loaded")
    if len(metadata.inputs) != 1 or metadata.inputs[0].dtype != "float32":
        raise ArtifactError(f"{version_dir}: the server takes models with one float32 input")
    if len(metadata.reference_histograms) != len(metadata.feature_names):
        raise ArtifactError(f"{version_dir}: metadata needs one reference histogram per feature")
    return ModelArtifact(metadata, onnx_bytes)


# ONNX Runtime's element types (NodeArg.type) as metadata.json names them.
_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(int64)": "int64"}


def verify_model(artifact: ModelArtifact, version_dir: Path) -> None:
    """ONNX Runtime loads the graph, and its inputs and outputs are the ones ``metadata.json`` promises
    clients (names, element types, shapes; a dynamic dimension is ``None``), and the engine its metadata
    names can run it here (a bf16 version needs OpenVINO and a CPU with native bf16). Checked once before
    the server listens, so a model that cannot serve is refused at start (``ArtifactError``, one line)
    rather than after "startup complete"."""
    meta = artifact.metadata
    if meta.engine is not None and (reason := unavailable(meta.engine, meta.precision)) is not None:
        raise ArtifactError(
            f"{version_dir}: published to run on {meta.engine} at {meta.precision}, which cannot run here: "
            f"{reason}; serve its parent version {meta.parent_version} instead"
        )
    try:
        session = ort.InferenceSession(
            artifact.onnx_bytes, sess_options=session_options(1), providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ArtifactError(f"{version_dir}: {ONNX_FILE} does not load in ONNX Runtime ({reason})") from None
    for side, tensors, promised in (
        ("input", session.get_inputs(), artifact.metadata.inputs),
        ("output", session.get_outputs(), artifact.metadata.outputs),
    ):
        found = [(arg.name, _DTYPES.get(arg.type, arg.type), _dims(arg.shape)) for arg in tensors]
        said = [(spec.name, spec.dtype, list(spec.shape)) for spec in promised]
        if found != said:
            graph, listed = _spec(found), _spec(said)
            raise ArtifactError(
                f"{version_dir}: {ONNX_FILE}'s {side}s are {graph} but {METADATA_FILE} says {listed}"
            )


def _dims(shape: Sequence[object]) -> list[int | None]:
    return [dim if isinstance(dim, int) else None for dim in shape]


def _spec(tensors: Sequence[tuple[str, str, list[int | None]]]) -> str:
    return ", ".join(f"{name} {dtype} {shape}" for name, dtype, shape in tensors) or "none"


class OnnxModel:
    """The serving hooks around one engine running the version's graph, in LitServe's terms: ``batch``,
    ``predict``, ``unbatch``. It computes at the version's own precision (``metadata.precision``);
    ``spinning`` applies to ONNX Runtime only. ``openvino_model``: see ``engines.open_runner``."""

    def __init__(
        self,
        artifact: ModelArtifact,
        threads: int,
        *,
        engine: Engine = "onnxruntime",
        spinning: bool = False,
        openvino_model: Any = None,
    ) -> None:
        self.artifact = artifact
        self.choice = EngineChoice(
            engine,
            artifact.metadata.precision,
            threads,
            spinning if engine == "onnxruntime" else None,
        )
        self._run = open_runner(artifact.onnx_bytes, self.choice, openvino_model=openvino_model)

    @staticmethod
    def batch(items: Sequence[Rows]) -> Rows:
        return items[0] if len(items) == 1 else np.concatenate(items, axis=0)

    def predict(self, x: Rows) -> npt.NDArray[np.float32]:
        return self._run(x)

    @staticmethod
    def unbatch(items: Sequence[Rows], y: npt.NDArray[np.float32]) -> list[npt.NDArray[np.float32]]:
        if len(items) == 1:  # the inline path: no split to pay for
            return [y]
        bounds = np.cumsum([len(i) for i in items])[:-1]
        return list(np.split(y, bounds))

    def single_row_seconds(self, runs: int = 50) -> float:
        """The median time of a one-row run: how cheap the model is."""
        x = np.zeros((1, self.artifact.n_features), dtype=np.float32)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            self.predict(x)
            times.append(time.perf_counter() - started)
        return float(np.median(times))

    def warm_up(self, max_batch_size: int) -> None:
        """Run the smallest and largest batch once so the first real requests don't pay for allocation."""
        for rows in sorted({1, max_batch_size}):
            self.predict(np.zeros((rows, self.artifact.n_features), dtype=np.float32))
