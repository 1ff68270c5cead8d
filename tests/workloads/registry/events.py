"""One lifecycle event as the record tests write it (tests/workloads/registry/test_record_*.py)."""

from __future__ import annotations

from workloads.registry.record import Event


def sample_event(action: str, at: str, reason: str = "") -> Event:
    """``action`` by ana at ``at``, with a champion and a number, as a promotion's events carry."""
    return Event(
        at=at,
        model="digits-mlp",
        action=action,
        by="ana",
        authenticated=True,
        versions={"champion": "2"},
        numbers={"accuracy": 0.97},
        reason=reason,
    )
