"""Every Kubernetes object every shipped stack applies passes the Kubernetes schemas of the stack's
version (kubernetes-validate, strict) and checkov's security checks, with no failed check and no skip
without a written reason. Manifests come from the real program under mocks (`plan --manifests`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest

from components.handle import WORKLOAD_IDENTITIES
from mlplatform.plan import Plan, all_stack_targets
from mlplatform.report import kubernetes_objects, write_manifests
from tests.linters import checkov_kubernetes, needs_checkov, unexplained_skips

STACKS = [t.stack for t in all_stack_targets()]
# Custom resources: kubernetes-validate ships schemas for built-in kinds only (REFERENCE.md).
CUSTOM_KINDS = {"PrometheusRule", "ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"}


def _k8s_version(plan: Plan) -> str:
    version = plan.outputs["kubernetesVersion"]
    assert isinstance(version, str)
    return version


@pytest.mark.parametrize("stack", STACKS)
def test_objects_pass_strict_schema_validation(stack: str, planned: Callable[[str], Plan]) -> None:
    plan = planned(stack)
    objects = kubernetes_objects(plan)
    assert objects, f"{stack} applies no Kubernetes objects"
    for obj in objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(obj, _k8s_version(plan), strict=True)


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
