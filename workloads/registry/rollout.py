"""Promote and rollback as pure decisions: which aliases move where, and the audit tags they leave.

Serving follows ``champion``; training only ever sets ``challenger``. A promotion records the champion it
replaces as ``previous-champion``, so a rollback is one alias move back; rolling back swaps the two, so a
second rollback undoes the first. Every move leaves tags on the version that received the alias: who
(``--actor`` or ``$USER``), when (UTC, ISO 8601) and by which action, as MLflow keeps no alias history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

CHAMPION = "champion"
CHALLENGER = "challenger"
PREVIOUS_CHAMPION = "previous-champion"
TAG_PREFIX = "mlplatform.alias"


@dataclass(frozen=True)
class AliasMove:
    alias: str
    version: str


@dataclass(frozen=True)
class Decision:
    """The alias moves to make, in order (``champion`` last: the move serving sees), or why none."""

    moves: tuple[AliasMove, ...] = ()
    refused: str | None = None
    note: str | None = None


def promotion(
    version: str,
    champion: str | None,
    *,
    metric: str,
    candidate_value: float | None,
    champion_value: float | None,
    tolerance: float,
    force: bool,
) -> Decision:
    """Make ``version`` the champion unless its ``metric`` (higher is better) falls below the current
    champion's by more than ``tolerance``; ``force`` skips the comparison, never the record."""
    if champion == version:
        return Decision(note=f"version {version} is already the {CHAMPION}")
    if champion is not None and not force:
        if candidate_value is None:
            return Decision(refused=f"version {version} has no {metric} to compare (use --force)")
        if champion_value is not None and candidate_value < champion_value - tolerance:
            return Decision(
                refused=f"version {version} {metric} {candidate_value:.4f} is below the {CHAMPION}'s"
                f" (version {champion}) {champion_value:.4f} by more than the tolerance {tolerance:g}"
                " (use --force)"
            )
    moves = (AliasMove(PREVIOUS_CHAMPION, champion),) if champion is not None else ()
    return Decision(moves=(*moves, AliasMove(CHAMPION, version)))


def rollback(champion: str | None, previous: str | None) -> Decision:
    """Back to the previous champion; the one rolled back from becomes the previous champion."""
    if previous is None:
        return Decision(refused=f"no {PREVIOUS_CHAMPION} to roll back to")
    if champion is None or champion == previous:
        return Decision(moves=(AliasMove(CHAMPION, previous),))
    return Decision(moves=(AliasMove(PREVIOUS_CHAMPION, champion), AliasMove(CHAMPION, previous)))


def audit_tags(move: AliasMove, *, actor: str, action: str, when: datetime) -> dict[str, str]:
    """The version tags recording who moved ``move.alias`` onto the version, when and how."""
    key = f"{TAG_PREFIX}.{move.alias}"
    return {f"{key}.by": actor, f"{key}.at": when.isoformat(timespec="seconds"), f"{key}.action": action}
