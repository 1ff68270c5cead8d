"""The references judge on objects written here: a Namespace is a reference too (the NamespaceLifecycle
admission plugin, kubernetes.io "Admission Control"), generic ephemeral volumes and CSI publish Secrets
are followed (kubernetes.io "Ephemeral Volumes", "Volumes" csi), and one object naming one missing object
at many fields is one finding."""

from __future__ import annotations

from typing import Any

from judges.references import GOVERNING_POLICY, POLICY, judge_references
from judges.validation import judge_validation


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


def _stateful_set(service: str, storage_class: str, peers: str = "") -> dict[str, Any]:
    """A database StatefulSet with a claim template mounted at /data (the canonical pattern)."""
    container = {
        "name": "db",
        "image": "postgres:17",
        "env": [{"name": "PEERS", "value": peers}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "shop"},
        "spec": {
            "serviceName": service,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [container]}},
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "storageClassName": storage_class,
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "10Gi"}},
                    },
                }
            ],
        },
    }


def _headless(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]},
    }


def test_a_stateful_sets_claim_templates_name_a_storage_class_that_exists_on_its_cluster() -> None:
    """Review 37c A3, B4: the StatefulSet controller makes each pod's claim from volumeClaimTemplates (a
    missing class leaves claim and pod Pending); AKS creates managed-csi-premium with every cluster
    (learn.microsoft.com, AKS built-in storage classes), EKS does not."""
    objects = [_namespace("shop"), _headless("db"), _stateful_set("db", "premium-ssd")]
    assert _mandatory(objects) == [
        "StatefulSet shop/db: spec.volumeClaimTemplates[0].spec.storageClassName: StorageClass premium-ssd "
        "is not in the plan and not made elsewhere (a reference must resolve, or the cluster refuses or "
        "never starts it)"
    ]
    built_in = [_namespace("shop"), _headless("db"), _stateful_set("db", "managed-csi-premium")]
    assert [f for f in judge_references(built_in, "aks") if f.mandatory] == []
    assert len([f for f in judge_references(built_in, "eks") if f.mandatory]) == 1


def test_a_stateful_set_mounts_its_claim_templates_as_volumes() -> None:
    """Review 37c B2: ValidatePodTemplateSpecForStatefulSet checks mounts against "the union of the given
    volumes and volumeClaims": a mount of a claim template is valid."""
    objects = [_stateful_set("db", "gp2")]
    assert judge_validation(objects) == []
    objects[0]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] = "dta"
    [finding] = judge_validation(objects)
    assert "volumeMounts[0].name 'dta': Not found" in finding.message


def test_a_missing_governing_service_is_advisory_unless_a_pod_dns_name_is_used() -> None:
    """Review 37c B3: without its serviceName Service the StatefulSet's pods are created and run, with no
    per-pod DNS names (kubernetes.io "StatefulSets", Stable Network ID): that breaks only what addresses
    a pod by such a name (a peer list, a rendezvous endpoint ``db-0.db``)."""
    alone = [_namespace("shop"), _stateful_set("db", "gp2")]
    findings = judge_references(alone, "eks")
    assert [(f.policy, f.level) for f in findings] == [(GOVERNING_POLICY, "advisory")]
    assert (
        "the pods are created and run, but get no per-pod DNS names (<pod>.db.shop.svc" in findings[0].message
    )
    peers = [_namespace("shop"), _stateful_set("db", "gp2", peers="db-0.db.shop.svc:5432,db-1.db:5432")]
    assert _mandatory(peers) == [
        "StatefulSet shop/db: spec.serviceName: Service shop/db is not in the plan: the pods are created and "
        'run, but get no per-pod DNS names (<pod>.db.shop.svc; kubernetes.io "StatefulSets", Stable Network '
        "ID: the headless Service is the user's to create); StatefulSet shop/db names db-0.db, which never "
        "resolves"
    ]
    assert judge_references([*peers, _headless("db")], "eks") == []
