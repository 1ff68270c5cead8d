"""The registry's cloud side on AWS (issue 28), as the real program plans it: RDS for PostgreSQL on
enterprise stacks, the registry's IRSA role, nothing on SMB. Each rule cites the pulumi-aws 7.51
docstring or guide it comes from; the pack's ``registry-database-protected`` judges the same instance
(tests/policies/test_registry.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from mlplatform.plan import Plan
from mlplatform.report import as_applied, kubernetes_objects
from tests.stack_variants import one

RDS = "aws:rds/instance:Instance"


def _inputs(plan: Plan, token: str, suffix: str) -> dict[str, Any]:
    inputs: dict[str, Any] = as_applied(one(plan, token, suffix).inputs)
    return inputs


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "aws-enterprise-dev"])
def test_enterprise_registry_database_is_private_encrypted_and_tls_only(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    plan = planned(stack)
    db = _inputs(plan, RDS, "-registry-db")
    key = one(plan, "aws:kms/key:Key", "-registry-database-key")
    # storage_encrypted + kms_key_id: encrypted under the registry database's own key (keys per data
    # domain, docs/security.md), not the AWS managed one.
    assert db["storageEncrypted"] is True and f":{key.name}-" in db["kmsKeyId"]
    # manage_master_user_password with master_user_secret_kms_key_id: no password in Pulumi's state.
    assert db["manageMasterUserPassword"] is True and "password" not in db
    assert db["masterUserSecretKmsKeyId"] == db["kmsKeyId"]
    assert db["publiclyAccessible"] is False
    params = _inputs(plan, "aws:rds/parameterGroup:ParameterGroup", "-registry-params")
    assert {"name": "rds.force_ssl", "value": "1"}.items() <= params["parameters"][0].items()
    # Enterprise stacks are audited: pgAudit preloaded (static: applied at creation or the next reboot)
    # and logging writes, DDL and role changes (RDS user guide, "Setting up the pgAudit extension").
    by_name = {p["name"]: p for p in params["parameters"]}
    assert by_name["shared_preload_libraries"]["value"].split(",") == ["pg_stat_statements", "pgaudit"]
    assert by_name["shared_preload_libraries"]["applyMethod"] == "pending-reboot"
    assert by_name["pgaudit.log"]["value"] == "ddl,role,write"
    # The instance names the group the plan creates (its physical name: the logical name + suffix).
    group = one(plan, "aws:rds/parameterGroup:ParameterGroup", "-registry-params").name
    assert db["parameterGroupName"].startswith(f"{group}-")
    subnets = _inputs(plan, "aws:rds/subnetGroup:SubnetGroup", "-registry-subnets")["subnetIds"]
    assert subnets and all("-private-" in s for s in subnets)
    rule = _inputs(
        plan, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "-registry-from-cluster"
    )
    assert rule["referencedSecurityGroupId"].startswith("sg-") and "cidrIpv4" not in rule
    assert (rule["fromPort"], rule["toPort"], rule["ipProtocol"]) == (5432, 5432, "tcp")
    assert db["backupTarget"] == "region" and db["backupRetentionPeriod"] >= 7
    prod = stack.endswith("prod")
    assert db["deletionProtection"] is prod and db["multiAz"] is prod
    assert db["skipFinalSnapshot"] is (not prod) and ("finalSnapshotIdentifier" in db) is prod
    if prod:
        # Unique per database (a re-created one's destroy would otherwise meet DBSnapshotAlreadyExists),
        # and within the RDS identifier rules: letters, digits and hyphens, 1-255, starting with a letter,
        # no double or trailing hyphen (RDS API reference, CreateDBSnapshot DBSnapshotIdentifier).
        name = db["finalSnapshotIdentifier"]
        assert re.fullmatch(r"[a-zA-Z][a-zA-Z0-9-]{0,254}", name) and "--" not in name and name[-1] != "-"
        assert re.search(r"-final-[0-9a-f]{8}$", name)


def test_smb_has_no_database(planned: Callable[[str], Plan]) -> None:
    assert planned("aws-smb-dev").by_type(RDS) == []


def test_registry_role_reaches_its_prefix_and_its_database_secret_only(
    planned: Callable[[str], Plan],
) -> None:
    plan = planned("aws-enterprise-prod")
    policy = json.loads(_inputs(plan, "aws:iam/rolePolicy:RolePolicy", "-identities-registry")["policy"])
    statements = {s["Sid"]: s for s in policy["Statement"]}
    assert statements["ListOwnPrefixes"]["Condition"]["StringLike"]["s3:prefix"] == ["registry/*"]
    assert all(r.endswith("/registry/*") for r in statements["WriteObjects"]["Resource"])
    secret = statements["ReadDatabasePassword"]
    assert (
        secret["Action"] == "secretsmanager:GetSecretValue"
        and ":secretsmanager:me-central-1:" in secret["Resource"]
    )
    via = statements["UseKeyThroughSecretsManager"]["Condition"]["StringEquals"]["kms:ViaService"]
    assert via == "secretsmanager.me-central-1.amazonaws.com"
    # Training and inference hold no right on the registry's prefix: the server proxies every transfer.
    for workload in ("training", "inference"):
        other = _inputs(plan, "aws:iam/rolePolicy:RolePolicy", f"-identities-{workload}")["policy"]
        assert "registry/" not in other


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "aws-smb-dev"])
def test_the_server_knows_its_region(stack: str, planned: Callable[[str], Plan]) -> None:
    """boto3's S3 and STS clients are given the stack's region rather than left to find one (me-central-1
    is an opt-in region, REFERENCE.md "UAE data residency"; whether the IRSA webhook also injects it is
    not relied on)."""
    [deployment] = [
        o
        for o in kubernetes_objects(planned(stack))
        if o["kind"] == "Deployment" and o["metadata"]["namespace"] == "ml-registry"
    ]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "me-central-1"
    assert env["REGISTRY_ARTIFACTS_DESTINATION"].endswith("/registry/")
