"""Atomic, self-verifying checkpoints and resume from the newest valid one.

File format: an 8-byte magic, the 32-byte sha256 of the payload, then the ``torch.save`` payload. A file
cut short by a crash or bit-rotted on shared storage fails the hash and is skipped with a warning; it is
never handed to ``torch.load``. Writes go to a hidden temp file in the same directory, are fsynced, renamed
over the final name and the directory is fsynced, so a reader sees either the whole file or none of it.
Loading uses ``weights_only=True``: a checkpoint on shared storage must not be able to run code.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from workloads.training.logs import log_event

MAGIC = b"MLPCKPT1"
_HEADER = len(MAGIC) + hashlib.sha256().digest_size
_FINAL = re.compile(r"^step-(\d{9})\.ckpt$")
_PARTIAL_PREFIX = ".step-"


class CorruptCheckpointError(Exception):
    """A checkpoint file that is truncated, altered, or not a checkpoint at all."""


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"step-{step:09d}.ckpt"


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """Complete (renamed) checkpoint files, oldest first, by the step in their name."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _FINAL.match(p.name))]
    return sorted(found)


def fsync_path(path: Path) -> None:
    """Flush a file, or a directory's entries (a rename is durable only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(final: Path, data: bytes, *, prefix: str) -> None:
    """Temp file in the same directory, fsync, rename over ``final``, fsync the directory."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=final.parent, prefix=prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, final)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_path(final.parent)


def save_checkpoint(directory: Path, step: int, state: dict[str, Any], *, keep: int) -> Path:
    """Write ``state`` for ``step`` atomically, then drop all but the newest ``keep`` checkpoints."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    final = checkpoint_path(directory, step)
    write_atomically(
        final, MAGIC + hashlib.sha256(payload).digest() + payload, prefix=f"{_PARTIAL_PREFIX}{step:09d}-"
    )
    prune(directory, keep)
    return final


def prune(directory: Path, keep: int) -> None:
    for _, path in list_checkpoints(directory)[:-keep]:
        path.unlink(missing_ok=True)


def remove_partials(directory: Path) -> None:
    """Delete temp files a killed writer left behind; only the single writer (rank 0) calls this."""
    if directory.is_dir():
        for path in directory.glob(f"{_PARTIAL_PREFIX}*.tmp"):
            path.unlink(missing_ok=True)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read and verify one checkpoint; raises ``CorruptCheckpointError`` instead of loading bad bytes."""
    data = path.read_bytes()
    if len(data) < _HEADER or not data.startswith(MAGIC):
        raise CorruptCheckpointError(f"{path.name}: truncated or not a checkpoint ({len(data)} bytes)")
    digest, payload = data[len(MAGIC) : _HEADER], data[_HEADER:]
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptCheckpointError(f"{path.name}: content does not match its sha256 (truncated or altered)")
    try:
        state: dict[str, Any] = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        raise CorruptCheckpointError(f"{path.name}: verified bytes but not loadable: {exc}") from exc
    return state


def latest_valid(directory: Path) -> tuple[int, dict[str, Any]] | None:
    """The newest checkpoint that verifies, skipping (with a warning) any that do not."""
    for step, path in reversed(list_checkpoints(directory)):
        try:
            return step, load_checkpoint(path)
        except (CorruptCheckpointError, OSError) as exc:
            log_event("checkpoint_skipped", logging.WARNING, path=str(path), reason=str(exc))
    return None
