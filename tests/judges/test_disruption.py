"""The disruption-budget judge (registry review B1; kubernetes.io "Specifying a Disruption Budget for
your Application", "Arbitrary workloads and arbitrary selectors"): a budget with maxUnavailable or a
percentage minAvailable that selects the pods of a Job (no scale subresource) is a finding; the
registry's budget, built from its pure function, selects its servers only."""

from __future__ import annotations

from typing import Any

from components.kubernetes.registry import INSTANCE_LABEL
from judges import judge_all
from judges.disruption import POLICY, judge_disruption_budgets
from tests.components.kubernetes.test_registry import _all, _spec


def _budget(**spec: Any) -> dict[str, Any]:
    selector = {"matchLabels": {"app.kubernetes.io/instance": "svc"}}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "svc", "namespace": "ns"},
        "spec": {**spec, "selector": selector},
    }


def _workload(kind: str) -> dict[str, Any]:
    template = {"metadata": {"labels": {"app.kubernetes.io/instance": "svc"}}, "spec": {"containers": []}}
    return {"kind": kind, "metadata": {"name": "w", "namespace": "ns"}, "spec": {"template": template}}


def test_a_budget_over_a_jobs_pods_is_refused_whatever_selects_them() -> None:
    for spec in ({"maxUnavailable": 1}, {"minAvailable": "50%"}):
        (finding,) = judge_disruption_budgets([_budget(**spec), _workload("Deployment"), _workload("Job")])
        assert finding.policy == POLICY and "Job w" in finding.message


def test_an_integer_min_available_or_scaled_controllers_only_pass() -> None:
    assert not judge_disruption_budgets([_budget(minAvailable=1), _workload("Job")])
    assert not judge_disruption_budgets([_budget(maxUnavailable=1), _workload("Deployment")])


def test_the_registry_budget_selects_its_servers_not_the_migration_job() -> None:
    objects = _all(_spec())
    assert not [f for f in judge_all(objects) if f.policy == POLICY]
    # The planted defect: the budget as it was, over the instance label the migration Job's pod carries.
    (budget,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    selector = {"matchLabels": {INSTANCE_LABEL: "registry"}}
    planted = {**budget, "spec": {**budget["spec"], "selector": selector}}
    others = [o for o in objects if o is not budget]
    assert [f.policy for f in judge_disruption_budgets([*others, planted])] == [POLICY]
