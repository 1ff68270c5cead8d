"""A drift monitor's retrains meet a rollout that judges them beside the champion on labelled rows
(``drift-retrains-can-pass``, policies/mlplatform_policies/lifecycle.py), both ways, through the real
pack over gRPC.

Sources: review rev40b A3 (/work/rev-40b-out): with the shipped gates (``minShadowAgreement`` 0.95, no
labelled set) the monitor-retrained, better version stopped at shadow, "shadow agreement 0.00% (0/41)
< 95.00%"; a version retrained on shifted data disagrees with the stale champion by design. Review rev40c
A3 and C1 (/work/rev-40c-out, plants p2, p3, p5): a labelled set with only a ``minAccuracy`` floor
compares nothing with the champion (with ``promote: true`` a worse retrain is promoted), and agreement off
with no labelled set leaves every retrain to ``--force``. The shipped aws-enterprise-prod (the stack with
a ``driftMonitor``, ``labelledSet`` with ``maxAccuracyDrop``) passes; each plant fails on the rollout
CronJob.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySettings
from mlplatform.plan import Plan

from .conftest import found
from .test_audit import of_type, with_inputs

POLICY = "drift-retrains-can-pass"
PlanDict = dict[str, Any]
ROLLOUT = "cronjob-ml-inference-inference-rollout"


@pytest.fixture(scope="module")
def workloads_plan(planned: Callable[[str], Plan]) -> PlanDict:
    """The shipped plan's CronJobs and providers: what the policy reads."""
    whole = planned("aws-enterprise-prod").to_dict()
    keep = ("kubernetes:batch/v1:CronJob", "pulumi:providers:")
    return {**whole, "resources": [r for r in whole["resources"] if r["type"].startswith(keep)]}


@pytest.fixture(scope="module")
def judged(pack: PolicyPackSession, defaults: dict[str, PolicySettings]) -> Callable[[PlanDict], set[str]]:
    return lambda plan: {name for p, name in found(pack.judge(plan, defaults)) if p == POLICY}


def _plan(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """An edit of the rollout CronJob's ``ROLLOUT_PLAN``."""

    def apply(inputs: dict[str, Any]) -> None:
        [container] = inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        [variable] = [v for v in container["env"] if v["name"] == "ROLLOUT_PLAN"]
        plan = json.loads(variable["value"])
        edit(plan)
        variable["value"] = json.dumps(plan)

    return apply


def test_the_shipped_drift_monitor_meets_a_rollout_that_can_pass_its_retrains(
    workloads_plan: PlanDict, judged: Callable[[PlanDict], set[str]]
) -> None:
    plan = next(r for r in workloads_plan["resources"] if r["name"] == ROLLOUT)
    assert "labelledSet" in json.dumps(plan["inputs"])  # the case below removes what is there
    assert judged(workloads_plan) == set()


def _no_labelled_set(plan: dict[str, Any]) -> None:
    plan["labelledSet"] = None
    plan["gates"]["maxAccuracyDrop"] = None


def _defaults(plan: dict[str, Any]) -> None:
    plan.clear()  # the plan's own defaults: agreement 0.95, no labelled set


def _agreement_off(plan: dict[str, Any]) -> None:  # plant p2
    _no_labelled_set(plan)
    plan["gates"]["minShadowAgreement"] = None


def _floor_promoted(floor: float) -> Callable[[dict[str, Any]], None]:  # plants p3 (0.0) and p5 (0.9)
    def edit(plan: dict[str, Any]) -> None:
        plan["gates"]["maxAccuracyDrop"] = None
        plan["gates"]["minAccuracy"] = floor
        plan["promote"] = True

    return edit


CASES = [
    ("no-labelled-set", _no_labelled_set),
    ("plan-defaults", _defaults),
    ("p2-agreement-off", _agreement_off),
    ("p3-floor-0-promote", _floor_promoted(0.0)),
    ("p5-floor-0.9-promote", _floor_promoted(0.9)),
]


@pytest.mark.parametrize(("case", "edit"), CASES, ids=[c[0] for c in CASES])
def test_a_rollout_that_does_not_judge_retrains_beside_the_champion_fails(
    case: str,
    edit: Callable[[dict[str, Any]], None],
    workloads_plan: PlanDict,
    judged: Callable[[PlanDict], set[str]],
) -> None:
    planted = with_inputs(workloads_plan, of_type("kubernetes:batch/v1:CronJob", "-rollout"), _plan(edit))
    assert judged(planted) == {ROLLOUT}, case


def test_agreement_off_beside_the_champion_passes(
    workloads_plan: PlanDict, judged: Callable[[PlanDict], set[str]]
) -> None:
    """Agreement is not what judges a retrain here: the labelled comparison does, with or without it."""

    def edit(plan: dict[str, Any]) -> None:
        plan["gates"]["minShadowAgreement"] = None

    planted = with_inputs(workloads_plan, of_type("kubernetes:batch/v1:CronJob", "-rollout"), _plan(edit))
    assert judged(planted) == set()
