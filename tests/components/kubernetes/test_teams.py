"""Team namespaces are first-class (issue 25 part 3, cluster review A3): a team that submits the
platform's own training run in its namespace gets it admitted by the API server (ResourceQuota, Pod
Security and the admission policies bound there), queued by its own ClusterQueue, and its pods reach
each other through the namespace's NetworkPolicies.

Rules and sources: ResourceQuota admission refuses a pod that would take a namespace over ``hard``
(kubernetes.io, "Resource Quotas"); a pod selected by any policy of a direction admits only what one of
them allows (kubernetes.io, "Network Policies"); Pod Security "restricted" allows no added capability
but NET_BIND_SERVICE (kubernetes.io, "Pod Security Standards"); ValidatingAdmissionPolicy CEL
validations deny when any evaluates false (admissionregistration.k8s.io/v1).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from components.kubernetes import kueue
from components.kubernetes.tenancy import POD_SECURITY_EXCEPTION_LABEL
from judges.cel import refusals
from judges.kube import labels_match
from judges.scheduling import QUOTA_POLICY, judge_scheduling
from mlplatform.report import kubernetes_objects
from tests.stack_variants import job_pod, plan_config, team_job, with_teams


@pytest.fixture(scope="module")
def team_plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    directory: Path = tmp_path_factory.mktemp("teams")
    return {
        stack: kubernetes_objects(plan_config(with_teams(stack), directory, stack, shared=True))
        for stack in ("aws-enterprise-prod", "azure-enterprise-prod")
    }


def _in(objects: list[dict[str, Any]], kind: str, namespace: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and o["metadata"].get("namespace") == namespace]


def _platform_job(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [job] = [
        o for o in _in(objects, "Job", "ml-training") if not o["metadata"]["name"].startswith("fabric-test-")
    ]
    return job


def _quota_refusals(objects: list[dict[str, Any]], job: dict[str, Any]) -> list[str]:
    """What the scheduling judge says of one run of ``job`` beside the plan: ResourceQuota admission of
    every pod of the run, and what its ClusterQueue can hold with borrowing (judges/scheduling.py)."""
    name = f"Job {job['metadata']['namespace']}/{job['metadata']['name']}"
    return [
        finding.message
        for finding in judge_scheduling([*objects, job])
        if finding.policy == QUOTA_POLICY and (str(finding.subject) == name or name in finding.message)
    ]


def _allows(
    policies: list[dict[str, Any]], pod: dict[str, Any], peer: dict[str, Any], direction: str
) -> bool:
    """Whether the namespace's policies of ``direction`` let ``pod`` talk to ``peer`` (same namespace)."""
    kind, key = ("Ingress", "from") if direction == "ingress" else ("Egress", "to")
    labels = pod["metadata"]["labels"]
    selecting = [
        p
        for p in policies
        if kind in p["spec"]["policyTypes"] and labels_match(p["spec"]["podSelector"], labels)
    ]
    if not selecting:
        return True
    return any(
        not rule.get(key)
        or any(
            "podSelector" in peer_rule
            and "namespaceSelector" not in peer_rule
            and labels_match(peer_rule["podSelector"], peer["metadata"]["labels"])
            for peer_rule in rule[key]
        )
        for policy in selecting
        for rule in policy["spec"].get(direction, [])
        if not rule.get("ports")
    )


def _vap_denials(objects: list[dict[str, Any]], pod: dict[str, Any]) -> Iterator[str]:
    """Messages of every ValidatingAdmissionPolicy bound with Deny to the pod's namespace that refuses it
    (the CEL judge's evaluation, judges/cel.py)."""
    return (finding.message for finding in refusals(objects, pod))


def _context(pod: dict[str, Any], where: str) -> dict[str, Any]:
    """The pod's or its first container's security context, created if absent."""
    owner = pod["spec"] if where == "pod" else pod["spec"]["containers"][0]
    context: dict[str, Any] = owner.setdefault("securityContext", {})
    return context


def _set(where: str, field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda pod: _context(pod, where).update({field: value})


_BASELINE_DEFECTS: dict[str, Callable[[dict[str, Any]], None]] = {
    **{
        f"{defect} ({where})": _set(where, field, value)
        for where in ("pod", "container")
        for defect, field, value in (
            ("AppArmor Unconfined", "appArmorProfile", {"type": "Unconfined"}),
            ("SELinux spc_t", "seLinuxOptions", {"type": "spc_t"}),
            ("SELinux user", "seLinuxOptions", {"user": "system_u"}),
            ("SELinux role", "seLinuxOptions", {"role": "system_r"}),
            ("HostProcess", "windowsOptions", {"hostProcess": True}),
            ("seccomp Unconfined", "seccompProfile", {"type": "Unconfined"}),
        )
    },
    "procMount Unmasked": lambda p: _context(p, "container").update(procMount="Unmasked"),
    "sysctls": lambda p: _context(p, "pod").update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    "AppArmor annotation": lambda p: (
        p["metadata"]
        .setdefault("annotations", {})
        .update({"container.apparmor.security.beta.kubernetes.io/trainer": "unconfined"})
    ),
}


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-enterprise-prod"])
def test_a_team_can_run_the_platforms_training_job(
    stack: str, team_plans: dict[str, list[dict[str, Any]]]
) -> None:
    objects = team_plans[stack]
    job = team_job(_platform_job(objects), "nlp")
    # ResourceQuota admission lets every pod of the two-node GPU run in.
    assert _quota_refusals(objects, job) == []
    # Kueue queues it: the namespace's LocalQueue points at the team's ClusterQueue, which borrows.
    [local] = _in(objects, "LocalQueue", "team-nlp")
    assert job["metadata"]["labels"][kueue.QUEUE_LABEL] == local["metadata"]["name"]
    assert local["spec"]["clusterQueue"] == "team-nlp"
    # Pods of the run reach each other both ways (rendezvous on pod 0, NCCL between all).
    policies = _in(objects, "NetworkPolicy", "team-nlp")
    first, second = job_pod(job, 0), job_pod(job, 1)
    for a, b in ((first, second), (second, first)):
        assert _allows(policies, a, b, "egress") and _allows(policies, b, a, "ingress")
    # Admission policies bound to the namespace (the IPC_LOCK exception on InfiniBand) accept its pods.
    assert list(_vap_denials(objects, first)) == []


def test_a_team_quota_still_refuses_more_than_its_queue_may_borrow(
    team_plans: dict[str, list[dict[str, Any]]],
) -> None:
    """vision may borrow 16 GPUs: the quota is sized from that, not unlimited."""
    objects = team_plans["aws-enterprise-prod"]
    job = team_job(_platform_job(objects), "vision")
    job["spec"]["parallelism"] = job["spec"]["completions"] = 3  # a three-node run: 24 GPUs
    assert any("requests.nvidia.com/gpu" in refusal for refusal in _quota_refusals(objects, job))


def test_infiniband_team_namespaces_get_the_narrow_exception_only(
    team_plans: dict[str, list[dict[str, Any]]],
) -> None:
    objects = team_plans["azure-enterprise-prod"]
    namespaces = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Namespace"}
    for name in ("team-nlp", "team-vision", "ml-training"):
        labels = namespaces[name]["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
        assert POD_SECURITY_EXCEPTION_LABEL in labels
    for job in _in(objects, "Job", "ml-training"):  # the platform's run and its fabric gate
        assert list(_vap_denials(objects, job_pod(job))) == [], job["metadata"]["name"]
    pod = job_pod(team_job(_platform_job(objects), "nlp"))
    container = pod["spec"]["containers"][0]
    # IPC_LOCK is effective only for UID 0 (kubernetes/kubernetes#56374).
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert container["securityContext"]["runAsUser"] == 0
    planted: dict[str, Callable[[dict[str, Any]], None]] = {
        "privileged": lambda p: p["spec"]["containers"][0]["securityContext"].update(privileged=True),
        "SYS_ADMIN": lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].update(
            add=["IPC_LOCK", "SYS_ADMIN"]
        ),
        "hostPath": lambda p: p["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
        "hostNetwork": lambda p: p["spec"].update(hostNetwork=True),
        "escalation": lambda p: p["spec"]["containers"][0]["securityContext"].update(
            allowPrivilegeEscalation=True
        ),
        # Review wt-cluster2 C1: the baseline controls (kubernetes.io, "Pod Security Standards",
        # Baseline: AppArmor, SELinux, /proc Mount Type, HostProcess, Sysctls, and restricted's Seccomp).
        **_BASELINE_DEFECTS,
    }
    for defect, plant in planted.items():
        bad = copy.deepcopy(pod)
        plant(bad)
        assert list(_vap_denials(objects, bad)), f"the exception policy admits a pod with {defect}"


def test_aws_team_namespaces_stay_restricted(team_plans: dict[str, list[dict[str, Any]]]) -> None:
    namespaces = {
        o["metadata"]["name"]: o for o in team_plans["aws-enterprise-prod"] if o["kind"] == "Namespace"
    }
    for name in ("team-nlp", "team-vision"):
        labels = namespaces[name]["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
        assert POD_SECURITY_EXCEPTION_LABEL not in labels
