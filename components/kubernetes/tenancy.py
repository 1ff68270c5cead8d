"""Namespaces with guardrails: Pod Security Admission, quotas, default limits and default-deny networking.

Pure functions: ``spec -> list[dict]``. Every workload namespace gets the same five objects (namespace,
ResourceQuota, LimitRange, default-deny NetworkPolicy, DNS egress); what differs is data: the Pod
Security level (restricted unless a documented exception needs more) and the quota.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from components.kubernetes.objects import MANAGED_BY, Object

# Annotation holding the written reason a namespace runs above "restricted"; the policy pack accepts a
# privileged namespace only with it (policies/mlplatform_policies/kubernetes.py).
PRIVILEGE_REASON = "policy.ml-platform.io/privileged-reason"


class PodSecurity(StrEnum):
    RESTRICTED = "restricted"
    BASELINE = "baseline"
    PRIVILEGED = "privileged"


@dataclass(frozen=True)
class NamespaceSpec:
    name: str
    pod_security: PodSecurity = PodSecurity.RESTRICTED
    # Required whenever pod_security is above restricted: why this namespace needs it.
    privilege_reason: str | None = None
    # ResourceQuota "hard" limits; None for operator namespaces sized by their charts.
    quota: Mapping[str, str] | None = None
    guarded: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pod_security is not PodSecurity.RESTRICTED and not self.privilege_reason:
            raise ValueError(f"namespace {self.name}: {self.pod_security} needs a written privilege_reason")


def _meta(
    name: str,
    namespace: str | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {**MANAGED_BY, **(labels or {})}}
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = dict(annotations)
    return metadata


def namespace(spec: NamespaceSpec) -> Object:
    level = spec.pod_security.value
    labels = {
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": "latest",
        # Warn and audit at restricted everywhere, so anything above it stays visible.
        "pod-security.kubernetes.io/warn": PodSecurity.RESTRICTED.value,
        "pod-security.kubernetes.io/audit": PodSecurity.RESTRICTED.value,
        **spec.labels,
    }
    annotations = {PRIVILEGE_REASON: spec.privilege_reason} if spec.privilege_reason else {}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": _meta(spec.name, labels=labels, annotations=annotations),
    }


def resource_quota(ns: str, hard: Mapping[str, str]) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta("quota", ns),
        "spec": {"hard": dict(hard)},
    }


def limit_range(ns: str) -> Object:
    """Defaults for containers that state no resources, so the quota always has numbers to count."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta("defaults", ns),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": "1", "memory": "1Gi"},
                    "defaultRequest": {"cpu": "250m", "memory": "256Mi"},
                }
            ]
        },
    }


def default_deny(ns: str) -> Object:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("default-deny", ns),
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }


def allow_dns(ns: str) -> Object:
    """Egress to the cluster DNS only; everything else stays denied unless a workload allows it."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("allow-dns", ns),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                            },
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                }
            ],
        },
    }


def allow_peers(ns: str, name: str, selector: Mapping[str, str]) -> Object:
    """Pods matching ``selector`` may reach each other on any port (NCCL and c10d pick theirs)."""
    peers = [{"podSelector": {"matchLabels": dict(selector)}}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(name, ns),
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": peers}],
            "egress": [{"to": peers}],
        },
    }


def service_account(ns: str, name: str, annotations: Mapping[str, Any]) -> Object:
    """A dedicated identity per workload, bound to its cloud role; no API token unless asked for."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, ns, annotations=annotations),
        "automountServiceAccountToken": False,
    }


def namespace_objects(spec: NamespaceSpec) -> list[Object]:
    """The namespace and, for workload namespaces, its quota, limits and default-deny networking."""
    objects = [namespace(spec)]
    if spec.guarded:
        objects += [limit_range(spec.name), default_deny(spec.name), allow_dns(spec.name)]
        if spec.quota:
            objects.append(resource_quota(spec.name, spec.quota))
    return objects
