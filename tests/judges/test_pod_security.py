"""The Pod Security judge: each pod against its namespace's enforced level (Pod Security Standards,
kubernetes.io), and added capabilities on a non-root container (review cluster.md A4)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from judges.pod_security import NONROOT_POLICY, POLICY, judge_pod_security

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


def messages(objects: list[dict[str, Any]]) -> list[str]:
    return [f"{f.policy}: {f.message}" for f in judge_pod_security(objects)]


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


def test_a_namespace_without_a_level_is_privileged() -> None:
    loose = {"name": "app", "image": "i", "securityContext": {"privileged": True}}
    assert messages([namespace("p", None), deployment("p", loose)]) == []


def test_capabilities_added_to_a_non_root_container_are_an_error_at_any_level() -> None:
    ipc_lock = copy.deepcopy(RESTRICTED_CONTAINER)
    ipc_lock["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]
    [finding] = judge_pod_security([namespace("p", "privileged"), deployment("p", ipc_lock)])
    assert finding.policy == NONROOT_POLICY and "UID 10001" in finding.message
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
