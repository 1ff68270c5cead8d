"""The lifecycle record: every alias move, promotion request, approval, rejection, rollout step and
rollback of a model, appended, never rewritten, and read back by ``mlplatform models history NAME``.

MLflow keeps no alias history (mlflow/mlflow#2169) and its tags are overwritten by the next move: the trial
(../shared/reviews/lifecycle.md, defects 4 and 5) found only the last event per version left, signed with
a self-declared ``--actor``. Here each event is one object of its own, written once:

- who: the registry's authenticated user (``GET /api/2.0/mlflow/users/current``, MLflow's basic-auth app,
  mlflow/server/auth/routes.py 3.17.2), ``authenticated: true``; on a registry without authentication
  (SMB dev) the caller's declared name, ``authenticated: false``, shown as such;
- what: the action, the versions by role, each version's digest (sha256 of its ``metadata.json``, which
  holds the sha256 of every file of the version), the numbers the decision was taken on, the reason;
- when: UTC.

Backend: a directory (a mounted volume; the tests' backend), each event a file created exclusively
(``O_EXCL``: an existing name is never overwritten) and made read-only. Named by time and a random
suffix, so concurrent writers never collide and a listing in name order is the history in time order.
The immutable cloud backends (S3 Object Lock, Blob immutability policies) are not built here; see
docs/lifecycle.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from workloads.registry.client import RegistryClient, RegistryError

RECORD_ENV = "MLPLATFORM_RECORD"


class Event(BaseModel):
    """One entry of a model's record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: str
    model: str
    action: str
    by: str
    authenticated: bool
    versions: dict[str, str] = {}
    digests: dict[str, str] = {}
    numbers: dict[str, Any] = {}
    reason: str = ""


class RecordError(Exception):
    """The record cannot be opened or written; one printable line."""


class DirectoryRecord:
    """Events as read-only files under ``root/<model>/``, each created once."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def append(self, event: Event) -> Path:
        folder = self.root / event.model
        stamp = event.at.replace(":", "").replace("-", "")
        path = folder / f"{stamp}-{uuid.uuid4().hex[:12]}.json"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            with os.fdopen(fd, "w") as handle:
                handle.write(event.model_dump_json())
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise RecordError(
                f"lifecycle record {self.root}: cannot append ({exc.strerror or exc})"
            ) from None
        return path

    def read(self, model: str) -> list[Event]:
        folder = self.root / model
        if not folder.is_dir():
            return []
        return [Event.model_validate_json(p.read_text()) for p in sorted(folder.glob("*.json"))]


def open_record(uri: str) -> DirectoryRecord:
    """The record at ``uri``: a directory path or ``file://`` URL (created if missing)."""
    path = Path(uri.removeprefix("file://"))
    if "://" in str(path):
        raise RecordError(f"lifecycle record {uri!r}: only a directory or file:// URL is supported here")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordError(f"lifecycle record {uri}: {exc.strerror or exc}") from None
    return DirectoryRecord(path)


@dataclass(frozen=True)
class Identity:
    """Who acts: the registry's authenticated user, else the declared name (``authenticated`` False)."""

    name: str
    authenticated: bool

    def __str__(self) -> str:
        return self.name if self.authenticated else f"{self.name} (unauthenticated)"


def identity(client: RegistryClient, declared: str) -> Identity:
    """The registry's own answer to who the caller is; ``declared`` only when it has no authentication."""
    try:
        user = client.current_user()
    except RegistryError as exc:
        if exc.status == 404:  # no basic-auth app: nothing authenticates anyone
            return Identity(declared, False)
        raise
    return Identity(user, True)


@dataclass
class Journal:
    """Appends a model's events, as ``who``, with the digests of the versions they name."""

    client: RegistryClient
    record: DirectoryRecord
    who: Identity

    def append(
        self,
        model: str,
        action: str,
        versions: Mapping[str, str],
        *,
        reason: str = "",
        numbers: Mapping[str, Any] | None = None,
    ) -> Event:
        event = Event(
            at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            model=model,
            action=action,
            by=self.who.name,
            authenticated=self.who.authenticated,
            versions=dict(versions),
            digests={v: self._digest(model, v) for v in sorted(set(versions.values()))},
            numbers=json.loads(json.dumps(dict(numbers or {}), default=str)),
            reason=reason,
        )
        self.record.append(event)
        return event

    def _digest(self, model: str, version: str) -> str:
        try:
            source = self.client.get_version(model, version).source
            return (
                "sha256:" + hashlib.sha256(self.client.read_artifact(f"{source}/metadata.json")).hexdigest()
            )
        except RegistryError as exc:
            return f"unknown ({str(exc).splitlines()[0][:120]})"
