"""Promote and rollback as pure decisions: which aliases move where, and the audit tags they leave.

Serving follows ``champion``; training only ever sets ``challenger``. A promotion records the champion it
replaces as ``previous-champion``, so a rollback is one alias move back; rolling back swaps the two, so a
second rollback undoes the first. Every move leaves tags on the version that received the alias: who
(``--actor`` or ``$USER``), when (UTC, ISO 8601) and by which action, as MLflow keeps no alias history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from workloads.registry.lock import PASSED, ROLLED_BACK, STOPPED

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


@dataclass(frozen=True)
class Evidence:
    """What a version's promotion is judged on: its run's ``metric``, the sha256 of the dataset that metric
    was measured on (the run's ``dataset_sha256``: its test split is drawn from it), how its last
    rollout ended and why (a ``passed`` only as the lifecycle record has it from the stack's rollout user:
    operations.py ``evidence``) and against which champion version, each None when unknown."""

    metric: float | None = None
    dataset: str | None = None
    outcome: str | None = None
    result: str | None = None
    against: str | None = None
    # That rollout's accuracies on its plan's labelled set: (this version's, the champion's), both measured
    # beside each other; None where its plan has no labelled set.
    labelled: tuple[float, float] | None = None


def promotion(
    version: str,
    champion: str | None,
    *,
    metric: str,
    candidate: Evidence,
    held: Evidence,
    tolerance: float,
    force: bool,
) -> Decision:
    """Make ``version`` the champion unless (``force`` skips these checks, never the record):

    - its last rollout stopped or was rolled back (a live verdict outranks an offline metric);
    - its last rollout passed every step against this very champion (``passed``, on the record by the
      stack's rollout user) and measured both on the plan's labelled set, and its accuracy there falls
      below the champion's by more than ``tolerance``; within it, that same-set comparison is the
      promotion's (a version retrained on the newest dataset has a test metric on another dataset);
    - otherwise (no such rollout, or one whose plan had no labelled set: its live windows judge errors,
      latency and drift, never accuracy beside the champion's), there is a champion and the two
      ``metric`` values were not measured on the same dataset (a test accuracy on another dataset's
      split compares nothing: the trial promoted a version trained on shifted data this way, and it
      served at 0.1 %), or either is missing;
    - its ``metric`` (higher is better) falls below the champion's by more than ``tolerance``."""
    if champion == version:
        return Decision(note=f"version {version} is already the {CHAMPION}")
    if not force:
        refused = _refusal(version, champion, metric, candidate, held, tolerance)
        if refused is not None:
            return Decision(refused=f"{refused} (use --force)")
    moves = (AliasMove(PREVIOUS_CHAMPION, champion),) if champion is not None else ()
    return Decision(moves=(*moves, AliasMove(CHAMPION, version)))


def _refusal(
    version: str, champion: str | None, metric: str, candidate: Evidence, held: Evidence, tolerance: float
) -> str | None:
    if candidate.outcome in (STOPPED, ROLLED_BACK):
        return f"version {version}'s last rollout ended {candidate.outcome}: {candidate.result or '?'}"
    if champion is None:
        return None
    unmeasured = ""
    if candidate.outcome == PASSED and candidate.against == champion:
        if candidate.labelled is None:
            unmeasured = (
                f"; its rollout passed against version {champion} but measured no accuracy beside it"
                " (the plan has no labelledSet)"
            )
        else:
            mine, theirs = candidate.labelled
            if mine < theirs - tolerance:
                return (
                    f"version {version}'s labelled-set accuracy {mine:.4f} in its rollout is below the"
                    f" {CHAMPION}'s (version {champion}) {theirs:.4f} on the same set by more than the"
                    f" tolerance {tolerance:g}"
                )
            return None
    refused = _metric_refusal(version, champion, metric, candidate, held, tolerance)
    return refused + unmeasured if refused is not None else None


def _metric_refusal(
    version: str, champion: str, metric: str, candidate: Evidence, held: Evidence, tolerance: float
) -> str | None:
    if candidate.metric is None:
        return f"version {version} has no {metric} to compare"
    if candidate.dataset is None or held.dataset is None:
        which = version if candidate.dataset is None else champion
        return f"version {which} records no dataset digest, so its {metric} compares with nothing"
    if candidate.dataset != held.dataset:
        return (
            f"version {version}'s {metric} was measured on dataset {candidate.dataset[:12]}, the"
            f" {CHAMPION}'s (version {champion}) on {held.dataset[:12]}: not comparable; roll it out"
            " (mlplatform rollout, with a labelledSet: both judged on the same set)"
        )
    if held.metric is not None and candidate.metric < held.metric - tolerance:
        return (
            f"version {version} {metric} {candidate.metric:.4f} is below the {CHAMPION}'s"
            f" (version {champion}) {held.metric:.4f} by more than the tolerance {tolerance:g}"
        )
    return None


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
