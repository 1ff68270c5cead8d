"""Deploy plain Kubernetes objects (dicts) through Pulumi, unchanged.

Objects are built by pure functions (``spec -> list[dict]``) in ``workloads/`` and here. Each object is
registered as the pulumi-kubernetes resource type for its apiVersion and kind, with the object's own
top-level fields as inputs — exactly what the typed SDK classes send — so what ``pulumi up`` applies,
what the policy pack judges and what ``mlplatform plan --manifests`` exports are the same dicts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pulumi

from components.handle import PRIVATE_NETWORKS, PUBLIC_NETWORK, Peer

Object = dict[str, Any]
# Pod annotations declaring each peer as ``<network>:<port>``: the reachability judge's contract
# (judges/reachability.py) reads them, the NetworkPolicy's egress is built from the same peers.
PEER_ANNOTATION_PREFIX = "reaches.ml-platform.io/"

MANAGED_BY = {"app.kubernetes.io/managed-by": "ml-platform", "app.kubernetes.io/part-of": "ml-platform"}
# pulumi-kubernetes creates an object carrying this without waiting for it to become ready (or, for a
# Job, complete): the "pulumi.com/skipAwait" annotation, pulumi-kubernetes pkg/metadata (REFERENCE.md).
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}


def peer_annotations(peers: Iterable[Peer]) -> dict[str, str]:
    """What a pod template declares it reaches outside the pod network (``PEER_ANNOTATION_PREFIX``)."""
    return {f"{PEER_ANNOTATION_PREFIX}{p.name}": f"{p.network}:{p.port}" for p in peers}


def peer_egress(peer: Peer) -> Object:
    """A NetworkPolicy egress rule to ``peer``; public addresses exclude the private ranges."""
    block: Object = {"cidr": peer.network}
    if peer.network == PUBLIC_NETWORK:
        block["except"] = list(PRIVATE_NETWORKS)
    return {"to": [{"ipBlock": block}], "ports": [{"port": peer.port, "protocol": "TCP"}]}


def admission_policy(
    name: str,
    resource_rules: Sequence[Object],
    validations: Sequence[Object],
    namespace_labels: Mapping[str, str],
    variables: Sequence[Object] = (),
) -> list[Object]:
    """A ValidatingAdmissionPolicy that fails closed (admissionregistration.k8s.io/v1, GA in Kubernetes
    1.30) and its binding, denying in the namespaces that carry ``namespace_labels``. ``variables`` are
    named expressions the validations read as ``variables.<name>`` (evaluated in order, each may read
    the ones before it: Kubernetes API reference, ValidatingAdmissionPolicySpec ``variables``)."""
    spec: Object = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": list(resource_rules)},
        **({"variables": list(variables)} if variables else {}),
        "validations": list(validations),
    }
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": dict(MANAGED_BY)},
            "spec": spec,
        },
        policy_binding(name, name, ["Deny"], namespace_labels),
    ]


def policy_binding(
    name: str, policy: str, actions: Sequence[str], namespace_labels: Mapping[str, str]
) -> Object:
    """A binding of ``policy`` in the namespaces that carry ``namespace_labels``. ``actions``: ``Deny``
    refuses; ``Warn`` and ``Audit`` admit and report (they may be combined; Deny and Warn may not:
    Kubernetes API reference, ValidatingAdmissionPolicyBindingSpec ``validationActions``)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {
            "policyName": policy,
            "validationActions": list(actions),
            "matchResources": {"namespaceSelector": {"matchLabels": dict(namespace_labels)}},
        },
    }


def service_account(metadata: Mapping[str, Any], annotations: Mapping[str, str]) -> Object:
    """A workload's ServiceAccount: its cloud identity in ``annotations`` (IRSA / workload identity),
    no API token mounted (the workloads call no Kubernetes API)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {**metadata, **({"annotations": dict(annotations)} if annotations else {})},
        "automountServiceAccountToken": False,
    }


def disruption_budget(metadata: Mapping[str, Any], match_labels: Mapping[str, str]) -> Object:
    """A budget that lets one selected server go at a time. ``unhealthyPodEvictionPolicy: AlwaysAllow``:
    the servers it guards are unready by design at times (inference before the first promotion, the
    registry before its admin Secret), and under the default ``IfHealthyBudget`` "running pods
    (status.phase=\"Running\"), but not yet healthy can be evicted only if the guarded application is not
    disrupted", so unready pods would block every drain, node-group upgrade and scale-down (cluster
    review B-N3; policy/v1 PodDisruptionBudgetSpec, Kubernetes API reference; KEP-3017, stable in 1.31)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": dict(metadata),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": dict(match_labels)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def restricted_pod_security(uid: int) -> Object:
    """The pod-level securityContext of a workload running as ``uid`` under Pod Security "restricted"
    (kubernetes.io "Pod Security Standards"): non-root, RuntimeDefault seccomp, volumes group-owned."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_container_security(uid: int) -> Object:
    """The container-level securityContext to match: no privilege escalation, every capability dropped,
    a read-only root file system."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_container(
    name: str,
    image: object,
    *,
    uid: int,
    cpu: str,
    memory: str,
    env: list[Object],
    mounts: list[Object],
    **entry: list[str],
) -> Object:
    """A container pulled on every start, Guaranteed (requests equal limits) and restricted; ``entry``
    is its ``command`` and/or ``args``."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "Always",
        **entry,
        "env": env,
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
        "securityContext": restricted_container_security(uid),
        "volumeMounts": mounts,
    }


def type_token(obj: Mapping[str, Any]) -> str:
    """``apps/v1`` + ``Deployment`` → ``kubernetes:apps/v1:Deployment``; core ``v1`` → ``core/v1``."""
    api_version = str(obj["apiVersion"])
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{obj['kind']}"


def resource_name(obj: Mapping[str, Any]) -> str:
    """A Pulumi name unique per object: kind, namespace and name (Pulumi names are per stack)."""
    metadata = obj["metadata"]
    parts = [str(obj["kind"]).lower(), metadata.get("namespace", ""), metadata["name"]]
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(p for p in parts if p))


def apply_objects(
    objects: Iterable[Object],
    provider: pulumi.ProviderResource,
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
    ignore_changes: Sequence[str] = (),
) -> list[pulumi.CustomResource]:
    """Register each object as its pulumi-kubernetes resource, all on ``provider``; service accounts
    first, and the other objects after them: the API server refuses a pod whose service account does not
    exist yet, and the ReplicaSet and Job controllers retry it with a growing back-off, while a service
    account may itself wait on its cloud identity's rights (``components/ordering.py``).
    ``ignore_changes``: paths of every object kept from state after creation."""
    objects = list(objects)

    def register(obj: Object, after: Sequence[pulumi.Resource]) -> pulumi.CustomResource:
        return pulumi.CustomResource(
            type_token(obj),
            resource_name(obj),
            obj,
            opts=pulumi.ResourceOptions(
                parent=parent,
                provider=provider,
                depends_on=list(after),
                ignore_changes=list(ignore_changes) or None,
            ),
        )

    accounts = [register(o, depends_on) for o in objects if o["kind"] == "ServiceAccount"]
    others = [register(o, [*depends_on, *accounts]) for o in objects if o["kind"] != "ServiceAccount"]
    return accounts + others
