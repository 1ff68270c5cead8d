"""The rollout's hold on a registered model, as tags every party reads the same way: its lock, its lease,
an operator's pause or abort, and each version's rollout outcome.

A rollout sets ``RUNNING_TAG`` (who, where, since) and ``LEASE_TAG`` (until when its split holds, UTC,
ISO 8601) when it starts, and renews the lease at every window and every poll while a setting is being
applied: each renewal reaches one window plus the plan's ``leaseGraceSeconds`` ahead. Three parties
check the lease:

- the inference servers (workloads/inference/follow.py): a split or shadow share above 0 counts only
  while the lease is current, so the share of a rollout that died without its cleanup (SIGKILL, OOM, a
  node lost, cut off from the registry) returns to 0 within one window plus the grace, with no command;
- a second rollout, which refuses to start while the lease holds and takes over a lapsed lock;
- every alias move (workloads/registry/operations.py): ``promote`` and ``rollback`` are refused while a
  rollout holds the model, except by that rollout itself, so nobody moves ``@champion`` under a running
  rollout's judgement.

``mlplatform rollout pause|resume|abort NAME`` set ``PAUSE_TAG`` and ``ABORT_TAG``; the running rollout
reads them at each renewal (docs/delivery.md). Pure functions of the tags and a time: no I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

RUNNING_TAG: Final = "mlplatform.delivery.running"  # JSON: by, host, at
LEASE_TAG: Final = "mlplatform.delivery.lease-until"  # UTC ISO 8601
PAUSE_TAG: Final = "mlplatform.delivery.paused"  # JSON: by, at
ABORT_TAG: Final = "mlplatform.delivery.abort"  # JSON: by, at
# Version tags: how the last rollout of a version ended (the full history is the lifecycle record).
RESULT_PREFIX: Final = "mlplatform.delivery"
RESULT_TAG: Final = f"{RESULT_PREFIX}.result"  # one line: "promoted after ...", "stopped at 25%: ..."
OUTCOME_TAG: Final = f"{RESULT_PREFIX}.outcome"  # promoted | passed | stopped | rolled-back
AGAINST_TAG: Final = f"{RESULT_PREFIX}.against"  # the champion version that rollout judged it against
# passed: every step passed on a plan that does not promote (``promote: false``); it awaits a promotion.
PROMOTED, PASSED, STOPPED, ROLLED_BACK = "promoted", "passed", "stopped", "rolled-back"


def verdict_action(outcome: str) -> str:
    """The lifecycle record's action for a rollout that ended ``outcome`` (``rollout-passed``, ...)."""
    return f"rollout-{outcome}"


def lease_until(tags: Mapping[str, str]) -> datetime | None:
    """The lease's end, or None when absent or unreadable (no lease: nothing holds)."""
    try:
        until = datetime.fromisoformat(tags.get(LEASE_TAG, ""))
    except ValueError:
        return None
    return until if until.tzinfo is not None else until.replace(tzinfo=UTC)


def lease_live(tags: Mapping[str, str], now: datetime) -> bool:
    until = lease_until(tags)
    return until is not None and now < until


@dataclass(frozen=True)
class Holder:
    """The rollout holding a model: who started it, on which host, since when, its lease's end."""

    by: str
    host: str
    at: str
    until: datetime

    def __str__(self) -> str:
        return (
            f"a rollout by {self.by} on {self.host} since {self.at} holds it"
            f" (lease until {self.until.isoformat(timespec='seconds')})"
        )


def _fields(value: str) -> dict[str, str]:
    try:
        found = json.loads(value) if value else None
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def holder(tags: Mapping[str, str], now: datetime) -> Holder | None:
    """The rollout holding the model now: a lock whose lease is current; None when free or lapsed."""
    if RUNNING_TAG not in tags or not lease_live(tags, now):
        return None
    until = lease_until(tags)
    assert until is not None
    found = _fields(tags[RUNNING_TAG])
    return Holder(found.get("by", "?"), found.get("host", "?"), found.get("at", "?"), until)


def request(tags: Mapping[str, str], key: str) -> dict[str, str] | None:
    """An operator's pause or abort (``PAUSE_TAG``, ``ABORT_TAG``): who and when; None when not set."""
    return _fields(tags[key]) or {"by": "?", "at": "?"} if key in tags else None


def stamp(by: str, when: datetime) -> str:
    """The JSON a lock, pause or abort tag carries."""
    return json.dumps({"by": by, "at": when.isoformat(timespec="seconds")}, sort_keys=True)


def effective_share(tags: Mapping[str, str], now: datetime, share: int) -> int:
    """What a server applies of a split or shadow ``share`` read from the tags: the share while a rollout's
    lease is current, else 0 (a share nobody renews is a share nobody judges)."""
    return share if share and lease_live(tags, now) else 0
