"""The model registry's policies (issue 28 part 5), both ways, through the real pack over gRPC.

Sources: pulumi-aws 7 ``rds.Instance`` docstrings (``storage_encrypted``, ``kms_key_id``,
``publicly_accessible``, ``manage_master_user_password`` / ``master_user_secret_kms_key_id``,
``deletion_protection``, ``skip_final_snapshot``); REFERENCE.md "UAE data residency" (me-central-1 is
the UAE's only AWS region; uaenorth pairs with uaecentral); MLflow's "Authentication with Username and
Password" (``--app-name basic-auth``).
"""

from __future__ import annotations

from .conftest import AWS, AZURE, KUBERNETES, Judge, found

AWS_PROD = AWS.replace("environment: dev", "environment: prod")

SAFE_RDS = """
import pulumi_aws.rds as rds

rds.Instance(
    "registry",
    engine="postgres",
    instance_class="db.t4g.medium",
    allocated_storage=20,
    storage_encrypted=True,
    kms_key_id=KEY_ARN,
    manage_master_user_password=True,
    master_user_secret_kms_key_id=KEY_ARN,
    username="mlflow",
    publicly_accessible=False,
    deletion_protection=True,
    skip_final_snapshot=False,
    final_snapshot_identifier="registry-final",
    backup_retention_period=14,
)
"""

UNSAFE_RDS = """
import pulumi_aws.rds as rds

rds.Instance(
    "open",
    engine="postgres",
    instance_class="db.t4g.medium",
    allocated_storage=20,
    manage_master_user_password=True,
    username="mlflow",
    publicly_accessible=True,
    skip_final_snapshot=True,
    backup_retention_period=0,
)
rds.InstanceAutomatedBackupsReplication(
    "dr-copy", source_db_instance_arn="arn:aws:rds:me-central-1:123456789012:db:registry"
)
"""

FLEXIBLE = """
import pulumi_azure_native.dbforpostgresql as pg

pg.Server(
    "{name}",
    resource_group_name="rg",
    location="{location}",
    network={{"public_network_access": "{access}"}},
    data_encryption={data_encryption},
    backup={{"geo_redundant_backup": "Enabled"}},
    tags=TAGS,
)
"""
CMK = '{"type": "AzureKeyVault", "primary_key_uri": "https://kv.vault.azure.net/keys/pg/1"}'

MLFLOW = """
from pulumi_kubernetes.apps.v1 import Deployment

SAFE = {{
    "runAsNonRoot": True, "runAsUser": 10001, "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True, "capabilities": {{"drop": ["ALL"]}},
    "seccompProfile": {{"type": "RuntimeDefault"}},
}}
Deployment(
    "{name}",
    metadata={{"name": "{name}", "namespace": "ml-registry", "labels": {{"tier": "{tier}"}}}},
    spec={{
        "selector": {{"matchLabels": {{"app": "{name}"}}}},
        "template": {{
            "metadata": {{"labels": {{"app": "{name}", "app.kubernetes.io/name": "mlflow"}}}},
            "spec": {{
                "automountServiceAccountToken": False,
                "containers": [{{
                    "name": "server",
                    "image": "registry.example.ae/registry:1@sha256:{digest}",
                    "args": {args},
                    "env": {env},
                    "securityContext": SAFE,
                    "resources": {{"limits": {{"cpu": "1", "memory": "1Gi"}}}},
                }}],
            }},
        }},
    }},
)
"""
DIGEST = "a" * 64
ADMIN_FROM_SECRET = (
    '{"name": "MLFLOW_AUTH_ADMIN_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "a", "key": "b"}}}'
)
FROM_SECRET = f"[{ADMIN_FROM_SECRET}]"


def _mlflow(name: str, tier: str, args: str, env: str) -> str:
    return MLFLOW.format(name=name, tier=tier, args=args, env=env, digest=DIGEST)


def test_an_open_unencrypted_unprotected_prod_database_is_refused(judge: Judge) -> None:
    violations = judge(UNSAFE_RDS, AWS_PROD)
    messages = {v.message for v in violations if v.policy == "registry-database-protected"}
    assert found(violations) >= {
        ("registry-database-protected", "open"),
        ("registry-database-protected", "dr-copy"),
    }
    for expected in (
        "storageEncrypted is not true",
        "kmsKeyId is not set",
        "publiclyAccessible is true",
        "masterUserSecretKmsKeyId is not set",
        "prod database without deletionProtection",
        "prod database skips its final snapshot",
        "replicates automated backups to another region",
        "backupRetentionPeriod is 0",
    ):
        assert any(m.startswith(expected) for m in messages), (expected, messages)


def test_the_database_the_platform_builds_passes_in_prod(judge: Judge) -> None:
    violations = judge(SAFE_RDS, AWS_PROD)
    assert not [v for v in violations if v.policy == "registry-database-protected"]


def test_a_flexible_server_is_private_and_customer_keyed_and_backs_up_inside_the_uae(judge: Judge) -> None:
    bad = FLEXIBLE.format(name="open", location="qatarcentral", access="Enabled", data_encryption="{}")
    good = FLEXIBLE.format(name="closed", location="uaenorth", access="Disabled", data_encryption=CMK)
    violations = [v for v in judge(bad + good, AZURE) if v.policy == "registry-database-protected"]
    assert {v.name for v in violations} == {"open"}
    messages = " ".join(v.message for v in violations)
    assert "publicNetworkAccess" in messages and "dataEncryption" in messages
    assert "outside the UAE" in messages


def test_an_enterprise_registry_without_auth_or_with_a_literal_password_is_refused(judge: Judge) -> None:
    body = _mlflow(
        "anonymous", "enterprise", '["server"]', '[{"name": "MLFLOW_AUTH_ADMIN_PASSWORD", "value": "x"}]'
    )
    violations = [v for v in judge(body, KUBERNETES) if v.policy == "registry-no-anonymous-access"]
    messages = " ".join(v.message for v in violations)
    assert {v.name for v in violations} == {"anonymous"}
    assert "anonymous requests" in messages and "MLFLOW_AUTH_ADMIN_PASSWORD is a literal value" in messages


def test_authenticated_enterprise_and_smb_registries_pass(judge: Judge) -> None:
    launcher = _mlflow(
        "launcher",
        "enterprise",
        '["server"]',
        f'[{{"name": "REGISTRY_AUTH", "value": "true"}}, {ADMIN_FROM_SECRET}]',
    )
    direct = _mlflow("direct", "enterprise", '["mlflow", "server", "--app-name", "basic-auth"]', FROM_SECRET)
    smb = _mlflow("smb", "smb", '["server"]', "[]")
    violations = judge(launcher + direct + smb, KUBERNETES)
    assert not [v for v in violations if v.policy == "registry-no-anonymous-access"]
