"""Team isolation holds at runtime, not only at plan time (issue 35, review A8): the NetworkPolicies,
ResourceQuota and LimitRange of every team namespace are refused to the team itself.

A team's ML engineers hold Kubernetes' ``edit`` there (AmazonEKSEditPolicy / AKS RBAC Writer follow it),
which writes ``networkpolicies`` and impersonates the namespace's service accounts (system:aggregate-to-
edit, kubernetes/kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go). So each such
object must be guarded by a ValidatingAdmissionPolicy bound with Deny that refuses its deletion to a
service account of its own namespace, evaluated with cel-python as the API server runs it
(judges/cel.py ``refusals``). The people themselves are named in the policy from the stack's config
(components/kubernetes/tenancy.py ``tenancy_guard_policy``), which the plan's objects do not carry:
tests/components/kubernetes/test_tenancy_guard.py judges those requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from judges.cel import refusals
from judges.findings import Finding, Subject
from judges.kube import of_kind

POLICY = "team-isolation-unguarded"
# What the Kubernetes layer names and labels a team's namespace (components/kubernetes/layer.py).
TEAM_PREFIX = "team-"
TEAM_LABEL = "ml-platform.io/team-namespace"
GUARDED_KINDS = ("NetworkPolicy", "ResourceQuota", "LimitRange")


def team_namespaces(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        str(n["metadata"]["name"])
        for n in of_kind(objects, "Namespace")
        if str(n["metadata"]["name"]).startswith(TEAM_PREFIX)
        or (n["metadata"].get("labels") or {}).get(TEAM_LABEL) == "true"
    ]


def judge_tenancy(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """One mandatory finding per guard object of a team namespace that the namespace's own service
    account may delete."""
    teams = set(team_namespaces(objects))
    findings = []
    for kind in GUARDED_KINDS:
        for obj in of_kind(objects, kind):
            namespace = str(obj["metadata"].get("namespace") or "")
            if namespace not in teams:
                continue
            robot = {
                "username": f"system:serviceaccount:{namespace}:default",
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{namespace}",
                    "system:authenticated",
                ],
            }
            if not refusals(objects, obj, operation="DELETE", user=robot):
                findings.append(
                    Finding(
                        POLICY,
                        "mandatory",
                        Subject.of(obj),
                        "no ValidatingAdmissionPolicy bound with Deny refuses deleting it to "
                        f"{robot['username']}, which the team's edit role may impersonate: the team "
                        "can undo its isolation (components/kubernetes/tenancy.py tenancy_guard_policy)",
                    )
                )
    return findings
