"""A team's ML engineers cannot undo what isolates their namespace (issue 35, review A8).

Their role (AmazonEKSEditPolicy / AKS RBAC Writer) follows Kubernetes' ``edit``, which writes
``networkpolicies`` and impersonates the namespace's service accounts (system:aggregate-to-edit,
kubernetes/kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go). The tenancy guard
(components/kubernetes/tenancy.py ``tenancy_guard_policy``) refuses them, judged with cel-python as the
API server runs the policy (judges/cel.py); the stack's own apply stays admitted. Users are named as the
API server authenticates them: EKS access entries make an IAM role the user
``arn:aws:sts::<account>:assumed-role/<role>/<session>`` (EKS user guide, "Create access entries"); AKS
puts a user's Entra group object ids in its groups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from components.kubernetes.tenancy import TENANCY_GUARD
from judges.cel import DEPLOYER, judge_cel, refusals
from judges.tenancy import POLICY, judge_tenancy
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects
from tests.stack_variants import ACCOUNT, PEOPLE_AZURE

GUARD = "ValidatingAdmissionPolicy ml-platform-tenancy-guard refuses"
NLP_ENGINEER = {
    "aws-enterprise-prod": {
        "username": f"arn:aws:sts::{ACCOUNT}:assumed-role/nlp-engineers/alice@example.ae",
        "groups": ["system:authenticated"],
    },
    "azure-enterprise-prod": {
        "username": "alice@example.ae",
        "groups": [PEOPLE_AZURE["mlEngineers"]["nlp"][0], "system:authenticated"],
    },
}
STACKS = tuple(NLP_ENGINEER)


def _guarded(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"].get("namespace") == "team-nlp"][:1]
    return found


def _refused(objects: list[dict[str, Any]], obj: dict[str, Any], operation: str, user: Any) -> list[str]:
    return [f.message for f in refusals(objects, obj, operation=operation, user=user) if GUARD in f.message]


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("kind", ["NetworkPolicy", "ResourceQuota", "LimitRange"])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_an_engineer_may_not_change_the_team_namespaces_guard_objects(
    stack: str, kind: str, operation: str, people_plan: Callable[[str], Plan]
) -> None:
    objects = kubernetes_objects(people_plan(stack))
    obj = _guarded(objects, kind)
    assert _refused(objects, obj, operation, NLP_ENGINEER[stack])
    # ...nor through a service account of the namespace, which edit may impersonate.
    robot = {"username": "system:serviceaccount:team-nlp:default", "groups": ["system:serviceaccounts"]}
    assert _refused(objects, obj, operation, robot)
    # The platform may: the deployer, and the cluster's controllers (the namespace controller deleting).
    assert not _refused(objects, obj, operation, DEPLOYER)
    controller = {"username": "system:serviceaccount:kube-system:namespace-controller", "groups": []}
    assert not _refused(objects, obj, operation, controller)


@pytest.mark.parametrize("stack", STACKS)
def test_the_guard_leaves_engineers_their_own_workloads_and_other_namespaces(
    stack: str, people_plan: Callable[[str], Plan]
) -> None:
    objects = kubernetes_objects(people_plan(stack))
    engineer = NLP_ENGINEER[stack]
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-nlp"}}
    assert not _refused(objects, config_map, "CREATE", engineer)
    # Only team namespaces are bound (the platform's own are out of the engineers' RBAC scope already).
    policy = next(
        o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == "ml-training"
    )
    assert not _refused(objects, policy, "DELETE", engineer)


@pytest.mark.parametrize("stack", STACKS)
def test_the_stacks_own_apply_is_admitted(stack: str, people_plan: Callable[[str], Plan]) -> None:
    objects = kubernetes_objects(people_plan(stack))
    assert any(
        o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == "ml-platform-tenancy-guard"
        for o in objects
    )
    assert not [f for f in judge_cel(objects) if GUARD in f.message]


@pytest.mark.parametrize("stack", STACKS)
def test_the_team_isolation_judge_catches_a_team_namespace_left_unguarded(
    stack: str, people_plan: Callable[[str], Plan]
) -> None:
    """judges/tenancy.py: the planned guard holds (no finding); without its binding every NetworkPolicy,
    ResourceQuota and LimitRange of both team namespaces is a mandatory finding."""
    objects = kubernetes_objects(people_plan(stack))
    assert judge_tenancy(objects) == []
    unbound = [
        o
        for o in objects
        if not (o["kind"] == "ValidatingAdmissionPolicyBinding" and o["metadata"]["name"] == TENANCY_GUARD)
    ]
    findings = judge_tenancy(unbound)
    guarded = {
        (o["kind"], o["metadata"]["namespace"])
        for o in objects
        if o["kind"] in ("NetworkPolicy", "ResourceQuota", "LimitRange")
        and o["metadata"].get("namespace") in ("team-nlp", "team-vision")
    }
    assert {(f.subject.kind, f.subject.namespace) for f in findings} == guarded
    assert len(guarded) >= 6 and all(f.mandatory and f.policy == POLICY for f in findings)
