"""The lifecycle record: every alias move, promotion request, approval, rejection, rollout step and
rollback of a model, appended, never rewritten, and read back by ``mlplatform models history NAME``.

MLflow keeps no alias history (mlflow/mlflow#2169) and its tags are overwritten by the next move: the trial
(../shared/reviews/lifecycle.md, defects 4 and 5) found only the last event per version left, signed with
a self-declared ``--actor``. Here each event is one object of its own, written once:

- who: on a registry that authenticates (MLflow's basic-auth app), the user the registry authenticated for
  the append, ``authenticated: true``, set by the registry itself: it is the record's only writer
  (``RegistryRecord``, the route ``RECORD_ROUTE`` its authorization function serves, workloads/registry/
  server/guard.py), the caller sends the event's kind and body and the registry adds who and when
  (``authenticated_event``), so no caller can append in another's name (review rev40c A1); on a registry
  without authentication (SMB dev) the caller's declared name, ``authenticated: false``, written by the
  caller, shown as such;
- what: the action, the versions by role, each version's digest (sha256 of its ``metadata.json``, which
  holds the sha256 of every file of the version), the numbers the decision was taken on, the reason;
- when: UTC, the registry's clock where the registry appends (so an event's place in the history, which
  its name gives, is the registry's too).

Backends, chosen by the record's URI (``--record``, ``$MLPLATFORM_RECORD``):

- ``s3://BUCKET/PREFIX``: each event one object under ``PREFIX/<model>/``, written create-only (``PutObject``
  with ``If-None-Match: *``: S3 answers 412 rather than replace an existing key; S3 user guide,
  "Add preconditions to S3 operations with conditional requests") into a bucket whose Object Lock default
  retention is in COMPLIANCE mode, which nobody, the account root included, can shorten or lift (S3 user
  guide, "Object Lock retention modes"): a deleted or overwritten key keeps its locked version, and the
  reader reads versions, so a delete marker hides no event. The writer
  refuses a bucket without that default rather than keep a record that can be rewritten. Endpoint,
  region and credentials are boto3's own chain (``AWS_ENDPOINT_URL_S3``, ``AWS_REGION``, IRSA).
- ``azblob://ACCOUNT/CONTAINER/PREFIX``: each event one block blob under ``PREFIX/<model>/``, written
  create-only (Put Blob with ``If-None-Match: *``: the Blob service answers 409 ``BlobAlreadyExists``
  rather than replace it; Blob REST API, "Specifying conditional headers for Blob service operations") into
  a container under version-level immutability (Azure Storage, "Configure immutability policies for blob
  versions": a version under a locked time-based policy can be neither deleted nor modified until it
  expires, by anyone). The writer refuses a container without version-level immutability (Get Container
  Properties, ``x-ms-immutable-storage-with-versioning-enabled``); whether the policy is locked is a
  management-plane fact, which the plan shows and the pack's ``lifecycle-record-locked`` checks. The
  account's endpoint is ``https://ACCOUNT.blob.core.windows.net`` (``$MLPLATFORM_RECORD_BLOB_ENDPOINT``
  for another cloud or an emulator, path-style ``http://HOST:PORT/ACCOUNT``); credentials are
  azure-identity's ``DefaultAzureCredential`` (AKS workload identity, the Azure CLI), or the SAS the
  endpoint carries as its query.
- a directory (a mounted volume; SMB dev and the tests), each event a file created exclusively
  (``O_EXCL``: an existing name is never overwritten) and made read-only.

Events are named by time and a random suffix, so concurrent writers never collide and a listing in name
order is the history in time order.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, ValidationError

from workloads.registry.client import API, RECORD_ENDPOINT, RegistryClient, RegistryError

RECORD_ENV = "MLPLATFORM_RECORD"
# The registry's own record, where it appends for its callers (the registry Deployment's variable).
REGISTRY_RECORD_ENV = "REGISTRY_RECORD"
# The registry's append route (served by its authorization function, workloads/registry/server/guard.py):
# POST an event's kind and body, GET whether the registry's record can take one.
RECORD_ROUTE = f"{API}/{RECORD_ENDPOINT}"
# The Blob endpoint of an ``azblob://`` record where it is not ``https://ACCOUNT.blob.core.windows.net``.
BLOB_ENDPOINT_ENV = "MLPLATFORM_RECORD_BLOB_ENDPOINT"


class Kind(StrEnum):
    """Every kind of event the record holds (``Event.action``), each appended at one place: the registry's
    route lets each kind only from its role (workloads/registry/server/guard.py ``EVENT_AUTHORS``, which
    names every kind, tests/workloads/registry/test_record_route.py), and the moves of the protected aliases
    only from the registry itself (guard.py ``ALIAS_MOVES``)."""

    # The drift monitor's windows and retrains (workloads/delivery/monitor.py).
    DRIFT_WINDOW = "drift-window"
    RETRAIN = "retrain"
    # A promotion as a change (workloads/registry/approval.py, mlplatform/models_cmd.py).
    REQUEST = "request-promotion"
    APPROVE = "approve"
    REJECT = "reject"
    SET_CHALLENGER = "set-challenger"
    # The moves of ``@champion`` and ``@previous-champion``: on a registry that authenticates, appended by
    # the registry itself as it lets each through (guard.py), else by the caller (operations.py).
    PROMOTE = "promote"
    ROLLBACK = "rollback"
    SET_PREVIOUS_CHAMPION = "set-previous-champion"
    REMOVE_ALIAS = "remove-alias"
    # A rollout's windows and how it ended (workloads/delivery/runner.py; lock.py ``verdict_action``).
    ROLLOUT_STEP = "rollout-step"
    ROLLOUT_PASSED = "rollout-passed"
    ROLLOUT_STOPPED = "rollout-stopped"
    ROLLOUT_PROMOTED = "rollout-promoted"
    ROLLOUT_ROLLED_BACK = "rollout-rolled-back"
    # An operator's control of a running rollout (mlplatform/rollout_cmd.py).
    ROLLOUT_PAUSE = "rollout-pause"
    ROLLOUT_RESUME = "rollout-resume"
    ROLLOUT_ABORT = "rollout-abort"


# The moves of the protected aliases, which only the registry appends where it authenticates.
ALIAS_MOVES = frozenset({Kind.PROMOTE, Kind.ROLLBACK, Kind.SET_PREVIOUS_CHAMPION, Kind.REMOVE_ALIAS})


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


# What the registry sets on an event it appends for a caller (``authenticated_event``); the caller sends the
# rest of ``Event``'s fields.
REGISTRY_FIELDS = ("at", "by", "authenticated")


class EventError(ValueError):
    """An event the registry will not append for its caller; one line naming the field."""


def authenticated_event(user: str, body: object, now: datetime | None = None) -> Event:
    """The event the registry appends for its authenticated ``user`` from the request ``body`` (a JSON
    object of ``Event``'s fields but ``REGISTRY_FIELDS``): ``by`` is ``user``, ``authenticated`` true, ``at``
    the registry's ``now``. EventError naming the field for anything else."""
    if not isinstance(body, dict):
        raise EventError("the request body must be a JSON object of the event's fields")
    for key in REGISTRY_FIELDS:
        if key in body:
            raise EventError(
                f"field {key!r}: set by the registry (who it authenticated, and when), not the caller"
            )
    stamp = (now or datetime.now(UTC)).isoformat(timespec="milliseconds")
    try:
        return Event.model_validate({**body, "at": stamp, "by": user, "authenticated": True})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise EventError(f"field {where!r}: {first['msg']}") from None


class Record(Protocol):
    """Where a model's events are appended, each once, and read back oldest first."""

    def ensure_ready(self) -> None:
        """Refuse, before the caller acts, a record that cannot take an event (a RecordError): a command
        that acts and then appends checks here first, so a bad record leaves nothing done."""
        ...

    def append(self, event: Event) -> object: ...

    def read(self, model: str) -> list[Event]: ...


def event_name(event: Event) -> str:
    """``<UTC time, no separators>-<random>.json``: unique, and in time order by name."""
    stamp = event.at.replace(":", "").replace("-", "")
    return f"{stamp}-{uuid.uuid4().hex[:12]}.json"


class DirectoryRecord:
    """Events as read-only files under ``root/<model>/``, each created once."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def ensure_ready(self) -> None:
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise RecordError(f"lifecycle record {self.root}: cannot append (not a writable directory)")

    def append(self, event: Event) -> Path:
        folder = self.root / event.model
        path = folder / event_name(event)
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


class S3Record:
    """Events as objects under ``s3://bucket/prefix/<model>/``, each put once into an Object-Locked
    bucket (module docstring). ``client`` is a boto3 S3 client."""

    # The Object Lock default retention the record must sit under (S3 API, GetObjectLockConfiguration).
    MODE = "COMPLIANCE"

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")
        self._locked = False

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def _folder(self, model: str) -> str:
        return f"{self.prefix}/{model}/" if self.prefix else f"{model}/"

    def _fail(self, doing: str, exc: Exception) -> RecordError:
        from botocore.exceptions import ClientError

        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            why = f"{error.get('Code', '?')}: {error.get('Message', '')}".rstrip(": ")
        else:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return RecordError(f"lifecycle record {self.uri}: cannot {doing} ({why})")

    def ensure_ready(self) -> None:
        """Refuse a bucket whose default retention is not COMPLIANCE: its events could be deleted."""
        if self._locked:
            return
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            config = self.client.get_object_lock_configuration(Bucket=self.bucket)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ObjectLockConfigurationNotFoundError":
                raise self._fail("read the bucket's Object Lock configuration", exc) from None
            config = {}
        except BotoCoreError as exc:
            raise self._fail("read the bucket's Object Lock configuration", exc) from None
        lock = config.get("ObjectLockConfiguration", {})
        retention = lock.get("Rule", {}).get("DefaultRetention", {})
        if lock.get("ObjectLockEnabled") != "Enabled" or retention.get("Mode") != self.MODE:
            raise RecordError(
                f"lifecycle record {self.uri}: bucket {self.bucket} has no Object Lock default retention "
                f"in {self.MODE} mode (found {retention.get('Mode') or 'none'}); refusing to write a record "
                "that can be rewritten"
            )
        self._locked = True

    def append(self, event: Event) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        self.ensure_ready()
        key = self._folder(event.model) + event_name(event)
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=event.model_dump_json().encode(),
                ContentType="application/json",
                IfNoneMatch="*",
                # A put under an Object Lock default retention needs Content-MD5 or an x-amz-checksum-*
                # header; named here rather than left to boto3's checksum default (AWS_REQUEST_CHECKSUM_
                # CALCULATION may turn it off).
                ChecksumAlgorithm="SHA256",
            )
        except (BotoCoreError, ClientError) as exc:
            raise self._fail(f"append {key}", exc) from None
        return key

    def read(self, model: str) -> list[Event]:
        """Every event's version, not the current objects: a delete marker (a simple DELETE in a versioned
        bucket) hides a key from a listing of current objects but not its locked version (S3 user guide,
        "Working with delete markers"; ListObjectVersions lists both), so nothing deleted drops out of the
        history. Versions of one key, oldest first."""
        from botocore.exceptions import BotoCoreError, ClientError

        versions: list[tuple[str, datetime, str]] = []
        try:
            pages = self.client.get_paginator("list_object_versions").paginate(
                Bucket=self.bucket, Prefix=self._folder(model)
            )
            for page in pages:
                versions += [
                    (item["Key"], item["LastModified"], item["VersionId"])
                    for item in page.get("Versions", [])
                    if item["Key"].endswith(".json")
                ]
            return [
                Event.model_validate_json(
                    self.client.get_object(Bucket=self.bucket, Key=key, VersionId=version)["Body"].read()
                )
                for key, _, version in sorted(versions)
            ]
        except (BotoCoreError, ClientError) as exc:
            raise self._fail(f"read {self._folder(model)}", exc) from None


class BlobRecord:
    """Events as block blobs under ``azblob://account/container/prefix/<model>/``, each created once in a
    container under version-level immutability (module docstring). ``container`` is an
    ``azure.storage.blob.ContainerClient``."""

    def __init__(self, container: Any, account: str, prefix: str) -> None:
        self.container, self.account, self.prefix = container, account, prefix.strip("/")
        self._immutable = False

    @property
    def uri(self) -> str:
        base = f"azblob://{self.account}/{self.container.container_name}"
        return f"{base}/{self.prefix}" if self.prefix else base

    def _folder(self, model: str) -> str:
        return f"{self.prefix}/{model}/" if self.prefix else f"{model}/"

    def _fail(self, doing: str, exc: Exception) -> RecordError:
        # azure-core's HttpResponseError carries the status and the service's error code (x-ms-error-code).
        lines = str(exc).splitlines()
        why = " ".join(
            str(part)
            for part in (getattr(exc, "status_code", None), getattr(exc, "error_code", None))
            if part
        )
        why = f"{why}: {lines[0]}" if why and lines else (lines[0] if lines else why or type(exc).__name__)
        return RecordError(f"lifecycle record {self.uri}: cannot {doing} ({why})")

    def ensure_ready(self) -> None:
        """Refuse a container without version-level immutability: its events could be rewritten."""
        if self._immutable:
            return
        from azure.core.exceptions import AzureError

        try:
            properties = self.container.get_container_properties()
        except AzureError as exc:
            raise self._fail("read the container's properties", exc) from None
        if not properties.immutable_storage_with_versioning_enabled:
            raise RecordError(
                f"lifecycle record {self.uri}: container {self.container.container_name} has no "
                "version-level immutability; refusing to write a record that can be rewritten"
            )
        self._immutable = True

    def append(self, event: Event) -> str:
        from azure.core.exceptions import AzureError
        from azure.storage.blob import ContentSettings

        self.ensure_ready()
        name = self._folder(event.model) + event_name(event)
        try:
            self.container.upload_blob(
                name,
                event.model_dump_json().encode(),
                blob_type="BlockBlob",
                content_settings=ContentSettings(content_type="application/json"),
                # Create-only: the client sends If-None-Match: * (azure-storage-blob 12.31.1,
                # _upload_helpers.upload_block_blob); tests/workloads/registry/test_record_blob.py sees it.
                overwrite=False,
            )
        except AzureError as exc:
            raise self._fail(f"append {name}", exc) from None
        return name

    def read(self, model: str) -> list[Event]:
        from azure.core.exceptions import AzureError

        folder = self._folder(model)
        try:
            names = sorted(
                blob.name
                for blob in self.container.list_blobs(name_starts_with=folder)
                if blob.name.endswith(".json")
            )
            return [Event.model_validate_json(self.container.download_blob(name).readall()) for name in names]
        except AzureError as exc:
            raise self._fail(f"read {folder}", exc) from None


def same_record(a: str, b: str) -> bool:
    """Whether the record URIs ``a`` and ``b`` name one record (a directory by its resolved path)."""

    def key(uri: str) -> str:
        if uri.startswith(("s3://", "azblob://")):
            return uri.rstrip("/")
        return str(Path(uri.removeprefix("file://")).resolve())

    return key(a) == key(b)


class RegistryRecord:
    """The record as a registry that authenticates keeps it: appended only by the registry, for its
    authenticated caller (``RECORD_ROUTE``, ``authenticated_event``), read from ``reader``, the same record
    as the caller can read it. People and pods hold no write on it (docs/lifecycle.md, "The record")."""

    def __init__(self, client: RegistryClient, reader: Record, uri: str) -> None:
        self.client, self.reader, self.uri = client, reader, uri
        self._ready = False

    def _fail(self, doing: str, exc: RegistryError) -> RecordError:
        return RecordError(
            f"lifecycle record {self.uri}: the registry cannot {doing} ({str(exc).splitlines()[0]})"
        )

    def ensure_ready(self) -> None:
        """Refuse a registry that keeps no record, cannot append to it, or keeps another than ``uri``:
        what this caller reads would not be what the registry appends."""
        if self._ready:
            return
        try:
            kept = self.client.registry_record()
        except RegistryError as exc:
            raise self._fail("append to its record", exc) from None
        if not same_record(kept, self.uri):
            raise RecordError(
                f"lifecycle record {self.uri}: the registry {self.client.uri} appends to {kept}; give that"
                f" record (--record, ${RECORD_ENV})"
            )
        self._ready = True

    def append(self, event: Event) -> Event:
        """The event as the registry appended it: who and when are the registry's."""
        self.ensure_ready()
        body = event.model_dump(exclude=set(REGISTRY_FIELDS))
        try:
            answer = self.client.append_record_event(body)
        except RegistryError as exc:
            raise self._fail(f"append a {event.action!r} event of {event.model}", exc) from None
        return Event.model_validate(answer["event"])

    def read(self, model: str) -> list[Event]:
        return self.reader.read(model)


def _blob_record(uri: str) -> BlobRecord:
    account, _, rest = uri.removeprefix("azblob://").partition("/")
    container, _, prefix = rest.partition("/")
    if not account or not container:
        raise RecordError(f"lifecycle record {uri!r}: give it as azblob://ACCOUNT/CONTAINER/PREFIX")
    try:
        from azure.identity import DefaultAzureCredential
        from azure.storage.blob import ContainerClient
    except ImportError:
        raise RecordError(
            f"lifecycle record {uri}: an azblob:// record needs azure-storage-blob and azure-identity "
            "(pip install 'ml-platform[registry]')"
        ) from None
    endpoint = os.environ.get(BLOB_ENDPOINT_ENV) or f"https://{account}.blob.core.windows.net"
    # An endpoint with a SAS (its query) carries its own authorisation; else Entra ID, as the workloads are.
    credential = None if urlsplit(endpoint).query else DefaultAzureCredential()
    client = ContainerClient(endpoint, container, credential=credential)
    return BlobRecord(client, account, prefix)


def _s3_record(uri: str) -> S3Record:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise RecordError(f"lifecycle record {uri!r}: give it as s3://BUCKET/PREFIX")
    try:
        import boto3
    except ImportError:
        raise RecordError(
            f"lifecycle record {uri}: an s3:// record needs boto3 (pip install 'ml-platform[registry]')"
        ) from None
    return S3Record(boto3.client("s3"), bucket, prefix)


def open_record(uri: str) -> Record:
    """The record at ``uri``: ``s3://BUCKET/PREFIX``, ``azblob://ACCOUNT/CONTAINER/PREFIX``, or a
    directory path or ``file://`` URL (created if missing)."""
    if uri.startswith("s3://"):
        return _s3_record(uri)
    if uri.startswith("azblob://"):
        return _blob_record(uri)
    path = Path(uri.removeprefix("file://"))
    if "://" in str(path):
        raise RecordError(
            f"lifecycle record {uri!r}: give an s3://BUCKET/PREFIX, an azblob://ACCOUNT/CONTAINER/PREFIX, "
            "a directory or a file:// URL"
        )
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


def version_digest(client: RegistryClient, model: str, version: str) -> str:
    """What a record event carries for ``version`` (``Event.digests``): the sha256 of its metadata.json,
    which records the sha256 of every other file of the version (workloads/artifacts.py), so a number
    reused by a model deleted and re-created names another digest; ``unknown (why)`` where unreadable."""
    try:
        source = client.get_version(model, version).source
        return "sha256:" + hashlib.sha256(client.read_artifact(f"{source}/metadata.json")).hexdigest()
    except RegistryError as exc:
        return f"unknown ({str(exc).splitlines()[0][:120]})"


def open_journal(client: RegistryClient, uri: str, who: Identity) -> Journal:
    """``who``'s journal on the record at ``uri``: appended by the registry where it authenticated ``who``
    (``RegistryRecord``), else directly, unauthenticated (a registry without authentication)."""
    record = open_record(uri)
    return Journal(client, RegistryRecord(client, record, uri) if who.authenticated else record, who)


@dataclass
class Journal:
    """Appends a model's events, as ``who``, with the digests of the versions they name."""

    client: RegistryClient
    record: Record
    who: Identity

    @property
    def registry_appends_moves(self) -> bool:
        """Whether the registry appends each move of a protected alias itself, as it lets it through
        (workloads/registry/server/guard.py): the caller then appends none, so each move is one event."""
        return isinstance(self.record, RegistryRecord)

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
            digests={v: version_digest(self.client, model, v) for v in sorted(set(versions.values()))},
            numbers=json.loads(json.dumps(dict(numbers or {}), default=str)),
            reason=reason,
        )
        written = self.record.append(event)
        # The registry's own event where it appended (its who and when), else the one written here.
        return written if isinstance(written, Event) else event
