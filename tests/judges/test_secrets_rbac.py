"""The Secrets RBAC judge (issue 35, review B9): no ServiceAccount but a named operator's reads Secrets
cluster-wide.

Both ways: the shipped stacks grant none (kube-state-metrics runs without its ``secrets`` collector, so the
chart's ClusterRole holds no rule on Secrets), and each planted grant of the class (the chart's default
collector list, a binding to the built-in ``edit``, an aggregated role, a namespace's whole group) is a
mandatory finding naming the ClusterRoleBinding, the subject and the rule.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from judges.secrets_rbac import POLICY, judge_secrets_rbac
from tests.judges.conftest import SHIPPED

from .conftest import Judged

KSM = "kube-prometheus-stack-kube-state-metrics"


def _object(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


@pytest.mark.parametrize("stack", SHIPPED)
def test_no_shipped_service_account_but_an_operators_reads_every_secret(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    objects = judged(stack).objects
    assert judge_secrets_rbac(objects) == []
    # Where monitoring runs, kube-state-metrics' ClusterRole keeps its other collectors, not secrets
    # (collectorsExclude).
    for role in (o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == KSM):
        assert any("pods" in r["resources"] for r in role["rules"])
        assert not any("secrets" in r["resources"] for r in role["rules"])


def test_the_charts_default_collectors_are_a_mandatory_finding(judged: Callable[[str], Judged]) -> None:
    """kube-state-metrics 8.4.0's default ``collectors`` include ``secrets`` (list, watch): what the plan
    shipped before review B9."""
    planted = copy.deepcopy(judged("azure-enterprise-prod").objects)
    role = _object(planted, "ClusterRole", KSM)
    role["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]})
    index = len(role["rules"]) - 1
    findings = judge_secrets_rbac(planted)
    assert [(f.policy, f.level, f.subject.kind, f.subject.name) for f in findings] == [
        (POLICY, "mandatory", "ClusterRoleBinding", KSM)
    ]
    assert findings[0].message.startswith(
        f"subjects[0] (ServiceAccount monitoring/{KSM}) reads every Secret cluster-wide through "
        f"ClusterRole {KSM} (rules[{index}] list, watch on secrets)"
    )


def _binding(name: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    }


def test_built_in_aggregated_and_group_grants_are_findings(judged: Callable[[str], Judged]) -> None:
    planted = copy.deepcopy(judged("aws-enterprise-prod").objects)
    trainer = {"kind": "ServiceAccount", "namespace": "ml-training", "name": "trainer"}
    team = {"kind": "Group", "name": "system:serviceaccounts:ml-inference"}
    planted += [
        _binding("trainer-edit", "edit", trainer),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "aggregated"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"reads": "secrets"}}]},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "piece", "labels": {"reads": "secrets"}},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}],
        },
        _binding("inference-aggregated", "aggregated", team),
        # One named Secret only: not every Secret.
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "one-secret"},
            "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["a"]}
            ],
        },
        _binding("trainer-one-secret", "one-secret", trainer),
    ]
    findings = {f.subject.name: f.message for f in judge_secrets_rbac(planted)}
    assert set(findings) == {"trainer-edit", "inference-aggregated"}
    assert "ServiceAccount ml-training/trainer" in findings["trainer-edit"]
    assert "a built-in role that reads Secrets" in findings["trainer-edit"]
    assert "every ServiceAccount of ml-inference" in findings["inference-aggregated"]
    assert "rules[0] get on secrets" in findings["inference-aggregated"]
