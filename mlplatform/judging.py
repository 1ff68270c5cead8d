"""The behaviour judges (``judges``) on a plan, their findings as violations beside the pack's.

A finding names a Kubernetes object; it is reported against the planned resource that applies it (a
chart's object against its rendered child), so ``check`` prints, counts and writes it like a pack
violation. The control plane's addresses are the cluster network the plan creates (the VPC's or VNet's
range), where kube-apiserver's webhook calls come from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

from components.catalog import InstanceType, catalog
from components.handle import POOL_LABEL, Cloud, Fabric
from judges import JUDGES, Finding, Subject, judge_all
from judges.kube import of_kind
from judges.limits import quantity
from judges.reachability import CONTROL_PLANE_NETWORK
from judges.scheduling import NodePool
from judges.transport import PLAINTEXT, exceptions_taken
from mlplatform.analyzer import Violation
from mlplatform.errors import exit_with
from mlplatform.graph import HELM_RELEASE, Plan, PlannedResource, as_applied
from mlplatform.rendering import unrendered
from workloads.training.sizing import EVICTION_HARD_MIB, aks_reserved, eks_reserved

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


# EKS managed node groups spell taint effects in the EKS API's enum (eks ``Taint``).
_EKS_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}
_EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
_EKS_CLUSTER = "aws:eks/cluster:Cluster"
_AKS_CLUSTER = "azure-native:containerservice:ManagedCluster"
_AKS_POOL = "azure-native:containerservice:AgentPool"
_ASG_TAG = "aws:autoscaling/tag:Tag"
_NODE_TEMPLATE = "k8s.io/cluster-autoscaler/node-template"


def managed_kubernetes(plan: Plan) -> str | None:
    """``eks`` or ``aks``: the managed Kubernetes the plan creates (its built-in objects exist for the
    judges); ``None`` for a plan with no cluster."""
    types = {resource.type for resource in plan.resources}
    if _EKS_CLUSTER in types:
        return "eks"
    if _AKS_CLUSTER in types:
        return "aks"
    return None


def node_pools(plan: Plan, objects: Sequence[Mapping[str, Any]]) -> list[NodePool]:
    """The node pools the plan creates (EKS managed node groups; AKS agent pools, the system pool in the
    cluster's profiles included), as the scheduler sees one node of each."""
    templates = _node_templates(plan)
    pools = []
    for resource in plan.resources:
        inputs = as_applied(resource.inputs)
        if resource.type == _EKS_NODE_GROUP:
            labels = inputs.get("labels") or {}
            taints = tuple(
                {
                    "key": t["key"],
                    "value": t.get("value", ""),
                    "effect": _EKS_EFFECTS.get(t["effect"], t["effect"]),
                }
                for t in inputs.get("taints") or []
            )
            extended = templates.get(str(labels.get(POOL_LABEL)), {})
            name = str(labels.get(POOL_LABEL) or inputs.get("nodeGroupName") or resource.name)
            pools.append(
                _pool(Cloud.AWS, inputs["instanceTypes"][0], name, labels, taints, extended, objects)
            )
        elif resource.type in {_AKS_CLUSTER, _AKS_POOL}:
            profiles = inputs.get("agentPoolProfiles") or [] if resource.type == _AKS_CLUSTER else [inputs]
            for profile in profiles:
                labels = profile.get("nodeLabels") or {}
                taints = tuple(_aks_taint(t) for t in profile.get("nodeTaints") or [])
                name = str(labels.get(POOL_LABEL) or profile.get("name") or profile.get("agentPoolName"))
                pools.append(_pool(Cloud.AZURE, profile["vmSize"], name, labels, taints, {}, objects))
    return pools


def _node_templates(plan: Plan) -> dict[str, dict[str, str]]:
    """Pool name → the extended resources its Auto Scaling group's cluster-autoscaler node-template tags
    declare (``k8s.io/cluster-autoscaler/node-template/resources/<name>``: EFA devices, hugepages), the
    group named by its ``label/ml-platform/pool`` tag."""
    groups: dict[str, dict[str, str]] = {}
    for resource in plan.by_type(_ASG_TAG):
        inputs = as_applied(resource.inputs)
        tag = inputs.get("tag") or {}
        groups.setdefault(str(inputs.get("autoscalingGroupName")), {})[str(tag.get("key"))] = str(
            tag.get("value")
        )
    found = {}
    for tags in groups.values():
        pool = tags.get(f"{_NODE_TEMPLATE}/label/{POOL_LABEL}")
        if pool:
            prefix = f"{_NODE_TEMPLATE}/resources/"
            found[pool] = {k.removeprefix(prefix): v for k, v in tags.items() if k.startswith(prefix)}
    return found


def _aks_taint(text: str) -> dict[str, str]:
    """AKS ``nodeTaints`` entries: ``key=value:Effect``."""
    pair, _, effect = text.rpartition(":")
    key, _, value = pair.partition("=")
    return {"key": key, "value": value, "effect": effect}


def _pool(
    cloud: Cloud,
    size: str,
    name: str,
    labels: Mapping[str, str],
    taints: tuple[dict[str, str], ...],
    extended: Mapping[str, str],
    objects: Sequence[Mapping[str, Any]],
) -> NodePool:
    # The labels every node gets from the kubelet (kubernetes.io "Well-Known Labels"); the catalog's
    # types are all x86-64.
    well_known = {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": size,
    }
    return NodePool(
        name=name,
        instance_type=size,
        labels={**well_known, **labels},
        taints=taints,
        allocatable=_allocatable(cloud, catalog(cloud)[size], extended, objects),
    )


def _allocatable(
    cloud: Cloud, instance: InstanceType, extended: Mapping[str, str], objects: Sequence[Mapping[str, Any]]
) -> dict[str, Decimal]:
    """Capacity less kube-reserved and the hard eviction threshold, by the cloud's formula
    (workloads.training.sizing), less pre-allocated huge pages; plus the extended resources: GPUs (the
    catalog), what the node-template tags declare (EFA devices, huge pages), and the RDMA shared device
    plugin's slots on InfiniBand pools (the planned NicClusterPolicy)."""
    memory_mib = instance.memory_gib * 1024
    reserved = (eks_reserved if cloud is Cloud.AWS else aks_reserved)(instance.vcpus, memory_mib)
    allocatable = {name: quantity(value) for name, value in extended.items()}
    huge = sum((v for k, v in allocatable.items() if k.startswith("hugepages-")), Decimal(0))
    allocatable["cpu"] = (Decimal(instance.vcpus * 1000) - Decimal(str(reserved[0]))) / 1000
    allocatable["memory"] = (
        Decimal(memory_mib) - Decimal(str(reserved[1])) - EVICTION_HARD_MIB
    ) * 2**20 - huge
    if instance.gpus:
        allocatable["nvidia.com/gpu"] = Decimal(instance.gpus)
    if instance.fabric is Fabric.INFINIBAND:
        for policy in of_kind(objects, "NicClusterPolicy"):
            config = ((policy.get("spec") or {}).get("rdmaSharedDevicePlugin") or {}).get("config")
            for item in _json(config).get("configList") or []:
                allocatable[f"rdma/{item['resourceName']}"] = Decimal(int(item.get("rdmaHcaMax", 0)))
    return allocatable


def _json(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def skipped_judges(names: list[str]) -> frozenset[str]:
    """``--skip`` values as judge names; exit 2 naming each that is none (``mlplatform check`` and
    ``mlplatform judge``)."""
    known = {judge.name for judge in JUDGES}
    unknown = [name for name in names if name not in known]
    if unknown:
        exit_with([f"--skip {name}: no such judge (judges: {', '.join(sorted(known))})" for name in unknown])
    return frozenset(names)


def judge_plan(
    plan: Plan, skip: frozenset[str] = frozenset(), previous: Plan | None = None
) -> list[Violation]:
    """Every judge's findings (but those named in ``skip``) on the plan's Kubernetes objects, charts
    included; with ``previous`` (the stack's last applied plan) the day-2 judge's too."""
    pairs = list(_objects(plan))
    objects = [obj for _, obj in pairs]
    by_subject = {Subject.of(obj): resource for resource, obj in pairs}
    # A release that was not rendered (--allow-unrendered): its namespace's pods are not all seen.
    unseen = frozenset(
        str(as_applied(r.inputs).get("namespace") or "default") for r in unrendered(plan.resources)
    )
    findings = judge_all(
        objects,
        cluster_network(plan),
        node_pools(plan, objects),
        skip=skip,
        unseen=unseen,
        previous=None if previous is None else planned_objects(previous),
        cluster=managed_kubernetes(plan),
    )
    return [_violation(finding, by_subject.get(finding.subject)) for finding in findings]


def transport_exemptions(plan: Plan, skip: frozenset[str] = frozenset()) -> tuple[tuple[str, str, str], ...]:
    """The transport judge's named exceptions the plan takes, for the evidence's register: (URN of the
    object whose flows they cover, ``plaintext-flow: <exception>``, the reason and the flows)."""
    if any(judge.name in skip and PLAINTEXT in judge.policies for judge in JUDGES):
        return ()
    pairs = list(_objects(plan))
    by_subject = {Subject.of(obj): resource for resource, obj in pairs}
    return tuple(
        (by_subject[subject].urn if subject in by_subject else str(subject), f"{PLAINTEXT}: {name}", reason)
        for subject, name, reason in exceptions_taken([obj for _, obj in pairs], cluster_network(plan))
    )


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
