"""PodDisruptionBudgets over pods without a scale (registry review B1): the disruption controller
computes ``maxUnavailable`` and a percentage ``minAvailable`` from the scale of each selected pod's
controller, and Jobs, CronJobs, DaemonSets and bare pods have none. One such pod in the selection (a
Job's finished pod counts: the controller does not filter terminal pods out) makes the controller fail
safe: ``disruptionsAllowed: 0``, condition ``SyncFailed``, and every eviction of every selected pod is
refused, so node drains, cluster upgrades and scale-downs stall.

Source: kubernetes.io "Specifying a Disruption Budget for your Application", "Arbitrary workloads and
arbitrary selectors": with pods of another controller or bare pods "only .spec.minAvailable can be used,
not .spec.maxUnavailable" and "only an integer value can be used with .spec.minAvailable, not a
percentage"; kubernetes pkg/controller/disruption/disruption.go (``getExpectedScale``, ``failSafe``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import labels_match, of_kind, pods

POLICY = "disruption-budget-scale"
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
