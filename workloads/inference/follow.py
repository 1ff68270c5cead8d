"""Serving a registry model: fetch a version, and follow an alias as it moves.

``fetch`` resolves ``models:/<name>@<alias>`` (or ``/<version>``) over MLflow's REST API, downloads the
version's files through the registry's artifact proxy and verifies every file against the sha256 in its
``metadata.json`` (``model.load_artifact``): the bytes ONNX Runtime loads are the bytes that verified.

``Follower`` polls the alias every ``poll_interval_s`` (``registered-models/get``: the model's aliases and
tags in one call). When it names another version, the new version
is fetched, loaded and warmed beside the serving one, off the event loop, and swapped in by one
assignment (``Service.swap_in``): requests keep flowing to the old session while the new one loads,
batches already running finish on the version they started with, and every response carries the
version that computed it. A version that fails to resolve, download, verify or load leaves the old one
serving and is counted in ``inference_model_update_failures_total{reason}``; one that cannot be
served in its place (``IncompatibleModelError``) is counted as ``incompatible``. A version that failed
for a reason that will not change (verify, incompatible, load) is not fetched again; a network failure
is retried at the next poll.

Following ``@champion``, the same poll reads the delivery tags (``workloads.delivery.contract``: the
split and the shadow sample, integers; anything else counts as 0, logged once; either counts only while
the rollout's lease is current, workloads/registry/lock.py, so a dead rollout's share lapses with its
lease). While either is above 0,
the ``@challenger`` version is fetched, verified, checked and loaded beside the champion the same way
(``Service.load_challenger``), and the shares applied; when both return to 0, or the alias is gone or
names the champion, it is unloaded. A challenger that cannot be served leaves the champion serving
alone, counted with the same reasons. When the champion alias moves onto the loaded challenger (a
promotion), its warm session becomes the champion's without a second fetch.

Nothing here imports MLflow (the inference image does not carry it): ``workloads.registry.client`` is
the standard library's HTTP client.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from workloads.artifacts import ArtifactError
from workloads.delivery.contract import SHADOW_RANGE, SHADOW_TAG, SPLIT_RANGE, SPLIT_TAG
from workloads.inference.model import ModelArtifact, load_artifact
from workloads.registry.client import ModelRef, RegisteredModel, RegistryClient, RegistryError
from workloads.registry.lock import effective_share
from workloads.registry.rollout import CHALLENGER, CHAMPION

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
        self, reason: str, message: str, version: str | None = None, *, answer: RegistryError | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.version = version
        # The registry's answer when the model could not be resolved: see ``server.prepare``.
        self.answer = answer


def fetch(
    client: RegistryClient, ref: ModelRef, cache_dir: Path, skip: Collection[str] = ()
) -> Fetched | None:
    """The version ``ref`` names, downloaded under ``cache_dir/<name>/<version>`` and verified; None when
    it is one of ``skip`` (serving already, or refused before). Raises ``FetchError``."""
    try:
        version = client.resolve(ref)
    except RegistryError as exc:
        raise FetchError("resolve", f"{ref}: {exc}", answer=exc) from None
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
    """Polls an alias and swaps each new version into ``service``; following ``@champion``, also loads
    and unloads the ``@challenger`` as the delivery tags ask (see the module's docstring)."""

    def __init__(self, service: Service, client: RegistryClient, ref: ModelRef, cache_dir: Path) -> None:
        self.service = service
        self.client = client
        self.ref = ref
        self.cache_dir = cache_dir
        self._refused: set[str] = set()  # versions that failed for good
        self._warned: set[tuple[str, str]] = set()  # bad tag values, logged once each

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.check()

    async def check(self) -> bool:
        """One poll (one registry call: the model's aliases and tags); True when a new version was
        swapped in as the champion."""
        if self.service.served is None:  # still loading the first version
            return False
        try:
            model = await asyncio.to_thread(self.client.registered_model, self.ref.name)
        except RegistryError as exc:
            self._failed("resolve", f"{self.ref}: {exc}")
            return False
        assert self.ref.alias is not None  # (a Follower follows an alias)
        swapped = await self._follow(model.aliases.get(self.ref.alias))
        if self.ref.alias == CHAMPION:
            await self._follow_challenger(model)
        return swapped

    async def _follow(self, version: str | None) -> bool:
        service = self.service
        current = service.version
        if version is None:
            self._failed("resolve", f"{self.ref}: no version has the alias {self.ref.alias!r}")
            return False
        if version == current or version in self._refused:
            return False
        challenger = service.challenger
        if challenger is not None and challenger.version == version:
            await service.promote_challenger()  # loaded and warm already: no fetch, no load
        else:
            fetched = await self._fetch(version)
            if fetched is None:
                return False
            try:
                await service.swap_in(fetched)
            except Exception as exc:
                self._refuse(fetched, exc)
                return False
        log.info("now serving %s version %s (was %s)", self.ref, version, current)
        self._discard(current)
        return True

    async def _follow_challenger(self, model: RegisteredModel) -> None:
        """Load ``@challenger`` beside the champion while the split or the shadow sample is above 0,
        apply both; unload it when both are 0, when the alias is gone or names the champion, or when the
        version it names cannot be served (the champion then serves alone)."""
        service = self.service
        now = datetime.now(UTC)
        split = effective_share(model.tags, now, self._percent(model.tags, SPLIT_TAG, SPLIT_RANGE))
        shadow = effective_share(model.tags, now, self._percent(model.tags, SHADOW_TAG, SHADOW_RANGE))
        wanted = model.aliases.get(CHALLENGER)
        loaded = service.challenger
        if not (split or shadow) or wanted is None or wanted == service.version or wanted in self._refused:
            await self._unload()
            return
        if loaded is None or loaded.version != wanted:
            fetched = await self._fetch(wanted, role=CHALLENGER)
            if fetched is None:
                await self._unload()
                return
            try:
                await service.load_challenger(fetched)
            except Exception as exc:
                self._refuse(fetched, exc, role=CHALLENGER)
                await self._unload()
                return
            if loaded is not None:
                self._discard(loaded.version)
        service.apply(split, shadow)

    async def _unload(self) -> None:
        loaded = self.service.challenger
        await self.service.unload_challenger()
        if loaded is not None:
            self._discard(loaded.version)

    async def _fetch(self, version: str, role: str = CHAMPION) -> Fetched | None:
        """``version`` downloaded and verified, or None (counted and logged)."""
        ref = ModelRef(self.ref.name, version=version)
        try:
            return await asyncio.to_thread(fetch, self.client, ref, self.cache_dir)
        except FetchError as exc:
            if exc.reason == "verify" and exc.version is not None:
                self._refused.add(exc.version)
            self._failed(exc.reason, str(exc), role)
            return None

    def _refuse(self, fetched: Fetched, exc: Exception, role: str = CHAMPION) -> None:
        """A version that cannot be served, for good: incompatible, or an ONNX Runtime load or warm-up
        failure."""
        self._refused.add(fetched.version)
        shutil.rmtree(fetched.directory, ignore_errors=True)
        where = f"{self.ref.name} version {fetched.version}"
        if isinstance(exc, IncompatibleModelError):
            self._failed("incompatible", f"{where}: {exc}", role)
        else:
            self._failed("load", f"{where}: {type(exc).__name__}: {exc}", role)

    def _discard(self, version: str) -> None:
        """Remove a version's files once no track serves it."""
        if self.service.track_for(version) is None:
            shutil.rmtree(self.cache_dir / self.ref.name / version, ignore_errors=True)

    def _percent(self, tags: Mapping[str, str], key: str, bounds: tuple[int, int]) -> int:
        """The integer tag ``key`` within ``bounds``; absent, or anything else, is 0 (logged once)."""
        raw = tags.get(key)
        if raw is None:
            return 0
        try:
            value = int(raw)
        except ValueError:
            value = None
        if value is not None and bounds[0] <= value <= bounds[1]:
            return value
        if (key, raw) not in self._warned:
            self._warned.add((key, raw))
            log.warning(
                "registry tag %s=%r on %s is not an integer in %d..%d; treated as 0",
                key,
                raw,
                self.ref.name,
                *bounds,
            )
        return 0

    def _failed(self, reason: str, message: str, role: str = CHAMPION) -> None:
        self.service.metrics.update_failures[reason].inc()
        what = (
            "model update failed (%s); still serving version %s: %s"
            if role == CHAMPION
            else "challenger not loaded (%s); version %s serves alone: %s"
        )
        log.warning(what, reason, self.service.version, message)


class IncompatibleModelError(ValueError):
    """A version that cannot replace the serving one in place (another input, output or class list)."""


def check_compatible(serving: ModelArtifact, candidate: ModelArtifact) -> None:
    """A swapped-in version must take the same requests and answer in the same shape: the request
    models, the V2 metadata and the drift reference were built from the first version."""
    old, new = serving.metadata, candidate.metadata
    for field in ("name", "inputs", "outputs", "feature_names", "class_names"):
        if getattr(old, field) != getattr(new, field):
            raise IncompatibleModelError(f"its {field} differ from the serving version's")
