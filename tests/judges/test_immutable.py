"""The day-2 judge (judges/immutable.py): an update the API server refuses, named by object, field and the
k8s.io/kubernetes 1.35 function that refuses it. Planted changes are data: each edits one object of a
planned stack (the previous plan) into the next plan's, and must give a mandatory finding naming the
field and the rule; a real day-2 edit of a shipped stack (turning teams and every optional feature on)
must give none."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from judges import Subject, judge_all
from judges.immutable import judge_immutable
from mlplatform.report import kubernetes_objects
from tests.stack_variants import all_features, plan_config

from .conftest import Judged
from .test_planted import DELETE, Edit, _apply

AWS = "all-features-aws"
_REGISTRY = ("Deployment", "ml-registry", "registry")
_JOB = ("Job", "ml-training", "digits-mlp-digits-001")
_CLASS = ("StorageClass", "", "ml-platform-encrypted")
_CLAIM = ("PersistentVolumeClaim", "ml-training", "training-output")

# (id, the edit that makes the next plan, the object, words the message must hold)
PLANTED: list[tuple[str, Edit, str, tuple[str, ...]]] = [
    (
        "deployment-selector",
        Edit(*_REGISTRY, ("spec", "selector", "matchLabels", "tier"), "server"),
        "Deployment ml-registry/registry",
        ("spec.selector", "field is immutable", "deployment strategy ValidateUpdate"),
    ),
    (
        "job-template",
        Edit(*_JOB, ("spec", "template", "spec", "containers", 0, "image"), "trainer:2"),
        "Job ml-training/digits-mlp-digits-001",
        ("spec.template", "ValidateJobSpecUpdate"),
    ),
    (
        "job-completions",
        Edit(*_JOB, ("spec", "completions"), 99),
        "Job ml-training/digits-mlp-digits-001",
        ("spec.completions", "validateCompletions"),
    ),
    (
        "job-pod-failure-policy",
        Edit(*_JOB, ("spec", "podFailurePolicy", "rules", 1), DELETE),
        "Job ml-training/digits-mlp-digits-001",
        ("spec.podFailurePolicy", "ValidateJobSpecUpdate"),
    ),
    (
        "storage-class-parameters",
        Edit(*_CLASS, ("parameters", "type"), "io2"),
        "StorageClass ml-platform-encrypted",
        ("parameters", "ValidateStorageClassUpdate"),
    ),
    (
        "storage-class-provisioner",
        Edit(*_CLASS, ("provisioner",), "efs.csi.aws.com"),
        "StorageClass ml-platform-encrypted",
        ("provisioner", "ValidateStorageClassUpdate"),
    ),
    (
        "claim-access-modes",
        Edit(*_CLAIM, ("spec", "accessModes"), ["ReadWriteOnce"]),
        "PersistentVolumeClaim ml-training/training-output",
        ("spec.accessModes", "ValidatePersistentVolumeClaimUpdate"),
    ),
    (
        "claim-shrinks",
        Edit(*_CLAIM, ("spec", "resources", "requests", "storage"), "2400Gi"),
        "PersistentVolumeClaim ml-training/training-output",
        ("2400Gi is less than the applied 4800Gi", "ValidatePersistentVolumeClaimUpdate"),
    ),
    (
        "volume-source",
        Edit(
            "PersistentVolume",
            "",
            "all-features-aws-aws-ml-training-training-output",
            old="c87044b2",
            value="d0",
        ),
        "PersistentVolume all-features-aws-aws-ml-training-training-output",
        ("spec.csi", "ValidatePersistentVolumeUpdate"),
    ),
]


def _next(objects: list[dict[str, Any]], edit: Edit) -> list[dict[str, Any]]:
    changed = copy.deepcopy(objects)
    _apply(changed, edit)
    return changed


@pytest.mark.parametrize(("edit", "subject", "says"), [p[1:] for p in PLANTED], ids=[p[0] for p in PLANTED])
def test_a_refused_update_is_a_mandatory_finding_naming_object_field_and_rule(
    judged: Callable[[str], Judged], edit: Edit, subject: str, says: tuple[str, ...]
) -> None:
    previous = judged(AWS).objects
    findings = judge_immutable(previous, _next(previous, edit))
    assert any(
        f.mandatory and str(f.subject) == subject and all(w in f.message for w in says) for f in findings
    ), [str(f) for f in findings]


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
        "statefulset-claim-templates",
        _object("StatefulSet", "apps/v1", spec={"replicas": 1, "volumeClaimTemplates": [{"a": 1}]}),
        _object("StatefulSet", "apps/v1", spec={"replicas": 2, "volumeClaimTemplates": [{"a": 2}]}),
        ("spec.volumeClaimTemplates", "ValidateStatefulSetUpdate"),
    ),
    (
        "statefulset-service-name",
        _object("StatefulSet", "apps/v1", spec={"serviceName": "a"}),
        _object("StatefulSet", "apps/v1", spec={"serviceName": "b"}),
        ("spec.serviceName", "ValidateStatefulSetUpdate"),
    ),
    (
        "daemonset-selector",
        _object("DaemonSet", "apps/v1", spec={"selector": {"matchLabels": {"a": "1"}}}),
        _object("DaemonSet", "apps/v1", spec={"selector": {"matchLabels": {"a": "2"}}}),
        ("spec.selector", "daemonset strategy ValidateUpdate"),
    ),
    (
        "service-cluster-ip",
        _object("Service", spec={"type": "ClusterIP", "clusterIP": "10.0.0.10"}),
        _object("Service", spec={"type": "ClusterIP", "clusterIP": "10.0.0.11"}),
        ("spec.clusterIP", "ValidateServiceUpdate"),
    ),
    (
        "immutable-secret-data",
        _object("Secret", immutable=True, data={"k": "YQ=="}),
        _object("Secret", immutable=True, data={"k": "Yg=="}),
        ("data", "ValidateSecretUpdate"),
    ),
    (
        "immutable-config-map-unset",
        _object("ConfigMap", immutable=True, data={"k": "a"}),
        _object("ConfigMap", data={"k": "a"}),
        ("immutable", "ValidateConfigMapUpdate"),
    ),
    (
        "secret-type",
        _object("Secret", type="Opaque"),
        _object("Secret", type="kubernetes.io/tls"),
        ("type", "ValidateSecretUpdate"),
    ),
    (
        "role-binding-role",
        _object("RoleBinding", "rbac.authorization.k8s.io/v1", roleRef={"kind": "Role", "name": "a"}),
        _object("RoleBinding", "rbac.authorization.k8s.io/v1", roleRef={"kind": "Role", "name": "b"}),
        ("cannot change roleRef", "ValidateRoleBindingUpdate"),
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
    assert any(f.mandatory and all(w in f.message for w in says) for f in findings), [
        str(f) for f in findings
    ]


def test_a_service_may_leave_external_name_and_an_indexed_job_scale_elastically() -> None:
    before = _object("Service", spec={"type": "ExternalName", "clusterIP": ""})
    assert (
        judge_immutable([before], [_object("Service", spec={"type": "ClusterIP", "clusterIP": "10.0.0.1"})])
        == []
    )
    job = {"completionMode": "Indexed", "completions": 2, "parallelism": 2}
    grown = {**job, "completions": 4, "parallelism": 4}
    assert (
        judge_immutable([_object("Job", "batch/v1", spec=job)], [_object("Job", "batch/v1", spec=grown)])
        == []
    )


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
def test_turning_every_feature_on_over_a_shipped_stack_is_an_update_the_api_server_accepts(
    judged: Callable[[str], Judged], tmp_path_factory: pytest.TempPathFactory, stack: str
) -> None:
    """Day 2 on an enterprise stack: the operator adds teams, monitoring, Kueue, the GPU operator, the
    fabric gate and authenticated inference; every object the shipped plan already applied takes the
    update (check --previous runs the same judge)."""
    before = judged(stack)
    after = plan_config(all_features(stack), Path(tmp_path_factory.mktemp("day2")), stack, shared=True)
    objects = kubernetes_objects(after)
    shared = {Subject.of(o) for o in before.objects} & {Subject.of(o) for o in objects}
    assert len(shared) > 200, "the day-2 plan must update the objects the shipped plan applied"
    findings = judge_all(
        objects, before.network, before.pools, skip=frozenset({"exit-codes"}), previous=before.objects
    )
    assert [str(f) for f in findings if f.policy == "immutable-field-changed"] == []
