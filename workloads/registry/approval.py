"""Promotion as a change: request, approve, reject, decided on the lifecycle record alone.

The record (record.py) is append-only, so an approval cannot be forged or withdrawn by editing a tag, as
the registry's own tags can by anyone with EDIT. The rules (issue 40; the control review's S1 and L4):

- a promotion of a version needs, when the stack requires approval, an ``approve`` after the version's
  latest ``request-promotion`` and no ``reject`` after that request, each counted only from someone who
  may review it (below), as the record names them: the registry writes who (record.py);
- only a member of the approver role (the stack's ``workloads.registry.approvers``) approves or rejects,
  and never who requested the promotion or who trained the version (four eyes);
- ``--force`` skips the approval and the metric checks, and only an approver may use it; it is recorded
  as such;
- the rollout's gates are a pre-approved path when the stack's plan says so (``promote``: unset, false
  where approval is required, true elsewhere); with ``promote: false`` a rollout that passes hands the
  version to this change;
- how a version's rollouts ended is read here too (``rollout_verdict``): a ``passed`` counts only as the
  record's ``rollout-passed`` event written, authenticated, by the stack's rollout user; the version tags
  the rollout also sets (lock.py ``OUTCOME_TAG``) are writable by every EDIT holder, training's user
  included, so a tag never admits a version.

An event counts for a version only where it carries the digest the version has now (record.py
``version_digest``, review rev40c C3): MLflow restarts version numbers when a model is deleted and
re-created, so a number alone would let the old model's approvals and rollouts decide the new one.

Every identity here is the registry's authenticated user (record.Identity); an unauthenticated name can
neither approve nor force where approval is required.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workloads.registry.lock import PASSED, PROMOTED, ROLLED_BACK, STOPPED, verdict_action
from workloads.registry.record import Event, Identity, Kind
from workloads.registry.rollout import CHALLENGER, CHAMPION

REQUEST, APPROVE, REJECT = Kind.REQUEST, Kind.APPROVE, Kind.REJECT
# The role a request, approval or rejection names its version in (mlplatform/models_cmd.py).
CANDIDATE = "candidate"
# The record's moves of ``@champion`` (operations.py ``promote``, ``rollback``: every alias move that
# serving sees, by a person, the rollout or the drift monitor).
PROMOTE, ROLLBACK = Kind.PROMOTE, Kind.ROLLBACK
# The record's ending of a rollout (workloads/delivery/runner.py ``_record``), by action.
_ENDINGS = {verdict_action(outcome): outcome for outcome in (PROMOTED, PASSED, STOPPED, ROLLED_BACK)}


@dataclass(frozen=True)
class Policy:
    """The stack's promotion rules (components/config.py ``RegistryWorkloadConfig``) and the registry user
    its rollout runs as (components/handle.py ``ROLLOUT_USER``; None: the stack has no authenticated
    rollout, so no rollout verdict admits a version)."""

    required: bool = False
    approvers: tuple[str, ...] = ()
    rollout_user: str | None = None


@dataclass(frozen=True)
class Verdict:
    """How a rollout of a version ended, from one record event: ``outcome`` (lock.py), its reason, the
    champion it was judged against, and the accuracies of the version and of that champion on the plan's
    labelled set at its last step (``labelled``: challenger, champion; None where the plan has none)."""

    outcome: str
    reason: str
    against: str | None
    labelled: tuple[float, float] | None = None


def _names(event: Event, role: str, version: str, digest: str) -> bool:
    """Whether ``event`` names ``version``, as it is now (``digest``), in ``role``."""
    return event.versions.get(role) == version and event.digests.get(version) == digest


def rollout_verdict(
    events: Sequence[Event], version: str, digest: str, rollout_user: str | None
) -> Verdict | None:
    """The verdict ``promote`` judges ``version`` on, or None when the record has none that counts.

    A stop counts from anyone (it is never a privilege): the latest ending of any rollout of the version
    when it stopped or was rolled back, else the latest ending by the rollout user when that one did (a
    caller's own rollout, on a plan and metrics of its choosing, never clears the stack's stop). Otherwise
    only the rollout user's latest ending, authenticated: the stack's plan, run as its Job."""
    endings = [e for e in events if e.action in _ENDINGS and _names(e, CHALLENGER, version, digest)]
    trusted = [e for e in endings if rollout_user is not None and e.authenticated and e.by == rollout_user]
    failed = [e for e in (*trusted[-1:], *endings[-1:]) if _ENDINGS[e.action] in (STOPPED, ROLLED_BACK)]
    chosen = failed[-1] if failed else (trusted[-1] if trusted else None)
    if chosen is None:
        return None
    if _ENDINGS[chosen.action] == PASSED and _champion_moved_after(events, chosen):
        return None
    mine, theirs = _number(chosen.numbers.get("accuracy")), _number(chosen.numbers.get("champion_accuracy"))
    labelled = (mine, theirs) if mine is not None and theirs is not None else None
    return Verdict(_ENDINGS[chosen.action], chosen.reason, chosen.versions.get(CHAMPION), labelled)


def _champion_moved_after(events: Sequence[Event], ending: Event) -> bool:
    """Whether ``@champion`` moved after ``ending`` (review rev40b C2): a ``passed`` judged the version
    beside the champion of its time, on the traffic of its time; a promotion or a rollback since (even
    one that returned the same version) ends what it showed, and the version needs a rollout of its own
    against the champion as it is. No age limit besides: the drift monitor and a new rollout judge
    traffic that changes, and a fixed age would be a number with no source."""
    after = next(i for i, e in enumerate(events) if e is ending) + 1
    return any(e.action in (PROMOTE, ROLLBACK) for e in events[after:])


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _latest_request(events: Sequence[Event], version: str, digest: str) -> int | None:
    found = [i for i, e in enumerate(events) if e.action == REQUEST and _names(e, CANDIDATE, version, digest)]
    return found[-1] if found else None


def _no_request(events: Sequence[Event], version: str, digest: str, needs: str) -> str:
    """Why ``version`` has no request to decide on: none at all, or only ones of another version under
    its number (another digest: the model was deleted and re-created since), named in the line."""
    other = [e for e in events if e.action == REQUEST and e.versions.get(CANDIDATE) == version]
    if other:
        named = other[-1].digests.get(version, "none")
        return (
            f"version {version}'s promotion request of {other[-1].at} names digest {named}, but version"
            f" {version} now has {digest} (the model was re-created since): request it again"
            " (mlplatform models request-promotion)"
        )
    return f"version {version} {needs} (mlplatform models request-promotion)"


def _approver(who: Identity, policy: Policy) -> str | None:
    """Why ``who`` is not an approver, or None."""
    if not who.authenticated:
        return f"{who} is not authenticated by the registry, so cannot act as an approver"
    if who.name not in policy.approvers:
        shown = ", ".join(policy.approvers) or "none declared (workloads.registry.approvers)"
        return f"{who.name} is not in the approver role ({shown})"
    return None


def review_refusal(
    events: Sequence[Event],
    version: str,
    digest: str,
    who: Identity,
    policy: Policy,
    trained_by: str | None,
) -> str | None:
    """Why ``who`` may not approve or reject ``version`` now, or None. ``trained_by``: the version's
    ``mlplatform.trained_by``, which the registry's guard lets only the registering user write, once, at
    registration (workloads/registry/server/guard.py ``trainer_refusal``; MLflow records no authenticated
    creator of its own); ``digest``: the version's now (record.py ``version_digest``)."""
    index = _latest_request(events, version, digest)
    if index is None:
        return _no_request(events, version, digest, "has no promotion request")
    if (refused := _approver(who, policy)) is not None:
        return refused
    if who.name == events[index].by:
        return f"{who.name} requested this promotion; another approver must review it"
    if trained_by is None:
        return (
            f"version {version} records no trainer (mlplatform.trained_by, which the registry lets only the"
            " registering user set, at registration): who trained it cannot be told from its reviewer;"
            " register it with mlplatform train"
        )
    if who.name == trained_by:
        return f"{who.name} trained version {version}; another approver must review it"
    return None


def _reviews(
    events: Sequence[Event], version: str, digest: str, policy: Policy, trained_by: str | None
) -> list[Event]:
    """The approvals and rejections of ``version``'s latest request that count: each by whom
    ``review_refusal`` lets review it (its ``by`` the registry's authenticated user, review rev40c A1),
    judged on the record as it stood then. Any other is a claim that changes nothing."""
    index = _latest_request(events, version, digest)
    if index is None:
        return []
    return [
        e
        for i, e in enumerate(events[index + 1 :], start=index + 1)
        if e.action in (APPROVE, REJECT)
        and _names(e, CANDIDATE, version, digest)
        and review_refusal(events[:i], version, digest, Identity(e.by, e.authenticated), policy, trained_by)
        is None
    ]


def approving(
    events: Sequence[Event], version: str, digest: str, policy: Policy, trained_by: str | None
) -> Event | None:
    """The latest approval of ``version``'s latest request that counts (``_reviews``), or None: what a
    promotion under ``policy`` rests on, named by the registry's event of the move (guard.py)."""
    return next(
        (e for e in reversed(_reviews(events, version, digest, policy, trained_by)) if e.action == APPROVE),
        None,
    )


def promotion_refusal(
    events: Sequence[Event],
    version: str,
    digest: str,
    who: Identity,
    policy: Policy,
    force: bool,
    trained_by: str | None = None,
) -> str | None:
    """Why the promotion of ``version`` by ``who`` is refused under ``policy``, or None. ``trained_by``:
    the version's ``mlplatform.trained_by`` and ``digest`` its digest now (``review_refusal``)."""
    if force:
        if policy.required and (refused := _approver(who, policy)) is not None:
            return f"--force is for the approver role: {refused}"
        return None
    if not policy.required:
        return None
    if _latest_request(events, version, digest) is None:
        return _no_request(events, version, digest, "needs an approved promotion request")
    later = _reviews(events, version, digest, policy, trained_by)
    if any(e.action == REJECT for e in later):
        reason = next(e.reason for e in reversed(later) if e.action == REJECT)
        return f"version {version}'s promotion request was rejected: {reason}"
    if not any(e.action == APPROVE for e in later):
        return f"version {version}'s promotion request awaits an approval (mlplatform models approve)"
    return None
