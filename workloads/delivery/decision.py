"""The rollout's judgement of one analysis window: a pure function of the window's numbers.

Every gate needs its own evidence: the error and latency gates ``minRequests`` requests of the challenger
(and of the champion they compare with), shadow agreement ``minRequests`` compared copies, the drift gate
a drift window of ``driftMinSamples`` rows on some server. A gate whose evidence is there and which is
breached fails the step at once, whatever the other gates lack; a gate without its evidence extends the
window (the runner then waits another window, keeping the start, so evidence accumulates); only when every
gate has its evidence and none is breached does the step pass. Drift below the floor is never a pass: PSI
over a few hundred rows alarms by chance (workloads/inference/drift.py), and a quiet PSI over few rows is
as meaningless as a loud one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from workloads.delivery.plan import SHADOW, BakePlan, Gates, RolloutPlan, Step


@dataclass(frozen=True)
class RoleWindow:
    """One version's live traffic in the window (inference_version_*), summed over the servers."""

    requests: int = 0
    errors: int = 0
    p99_s: float | None = None


@dataclass(frozen=True)
class ShadowWindow:
    """Copies of champion requests to the challenger (inference_shadow_*), summed over the servers;
    the p99s are of the same rows on each version (inference_shadow_duration_seconds)."""

    compared: int = 0
    agreed: int = 0
    dropped: int = 0
    failed: int = 0
    challenger_p99_s: float | None = None
    champion_p99_s: float | None = None


@dataclass(frozen=True)
class DriftWindow:
    """A version's drift at the end of the window, per server: (rows in its drift window, its largest
    per-feature PSI or None when the server reports none)."""

    servers: tuple[tuple[int, float | None], ...] = ()


@dataclass(frozen=True)
class WindowStats:
    champion: RoleWindow = field(default_factory=RoleWindow)
    challenger: RoleWindow = field(default_factory=RoleWindow)
    shadow: ShadowWindow = field(default_factory=ShadowWindow)
    drift: DriftWindow = field(default_factory=DriftWindow)
    # Accuracy of the challenger on the labelled set, when one was sent.
    accuracy: float | None = None
    # ... and of the champion on the same set, measured beside it: what ``models promote`` compares.
    champion_accuracy: float | None = None


class Outcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    EXTEND = "extend"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    # Why: the breached gate (fail), the missing evidence (extend), or what was measured (pass).
    reason: str


@dataclass
class _Findings:
    failed: list[str] = field(default_factory=list)
    short: list[str] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)

    def verdict(self) -> Verdict:
        if self.failed:
            return Verdict(Outcome.FAIL, "; ".join(self.failed))
        if self.short:
            return Verdict(Outcome.EXTEND, "; ".join(self.short))
        return Verdict(Outcome.PASS, "; ".join(self.measured) or "no gate set")


def judge_step(step: Step, stats: WindowStats, plan: RolloutPlan) -> Verdict:
    """The verdict on one window of ``step`` (shadow, or a challenger percentage)."""
    gates, found = plan.gates, _Findings()
    if step == SHADOW:
        shadow = stats.shadow
        reached = shadow.compared + shadow.failed
        _errors(found, "shadow copies", reached, shadow.failed, stats.champion, gates, plan.min_requests)
        _latency(
            found,
            "shadow",
            shadow.challenger_p99_s,
            shadow.champion_p99_s,
            reached,
            reached,
            gates,
            plan.min_requests,
        )
        _agreement(found, shadow, plan)
    else:
        live = stats.challenger
        _errors(found, "requests", live.requests, live.errors, stats.champion, gates, plan.min_requests)
        _latency(
            found,
            "live",
            live.p99_s,
            stats.champion.p99_s,
            live.requests,
            stats.champion.requests,
            gates,
            plan.min_requests,
        )
    _drift(found, stats.drift, gates.max_psi, plan.drift_min_samples)
    if gates.min_accuracy is not None:
        if stats.accuracy is None:
            found.failed.append("labelled-set accuracy was not measured")
        elif stats.accuracy < gates.min_accuracy:
            found.failed.append(f"labelled-set accuracy {stats.accuracy:.4f} < {gates.min_accuracy:g}")
        else:
            found.measured.append(f"accuracy {stats.accuracy:.4f}")
    _accuracy_drop(found, stats, gates.max_accuracy_drop)
    return found.verdict()


def _accuracy_drop(found: _Findings, stats: WindowStats, drop: float | None) -> None:
    if drop is None:
        return
    if stats.accuracy is None or stats.champion_accuracy is None:
        found.failed.append("labelled-set accuracy beside the champion's was not measured")
        return
    stated = f"labelled-set accuracy {stats.accuracy:.4f} vs the champion's {stats.champion_accuracy:.4f}"
    if stats.accuracy < stats.champion_accuracy - drop:
        found.failed.append(f"{stated} (more than {drop:g} below)")
    else:
        found.measured.append(stated)


def judge_bake(champion: RoleWindow, drift: DriftWindow, bake: BakePlan, plan: RolloutPlan) -> Verdict:
    """The verdict on one window of the newly promoted champion: fail on a breach; a window without
    enough evidence is no breach (EXTEND), the bake simply goes on to its end."""
    found = _Findings()
    if bake.max_error_rate is not None:
        if champion.requests < plan.min_requests:
            found.short.append(f"{champion.requests} requests < {plan.min_requests}")
        else:
            rate = champion.errors / champion.requests
            (found.failed if rate > bake.max_error_rate else found.measured).append(
                f"error rate {rate:.2%} ({champion.errors}/{champion.requests})"
                + (f" > {bake.max_error_rate:.2%}" if rate > bake.max_error_rate else "")
            )
    _drift(found, drift, bake.max_psi, plan.drift_min_samples)
    return found.verdict()


def _errors(
    found: _Findings, what: str, count: int, errors: int, champion: RoleWindow, gates: Gates, minimum: int
) -> None:
    if gates.max_error_rate is None and gates.max_error_rate_increase is None:
        return
    if count < minimum:
        found.short.append(f"{count} challenger {what} < {minimum}")
        return
    rate = errors / count
    stated = f"error rate {rate:.2%} ({errors}/{count})"
    if gates.max_error_rate is not None and rate > gates.max_error_rate:
        found.failed.append(f"{stated} > {gates.max_error_rate:.2%}")
        return
    if gates.max_error_rate_increase is not None:
        if champion.requests < minimum:
            found.short.append(f"{champion.requests} champion requests < {minimum}")
            return
        base = champion.errors / champion.requests
        if rate - base > gates.max_error_rate_increase:
            found.failed.append(
                f"{stated} exceeds the champion's {base:.2%} by more than {gates.max_error_rate_increase:.2%}"
            )
            return
    found.measured.append(stated)


def _latency(
    found: _Findings,
    what: str,
    challenger: float | None,
    champion: float | None,
    challenger_count: int,
    champion_count: int,
    gates: Gates,
    minimum: int,
) -> None:
    ratio, added_ms = gates.max_p99_ratio, gates.max_p99_added_ms
    if ratio is None and added_ms is None:
        return
    if challenger_count < minimum or champion_count < minimum or challenger is None or champion is None:
        found.short.append(
            f"{what} p99: {challenger_count} challenger and {champion_count} champion"
            f" requests, {minimum} each needed"
        )
        return
    limits = [champion * ratio] if ratio is not None else []
    limits += [champion + added_ms / 1000] if added_ms is not None else []
    allowed = max(limits)
    stated = f"{what} p99 {challenger * 1000:.1f} ms vs the champion's {champion * 1000:.1f} ms"
    if challenger > allowed:
        found.failed.append(f"{stated} (allowed {allowed * 1000:.1f} ms)")
    else:
        found.measured.append(stated)


def _agreement(found: _Findings, shadow: ShadowWindow, plan: RolloutPlan) -> None:
    """Shadow agreement: a gate, or where the plan judges the challenger beside the champion on labelled
    rows (``RolloutPlan.judges_beside_champion``), only reported with its numbers, for every challenger."""
    gate = plan.gates.min_shadow_agreement
    if plan.judges_beside_champion:
        if shadow.compared:
            agreement = shadow.agreed / shadow.compared
            found.measured.append(
                f"shadow agreement {agreement:.2%} ({shadow.agreed}/{shadow.compared}), not a gate: "
                "judged beside the champion on the labelled set"
            )
        return
    if gate is None:
        return
    if shadow.compared < plan.min_requests:
        found.short.append(
            f"{shadow.compared} compared shadow copies < {plan.min_requests} ({shadow.dropped} dropped)"
        )
        return
    agreement = shadow.agreed / shadow.compared
    stated = f"shadow agreement {agreement:.2%} ({shadow.agreed}/{shadow.compared})"
    if agreement < gate:
        found.failed.append(f"{stated} < {gate:.2%}")
    else:
        found.measured.append(stated)


def _drift(found: _Findings, drift: DriftWindow, max_psi: float | None, floor: int) -> None:
    if max_psi is None:
        return
    judged = [psi for samples, psi in drift.servers if samples >= floor and psi is not None]
    if not judged:
        rows = max((samples for samples, _ in drift.servers), default=0)
        found.short.append(f"drift window {rows} rows < {floor}: PSI not judged yet")
        return
    worst = max(judged)
    if worst > max_psi:
        found.failed.append(f"PSI {worst:.3f} > {max_psi:g}")
    else:
        found.measured.append(f"PSI {worst:.3f}")
