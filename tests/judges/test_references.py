"""The references judge on objects written here: a Namespace is a reference too (the NamespaceLifecycle
admission plugin, kubernetes.io "Admission Control"), generic ephemeral volumes and CSI publish Secrets
are followed (kubernetes.io "Ephemeral Volumes", "Volumes" csi), and one object naming one missing object
at many fields is one finding."""

from __future__ import annotations

from typing import Any

from judges.references import POLICY, judge_references


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _pod(namespace: str, *volumes: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "app", "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": "i"}], "volumes": list(volumes)},
    }


def _mandatory(objects: list[dict[str, Any]]) -> list[str]:
    return [f"{f.subject}: {f.message}" for f in judge_references(objects) if f.mandatory]


def test_objects_in_a_namespace_nobody_creates_are_one_finding_naming_the_namespace() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "serving"}}
    volume = {"name": "creds", "secret": {"secretName": "elsewhere"}}
    [finding] = _mandatory([_pod("serving", volume), secret])
    assert finding.startswith("Namespace serving: metadata.namespace of 2 planned objects (Pod serving/app")
    assert 'namespaces "serving" not found' in finding
    assert _mandatory([_namespace("serving"), _pod("serving"), secret]) == []


def test_the_built_in_namespaces_need_no_namespace_object() -> None:
    """kubernetes.io "Namespaces", Initial namespaces."""
    assert _mandatory([_pod("kube-system"), _pod("default")]) == []


def test_a_namespace_on_a_cluster_scoped_object_is_no_reference() -> None:
    """The API server clears it on create (rest.BeforeCreate); charts often set it on every object."""
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "flavors.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"kind": "Flavor", "plural": "flavors"},
        },
    }
    metadata = {"namespace": "charts"}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "r", **metadata},
    }
    flavor = {"apiVersion": "example.com/v1", "kind": "Flavor", "metadata": {"name": "f", **metadata}}
    assert _mandatory([crd, role, flavor]) == []


def test_an_ephemeral_volume_claims_from_a_storage_class_that_exists() -> None:
    template = {"spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"]}}
    found = _mandatory(
        [_namespace("a"), _pod("a", {"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}})]
    )
    assert found == [
        "Pod a/app: volumes[scratch].ephemeral.volumeClaimTemplate.spec.storageClassName: StorageClass fast "
        "is not in the plan and not made elsewhere (a reference must resolve, or the cluster refuses or "
        "never starts it)"
    ]


def test_a_csi_volume_publishes_with_a_secret_that_exists() -> None:
    csi = {"driver": "secrets-store.csi.k8s.io", "nodePublishSecretRef": {"name": "kv-creds"}}
    [finding] = _mandatory([_namespace("a"), _pod("a", {"name": "kv", "csi": csi})])
    assert "volumes[kv].csi.nodePublishSecretRef.name: Secret a/kv-creds" in finding


def test_one_object_naming_one_missing_service_at_many_fields_is_one_finding() -> None:
    webhooks = [
        {
            "name": f"v{n}.example.com",
            "clientConfig": {"service": {"namespace": "kube-system", "name": "hook"}},
        }
        for n in range(5)
    ]
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "hooks"},
        "webhooks": webhooks,
    }
    [finding] = [f for f in judge_references([config]) if f.policy == POLICY]
    assert finding.message.startswith(
        "webhooks[v0.example.com].clientConfig.service, webhooks[v1.example.com].clientConfig.service, "
        "webhooks[v2.example.com].clientConfig.service and 2 more (5 fields): Service kube-system/hook"
    )
