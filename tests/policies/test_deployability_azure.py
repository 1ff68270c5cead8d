"""The Azure deployability policies (issue 12): each catches a small violating program through the real
pack, and leaves its compliant counterpart alone."""

from __future__ import annotations

import pytest

from .conftest import AZURE, KUBERNETES, Judge, found

_DES = """
from pulumi_azure_native import compute

compute.DiskEncryptionSet(
    "des",
    resource_group_name="rg",
    location="uaenorth",
    identity={"type": "SystemAssigned"},
    active_key={"key_url": KEY_URL, "source_vault": {"id": "/vault"}},
    rotation_to_latest_key_version_enabled=True,
    tags=TAGS,
)
"""

_VAULT = """
from pulumi_azure_native import keyvault

keyvault.Vault(
    "vault",
    resource_group_name="rg",
    location="uaenorth",
    vault_name=NAME,
    properties={
        "tenant_id": "00000000-0000-0000-0000-000000000001",
        "sku": {"family": "A", "name": "standard"},
        "enable_rbac_authorization": True,
        "enable_soft_delete": True,
        "enable_purge_protection": True,
        "public_network_access": "Disabled",
        "network_acls": {"default_action": "Deny", "bypass": "AzureServices"},
    },
    tags=TAGS,
    opts=pulumi.ResourceOptions(protect=PROTECT),
)
"""

_POD = """
from pulumi_kubernetes.apps.v1 import Deployment
from pulumi_kubernetes.core.v1 import Namespace, ServiceAccount

ns = Namespace("ns", metadata={"name": "ml", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}})
ServiceAccount(
    "sa",
    metadata={
        "name": "trainer",
        "namespace": "ml",
        "annotations": {"azure.workload.identity/client-id": "00000000-0000-0000-0000-000000000002"},
    },
    automount_service_account_token=False,
)
Deployment(
    "app",
    metadata={"name": "app", "namespace": "ml"},
    spec={
        "selector": {"matchLabels": {"app": "app"}},
        "template": {
            "metadata": {"labels": {"app": "app", **LABELS}},
            "spec": {"serviceAccountName": "trainer", "containers": [{"name": "app", "image": "r.ae/a:1"}]},
        },
    },
)
"""

_TAGGED_VAULT = """
from pulumi_azure_native import keyvault

keyvault.Vault(
    "vault",
    resource_group_name="rg",
    location="uaenorth",
    vault_name="mlp-kv-fixed",
    properties={
        "tenant_id": "00000000-0000-0000-0000-000000000001",
        "sku": {"family": "A", "name": "standard"},
        "enable_rbac_authorization": True,
        "public_network_access": "Disabled",
        "network_acls": {"default_action": "Deny", "bypass": "AzureServices"},
    },
    tags={**TAGS, ROLE_TAG: "registry-creation-key"},
)
"""

_CLUSTER = """
from pulumi_azure_native import containerservice

SUBNET = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/n"

containerservice.ManagedCluster(
    "aks",
    resource_group_name="rg",
    location="uaenorth",
    dns_prefix="aks",
    network_profile={"network_plugin": "azure", "outbound_type": OUTBOUND},
    agent_pool_profiles=[
        {"name": "system", "mode": "System", "vm_size": "Standard_D4s_v5", "vnet_subnet_id": SUBNET}
    ],
    tags=TAGS,
)
"""

# (id, config, program, the policy and resource it must catch, or None for a compliant program)
CASES = [
    (
        "tag-name-with-slash",
        AZURE,
        'ROLE_TAG = "ml-platform.io/role"\n' + _TAGGED_VAULT,
        ("azure-tag-name-charset", "vault"),
    ),
    ("tag-name-without-slash", AZURE, 'ROLE_TAG = "ml-platform.io-role"\n' + _TAGGED_VAULT, None),
    (
        "managed-nat-own-subnet",
        AZURE,
        'OUTBOUND = "managedNATGateway"\n' + _CLUSTER,
        ("aks-managed-nat-byo-subnet", "aks"),
    ),
    ("user-assigned-nat-own-subnet", AZURE, 'OUTBOUND = "userAssignedNATGateway"\n' + _CLUSTER, None),
    (
        "des-versionless-key",
        AZURE,
        'KEY_URL = "https://v.vault.azure.net/keys/disks"\n' + _DES,
        ("azure-des-versioned-key", "des"),
    ),
    (
        "des-versioned-key",
        AZURE,
        'KEY_URL = "https://v.vault.azure.net/keys/disks/0123456789abcdef0123456789abcdef"\n' + _DES,
        None,
    ),
    (
        "vault-fixed-name-unprotected",
        AZURE,
        'NAME, PROTECT = "mlp-kv-fixed", False\n' + _VAULT,
        ("azure-key-vault-name-reuse", "vault"),
    ),
    ("vault-fixed-name-protected", AZURE, 'NAME, PROTECT = "mlp-kv-fixed", True\n' + _VAULT, None),
    (
        "vault-random-name-unprotected",
        AZURE,
        "import pulumi_random\n"
        'NAME = pulumi_random.RandomString("u", length=4, special=False, upper=False).result.apply('
        'lambda r: f"mlp-kv-{r}")\n'
        "PROTECT = False\n" + _VAULT,
        None,
    ),
    (
        "federated-pod-without-label",
        KUBERNETES,
        "LABELS = {}\n" + _POD,
        ("azure-workload-identity-label", "app"),
    ),
    (
        "federated-pod-with-label",
        KUBERNETES,
        'LABELS = {"azure.workload.identity/use": "true"}\n' + _POD,
        None,
    ),
]
COVERED = {expected[0] for _, _, _, expected in CASES if expected is not None}


@pytest.mark.parametrize(("config", "body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_azure_deployability_policy(
    judge: Judge, config: str, body: str, expected: tuple[str, str] | None
) -> None:
    findings = {f for f in found(judge(body, config)) if f[0] in COVERED}
    assert findings == ({expected} if expected else set())
