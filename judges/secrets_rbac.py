"""Secrets RBAC: no ServiceAccount but an operator's reads Secrets cluster-wide (issue 35, review B9:
"segregation of duties").

A ClusterRoleBinding grants its ClusterRole's rules in every namespace (Kubernetes docs, "Using RBAC
Authorization", ClusterRoleBinding). A rule reads Secrets when its ``apiGroups`` hold ``""`` (core) or
``*``, its ``resources`` ``secrets`` or ``*``, its ``verbs`` ``get``, ``list``, ``watch`` or ``*``, and it
names no ``resourceNames`` (which limit it to those Secrets). An aggregated ClusterRole carries the rules of
the planned ClusterRoles its ``aggregationRule`` selects; of the built-in roles, ``cluster-admin``,
``admin`` and ``edit`` read Secrets (``view`` does not: "User-facing roles"). The subjects judged are
ServiceAccounts, and the groups ``system:serviceaccounts`` (every one) and ``system:serviceaccounts:<ns>``
(every one of a namespace).

Each such grant is mandatory, except to an operator in ``OPERATORS`` (named with why it needs it): an
exporter (kube-state-metrics' ``secrets`` collector, on by default in its chart) reads every Secret's
metadata and, with ``list``, their data too (the API returns whole objects), which no metrics need.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import labels_match, of_kind

POLICY = "secrets-cluster-wide"
READ_VERBS = frozenset({"get", "list", "watch", "*"})
# Built-in ClusterRoles that read Secrets (Kubernetes docs, "Using RBAC Authorization", "User-facing
# roles": admin and edit allow access to Secrets, view does not).
BUILT_IN_READERS = frozenset({"cluster-admin", "admin", "edit"})
_SA_GROUP = "system:serviceaccounts"


@dataclass(frozen=True)
class Operator:
    """A controller that must read Secrets in every namespace it reconciles: its namespace, its
    ServiceAccount (``*``: the whole namespace's group, as its chart binds it) and why."""

    namespace: str
    service_account: str
    reason: str


OPERATORS = (
    Operator(
        "monitoring",
        "kube-prometheus-stack-operator",
        "the Prometheus operator writes each Prometheus' and Alertmanager's configuration Secret and reads "
        "the Secrets ServiceMonitors name for credentials (kube-prometheus-stack 88.5.3, "
        "templates/prometheus-operator/clusterrole.yaml)",
    ),
    Operator(
        "network-operator",
        "*",
        "the NVIDIA Network Operator deploys the RDMA device plugin and its configuration for the "
        "InfiniBand fabric (network-operator 26.4.1 ClusterRole, bound to the namespace's group)",
    ),
)


def _reads_secrets(rule: Mapping[str, Any]) -> bool:
    return (
        bool({"", "*"} & set(rule.get("apiGroups") or []))
        and bool({"secrets", "*"} & set(rule.get("resources") or []))
        and bool(READ_VERBS & set(rule.get("verbs") or []))
        and not rule.get("resourceNames")
    )


def _rules(role: Mapping[str, Any], roles: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A ClusterRole's rules, an aggregated one's from the planned ClusterRoles it selects."""
    rules = list(role.get("rules") or [])
    for selector in (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []:
        for other in roles:
            if other is not role and labels_match(selector, (other["metadata"].get("labels") or {})):
                rules += other.get("rules") or []
    return rules


def _grant(role_name: str, roles: Sequence[Mapping[str, Any]]) -> str | None:
    """How the ClusterRole reads every Secret (``rules[i]: verbs``), or None."""
    if role_name in BUILT_IN_READERS:
        return "a built-in role that reads Secrets"
    for role in roles:
        if role["metadata"]["name"] == role_name:
            for index, rule in enumerate(_rules(role, roles)):
                if _reads_secrets(rule):
                    verbs = ", ".join(sorted(READ_VERBS & set(rule.get("verbs") or [])))
                    return f"rules[{index}] {verbs} on secrets"
    return None


def _service_accounts(binding: Mapping[str, Any]) -> Iterator[tuple[int, str, str]]:
    """(index in ``subjects``, namespace or ``*``, ServiceAccount or ``*``) of each subject that stands
    for ServiceAccounts."""
    for index, subject in enumerate(binding.get("subjects") or []):
        kind, name = subject.get("kind"), str(subject.get("name"))
        if kind == "ServiceAccount":
            yield index, str(subject.get("namespace")), name
        elif kind == "Group" and name == _SA_GROUP:
            yield index, "*", "*"
        elif kind == "Group" and name.startswith(f"{_SA_GROUP}:"):
            yield index, name.removeprefix(f"{_SA_GROUP}:"), "*"


def operator(namespace: str, service_account: str) -> Operator | None:
    for known in OPERATORS:
        if (known.namespace, known.service_account) == (namespace, service_account):
            return known
    return None


def judge_secrets_rbac(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """One mandatory finding per ClusterRoleBinding subject, not an operator's, that reads every Secret."""
    roles = of_kind(objects, "ClusterRole")
    findings = []
    for binding in of_kind(objects, "ClusterRoleBinding"):
        ref = binding.get("roleRef") or {}
        grant = _grant(str(ref.get("name")), roles) if ref.get("kind") == "ClusterRole" else None
        if grant is None:
            continue
        for index, namespace, account in _service_accounts(binding):
            if operator(namespace, account) is not None:
                continue
            who = "every ServiceAccount" + (f" of {namespace}" if namespace != "*" else "")
            if account != "*":
                who = f"ServiceAccount {namespace}/{account}"
            findings.append(
                Finding(
                    POLICY,
                    "mandatory",
                    Subject.of(binding),
                    f"subjects[{index}] ({who}) reads every Secret cluster-wide through ClusterRole "
                    f"{ref.get('name')} ({grant}): only an operator may (judges/secrets_rbac.py OPERATORS); "
                    "drop the grant (a chart's collector or RBAC values) or bind a Role per namespace",
                )
            )
    return findings
