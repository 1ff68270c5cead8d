"""How the program names each AWS data key's users (issue 35 item 3; review 35 C1, C4): the Secrets key names
the cluster role by its exact ARN, not a name prefix, and readers get ``kms:Decrypt`` alone. The class rule
(every key names exactly the roles whose IAM uses it, the people the role-to-key table gives its domains, and
the deployer only where the store's service needs it) is the pack's ``key-users-named``, tested both ways on
the plans in tests/policies/test_key_users_named.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from mlplatform.plan import Plan
from tests.stack_variants import PEOPLE_AWS

AWS = "aws-enterprise-prod"
Resources = list[dict[str, Any]]


def _name(arn: str) -> str:
    return arn.rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def enterprise(people_plan: Callable[[str], Plan]) -> Resources:
    resources: Resources = people_plan(AWS).to_dict()["resources"]
    return resources


def _use_statement(resources: Resources, key: str, sid: str) -> dict[str, Any]:
    (found,) = [r for r in resources if r["name"] == key]
    policy = json.loads(found["inputs"]["policy"])
    statements: list[dict[str, Any]] = [s for s in policy["Statement"] if s["Sid"] == sid]
    (statement,) = statements
    return statement


def test_the_secrets_key_names_the_cluster_role_by_its_exact_arn(enterprise: Resources) -> None:
    statement = _use_statement(enterprise, f"{AWS}-aws-key-key", "KubernetesSecretsUsersUseKey")
    (role,) = statement["Condition"]["ArnEquals"]["aws:PrincipalArn"]
    assert "*" not in role
    assert "ArnLike" not in statement["Condition"]
    (cluster_role,) = [
        r for r in enterprise if r["name"] == f"{AWS}-aws-cluster-role" and r["type"] == "aws:iam/role:Role"
    ]
    assert _name(role).startswith(cluster_role["inputs"]["namePrefix"])


def test_readers_only_decrypt(enterprise: Resources) -> None:
    statement = _use_statement(enterprise, f"{AWS}-aws-audit-key", "AuditReadersDecrypt")
    assert statement["Action"] == ["kms:Decrypt", "kms:DescribeKey"]
    assert statement["Condition"]["ArnEquals"]["aws:PrincipalArn"] == PEOPLE_AWS["auditors"]
