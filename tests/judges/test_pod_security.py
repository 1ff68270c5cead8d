"""The Pod Security judge: each pod against its namespace's enforced level (Pod Security Standards,
kubernetes.io), and added capabilities on a non-root container (review cluster.md A4)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from judges.pod_security import NONROOT_POLICY, POLICY, UNGUARDED_POLICY, judge_pod_security

from .conftest import Judged

RESTRICTED_CONTAINER: dict[str, Any] = {
    "name": "app",
    "image": "i",
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    },
}


def namespace(name: str, level: str | None) -> dict[str, Any]:
    labels = {"pod-security.kubernetes.io/enforce": level} if level else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def deployment(namespace: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": namespace},
        "spec": {
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [container], **spec}}
        },
    }


def messages(
    objects: list[dict[str, Any]], policies: tuple[str, ...] = (POLICY, NONROOT_POLICY)
) -> list[str]:
    """What the admission controls and the inert-capability rule say (the unguarded-level rule is
    judged by its own tests below)."""
    return [f"{f.policy}: {f.message}" for f in judge_pod_security(objects) if f.policy in policies]


def test_a_restricted_pod_passes_restricted() -> None:
    assert messages([namespace("r", "restricted"), deployment("r", RESTRICTED_CONTAINER)]) == []


def test_baseline_refuses_host_path_and_privileged_but_not_a_missing_seccomp() -> None:
    loose = copy.deepcopy(RESTRICTED_CONTAINER)
    loose["securityContext"] = {"privileged": True}
    found = messages(
        [
            namespace("b", "baseline"),
            deployment("b", loose, volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
        ]
    )
    assert any("hostPath (HostPath Volumes)" in m for m in found)
    assert any("privileged (Privileged Containers)" in m for m in found)
    assert not any("Seccomp" in m for m in found)


def test_restricted_refuses_escalation_root_missing_drop_and_added_capabilities() -> None:
    container = {"name": "app", "image": "i", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}
    found = messages([namespace("r", "restricted"), deployment("r", container)])
    for control in (
        "Privilege Escalation",
        "Running as Non-root",
        "Seccomp",
        "does not drop ALL",
        "adds NET_ADMIN",
    ):
        assert any(control in m for m in found), (control, found)


@pytest.mark.parametrize(
    ("pod_context", "control"),
    [
        ({"runAsNonRoot": False}, "pod: runAsNonRoot false (Running as Non-root)"),
        ({"runAsUser": 0}, "pod: runAsUser 0 (Running as Non-root user)"),
    ],
)
def test_restricted_refuses_a_root_pod_setting_that_every_container_overrides(
    pod_context: dict[str, Any], control: str
) -> None:
    """pod-security-admission policy/check_runAsNonRoot.go ("pod must not set runAsNonRoot=false") and
    check_runAsUser.go ("pod must not set runAsUser=0") judge the pod's securityContext on its own; the
    container's own ``runAsNonRoot: true``, ``runAsUser: 10001`` do not save it (review 37c A2)."""
    container = RESTRICTED_CONTAINER  # runAsNonRoot true, runAsUser 10001 of its own
    admitted = messages([namespace("r", "restricted"), deployment("r", container)])
    assert admitted == []
    refused = messages(
        [namespace("r", "restricted"), deployment("r", container, securityContext=pod_context)]
    )
    assert refused == [f"{POLICY}: namespace r enforces restricted: {control}"]


def test_a_namespace_without_a_level_is_privileged() -> None:
    loose = {"name": "app", "image": "i", "securityContext": {"privileged": True}}
    assert messages([namespace("p", None), deployment("p", loose)]) == []


def test_capabilities_added_to_a_non_root_container_are_an_error_at_any_level() -> None:
    ipc_lock = copy.deepcopy(RESTRICTED_CONTAINER)
    ipc_lock["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]
    [finding] = messages([namespace("p", "privileged"), deployment("p", ipc_lock)])
    assert finding.startswith(NONROOT_POLICY) and "UID 10001" in finding
    as_root = copy.deepcopy(ipc_lock)
    as_root["securityContext"] |= {"runAsUser": 0, "runAsNonRoot": False}
    assert messages([namespace("p", "privileged"), deployment("p", as_root)]) == []


def test_a_planted_capability_on_the_inference_pods_is_caught(judged: Callable[[str], Judged]) -> None:
    objects = copy.deepcopy(judged("aws-smb-dev").objects)
    assert judge_pod_security(objects) == []
    [inference] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "inference"]
    inference["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = [
        "SYS_ADMIN"
    ]
    found = {(f.policy, f.subject.name) for f in judge_pod_security(objects)}
    assert found == {(POLICY, "inference"), (NONROOT_POLICY, "inference")}


def _binding(namespace: str, verbs: list[str]) -> list[dict[str, Any]]:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "operator", "namespace": namespace},
        "rules": [{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": verbs}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "operator", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}],
    }
    return [role, binding]


def test_an_unguarded_privileged_namespace_is_refused_even_when_its_pods_need_privileged() -> None:
    """Review 37 P05: a namespace that admits any pod must be narrowed by a Deny-bound guard whatever its
    planned pods need; only a namespace where an operator makes pods (the plan's RBAC lets a
    ServiceAccount there create workloads) is left to its operator."""
    loose = {"name": "app", "image": "i", "securityContext": {"privileged": True}}
    objects = [namespace("p", "privileged"), deployment("p", loose)]
    [finding] = messages(objects, (UNGUARDED_POLICY,))
    assert "'privileged'" in finding and "no ValidatingAdmissionPolicy bound with Deny" in finding
    assert messages([*objects, *_binding("p", ["create"])], (UNGUARDED_POLICY,)) == []
    assert len(messages([*objects, *_binding("p", ["get", "list"])], (UNGUARDED_POLICY,))) == 1


def test_a_baseline_namespace_refuses_host_access_itself_and_must_be_needed() -> None:
    """Baseline refuses hostPath, host namespaces, privileged containers and added capabilities (the
    guard's probe): it is judged only against what its pods need."""
    needs_baseline = copy.deepcopy(RESTRICTED_CONTAINER)
    needs_baseline["securityContext"]["runAsNonRoot"] = False
    assert messages([namespace("b", "baseline"), deployment("b", needs_baseline)], (UNGUARDED_POLICY,)) == []
    [finding] = messages(
        [namespace("b", "baseline"), deployment("b", RESTRICTED_CONTAINER)], (UNGUARDED_POLICY,)
    )
    assert "the plan's pods there pass 'restricted'" in finding
