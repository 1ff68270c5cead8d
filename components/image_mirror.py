"""Third-party images pinned to the stack's mirror: the mirror lock and the one function that maps an
image reference through it (compliance review R4: run-time pulls from registries outside the UAE, by tag).

``mlplatform images mirror STACK`` prints a script that copies every image the stack's objects name from
outside its registry to ``<registry>/mirror/<source host>/<source path>`` (``crane copy``, which keeps
the digest) and writes the stack's mirror lock from ``crane digest`` of each copy: a JSON file naming, per
source image, its mirror and that digest. A stack names its lock with ``kubernetes.imageLock`` (a path
from the project's folder, the one with ``Pulumi.yaml``); then every third-party image the program
produces (each chart's image values, the NicClusterPolicy's images) is mapped through it by one
function, ``MirrorLock.pin``, so the plan, ``pulumi up`` and the judges see the same
``<mirror>@sha256:<digest>`` objects.

The lock's format (version 2)::

    {"version": 2,
     "images": {"<source>": {"mirror": "mirror/<source host>/<source path>:<tag>",
                             "digest": "sha256:<64 hex>", "signed": true}}}

``mirror``: the copy's reference below the stack's registry. The script runs where the deployed stack
is, and the registry is the deployed stack's ``registry`` output, which a plan under Pulumi's mocks
names with the mocks' account; so the lock names neither, and the program roots each copy at the
registry it renders with (``MirrorLock.under``): the deployed one under ``pulumi up``, the mocks' in a
plan, the same objects otherwise.

``signed``: the script signed the copy's digest with the stack's key (components/images.py
``sign_once``). A lock whose every copy is signed puts the operator namespaces under the signature
verifier too (components/kubernetes/image_verification.py). A version 1 lock (each ``mirror`` a whole
reference, no ``signed``: written before the script signed) still loads, its copies unsigned: those
namespaces stay ``mirror``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

LOCK_VERSION = 2
# Version 1: each mirror a whole reference, no ``signed`` in an entry (its copies unsigned). Still read.
READ_VERSIONS = (1, LOCK_VERSION)
# Where the copies go below the stack's registry: ``<registry>/mirror/<source host>/<source path>``.
MIRROR_PATH = "mirror"
# On an object the program writes that names a mirror by bare digest (the DOCA driver: its operator takes
# no tag with a digest), JSON ``{"<mirror>@<digest>": "<source by tag>"}``: the evidence keeps the tag.
SOURCES_ANNOTATION = "images.ml-platform.io/mirrored-from"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
PROJECT_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ImageRef:
    """A reference split as the distribution reference grammar reads it (distribution/reference): a
    first path component with a ``.`` or ``:``, or ``localhost``, is a host; otherwise the host is
    ``docker.io`` and a single-component path is below ``library/``."""

    host: str
    path: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, reference: str) -> ImageRef:
        rest, _, digest = reference.partition("@")
        first, slash, remainder = rest.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            host, rest = first, remainder
        else:
            host = "docker.io"
            rest = rest if "/" in rest else f"library/{rest}"
        path, colon, tag = rest.rpartition(":") if ":" in rest.rsplit("/", 1)[-1] else (rest, "", "")
        return cls(host, path, tag if colon else None, digest or None)

    @property
    def repository(self) -> str:
        """``host/path``: the reference without tag or digest."""
        return f"{self.host}/{self.path}"

    def __str__(self) -> str:
        return (
            self.repository
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )


class LockError(ValueError):
    """A mirror lock that cannot be used (one printable line naming the file)."""


@dataclass(frozen=True)
class MirrorLock:
    """Per source image (as the objects name it upstream), its mirror reference and the mirror's digest;
    and the sources whose copy the stack's key signed."""

    path: str
    # source -> (mirror, digest); each mirror a whole reference, or (``below_registry``, a version 2
    # lock as read) one below the stack's registry, to be rooted with ``under``.
    images: Mapping[str, tuple[str, str]]
    signed_sources: frozenset[str] = frozenset()
    below_registry: bool = False

    def under(self, registry: str) -> MirrorLock:
        """The lock with each mirror rooted at ``registry`` (the stack's, as the program renders it)."""
        if not self.below_registry:
            return self
        images = {
            source: (f"{registry}/{mirror}", digest) for source, (mirror, digest) in self.images.items()
        }
        return replace(self, images=images, below_registry=False)

    @property
    def signed(self) -> bool:
        """Every copy is signed with the stack's key: the verifier can hold the operator namespaces to it."""
        return self.signed_sources >= self.images.keys()

    def pin(self, source: str) -> str:
        """``source`` as the mirror names it by digest: the mirror's repository and tag (where the source
        has one) with the digest ``crane digest`` printed for the copy."""
        found = self.images.get(source)
        if found is None:
            raise LockError(
                f"image {source} is not in the mirror lock {self.path}: run `mlplatform images mirror` "
                "for this stack again and the script it prints"
            )
        if self.below_registry:
            raise ValueError(
                f"mirror lock {self.path}: its mirrors are below a registry; pin through under()"
            )
        mirror, digest = found
        return str(replace(ImageRef.parse(mirror), digest=digest))


def read_lock(path: Path, name: str) -> MirrorLock:
    """The lock at ``path`` (``name``: how to call it in an error line), or ``LockError`` in one line."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise LockError(f"mirror lock {name}: cannot be read ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise LockError(f"mirror lock {name}: not JSON ({error.msg}, line {error.lineno})") from None
    version = document.get("version") if isinstance(document, dict) else None
    if version not in READ_VERSIONS:
        raise LockError(
            f'mirror lock {name}: expected {{"version": {LOCK_VERSION}, "images": {{...}}}}'
            f" (or an older version {', '.join(str(v) for v in READ_VERSIONS[:-1])})"
        )
    entries = document.get("images")
    if not isinstance(entries, dict):
        raise LockError(
            f"mirror lock {name}: images: expected a mapping of source image to mirror and digest"
        )
    images: dict[str, tuple[str, str]] = {}
    signed: set[str] = set()
    for source, entry in entries.items():
        mirror = entry.get("mirror") if isinstance(entry, dict) else None
        digest = entry.get("digest") if isinstance(entry, dict) else None
        if not isinstance(mirror, str) or not mirror:
            raise LockError(f"mirror lock {name}: images[{source!r}].mirror: expected the mirror's reference")
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise LockError(
                f"mirror lock {name}: images[{source!r}].digest: {digest!r} is not sha256: and 64 lowercase"
                " hex digits (what `crane digest` prints)"
            )
        if version == LOCK_VERSION:
            if not mirror.startswith(f"{MIRROR_PATH}/"):
                raise LockError(
                    f"mirror lock {name}: images[{source!r}].mirror: {mirror!r} is not the copy's place"
                    f" below the stack's registry ({MIRROR_PATH}/<source host>/<source path>:<tag>, no"
                    " registry host: `mlplatform images mirror` writes it so)"
                )
            if not isinstance(entry.get("signed"), bool):
                raise LockError(
                    f"mirror lock {name}: images[{source!r}].signed: expected true or false (whether the"
                    " script signed the copy with the stack's key)"
                )
            if entry["signed"]:
                signed.add(source)
        images[source] = (mirror, digest)
    return MirrorLock(name, images, frozenset(signed), below_registry=version == LOCK_VERSION)


def load_lock(setting: str) -> MirrorLock:
    """The lock a stack's ``kubernetes.imageLock`` names: a path from the project's folder, or absolute
    (its mirrors rooted with ``under``)."""
    path = Path(setting)
    return read_lock(path if path.is_absolute() else PROJECT_DIR / path, setting)
