"""The decision as a pure function: each gate both ways, and what happens without enough evidence."""

from __future__ import annotations

import pytest

from components.config import parse_stack_config, rollout_plan
from tests.stack_variants import template
from workloads.delivery.decision import (
    DriftWindow,
    Outcome,
    RoleWindow,
    ShadowWindow,
    WindowStats,
    judge_bake,
    judge_step,
)
from workloads.delivery.plan import BakePlan, Gates, RolloutPlan

# Only the gate under test is set, so each test sees one gate's effect.
NONE = Gates(
    max_error_rate=None, max_p99_ratio=None, max_p99_added_ms=None, max_psi=None, min_shadow_agreement=None
)


def plan(**gates: float | None) -> RolloutPlan:
    judged = gates.get("min_accuracy") is not None or gates.get("max_accuracy_drop") is not None
    labelled = "labelled.npz" if judged else None
    return RolloutPlan(min_requests=100, gates=NONE.model_copy(update=gates), labelled_set=labelled)


HEALTHY = RoleWindow(requests=1000, errors=0, p99_s=0.005)


def live(challenger: RoleWindow, champion: RoleWindow = HEALTHY, **extra: object) -> WindowStats:
    return WindowStats(champion=champion, challenger=challenger, **extra)  # type: ignore[arg-type]


def test_no_gate_passes() -> None:
    assert judge_step(25, live(HEALTHY), plan()).outcome is Outcome.PASS


@pytest.mark.parametrize(("errors", "outcome"), [(10, Outcome.PASS), (11, Outcome.FAIL)])
def test_error_rate_gate(errors: int, outcome: Outcome) -> None:
    verdict = judge_step(5, live(RoleWindow(1000, errors, 0.005)), plan(max_error_rate=0.01))
    assert verdict.outcome is outcome
    assert "error rate" in verdict.reason


def test_error_rate_relative_to_the_champion() -> None:
    """Client errors hit both versions alike: 3% on each is no regression, 3% over 0.5% is."""
    gate = plan(max_error_rate_increase=0.01)
    noisy = RoleWindow(1000, 30, 0.005)
    assert judge_step(25, live(noisy, noisy), gate).outcome is Outcome.PASS
    verdict = judge_step(25, live(noisy, RoleWindow(1000, 5, 0.005)), gate)
    assert verdict.outcome is Outcome.FAIL
    assert "exceeds the champion's 0.50%" in verdict.reason


def test_too_few_requests_extend_rather_than_pass() -> None:
    verdict = judge_step(5, live(RoleWindow(99, 0, 0.005)), plan(max_error_rate=0.01))
    assert verdict.outcome is Outcome.EXTEND
    assert "99 challenger requests < 100" in verdict.reason


def test_a_breach_fails_even_while_another_gate_waits_for_evidence() -> None:
    """Traffic goes back as soon as one gate has seen enough: the PSI floor does not hold up a 422 storm."""
    stats = live(RoleWindow(1000, 500, 0.005), drift=DriftWindow(((10, None),)))
    verdict = judge_step(5, stats, plan(max_error_rate=0.01, max_psi=0.2))
    assert verdict.outcome is Outcome.FAIL
    assert "PSI" not in verdict.reason


@pytest.mark.parametrize(("p99_s", "outcome"), [(0.014, Outcome.PASS), (0.025, Outcome.FAIL)])
def test_p99_added_milliseconds(p99_s: float, outcome: Outcome) -> None:
    """+20 ms per run fails a 10 ms allowance; +9 ms passes it."""
    verdict = judge_step(50, live(RoleWindow(1000, 0, p99_s)), plan(max_p99_added_ms=10))
    assert verdict.outcome is outcome


@pytest.mark.parametrize(("p99_s", "outcome"), [(0.0074, Outcome.PASS), (0.0076, Outcome.FAIL)])
def test_p99_ratio(p99_s: float, outcome: Outcome) -> None:
    verdict = judge_step(50, live(RoleWindow(1000, 0, p99_s)), plan(max_p99_ratio=1.5))
    assert verdict.outcome is outcome


def test_p99_must_exceed_both_the_ratio_and_the_added_milliseconds() -> None:
    """A 5 ms model at 10 ms is twice as slow but only 5 ms slower: within a 10 ms allowance."""
    gate = plan(max_p99_ratio=1.5, max_p99_added_ms=10)
    assert judge_step(5, live(RoleWindow(1000, 0, 0.010)), gate).outcome is Outcome.PASS
    assert judge_step(5, live(RoleWindow(1000, 0, 0.016)), gate).outcome is Outcome.FAIL


def test_p99_needs_champion_requests_too() -> None:
    stats = live(RoleWindow(1000, 0, 0.1), RoleWindow(50, 0, 0.005))
    assert judge_step(50, stats, plan(max_p99_added_ms=10)).outcome is Outcome.EXTEND


@pytest.mark.parametrize(("psi", "outcome"), [(0.19, Outcome.PASS), (0.21, Outcome.FAIL)])
def test_psi_gate(psi: float, outcome: Outcome) -> None:
    stats = live(HEALTHY, drift=DriftWindow(((500, psi),)))
    assert judge_step(25, stats, plan(max_psi=0.2)).outcome is outcome


@pytest.mark.parametrize("psi", [0.05, 3.0])
def test_psi_below_the_500_row_floor_extends_whatever_it_says(psi: float) -> None:
    """A server that reports PSI over 499 rows (its own floor set lower) is not judged: not a pass, not a
    fail (workloads/inference/drift.py: 100 rows alarm every time, 500 rows 0.7%)."""
    stats = live(HEALTHY, drift=DriftWindow(((499, psi),)))
    verdict = judge_step(25, stats, plan(max_psi=0.2))
    assert verdict.outcome is Outcome.EXTEND
    assert "499 rows < 500" in verdict.reason


def test_psi_is_judged_on_the_servers_above_the_floor() -> None:
    stats = live(HEALTHY, drift=DriftWindow(((120, 9.0), (640, 0.3), (700, None))))
    verdict = judge_step(25, stats, plan(max_psi=0.2))
    assert verdict.outcome is Outcome.FAIL
    assert "PSI 0.300 > 0.2" in verdict.reason


def test_no_drift_reported_extends() -> None:
    assert judge_step(25, live(HEALTHY), plan(max_psi=0.2)).outcome is Outcome.EXTEND


SHADOW_OK = ShadowWindow(
    compared=1000, agreed=990, dropped=7, failed=0, challenger_p99_s=0.005, champion_p99_s=0.005
)


@pytest.mark.parametrize(("agreed", "outcome"), [(950, Outcome.PASS), (949, Outcome.FAIL)])
def test_shadow_agreement(agreed: int, outcome: Outcome) -> None:
    stats = WindowStats(shadow=ShadowWindow(compared=1000, agreed=agreed))
    verdict = judge_step("shadow", stats, plan(min_shadow_agreement=0.95))
    assert verdict.outcome is outcome
    assert "shadow agreement" in verdict.reason


# The shipped aws-enterprise-prod's rollout gates, as the stack declares them (``maxAccuracyDrop`` 0.01 on
# its ``labelledSet``, shadow agreement at the plan's default 0.95), nothing else added.
SHIPPED = rollout_plan(
    parse_stack_config(template("aws-enterprise-prod"), "Pulumi.aws-enterprise-prod.yaml")
).model_copy(update={"min_requests": 100})
# A retrain on drifted data: it disagrees with the champion drift made stale on every compared copy.
RETRAIN_SHADOW = ShadowWindow(compared=1000, agreed=0, challenger_p99_s=0.005, champion_p99_s=0.005)


@pytest.mark.parametrize(
    ("accuracy", "outcome", "reason"),
    [
        (0.975, Outcome.PASS, "labelled-set accuracy 0.9750 vs the champion's 0.9800"),
        (0.900, Outcome.FAIL, "labelled-set accuracy 0.9000 vs the champion's 0.9800 (more than 0.01 below)"),
    ],
)
def test_the_shipped_gates_alone_pass_a_good_retrain_and_stop_a_worse_one(
    accuracy: float, outcome: Outcome, reason: str
) -> None:
    """Issue 40 "Done when" (a worse retrained model stops at its first gate) and reviews rev40c A2/B3:
    the shipped plan's labelled comparison beside the champion judges every challenger, and the shadow
    agreement it replaces is reported with its numbers, not judged; no version tag is an input."""
    assert SHIPPED.gates.max_accuracy_drop == 0.01 and SHIPPED.gates.min_accuracy is None
    assert SHIPPED.gates.min_shadow_agreement == 0.95
    stats = WindowStats(
        champion=HEALTHY,
        shadow=RETRAIN_SHADOW,
        accuracy=accuracy,
        champion_accuracy=0.98,
        drift=DriftWindow(servers=((1000, 0.05),)),
    )
    verdict = judge_step("shadow", stats, SHIPPED)
    assert verdict.outcome is outcome, verdict.reason
    assert reason in verdict.reason
    if outcome is Outcome.PASS:
        assert "shadow agreement 0.00% (0/1000), not a gate" in verdict.reason


def test_without_the_comparison_beside_the_champion_agreement_is_a_gate() -> None:
    """A floor on the labelled set does not replace agreement: it compares nothing with the champion."""
    floor = plan(min_shadow_agreement=0.95, min_accuracy=0.5)
    stats = WindowStats(shadow=RETRAIN_SHADOW, accuracy=0.975)
    verdict = judge_step("shadow", stats, floor)
    assert verdict.outcome is Outcome.FAIL
    assert verdict.reason == "shadow agreement 0.00% (0/1000) < 95.00%"


def test_shadow_agreement_needs_compared_copies_not_dropped_ones() -> None:
    stats = WindowStats(shadow=ShadowWindow(compared=10, agreed=10, dropped=5000))
    verdict = judge_step("shadow", stats, plan(min_shadow_agreement=0.95))
    assert verdict.outcome is Outcome.EXTEND
    assert "5000 dropped" in verdict.reason


def test_shadow_failures_are_the_challengers_errors() -> None:
    stats = WindowStats(shadow=ShadowWindow(compared=900, agreed=900, failed=100))
    verdict = judge_step("shadow", stats, plan(max_error_rate=0.01))
    assert verdict.outcome is Outcome.FAIL
    assert "(100/1000)" in verdict.reason


def test_shadow_latency_compares_the_same_rows_on_each_version() -> None:
    slow = ShadowWindow(compared=1000, agreed=1000, challenger_p99_s=0.030, champion_p99_s=0.005)
    assert judge_step("shadow", WindowStats(shadow=slow), plan(max_p99_added_ms=10)).outcome is Outcome.FAIL
    assert judge_step("shadow", WindowStats(shadow=SHADOW_OK), plan(max_p99_added_ms=10)).outcome is (
        Outcome.PASS
    )


def test_shadow_step_ignores_live_challenger_traffic() -> None:
    """At the shadow step the challenger answers nobody: its live counters are not the evidence."""
    stats = WindowStats(challenger=RoleWindow(5000, 5000, 1.0), shadow=SHADOW_OK)
    assert judge_step("shadow", stats, plan(max_error_rate=0.01, max_p99_added_ms=10)).outcome is Outcome.PASS


@pytest.mark.parametrize(
    ("accuracy", "outcome"), [(0.9, Outcome.PASS), (0.89, Outcome.FAIL), (None, Outcome.FAIL)]
)
def test_labelled_accuracy(accuracy: float | None, outcome: Outcome) -> None:
    verdict = judge_step(5, live(HEALTHY, accuracy=accuracy), plan(min_accuracy=0.9))
    assert verdict.outcome is outcome


@pytest.mark.parametrize(
    ("accuracy", "champion", "outcome"),
    [
        (0.80, 0.80, Outcome.PASS),
        (0.79, 0.80, Outcome.PASS),  # one point below: within
        (0.78, 0.80, Outcome.FAIL),
        (0.95, 0.40, Outcome.PASS),  # a retrain far better than a champion drift made stale
        (0.90, None, Outcome.FAIL),  # the champion unmeasured compares nothing
        (None, 0.80, Outcome.FAIL),
    ],
)
def test_labelled_accuracy_beside_the_champion(
    accuracy: float | None, champion: float | None, outcome: Outcome
) -> None:
    """``maxAccuracyDrop``: the challenger against the champion on the same labelled set, in shadow as in
    a live step (review rev40b A3: a retrain is judged beside the champion, not on agreement with it)."""
    stats = live(HEALTHY, accuracy=accuracy, champion_accuracy=champion)
    for step in ("shadow", 5):
        assert judge_step(step, stats, plan(max_accuracy_drop=0.011)).outcome is outcome


BAKE = BakePlan(seconds=600, max_error_rate=0.01, max_psi=0.2)


@pytest.mark.parametrize(("errors", "outcome"), [(10, Outcome.PASS), (11, Outcome.FAIL)])
def test_bake_error_rate(errors: int, outcome: Outcome) -> None:
    verdict = judge_bake(RoleWindow(1000, errors), DriftWindow(((800, 0.01),)), BAKE, plan())
    assert verdict.outcome is outcome


@pytest.mark.parametrize(
    ("servers", "outcome"),
    [(((800, 0.5),), Outcome.FAIL), (((800, 0.1),), Outcome.PASS), (((300, 0.5),), Outcome.EXTEND)],
)
def test_bake_drift(servers: tuple[tuple[int, float | None], ...], outcome: Outcome) -> None:
    assert judge_bake(RoleWindow(1000, 0), DriftWindow(servers), BAKE, plan()).outcome is outcome


def test_bake_with_little_traffic_is_no_breach() -> None:
    assert judge_bake(RoleWindow(5, 5), DriftWindow(((800, 0.1),)), BAKE, plan()).outcome is Outcome.EXTEND
