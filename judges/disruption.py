"""PodDisruptionBudgets that stall drains.

Over pods without a scale (registry review B1): the disruption controller
computes ``maxUnavailable`` and a percentage ``minAvailable`` from the scale of each selected pod's
controller, and Jobs, CronJobs, DaemonSets and bare pods have none. One such pod in the selection (a
Job's finished pod counts: the controller does not filter terminal pods out) makes the controller fail
safe: ``disruptionsAllowed: 0``, condition ``SyncFailed``, and every eviction of every selected pod is
refused, so node drains, cluster upgrades and scale-downs stall.

Source: kubernetes.io "Specifying a Disruption Budget for your Application", "Arbitrary workloads and
arbitrary selectors": with pods of another controller or bare pods "only .spec.minAvailable can be used,
not .spec.maxUnavailable" and "only an integer value can be used with .spec.minAvailable, not a
percentage"; kubernetes pkg/controller/disruption/disruption.go (``getExpectedScale``, ``failSafe``).

Over pods that can be unready (cluster review B-N3): under the default ``IfHealthyBudget`` "running pods
(status.phase=\"Running\"), but not yet healthy can be evicted only if the guarded application is not
disrupted (status.currentHealthy is at least equal to status.desiredHealthy)" (policy/v1
PodDisruptionBudgetSpec ``unhealthyPodEvictionPolicy``, Kubernetes API reference; KEP-3017, stable in
1.31). A pod with a readiness probe is unready whenever the probe fails (inference before its first
promotion, the registry before its admin Secret). While enough pods stay healthy the unready ones are
evicted; once unready pods take the budget below ``desiredHealthy`` (every inference pod waiting for a
first promotion), every eviction of its pods is refused and node drains, managed node-group and AKS
upgrades and autoscaler scale-downs stall until they are ready. ``AlwaysAllow`` lets the unready go. The
cluster accepts and runs such a budget, so the finding is advisory (review 37c B6); a chart's budget
whose template offers no such value carries its pin's written exception, which the message quotes on
objects Helm installs (components/kubernetes/charts.py ``ChartPin.exceptions``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import labels_match, of_kind, pods

# The reason a chart pin writes on an object its chart offers no value to fix (kubernetes/charts.py).
CHART_EXCEPTION = "policy.ml-platform.io/chart-exception"
HELM_RELEASE = "meta.helm.sh/release-name"
POLICY = "disruption-budget-scale"
UNHEALTHY_POLICY = "disruption-budget-unhealthy-eviction"
# Controllers with a scale subresource the disruption controller reads.
SCALED = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "ReplicationController"})


def _needs_scale(spec: Mapping[str, Any]) -> str | None:
    """What in the budget needs the controllers' scale, or None."""
    if "maxUnavailable" in spec:
        return f"maxUnavailable {spec['maxUnavailable']}"
    if isinstance(spec.get("minAvailable"), str):
        return f"minAvailable {spec['minAvailable']} (a percentage)"
    return None


def judge_disruption_budgets(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    planned = pods(objects)
    findings = []
    for budget in of_kind(objects, "PodDisruptionBudget"):
        spec = budget.get("spec") or {}
        needs = _needs_scale(spec)
        if needs is None:
            continue
        namespace = str(budget["metadata"].get("namespace", ""))
        for pod in planned:
            if pod.namespace != namespace or pod.owner.kind in SCALED:
                continue
            if labels_match(spec.get("selector"), pod.labels):
                findings.append(
                    Finding(
                        POLICY,
                        "mandatory",
                        Subject.of(budget),
                        f"selects the pods of {pod.owner.kind} {pod.owner.name}, which has no scale: with"
                        f" {needs} the disruption controller allows no eviction of any selected pod",
                    )
                )
    return findings


def judge_unhealthy_eviction(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """Budgets without ``unhealthyPodEvictionPolicy: AlwaysAllow`` over pods that have a readiness
    probe."""
    planned = pods(objects)
    findings = []
    for budget in of_kind(objects, "PodDisruptionBudget"):
        spec = budget.get("spec") or {}
        if spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            continue
        namespace = str(budget["metadata"].get("namespace", ""))
        probed = sorted(
            {
                f"{pod.owner.kind} {pod.owner.name}"
                for pod in planned
                if pod.namespace == namespace
                and labels_match(spec.get("selector"), pod.labels)
                and any("readinessProbe" in c for c in pod.containers())
            }
        )
        if probed:
            policy = spec.get("unhealthyPodEvictionPolicy", "IfHealthyBudget (the default)")
            annotations = budget["metadata"].get("annotations") or {}
            excepted = annotations.get(CHART_EXCEPTION) if annotations.get(HELM_RELEASE) else None
            findings.append(
                Finding(
                    UNHEALTHY_POLICY,
                    "advisory",
                    Subject.of(budget),
                    f"selects the pods of {', '.join(probed)}, which have a readiness probe: under"
                    f" {policy} an unready pod is evicted only while the budget is healthy (currentHealthy"
                    " >= desiredHealthy); when unready pods take it below that, every eviction of its pods"
                    " is refused and drains, node upgrades and scale-downs stall until they are ready;"
                    " set unhealthyPodEvictionPolicy: AlwaysAllow"
                    + (f" (chart exception: {excepted})" if excepted else ""),
                )
            )
    return findings
