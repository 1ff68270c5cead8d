"""Serving a registry model: fetch a version, and follow an alias as it moves.

``fetch`` resolves ``models:/<name>@<alias>`` (or ``/<version>``) over MLflow's REST API, downloads the
version's files through the registry's artifact proxy and verifies every file against the sha256 in its
``metadata.json`` (``model.load_artifact``): the bytes ONNX Runtime loads are the bytes that verified.

``Follower`` polls the alias every ``poll_interval_s``. When it names another version, the new version
is fetched, loaded and warmed beside the serving one, off the event loop, and swapped in by one
assignment (``Service.swap_in``): requests keep flowing to the old session while the new one loads,
batches already running finish on the version they started with, and every response carries the
version that computed it. A version that fails to resolve, download, verify or load leaves the old one
serving and is counted in ``inference_model_update_failures_total{reason}``; one that cannot be
served in its place (``IncompatibleModelError``) is counted as ``incompatible``. A version that failed
for a reason that will not change (verify, incompatible, load) is not fetched again; a network failure
is retried at the next poll.

Nothing here imports MLflow (the inference image does not carry it): ``workloads.registry.client`` is
the standard library's HTTP client.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workloads.artifacts import ArtifactError
from workloads.inference.model import ModelArtifact, load_artifact
from workloads.registry.client import ModelRef, RegistryClient, RegistryError

if TYPE_CHECKING:
    from workloads.inference.service import Service

log = logging.getLogger("workloads.inference")


@dataclass(frozen=True)
class Fetched:
    """A verified registry version on local disk; ``version`` is the registry's version number."""

    artifact: ModelArtifact
    version: str
    directory: Path


class FetchError(Exception):
    """A version that could not be fetched; ``reason`` is the metric label."""

    def __init__(
        self, reason: str, message: str, version: str | None = None, *, missing: bool = False
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.version = version
        # The registry answered that the model or its alias does not exist (yet): see ``server.prepare``.
        self.missing = missing


def fetch(
    client: RegistryClient, ref: ModelRef, cache_dir: Path, skip: Collection[str] = ()
) -> Fetched | None:
    """The version ``ref`` names, downloaded under ``cache_dir/<name>/<version>`` and verified; None when
    it is one of ``skip`` (serving already, or refused before). Raises ``FetchError``."""
    try:
        version = client.resolve(ref)
    except RegistryError as exc:
        raise FetchError("resolve", f"{ref}: {exc}", missing=exc.not_found) from None
    if version.version in skip:
        return None
    directory = cache_dir / ref.name / version.version
    try:
        client.download(version.source, directory)
    except (RegistryError, OSError) as exc:
        raise FetchError("download", f"{ref} version {version.version}: {exc}") from None
    try:
        artifact = load_artifact(directory)
    except ArtifactError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        raise FetchError("verify", f"{ref} version {version.version}: {exc}", version.version) from None
    return Fetched(artifact, version.version, directory)


class Follower:
    """Polls an alias and swaps each new version into ``service`` (see the module's docstring)."""

    def __init__(self, service: Service, client: RegistryClient, ref: ModelRef, cache_dir: Path) -> None:
        self.service = service
        self.client = client
        self.ref = ref
        self.cache_dir = cache_dir
        self._refused: set[str] = set()  # versions that failed for good

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.check()

    async def check(self) -> bool:
        """One poll; True when a new version was swapped in."""
        if self.service.served is None:  # still loading the first version
            return False
        current = self.service.version
        skip = {current, *self._refused}
        try:
            fetched = await asyncio.to_thread(fetch, self.client, self.ref, self.cache_dir, skip)
        except FetchError as exc:
            if exc.reason == "verify" and exc.version is not None:
                self._refused.add(exc.version)
            self._failed(exc.reason, str(exc))
            return False
        if fetched is None:
            return False
        try:
            await self.service.swap_in(fetched)
        except IncompatibleModelError as exc:
            self._refused.add(fetched.version)
            self._failed("incompatible", f"{self.ref} version {fetched.version}: {exc}")
            return False
        except Exception as exc:  # an ONNX Runtime load or warm-up failure: the old version serves on
            self._refused.add(fetched.version)
            self._failed("load", f"{self.ref} version {fetched.version}: {type(exc).__name__}: {exc}")
            return False
        log.info("now serving %s version %s (was %s)", self.ref, fetched.version, current)
        previous = self.cache_dir / self.ref.name / current
        if previous != fetched.directory:
            shutil.rmtree(previous, ignore_errors=True)
        return True

    def _failed(self, reason: str, message: str) -> None:
        self.service.metrics.update_failures[reason].inc()
        log.warning(
            "model update failed (%s); still serving version %s: %s", reason, self.service.version, message
        )


class IncompatibleModelError(ValueError):
    """A version that cannot replace the serving one in place (another input, output or class list)."""


def check_compatible(serving: ModelArtifact, candidate: ModelArtifact) -> None:
    """A swapped-in version must take the same requests and answer in the same shape: the request
    models, the V2 metadata and the drift reference were built from the first version."""
    old, new = serving.metadata, candidate.metadata
    for field in ("name", "inputs", "outputs", "feature_names", "class_names"):
        if getattr(old, field) != getattr(new, field):
            raise IncompatibleModelError(f"its {field} differ from the serving version's")
