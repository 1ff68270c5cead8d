"""A drift monitor's retrains meet a rollout that can pass them (``drift-retrains-can-pass``,
policies/mlplatform_policies/lifecycle.py), both ways, through the real pack over gRPC.

Source: review rev40b A3 (/work/rev-40b-out): with the shipped gates (``minShadowAgreement`` 0.95, no
labelled set) the monitor-retrained, better version stopped at shadow, "shadow agreement 0.00% (0/41)
< 95.00%"; a version retrained on shifted data disagrees with the stale champion by design. The shipped
aws-enterprise-prod (the stack with a ``driftMonitor``) passes; its rollout plan without the labelled set,
or the plan's defaults, fail on the rollout CronJob.
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


CASES = [("no-labelled-set", _no_labelled_set), ("plan-defaults", _defaults)]


@pytest.mark.parametrize(("case", "edit"), CASES, ids=[c[0] for c in CASES])
def test_a_rollout_judging_agreement_without_labels_under_a_drift_monitor_fails(
    case: str,
    edit: Callable[[dict[str, Any]], None],
    workloads_plan: PlanDict,
    judged: Callable[[PlanDict], set[str]],
) -> None:
    planted = with_inputs(workloads_plan, of_type("kubernetes:batch/v1:CronJob", "-rollout"), _plan(edit))
    assert judged(planted) == {ROLLOUT}, case


def test_without_agreement_the_rollout_passes_without_labels(
    workloads_plan: PlanDict, judged: Callable[[PlanDict], set[str]]
) -> None:
    """Agreement off: nothing stops a retrain by design (its quality is then promote's to judge)."""

    def edit(plan: dict[str, Any]) -> None:
        _no_labelled_set(plan)
        plan["gates"]["minShadowAgreement"] = None

    planted = with_inputs(workloads_plan, of_type("kubernetes:batch/v1:CronJob", "-rollout"), _plan(edit))
    assert judged(planted) == set()
