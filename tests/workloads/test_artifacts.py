"""The artifact contract: metadata written last and atomically, hashes that catch any changed file,
and files the serving user (not the trainer) can read."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from workloads.artifacts import (
    METADATA_FILE,
    ONNX_FILE,
    ArtifactError,
    DatasetInfo,
    ModelMetadata,
    load_metadata,
    write_metadata,
)


def _metadata() -> ModelMetadata:
    return ModelMetadata(
        name="m",
        version="1",
        created="2026-11-22T00:00:00Z",
        code_version="test",
        dataset=DatasetInfo(name="d", sha256="0" * 64, split_seed=0, split_sizes={"train": 1, "test": 1}),
        hyperparameters={},
        world_size=1,
        metrics={},
        inputs=[],
        outputs=[],
        feature_names=[],
        reference_histograms=[],
    )


def test_written_metadata_hashes_every_file_and_is_world_readable(tmp_path: Path) -> None:
    (tmp_path / ONNX_FILE).write_bytes(b"graph")
    written = write_metadata(tmp_path, _metadata())
    assert set(written.files) == {ONNX_FILE}
    assert stat.S_IMODE((tmp_path / METADATA_FILE).stat().st_mode) == 0o644
    assert load_metadata(tmp_path) == written
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_changed_file_fails_verification(tmp_path: Path) -> None:
    (tmp_path / ONNX_FILE).write_bytes(b"graph")
    write_metadata(tmp_path, _metadata())
    (tmp_path / ONNX_FILE).write_bytes(b"tampered")
    with pytest.raises(ArtifactError, match="does not match its recorded sha256"):
        load_metadata(tmp_path)
