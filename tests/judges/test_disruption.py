"""The disruption-budget judge (registry review B1; kubernetes.io "Specifying a Disruption Budget for
your Application", "Arbitrary workloads and arbitrary selectors"): a budget with maxUnavailable or a
percentage minAvailable that selects the pods of a Job (no scale subresource) is a finding; the
registry's budget, built from its pure function, selects its servers only."""

from __future__ import annotations

from typing import Any

from components.kubernetes.registry import INSTANCE_LABEL
from judges import judge_all
from judges.disruption import (
    CHART_EXCEPTION,
    HELM_RELEASE,
    POLICY,
    UNHEALTHY_POLICY,
    judge_disruption_budgets,
    judge_unhealthy_eviction,
)
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


def _probed(kind: str) -> dict[str, Any]:
    workload = _workload(kind)
    workload["spec"]["template"]["spec"]["containers"] = [{"name": "c", "readinessProbe": {}}]
    return workload


def test_a_budget_over_pods_that_can_be_unready_is_advised_to_always_allow_their_eviction() -> None:
    """Cluster review B-N3: policy/v1 ``unhealthyPodEvictionPolicy`` (IfHealthyBudget by default, GA in
    1.31, KEP-3017): "running pods ... not yet healthy can be evicted only if the guarded application is
    not disrupted (status.currentHealthy is at least equal to status.desiredHealthy)". The cluster accepts
    and runs the budget, so the finding is advisory and says when drains stall (review 37c B6). Unprobed
    pods are ready whenever they run, so a budget over them passes either way."""
    (finding,) = judge_unhealthy_eviction([_budget(maxUnavailable=1), _probed("Deployment")])
    assert finding.policy == UNHEALTHY_POLICY and not finding.mandatory
    assert "Deployment w" in finding.message
    assert (
        "an unready pod is evicted only while the budget is healthy (currentHealthy >= desiredHealthy)"
        in (finding.message)
    )
    explicit = _budget(maxUnavailable=1, unhealthyPodEvictionPolicy="IfHealthyBudget")
    assert "under IfHealthyBudget" in judge_unhealthy_eviction([explicit, _probed("Deployment")])[0].message
    allowed = _budget(maxUnavailable=1, unhealthyPodEvictionPolicy="AlwaysAllow")
    assert not judge_unhealthy_eviction([allowed, _probed("Deployment")])
    assert not judge_unhealthy_eviction([_budget(maxUnavailable=1), _workload("Deployment")])


def test_a_charts_written_exception_is_quoted_on_what_helm_installs_only() -> None:
    """kueue 0.19.2's manager-pdb template offers no unhealthyPodEvictionPolicy: its pin writes why."""
    budget = _budget(minAvailable=1)
    budget["metadata"]["annotations"] = {CHART_EXCEPTION: "no value in the chart"}
    (own,) = judge_unhealthy_eviction([budget, _probed("Deployment")])
    assert "chart exception" not in own.message, "an exception on an object the program builds is none"
    budget["metadata"]["annotations"][HELM_RELEASE] = "kueue"
    (charted,) = judge_unhealthy_eviction([budget, _probed("Deployment")])
    assert "(chart exception: no value in the chart)" in charted.message


def test_the_registry_budget_lets_unready_servers_go() -> None:
    """The registry's servers are unready while their database is unreachable: the budget carries
    AlwaysAllow; the planted budget without it is found (inference's: tests/judges/test_stacks.py)."""
    objects = _all(_spec())
    assert not judge_unhealthy_eviction(objects)
    (budget,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    planted = {
        **budget,
        "spec": {k: v for k, v in budget["spec"].items() if k != "unhealthyPodEvictionPolicy"},
    }
    others = [o for o in objects if o is not budget]
    assert [f.policy for f in judge_unhealthy_eviction([*others, planted])] == [UNHEALTHY_POLICY]
