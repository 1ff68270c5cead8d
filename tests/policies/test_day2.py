"""``day2-cloud-moved-properties-ignored`` through the real pack (review azure.md A1): a property the cloud
grows, scales or rotates by itself without ignoreChanges is found; with it, or when the cloud does not move
it (autogrow off, a fixed-size pool), nothing is; the shipped stacks raise none."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySettings
from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import AWS_STACKS
from tests.components.azure.azure_plan_support import AZURE_STACKS

from .conftest import AWS, AZURE, Judge, found

POLICY = "day2-cloud-moved-properties-ignored"

_SERVER = """
from pulumi_azure_native import dbforpostgresql

dbforpostgresql.Server(
    "pg",
    resource_group_name="rg",
    location="uaenorth",
    version="17",
    sku={"name": "Standard_B2s", "tier": "Burstable"},
    storage={"storage_size_gb": 32, "auto_grow": GROW},
    tags=TAGS,
    opts=pulumi.ResourceOptions(ignore_changes=IGNORED),
)
"""

_POOL = """
from pulumi_azure_native import containerservice

containerservice.AgentPool(
    "pool",
    resource_group_name="rg",
    resource_name_="aks",
    agent_pool_name="gpu",
    vm_size="Standard_NC24ads_A100_v4",
    count=1,
    min_count=1,
    max_count=4,
    enable_auto_scaling=True,
    opts=pulumi.ResourceOptions(ignore_changes=IGNORED),
)
"""

_NODE_GROUP = """
from pulumi_aws import eks

eks.NodeGroup(
    "ng",
    cluster_name="c",
    node_role_arn="arn:aws:iam::123456789012:role/n",
    subnet_ids=["subnet-1"],
    scaling_config={"min_size": 1, "desired_size": 1, "max_size": MAX},
    opts=pulumi.ResourceOptions(ignore_changes=IGNORED),
)
"""

_KMS_CLUSTER = """
from pulumi_azure_native import containerservice

containerservice.ManagedCluster(
    "aks",
    **AKS,
    security_profile={"azure_key_vault_kms": {"enabled": True, "key_id": "https://v.vault.azure.net/keys/k/1"}},
    opts=pulumi.ResourceOptions(ignore_changes=IGNORED),
)
"""

CASES = [
    ("autogrow-size-declared", AZURE, 'GROW = "Enabled"\nIGNORED = []\n' + _SERVER, "pg"),
    (
        "autogrow-size-ignored",
        AZURE,
        'GROW = "Enabled"\nIGNORED = ["storage.storageSizeGB"]\n' + _SERVER,
        None,
    ),
    ("fixed-size-declared", AZURE, 'GROW = "Disabled"\nIGNORED = []\n' + _SERVER, None),
    ("autoscaled-pool-count-declared", AZURE, "IGNORED = []\n" + _POOL, "pool"),
    ("autoscaled-pool-count-ignored", AZURE, 'IGNORED = ["count"]\n' + _POOL, None),
    ("kms-key-version-followed", AZURE, 'IGNORED = ["agentPoolProfiles"]\n' + _KMS_CLUSTER, "aks"),
    (
        "kms-key-version-pinned",
        AZURE,
        'IGNORED = ["agentPoolProfiles", "securityProfile.azureKeyVaultKms.keyId"]\n' + _KMS_CLUSTER,
        None,
    ),
    # Review azure.md U3: the inline profiles, which AKS refreshes to every pool of the cluster.
    (
        "inline-pool-profiles-declared",
        AZURE,
        'IGNORED = ["agentPoolProfiles[0].count", "securityProfile.azureKeyVaultKms.keyId"]\n' + _KMS_CLUSTER,
        "aks",
    ),
    ("autoscaled-node-group-desired-declared", AWS, "MAX = 4\nIGNORED = []\n" + _NODE_GROUP, "ng"),
    ("fixed-node-group-desired-declared", AWS, "MAX = 1\nIGNORED = []\n" + _NODE_GROUP, None),
    (
        "autoscaled-node-group-desired-ignored",
        AWS,
        'MAX = 4\nIGNORED = ["scalingConfig.desiredSize"]\n' + _NODE_GROUP,
        None,
    ),
]


@pytest.mark.parametrize(("config", "body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_property_the_cloud_moves_is_ignored(
    judge: Judge, config: str, body: str, expected: str | None
) -> None:
    findings = {name for policy, name in found(judge(body, config)) if policy == POLICY}
    assert findings == ({expected} if expected else set())


@pytest.mark.parametrize("stack", [*AWS_STACKS, *AZURE_STACKS])
def test_the_shipped_stacks_ignore_what_their_clouds_move(
    pack: PolicyPackSession,
    defaults: dict[str, PolicySettings],
    cloud_plan: Callable[[str], Plan],
    stack: str,
) -> None:
    violations = pack.judge(cloud_plan(stack).to_dict(), defaults)
    assert [(v.name, v.message) for v in violations if v.policy == POLICY] == []
