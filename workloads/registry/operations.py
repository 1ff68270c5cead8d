"""Alias moves against a registry: the decisions of ``rollout`` applied and recorded.

Each move sets the alias (one call: MLflow moves an alias atomically) and then tags the version with
who, when and how. ``champion`` moves last, so a server polling it never sees a half-made promotion. With
a ``journal`` (record.py) each promotion and rollback is also appended to the lifecycle record, with the
numbers it was decided on: the tags show the latest move, the record every one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from workloads.registry import approval, lock, rollout
from workloads.registry.client import ModelVersion, RegistryClient, RegistryError
from workloads.registry.record import Journal

FAILED = (lock.STOPPED, lock.ROLLED_BACK)


def move_aliases(
    client: RegistryClient,
    name: str,
    moves: Iterable[rollout.AliasMove],
    *,
    actor: str,
    action: str,
    claim: Mapping[str, Any] | None = None,
) -> None:
    """``claim``: what the caller says of the moves (reason, numbers, ``force``), which the registry puts on
    its record event of each move of a protected alias (client.py ``MOVE_HEADER``)."""
    for move in moves:
        client.set_alias(name, move.alias, move.version, {"reason": action, **(claim or {})})
        when = datetime.now(UTC)
        for key, value in rollout.audit_tags(move, actor=actor, action=action, when=when).items():
            client.set_version_tag(name, move.version, key, value)


class LockedError(RegistryError):
    """An alias move refused because a rollout holds the model (``lock.holder``)."""


def ensure_free(client: RegistryClient, name: str, holding: str | None) -> None:
    """Refuse an alias move while a rollout holds ``name``, unless ``holding`` is that rollout's lock."""
    tags = client.registered_model(name).tags
    holder = lock.holder(tags, datetime.now(UTC))
    if holder is not None and tags.get(lock.RUNNING_TAG) != holding:
        raise LockedError(
            f"{name}: {holder}; no alias moves until it ends (mlplatform rollout abort {name} stops it)",
            "LOCKED",
        )


def evidence(
    client: RegistryClient, version: ModelVersion, metric: str, verdict: approval.Verdict | None = None
) -> rollout.Evidence:
    """What the promotion of ``version`` is judged on: its run's latest ``metric`` and dataset digest, and
    how its last rollout ended: ``verdict``, the record's (approval.py ``rollout_verdict``), unless its
    tags say it stopped or was rolled back and the record does not. A stop on a tag still refuses (a stop
    is never a privilege); a ``passed`` tag admits nothing, as any EDIT holder can write one."""
    run = client.get_run(version.run_id).get("data", {}) if version.run_id else {}
    values = [m["value"] for m in run.get("metrics", ()) if m.get("key") == metric]
    params = {p["key"]: p["value"] for p in run.get("params", ())}
    tagged = version.tags.get(lock.OUTCOME_TAG)
    if tagged in FAILED and (verdict is None or verdict.outcome not in FAILED):
        verdict = approval.Verdict(tagged, version.tags.get(lock.RESULT_TAG) or "?", None)
    return rollout.Evidence(
        metric=float(values[-1]) if values else None,
        dataset=params.get("dataset_sha256") or None,
        outcome=verdict.outcome if verdict else None,
        result=verdict.reason if verdict else None,
        against=verdict.against if verdict else None,
        labelled=verdict.labelled if verdict else None,
    )


def promote(
    client: RegistryClient,
    name: str,
    version: str,
    *,
    metric: str,
    tolerance: float,
    force: bool,
    actor: str,
    action: str | None = None,
    holding: str | None = None,
    journal: Journal | None = None,
    verdict: approval.Verdict | None = None,
) -> rollout.Decision:
    """``action`` names the move in the audit tags (default: ``promote``, ``promote --force``);
    ``holding``: the lock of the rollout promoting (anyone else is refused while one runs); ``verdict``:
    how the version's last rollout ended, as the lifecycle record says (``evidence``)."""
    candidate = client.get_version(name, version)  # a RegistryError (not found) if there is none
    ensure_free(client, name, holding)
    champion = client.alias_or_none(name, rollout.CHAMPION)
    judged = not force and bool(metric)
    candidate_evidence = evidence(client, candidate, metric, verdict) if judged else rollout.Evidence()
    held = evidence(client, champion, metric) if champion and judged else rollout.Evidence()
    decision = rollout.promotion(
        version,
        champion.version if champion else None,
        metric=metric,
        candidate=candidate_evidence,
        held=held,
        tolerance=tolerance,
        force=force,
    )
    action = action or "promote" + (" --force" if force else "")
    numbers = {"candidate": asdict(candidate_evidence), "champion": asdict(held), "tolerance": tolerance}
    numbers = numbers if judged else {}
    # The registry appends each move with these where it authenticates (guard.py); else they go here.
    claim = {"numbers": numbers, "force": force}
    move_aliases(client, name, decision.moves, actor=actor, action=action, claim=claim)
    if journal is not None and decision.moves and not journal.registry_appends_moves:
        versions = {move.alias: move.version for move in decision.moves}
        journal.append(name, approval.PROMOTE, versions, reason=action, numbers=numbers)
    return decision


def rollback(
    client: RegistryClient,
    name: str,
    *,
    actor: str,
    action: str = "rollback",
    holding: str | None = None,
    journal: Journal | None = None,
    restore_only: bool = False,
) -> rollout.Decision:
    """``restore_only``: ``@champion`` onto ``@previous-champion``'s version and nothing else, the one move
    the registry lets a restorer make (the drift monitor; workloads/registry/server/guard.py); the version
    rolled back from stays on the record, not in ``@previous-champion``."""
    ensure_free(client, name, holding)
    champion = client.alias_or_none(name, rollout.CHAMPION)
    previous = client.alias_or_none(name, rollout.PREVIOUS_CHAMPION)
    decision = rollout.rollback(
        champion.version if champion else None, previous.version if previous else None
    )
    if restore_only:
        decision = dataclasses.replace(
            decision, moves=tuple(m for m in decision.moves if m.alias == rollout.CHAMPION)
        )
    move_aliases(client, name, decision.moves, actor=actor, action=action)
    if journal is not None and decision.moves and not journal.registry_appends_moves:
        journal.append(name, approval.ROLLBACK, {m.alias: m.version for m in decision.moves}, reason=action)
    return decision
