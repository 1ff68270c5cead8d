"""Alias moves against a registry: the decisions of ``rollout`` applied and recorded.

Each move sets the alias (one call: MLflow moves an alias atomically) and then tags the version with
who, when and how. ``champion`` moves last, so a server polling it never sees a half-made promotion.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from workloads.registry import rollout
from workloads.registry.client import ModelVersion, RegistryClient


def move_aliases(
    client: RegistryClient, name: str, moves: Iterable[rollout.AliasMove], *, actor: str, action: str
) -> None:
    for move in moves:
        client.set_alias(name, move.alias, move.version)
        when = datetime.now(UTC)
        for key, value in rollout.audit_tags(move, actor=actor, action=action, when=when).items():
            client.set_version_tag(name, move.version, key, value)


def run_metric(client: RegistryClient, version: ModelVersion, metric: str) -> float | None:
    """The latest value of ``metric`` logged by the run that produced ``version``."""
    if not version.run_id:
        return None
    metrics = client.get_run(version.run_id).get("data", {}).get("metrics", [])
    values = [m["value"] for m in metrics if m.get("key") == metric]
    return float(values[-1]) if values else None


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
) -> rollout.Decision:
    """``action`` names the move in the audit tags (default: ``promote``, ``promote --force``)."""
    candidate = client.get_version(name, version)  # a RegistryError (not found) if there is none
    champion = client.alias_or_none(name, rollout.CHAMPION)
    decision = rollout.promotion(
        version,
        champion.version if champion else None,
        metric=metric,
        candidate_value=run_metric(client, candidate, metric),
        champion_value=run_metric(client, champion, metric) if champion else None,
        tolerance=tolerance,
        force=force,
    )
    action = action or "promote" + (" --force" if force else "")
    move_aliases(client, name, decision.moves, actor=actor, action=action)
    return decision


def rollback(client: RegistryClient, name: str, *, actor: str, action: str = "rollback") -> rollout.Decision:
    champion = client.alias_or_none(name, rollout.CHAMPION)
    previous = client.alias_or_none(name, rollout.PREVIOUS_CHAMPION)
    decision = rollout.rollback(
        champion.version if champion else None, previous.version if previous else None
    )
    move_aliases(client, name, decision.moves, actor=actor, action=action)
    return decision
