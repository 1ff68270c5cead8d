"""Every Kubernetes object every shipped stack applies passes the Kubernetes schemas of the stack's
version (kubernetes-validate, strict) and checkov's security checks, with no failed check and no skip
without a written reason. Manifests come from the real program under mocks (`plan --manifests`),
the objects its Helm charts render included; custom resources (ours and the charts') are validated
against the openAPIV3Schema of the CustomResourceDefinitions the charts ship."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from components.handle import WORKLOAD_IDENTITIES
from components.kubernetes.charts import CHART_EXCEPTION, RELEASE_NAME
from mlplatform.plan import Plan, all_stack_targets
from mlplatform.report import kubernetes_objects, write_manifests
from tests.linters import (
    checkov_kinds,
    checkov_kubernetes,
    needs_checkov,
    unexplained_skips,
    validate_strictly,
)

pytestmark = pytest.mark.slow

STACKS = [t.stack for t in all_stack_targets()]


def _k8s_version(plan: Plan) -> str:
    version = plan.outputs["kubernetesVersion"]
    assert isinstance(version, str)
    return version


def _crd_schemas(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema, from every CustomResourceDefinition in the plan."""
    return {
        (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"]): version["schema"][
            "openAPIV3Schema"
        ]
        for crd in objects
        if crd["kind"] == "CustomResourceDefinition"
        for version in crd["spec"]["versions"]
        if "schema" in version
    }


@pytest.mark.parametrize("stack", STACKS)
def test_objects_pass_strict_schema_validation(stack: str, planned: Callable[[str], Plan]) -> None:
    """kubernetes-validate ships schemas for built-in kinds only (REFERENCE.md); a custom kind is
    validated against the CRD a chart in the same plan installs, and must have one."""
    plan = planned(stack)
    objects = kubernetes_objects(plan)
    assert objects, f"{stack} applies no Kubernetes objects"
    crds = _crd_schemas(objects)
    without_schema = []
    for obj in objects:
        custom = crds.get((obj["apiVersion"], obj["kind"]))
        if custom is not None:
            jsonschema.Draft7Validator(custom).validate(obj)
            continue
        try:
            validate_strictly(obj, _k8s_version(plan))
        except kubernetes_validate.SchemaNotFoundError:
            without_schema.append(f"{obj['apiVersion']} {obj['kind']} {obj['metadata']['name']}")
    assert without_schema == []


def _namespaced(objects: list[dict[str, Any]], kind: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for obj in objects:
        if obj["kind"] == kind:
            found.setdefault(obj["metadata"]["namespace"], []).append(obj["metadata"]["name"])
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_every_workload_namespace_has_quota_limits_and_default_deny(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    objects = kubernetes_objects(planned(stack))
    workload_namespaces = {
        o["metadata"]["namespace"]
        for o in objects
        if o["kind"] in {"Deployment", "Job"}
        and "namespace" in o["metadata"]
        and RELEASE_NAME not in o["metadata"].get("annotations", {})
    }
    assert {i.namespace for i in WORKLOAD_IDENTITIES.values()} <= workload_namespaces
    quotas, limits = _namespaced(objects, "ResourceQuota"), _namespaced(objects, "LimitRange")
    policies = _namespaced(objects, "NetworkPolicy")
    for namespace in workload_namespaces:
        assert namespace in quotas and namespace in limits, namespace
        assert "default-deny" in policies[namespace] and "allow-dns" in policies[namespace], namespace


# What checkov still finds on objects the charts install, each with why it stays (README: "The Kubernetes
# layer"). Every other check passes on them as on ours; a new finding fails here.
CHART_FINDINGS = {
    "CKV_K8S_15": "charts pin images by version tag with IfNotPresent; Always adds a registry round trip",
    "CKV_K8S_43": "charts pin images by tag; the chart version pins the tag (digests are not in the charts)",
    "CKV_K8S_38": "operators, autoscaler, metrics-server and NFD call the Kubernetes API with their token",
    "CKV_K8S_49": "operators manage resources of their own CRDs with wildcard verbs, as their charts grant",
    "CKV_K8S_155": "network-operator and the prometheus admission job manage their own webhooks",
    "CKV2_K8S_5": "the prometheus admission job writes its webhook's TLS secret",
    "CKV_K8S_9": "cluster-autoscaler's chart has no readiness probe (liveness only)",
    "CKV_K8S_22": "the chart's container writes to its root filesystem (no value to make it read-only)",
    "CKV_K8S_29": "the chart sets no pod securityContext and offers no value for it on this object",
    "CKV_K8S_31": "the chart's pod has no seccomp value; k8s-workload-baseline reports it (advisory)",
    "CKV_K8S_40": "the chart's image runs as its own UID below 10000; values cannot change it",
}
# Only on an object whose pin carries a written exception (policy.ml-platform.io/chart-exception).
EXCEPTED_FINDINGS = {
    "CKV_K8S_8",
    "CKV_K8S_10",
    "CKV_K8S_11",
    "CKV_K8S_12",
    "CKV_K8S_13",
    "CKV_K8S_16",
    "CKV_K8S_17",
    "CKV_K8S_19",
    "CKV_K8S_20",
    "CKV_K8S_23",
    "CKV_K8S_28",
    "CKV_K8S_30",
    "CKV_K8S_37",
}


@pytest.fixture(scope="module")
def manifests(planned: Callable[[str], Plan], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """checkov's report on every stack's manifests, and each object's annotations by checkov's name.

    checkov judges each object by its content alone, so an object that another stack exports identically
    (most chart objects) is judged once, and an object of a kind no check of checkov's reads (the charts'
    CustomResourceDefinitions, most of the bytes) is left out: the report is the same, in a fraction of
    the time."""
    root = tmp_path_factory.mktemp("manifests")
    annotations: dict[str, dict[str, str]] = {}
    seen: set[str] = set()
    kinds = checkov_kinds()
    for stack in STACKS:
        objects = kubernetes_objects(planned(stack))
        for path, obj in zip(write_manifests(planned(stack), root / stack), objects, strict=True):
            if obj["kind"] not in kinds or (content := path.read_text()) in seen:
                path.unlink()
            else:
                seen.add(content)
        for obj in objects:
            metadata = obj["metadata"]
            key = f"{obj['kind']}.{metadata.get('namespace', 'default')}.{metadata['name']}"
            annotations[key] = metadata.get("annotations") or {}
    return {"report": checkov_kubernetes(root), "annotations": annotations}


@needs_checkov
def test_checkov_finds_no_failed_check_on_our_objects(manifests: dict[str, Any]) -> None:
    chart = {key for key, found in manifests["annotations"].items() if RELEASE_NAME in found}
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
        for c in manifests["report"]["failed_checks"]
        if c["resource"] not in chart
    ]
    assert failed == []


@needs_checkov
def test_checkov_findings_on_chart_objects_are_the_written_ones(manifests: dict[str, Any]) -> None:
    unexplained = set()
    for check in manifests["report"]["failed_checks"]:
        found = manifests["annotations"].get(check["resource"], {})
        if RELEASE_NAME not in found:
            continue
        excepted = check["check_id"] in EXCEPTED_FINDINGS and found.get(CHART_EXCEPTION)
        if check["check_id"] not in CHART_FINDINGS and not excepted:
            unexplained.add(f"{check['check_id']} {check['resource']}: {check['check_name']}")
    assert sorted(unexplained) == []


@needs_checkov
def test_every_checkov_skip_carries_a_written_reason(manifests: dict[str, Any]) -> None:
    assert unexplained_skips(manifests["report"]) == []
