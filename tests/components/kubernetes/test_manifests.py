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
from mlplatform.plan import Plan, all_stack_targets
from mlplatform.report import kubernetes_objects, write_manifests
from tests.linters import checkov_kubernetes, needs_checkov, unexplained_skips

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
            kubernetes_validate.validate(obj, _k8s_version(plan), strict=True)
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
        if o["kind"] in {"Deployment", "Job"} and "namespace" in o["metadata"]
    }
    assert {i.namespace for i in WORKLOAD_IDENTITIES.values()} <= workload_namespaces
    quotas, limits = _namespaced(objects, "ResourceQuota"), _namespaced(objects, "LimitRange")
    policies = _namespaced(objects, "NetworkPolicy")
    for namespace in workload_namespaces:
        assert namespace in quotas and namespace in limits, namespace
        assert "default-deny" in policies[namespace] and "allow-dns" in policies[namespace], namespace


@pytest.fixture(scope="module")
def checkov_report(
    planned: Callable[[str], Plan], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("manifests")
    for stack in STACKS:
        write_manifests(planned(stack), root / stack)
    return checkov_kubernetes(root)


@needs_checkov
def test_checkov_finds_no_failed_check(checkov_report: dict[str, Any]) -> None:
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
        for c in checkov_report["failed_checks"]
    ]
    assert failed == []


@needs_checkov
def test_every_checkov_skip_carries_a_written_reason(checkov_report: dict[str, Any]) -> None:
    assert unexplained_skips(checkov_report) == []
