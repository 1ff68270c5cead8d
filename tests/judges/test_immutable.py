"""The day-2 judge (judges/immutable.py): what an update does to each object the last plan applied.
pulumi-kubernetes replaces an object on a change its diff marks ``forceNew`` (provider/pkg/provider/
diff.go), deleting it first as its name is fixed: a finding naming the effect, mandatory where the delete
cannot finish (a bound PersistentVolume, a claim a running pod mounts: Kubernetes "Storage Object in Use
Protection"; review 38 A2, B2). A change the API server refuses and the provider does not replace is a
mandatory finding naming the field and the k8s.io/kubernetes 1.35 function. Planted changes are data: each
edits one object of a planned stack (the previous plan) into the next plan's; a real day-2 edit of a
shipped stack (turning teams and every optional feature on) must give no mandatory finding."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from judges import Subject, judge_all
from judges.immutable import POLICY, REPLACED, judge_immutable
from mlplatform.report import kubernetes_objects
from tests.stack_variants import all_features, plan_config

from .conftest import Judged
from .test_planted import DELETE, Edit, _apply

AWS = "all-features-aws"
_REGISTRY = ("Deployment", "ml-registry", "registry")
_JOB = ("Job", "ml-training", "digits-mlp-digits-001")
_CLASS = ("StorageClass", "", "ml-platform-encrypted")
_CLAIM = ("PersistentVolumeClaim", "ml-training", "training-output")

_VOLUME = "all-features-aws-aws-ml-training-training-output"

# (id, the edit that makes the next plan, the object, words the message must hold): refused updates.
REFUSED: list[tuple[str, Edit, str, tuple[str, ...]]] = [
    (
        "job-pod-failure-policy",
        Edit(*_JOB, ("spec", "podFailurePolicy", "rules", 1), DELETE),
        "Job ml-training/digits-mlp-digits-001",
        ("spec.podFailurePolicy", "ValidateJobSpecUpdate"),
    ),
    (
        "storage-class-reclaim-policy",
        Edit(*_CLASS, ("reclaimPolicy",), "Retain"),
        "StorageClass ml-platform-encrypted",
        ("reclaimPolicy", "ValidateStorageClassUpdate"),
    ),
    (
        "claim-volume-mode",
        Edit(*_CLAIM, ("spec", "volumeMode"), "Block"),
        "PersistentVolumeClaim ml-training/training-output",
        ("spec.volumeMode", "ValidatePersistentVolumeClaimUpdate"),
    ),
    (
        "claim-shrinks",
        Edit(*_CLAIM, ("spec", "resources", "requests", "storage"), "2400Gi"),
        "PersistentVolumeClaim ml-training/training-output",
        ("2400Gi is less than the applied 4800Gi", "ValidatePersistentVolumeClaimUpdate"),
    ),
    (
        "volume-mode",
        Edit("PersistentVolume", "", _VOLUME, ("spec", "volumeMode"), "Block"),
        f"PersistentVolume {_VOLUME}",
        ("spec.volumeMode", "ValidatePersistentVolumeUpdate"),
    ),
]

# (id, edit, object, level, words): replacements and their effect.
REPLACEMENTS: list[tuple[str, Edit, str, str, tuple[str, ...]]] = [
    (
        "deployment-selector",
        Edit(*_REGISTRY, ("spec", "selector", "matchLabels", "tier"), "server"),
        "Deployment ml-registry/registry",
        "advisory",
        ("spec.selector", "an outage"),
    ),
    (
        "job-template",
        Edit(*_JOB, ("spec", "template", "spec", "containers", 0, "image"), "trainer:2"),
        "Job ml-training/digits-mlp-digits-001",
        "advisory",
        ("spec.template", "the Job runs again"),
    ),
    (
        "job-completions",
        Edit(*_JOB, ("spec", "completions"), 99),
        "Job ml-training/digits-mlp-digits-001",
        "advisory",
        ("spec.completions", "the Job runs again"),
    ),
    (
        "storage-class-parameters",
        Edit(*_CLASS, ("parameters", "type"), "io2"),
        "StorageClass ml-platform-encrypted",
        "advisory",
        ("parameters", "keep the old class's parameters"),
    ),
    (
        "storage-class-provisioner",
        Edit(*_CLASS, ("provisioner",), "efs.csi.aws.com"),
        "StorageClass ml-platform-encrypted",
        "advisory",
        ("provisioner", "keep the old class's parameters"),
    ),
    (
        "claim-access-modes-of-a-jobs-claim",
        Edit(*_CLAIM, ("spec", "accessModes"), ["ReadWriteOnce"]),
        "PersistentVolumeClaim ml-training/training-output",
        "advisory",
        ("spec.accessModes", "a new claim"),
    ),
    (
        "bound-volume-source",
        Edit("PersistentVolume", "", _VOLUME, old="c87044b2", value="d0"),
        f"PersistentVolume {_VOLUME}",
        "mandatory",
        ("spec.csi", "bound to claim ml-training/training-output, which stays", "pv-protection"),
    ),
]


def _next(objects: list[dict[str, Any]], edit: Edit) -> list[dict[str, Any]]:
    changed = copy.deepcopy(objects)
    _apply(changed, edit)
    return changed


@pytest.mark.parametrize(("edit", "subject", "says"), [p[1:] for p in REFUSED], ids=[p[0] for p in REFUSED])
def test_a_refused_update_is_a_mandatory_finding_naming_object_field_and_rule(
    judged: Callable[[str], Judged], edit: Edit, subject: str, says: tuple[str, ...]
) -> None:
    previous = judged(AWS).objects
    findings = judge_immutable(previous, _next(previous, edit))
    assert [f.policy for f in findings] == [POLICY]
    assert any(
        f.mandatory and str(f.subject) == subject and all(w in f.message for w in says) for f in findings
    ), [str(f) for f in findings]


@pytest.mark.parametrize(
    ("edit", "subject", "level", "says"), [p[1:] for p in REPLACEMENTS], ids=[p[0] for p in REPLACEMENTS]
)
def test_a_replacement_names_its_effect_and_is_mandatory_only_where_the_delete_cannot_finish(
    judged: Callable[[str], Judged], edit: Edit, subject: str, level: str, says: tuple[str, ...]
) -> None:
    """Review 38 B2: pulumi-kubernetes replaces these, so the API server never refuses them."""
    previous = judged(AWS).objects
    [finding] = judge_immutable(previous, _next(previous, edit))
    assert (finding.policy, str(finding.subject), finding.level) == (REPLACED, subject, level)
    assert "forceNew" in finding.message and all(w in finding.message for w in says), finding.message


def test_what_the_api_server_lets_change_is_no_finding(judged: Callable[[str], Judged]) -> None:
    """Replicas, a Deployment's template, a claim's growth through an expandable class, a CronJob's
    jobTemplate: each is an ordinary update."""
    previous = judged(AWS).objects
    objects = previous
    for edit in (
        Edit(*_REGISTRY, ("spec", "replicas"), 3),
        Edit(*_REGISTRY, ("spec", "template", "spec", "containers", 0, "image"), "registry:2"),
        Edit(*_CLAIM, ("spec", "resources", "requests", "storage"), "9600Gi"),
    ):
        objects = _next(objects, edit)
    assert judge_immutable(previous, objects) == []
    assert judge_immutable(None, objects) == []  # no previous plan: no day 2 to judge


def _object(kind: str, api: str = "v1", **fields: Any) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "x", "namespace": "a"}, **fields}


# Kinds the shipped stacks do not apply, or changes the planned objects do not carry: (before, after, says).
SMALL: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
    (
        "replicaset-selector",
        _object("ReplicaSet", "apps/v1", spec={"selector": {"matchLabels": {"a": "1"}}}),
        _object("ReplicaSet", "apps/v1", spec={"selector": {"matchLabels": {"a": "2"}}}),
        ("spec.selector", "replicaset strategy ValidateUpdate"),
    ),
    (
        "job-completion-mode",
        _object("Job", "batch/v1", spec={"completionMode": "NonIndexed"}),
        _object("Job", "batch/v1", spec={"completionMode": "Indexed"}),
        ("spec.completionMode", "ValidateJobSpecUpdate"),
    ),
    (
        "service-cluster-ips",
        _object("Service", spec={"type": "ClusterIP", "clusterIP": "10.0.0.10", "clusterIPs": ["10.0.0.10"]}),
        _object("Service", spec={"type": "ClusterIP", "clusterIP": "10.0.0.10", "clusterIPs": ["10.0.0.11"]}),
        ("spec.clusterIPs", "ValidateServiceUpdate"),
    ),
    (
        "immutable-config-map-unset",
        _object("ConfigMap", immutable=True, data={"k": "a"}),
        _object("ConfigMap", data={"k": "a"}),
        ("immutable", "ValidateConfigMapUpdate"),
    ),
    (
        "immutable-secret-unset",
        _object("Secret", immutable=True, data={"k": "YQ=="}),
        _object("Secret", data={"k": "YQ=="}),
        ("immutable", "ValidateSecretUpdate"),
    ),
    (
        "csi-driver-attach",
        _object("CSIDriver", "storage.k8s.io/v1", spec={"attachRequired": True}),
        _object("CSIDriver", "storage.k8s.io/v1", spec={"attachRequired": False}),
        ("spec.attachRequired", "ValidateCSIDriverUpdate"),
    ),
    (
        "ingress-class-controller",
        _object("IngressClass", "networking.k8s.io/v1", spec={"controller": "a.io/x"}),
        _object("IngressClass", "networking.k8s.io/v1", spec={"controller": "b.io/x"}),
        ("spec.controller", "ValidateIngressClassUpdate"),
    ),
    (
        "priority-class-value",
        _object("PriorityClass", "scheduling.k8s.io/v1", value=100),
        _object("PriorityClass", "scheduling.k8s.io/v1", value=200),
        ("value", "ValidatePriorityClassUpdate"),
    ),
    (
        "claim-grows-through-a-fixed-class",
        _object(
            "PersistentVolumeClaim",
            spec={"storageClassName": "fixed", "resources": {"requests": {"storage": "1Gi"}}},
        ),
        _object(
            "PersistentVolumeClaim",
            spec={"storageClassName": "fixed", "resources": {"requests": {"storage": "2Gi"}}},
        ),
        ("allowVolumeExpansion", "PersistentVolumeClaimResize"),
    ),
]


@pytest.mark.parametrize(("before", "after", "says"), [s[1:] for s in SMALL], ids=[s[0] for s in SMALL])
def test_each_kinds_refused_update(
    before: dict[str, Any], after: dict[str, Any], says: tuple[str, ...]
) -> None:
    fixed = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fixed"}}
    findings = judge_immutable([before], [after, fixed])
    assert [(f.policy, f.level) for f in findings] == [(POLICY, "mandatory")]
    assert all(w in findings[0].message for w in says), findings[0].message


# What ValidateStatefulSetUpdate, ValidateServiceUpdate, ValidateSecretUpdate and the bindings' roleRef rule
# would refuse, and what the API server lets change but the provider still replaces: (before, after, says).
SMALL_REPLACED: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...]]] = [
    (
        "statefulset-claim-templates",
        _object("StatefulSet", "apps/v1", spec={"replicas": 1, "volumeClaimTemplates": [{"a": 1}]}),
        _object("StatefulSet", "apps/v1", spec={"replicas": 2, "volumeClaimTemplates": [{"a": 2}]}),
        ("spec.volumeClaimTemplates", "their claims stay"),
    ),
    (
        "statefulset-revision-history",
        _object("StatefulSet", "apps/v1", spec={"revisionHistoryLimit": 10}),
        _object("StatefulSet", "apps/v1", spec={"revisionHistoryLimit": 3}),
        ("spec.revisionHistoryLimit", "an outage"),
    ),
    (
        "daemonset-selector",
        _object("DaemonSet", "apps/v1", spec={"selector": {"matchLabels": {"a": "1"}}}),
        _object("DaemonSet", "apps/v1", spec={"selector": {"matchLabels": {"a": "2"}}}),
        ("spec.selector", "an outage"),
    ),
    (
        "service-cluster-ip",
        _object("Service", spec={"type": "ClusterIP", "clusterIP": "10.0.0.10"}),
        _object("Service", spec={"type": "ClusterIP", "clusterIP": "10.0.0.11"}),
        ("spec.clusterIP", "a new cluster IP"),
    ),
    (
        "secret-data",
        _object("Secret", data={"k": "YQ=="}),
        _object("Secret", data={"k": "Yg=="}),
        ("data", "a pod starting then cannot read it"),
    ),
    (
        "secret-type",
        _object("Secret", type="Opaque"),
        _object("Secret", type="kubernetes.io/tls"),
        ("type", "a pod starting then cannot read it"),
    ),
    (
        "config-map-data",
        _object("ConfigMap", data={"k": "a"}),
        _object("ConfigMap", data={"k": "b"}),
        ("data", "a pod starting then cannot read it"),
    ),
    (
        "role-binding-role",
        _object("RoleBinding", "rbac.authorization.k8s.io/v1", roleRef={"kind": "Role", "name": "a"}),
        _object("RoleBinding", "rbac.authorization.k8s.io/v1", roleRef={"kind": "Role", "name": "b"}),
        ("roleRef", "its grant is absent"),
    ),
    (
        "indexed-job-scaled-elastically",
        _object("Job", "batch/v1", spec={"completionMode": "Indexed", "completions": 2, "parallelism": 2}),
        _object("Job", "batch/v1", spec={"completionMode": "Indexed", "completions": 4, "parallelism": 4}),
        ("spec.completions, spec.parallelism", "the Job runs again"),
    ),
    (
        "pod-container-image",
        _object("Pod", spec={"containers": [{"name": "a", "image": "a:1"}]}),
        _object("Pod", spec={"containers": [{"name": "a", "image": "a:2"}]}),
        ("spec.containers[*].image", "deleted, then created again"),
    ),
]


@pytest.mark.parametrize(
    ("before", "after", "says"), [s[1:] for s in SMALL_REPLACED], ids=[s[0] for s in SMALL_REPLACED]
)
def test_each_kinds_replacement(before: dict[str, Any], after: dict[str, Any], says: tuple[str, ...]) -> None:
    [finding] = judge_immutable([before], [after])
    assert (finding.policy, finding.level) == (REPLACED, "advisory")
    assert all(w in finding.message for w in says), finding.message


def test_what_neither_refuses_nor_replaces_is_no_finding() -> None:
    """A Service leaving ExternalName that lets the cluster pick its address; a pod field outside the
    provider's container list (``startupProbe``)."""
    before = _object("Service", spec={"type": "ExternalName", "externalName": "a.example"})
    assert judge_immutable([before], [_object("Service", spec={"type": "ClusterIP"})]) == []
    pod = _object("Pod", spec={"containers": [{"name": "a", "image": "a:1"}]})
    probed = _object("Pod", spec={"containers": [{"name": "a", "image": "a:1", "startupProbe": {"a": 1}}]})
    assert judge_immutable([pod], [probed]) == []


def _claim(name: str, volume: str) -> dict[str, Any]:
    spec = {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "a"},
        "spec": spec,
    }


def _volume(name: str, claim: str, handle: str) -> dict[str, Any]:
    spec = {
        "csi": {"driver": "efs.csi.aws.com", "volumeHandle": handle},
        "claimRef": {"namespace": "a", "name": claim},
    }
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def _server(claim: str, replicas: int = 1) -> dict[str, Any]:
    volumes = [{"name": "store", "persistentVolumeClaim": {"claimName": claim}}]
    spec = {
        "replicas": replicas,
        "template": {"spec": {"containers": [{"name": "s", "image": "s"}], "volumes": volumes}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "s", "namespace": "a"},
        "spec": spec,
    }


def test_a_claim_a_running_pod_mounts_cannot_be_replaced() -> None:
    """pvc-protection: a claim mounted by a Deployment's pods is not removed while they run, so its
    delete-first replacement does not finish (mandatory); at 0 replicas nothing holds it (advisory); the
    volume whose claim is replaced too defers to the claim."""
    previous = [_volume("v", "c", "fs-1"), _claim("c", "v"), _server("c")]
    moved = [_volume("v", "c", "fs-1"), _claim("c", "w"), _server("c")]
    [finding] = judge_immutable(previous, moved)
    assert (finding.policy, finding.level, str(finding.subject)) == (
        REPLACED,
        "mandatory",
        "PersistentVolumeClaim a/c",
    )
    assert "Deployment a/s mount it" in finding.message and "pvc-protection" in finding.message
    stopped = [*previous[:2], _server("c", replicas=0)]
    assert [f.level for f in judge_immutable(stopped, moved)] == ["advisory"]
    both = [_volume("v", "c", "fs-2"), _claim("c", "w"), _server("c")]
    levels = {str(f.subject): f.level for f in judge_immutable(stopped, both)}
    assert levels == {"PersistentVolume v": "advisory", "PersistentVolumeClaim a/c": "advisory"}


def test_a_store_moved_under_names_of_its_own_is_no_finding() -> None:
    """Review 38 A2, both ways: the registry's store moved to a new source under the same names is a bound
    volume's replacement (mandatory, whose claim the server mounts); under names derived from the new store
    (components/kubernetes/storage.py ``store_claim``) the update creates the new pair and deletes the old
    one last, which nothing then holds."""
    previous = [_volume("v-store", "store", "fs-1::ap-shared"), _claim("store", "v-store"), _server("store")]
    same_names = [_volume("v-store", "store", "fs-1::ap-own"), _claim("store", "v-store"), _server("store")]
    [finding] = judge_immutable(previous, same_names)
    assert finding.mandatory and "bound to claim a/store, which stays" in finding.message
    own = [
        _volume("v-store-1a2b", "store-1a2b", "fs-1::ap-own"),
        _claim("store-1a2b", "v-store-1a2b"),
        _server("store-1a2b"),
    ]
    assert judge_immutable(previous, own) == []


def test_a_helm_hook_job_with_a_new_template_is_created_anew_not_updated() -> None:
    """Helm deletes a hook before creating it again (``before-hook-creation``, its default policy: Helm
    docs "Chart Hooks"); the same change to a Job that is no hook is refused."""
    hook = {"annotations": {"helm.sh/hook": "pre-upgrade"}, "name": "x", "namespace": "a"}
    before, after = ({"template": {"spec": {"containers": [{"image": image}]}}} for image in ("a:1", "b:1"))
    assert (
        judge_immutable(
            [_object("Job", "batch/v1", spec=before, metadata=hook)],
            [_object("Job", "batch/v1", spec=after, metadata=hook)],
        )
        == []
    )
    [finding] = judge_immutable(
        [_object("Job", "batch/v1", spec=before)], [_object("Job", "batch/v1", spec=after)]
    )
    assert "spec.template" in finding.message


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-enterprise-prod"])
def test_turning_every_feature_on_over_a_shipped_stack_is_an_update_that_completes(
    judged: Callable[[str], Judged], tmp_path_factory: pytest.TempPathFactory, stack: str
) -> None:
    """Day 2 on an enterprise stack: the operator adds teams, monitoring, Kueue, the GPU operator, the
    fabric gate and authenticated inference; every object the shipped plan already applied takes the
    update or a replacement that completes (check --previous runs the same judge)."""
    before = judged(stack)
    after = plan_config(all_features(stack), Path(tmp_path_factory.mktemp("day2")), stack, shared=True)
    objects = kubernetes_objects(after)
    shared = {Subject.of(o) for o in before.objects} & {Subject.of(o) for o in objects}
    assert len(shared) > 200, "the day-2 plan must update the objects the shipped plan applied"
    findings = judge_all(
        objects, before.network, before.pools, skip=frozenset({"exit-codes"}), previous=before.objects
    )
    assert [str(f) for f in findings if f.policy in {POLICY, REPLACED} and f.mandatory] == []


def _registry_store(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The registry's store volume and the training directory's volume."""
    volumes = {o["spec"]["claimRef"]["namespace"]: o for o in objects if o["kind"] == "PersistentVolume"}
    return volumes["ml-registry"], volumes["ml-training"]


@pytest.mark.parametrize("stack", ["aws-smb-prod", "azure-smb-prod"])
def test_the_upgrade_that_moves_an_smb_registrys_store_completes(
    judged: Callable[[str], Judged], stack: str
) -> None:
    """Review 38 A2 on the shipped SMB stacks, both ways. The previous plan is the release before the store
    move (docs/operations.md, "Once: move an SMB registry's database to its own store"): the server's
    claim ``registry-store`` over the training directory. This release names the pair after the store
    (``registry-store-<digest>``): a new pair, no finding. The same move under the old names, as the
    release before this fix planned it, replaces a bound volume the server uses: mandatory."""
    objects = judged(stack).objects
    store, training = _registry_store(objects)
    claim = store["spec"]["claimRef"]["name"]
    # Azure's volumes are the TLS tunnel's source revision (SharedStorage.source_revision).
    assert re.fullmatch(r"registry-store-[0-9a-f]{8}" + ("-tls" if stack.startswith("azure") else ""), claim)
    previous = json.loads(json.dumps(objects).replace(claim, "registry-store"))
    _registry_store(previous)[0]["spec"]["csi"] = copy.deepcopy(training["spec"]["csi"])
    assert judge_immutable(previous, objects) == []
    same_names = json.loads(json.dumps(objects).replace(claim, "registry-store"))
    [finding] = judge_immutable(previous, same_names)
    assert (finding.policy, finding.level, finding.subject.kind) == (
        REPLACED,
        "mandatory",
        "PersistentVolume",
    )
    assert "bound to claim ml-registry/registry-store, which stays" in finding.message
