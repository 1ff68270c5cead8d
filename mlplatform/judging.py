"""The behaviour judges (``judges``) on a plan, their findings as violations beside the pack's.

A finding names a Kubernetes object; it is reported against the planned resource that applies it (a
chart's object against its rendered child), so ``check`` prints, counts and writes it like a pack
violation. The control plane's addresses are the cluster network the plan creates (the VPC's or VNet's
range), where kube-apiserver's webhook calls come from.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from judges import Finding, Subject, judge_all
from judges.reachability import CONTROL_PLANE_NETWORK
from mlplatform.analyzer import Violation
from mlplatform.graph import HELM_RELEASE, Plan, PlannedResource, as_applied

_SEVERITY = {"mandatory": "high", "advisory": "low"}


def _objects(plan: Plan) -> Iterator[tuple[PlannedResource, dict[str, Any]]]:
    for resource in plan.resources:
        if resource.custom and resource.type.startswith("kubernetes:") and resource.type != HELM_RELEASE:
            yield resource, as_applied(resource.inputs)


def planned_objects(plan: Plan) -> list[dict[str, Any]]:
    """Every Kubernetes object the plan applies, charts' included, as applied."""
    return [obj for _, obj in _objects(plan)]


def cluster_network(plan: Plan) -> str:
    """The VPC's (AWS) or the VNet's first (Azure) address range; RFC 1918 10/8 when neither is planned."""
    for resource in plan.resources:
        inputs = as_applied(resource.inputs)
        if resource.type == "aws:ec2/vpc:Vpc" and inputs.get("cidrBlock"):
            return str(inputs["cidrBlock"])
        if resource.type == "azure-native:network:VirtualNetwork":
            prefixes = (inputs.get("addressSpace") or {}).get("addressPrefixes") or []
            if prefixes:
                return str(prefixes[0])
    return CONTROL_PLANE_NETWORK


def judge_plan(plan: Plan) -> list[Violation]:
    """Every judge's findings on the plan's Kubernetes objects, charts included."""
    pairs = list(_objects(plan))
    objects = [obj for _, obj in pairs]
    by_subject = {Subject.of(obj): resource for resource, obj in pairs}
    findings = judge_all(objects, cluster_network(plan))
    return [_violation(finding, by_subject.get(finding.subject)) for finding in findings]


def _violation(finding: Finding, resource: PlannedResource | None) -> Violation:
    return Violation(
        policy=finding.policy,
        enforcement=finding.level,
        severity=_SEVERITY[finding.level],
        urn=resource.urn if resource is not None else "",
        type=resource.type if resource is not None else finding.subject.kind,
        name=resource.name if resource is not None else str(finding.subject),
        # "<namespace/name>: <finding>": check groups findings that differ only in that first token.
        message=f"{_token(finding.subject)}: {finding.message}",
    )


def _token(subject: Subject) -> str:
    return f"{subject.namespace}/{subject.name}" if subject.namespace else subject.name
