"""Namespaces carry their guardrails; privilege above restricted needs a written reason."""

from __future__ import annotations

import pytest

from components.kubernetes.tenancy import PRIVILEGE_REASON, NamespaceSpec, PodSecurity, namespace_objects


def test_workload_namespace_gets_quota_limits_and_default_deny_with_dns() -> None:
    objects = namespace_objects(NamespaceSpec("ml-inference", quota={"requests.cpu": "8"}))
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == [
        ("LimitRange", "defaults"),
        ("Namespace", "ml-inference"),
        ("NetworkPolicy", "allow-dns"),
        ("NetworkPolicy", "default-deny"),
        ("ResourceQuota", "quota"),
    ]
    deny = next(o for o in objects if o["metadata"]["name"] == "default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    namespace = objects[0]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_privileged_namespace_requires_and_records_its_reason() -> None:
    with pytest.raises(ValueError, match="needs a written privilege_reason"):
        NamespaceSpec("gpu-operator", PodSecurity.PRIVILEGED)
    spec = NamespaceSpec("gpu-operator", PodSecurity.PRIVILEGED, "loads kernel modules", guarded=False)
    (namespace,) = namespace_objects(spec)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert namespace["metadata"]["annotations"] == {PRIVILEGE_REASON: "loads kernel modules"}
