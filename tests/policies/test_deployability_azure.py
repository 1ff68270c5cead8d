"""The Azure deployability policies (issue 12): each catches a small violating program through the real
pack, and leaves its compliant counterpart alone."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySettings
from mlplatform.plan import Plan
from tests.components.azure.azure_plan_support import AZURE_STACKS

from .conftest import AZURE, KUBERNETES, PACK_DIR, Judge, found

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

_VERSIONED_CLUSTER = """
from pulumi_azure_native import containerservice

containerservice.ManagedCluster(
    "aks",
    resource_group_name="rg",
    location="uaenorth",
    dns_prefix="aks",
    kubernetes_version=VERSION,
    agent_pool_profiles=[{"name": "system", "mode": "System", "vm_size": "Standard_D4s_v5", "count": 1}],
    tags=TAGS,
)
"""

_RBAC_VAULT_KEY = """
from pulumi_azure_native import authorization, keyvault

vault = keyvault.Vault(
    "vault",
    resource_group_name="rg",
    location="uaenorth",
    vault_name="mlp-kv-demo",
    properties={
        "tenant_id": "00000000-0000-0000-0000-000000000001",
        "sku": {"family": "A", "name": "standard"},
        "enable_rbac_authorization": True,
        "public_network_access": "Disabled",
        "network_acls": {"default_action": "Deny", "bypass": "AzureServices"},
    },
    tags=TAGS,
)
waits = []
if GRANT:
    waits.append(
        authorization.RoleAssignment(
            "deployer-keys",
            principal_id="00000000-0000-0000-0000-00000000000d",
            principal_type="User",
            role_definition_id="/subscriptions/s/providers/Microsoft.Authorization/roleDefinitions/"
            "14b46e9e-c2b7-41b4-b07b-48a6ebf60603",
            scope=vault.id,
        )
    )
key = keyvault.Key(
    "key",
    resource_group_name="rg",
    vault_name=vault.name,
    key_name="disks-cmk",
    properties={"kty": "RSA", "key_size": 3072},
    tags=TAGS,
    opts=pulumi.ResourceOptions(depends_on=waits),
)
"""
# Review azure.md U1: the private vault's endpoint (group vault).
_VAULT_ENDPOINT = """
from pulumi_azure_native import network

if ENDPOINT:
    network.PrivateEndpoint(
        "vault-pe",
        resource_group_name="rg",
        location="uaenorth",
        subnet={"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/subnets/e"},
        private_link_service_connections=[
            {"name": "vault", "private_link_service_id": vault.id, "group_ids": ["vault"]}
        ],
        tags=TAGS,
    )
"""
# D5 6: KMS Public access with that (firewalled) vault's key.
_KMS_PUBLIC = """
from pulumi_azure_native import containerservice

containerservice.ManagedCluster(
    "aks",
    resource_group_name="rg",
    location="uaenorth",
    dns_prefix="aks",
    agent_pool_profiles=[{"name": "system", "mode": "System", "vm_size": "Standard_D4s_v5", "count": 1}],
    security_profile={
        "azure_key_vault_kms": {
            "enabled": True,
            "key_id": key.key_uri_with_version,
            "key_vault_network_access": ACCESS,
            "key_vault_resource_id": vault.id,
        }
    },
    api_server_access_profile={"enable_vnet_integration": True, "subnet_id": "/subnets/apiserver"},
    tags=TAGS,
)
"""
# Review of issue 38, B7: the KMS key's rotation policy, with or without expiry and Notify.
_KMS_KEY_POLICY = """
policy = {"lifetime_actions": [{"trigger": {"time_after_create": "P90D"}, "action": {"type": "rotate"}}]}
if NOTIFY:
    policy["attributes"] = {"expiry_time": "P1Y"}
    notice = {"trigger": {"time_before_expiry": "P30D"}, "action": {"type": "notify"}}
    policy["lifetime_actions"].append(notice)
key = keyvault.Key(
    "secrets-key",
    resource_group_name="rg",
    vault_name=vault.name,
    key_name="secrets-cmk",
    properties={"kty": "RSA", "key_size": 3072, "rotation_policy": policy},
    tags=TAGS,
    opts=pulumi.ResourceOptions(depends_on=waits),
)
"""
# D5 5 and 7: the API server's delegated subnet and the node subnet under a user-assigned NAT gateway.
_SUBNETS = """
from pulumi_azure_native import containerservice, network

api = network.Subnet(
    "apiserver",
    resource_group_name="rg",
    virtual_network_name="vnet",
    address_prefix=API_PREFIX,
    delegations=[{"name": "d", "service_name": "Microsoft.ContainerService/managedClusters"}]
    if DELEGATED
    else None,
)
nodes = network.Subnet(
    "nodes",
    resource_group_name="rg",
    virtual_network_name="vnet",
    address_prefix="10.0.0.0/20",
    nat_gateway={"id": "/subscriptions/s/providers/Microsoft.Network/natGateways/n"} if NAT else None,
)
containerservice.ManagedCluster(
    "aks",
    resource_group_name="rg",
    location="uaenorth",
    dns_prefix="aks",
    agent_pool_profiles=[
        {"name": "system", "mode": "System", "vm_size": "Standard_D4s_v5", "count": 1,
         "vnet_subnet_id": nodes.id}
    ],
    network_profile={"network_plugin": "azure", "outbound_type": "userAssignedNATGateway"},
    api_server_access_profile={"enable_vnet_integration": True, "subnet_id": api.id},
    tags=TAGS,
)
"""
# D5 1 and 4 (review azure.md C1, D1): the registry's PostgreSQL, its logs and its administrators.
_POSTGRES = """
from pulumi_azure_native import dbforpostgresql, monitor

server = dbforpostgresql.Server(
    "registry-pg",
    resource_group_name="rg",
    location="uaenorth",
    server_name="mlp-registry-pg-demo",
    version="17",
    auth_config={"active_directory_auth": "Enabled", "password_auth": "Disabled", "tenant_id": "t"},
    tags=TAGS,
)
admins = [("00000000-0000-0000-0000-00000000000a", "registry", "ServicePrincipal")]
if HUMAN:
    admins.append(("00000000-0000-0000-0000-00000000000b", "registry-dba", "Group"))
for object_id, name, kind in admins:
    dbforpostgresql.AdministratorsMicrosoftEntra(
        f"admin-{name}",
        resource_group_name="rg",
        server_name=server.name,
        object_id=object_id,
        principal_name=name,
        principal_type=kind,
        tenant_id="t",
    )
if AUDITED:
    monitor.DiagnosticSetting(
        "registry-pg-audit",
        resource_uri=server.id,
        workspace_id="/subscriptions/s/resourceGroups/rg/providers/Microsoft.OperationalInsights/workspaces/w",
        logs=[{"category": "PostgreSQLLogs", "enabled": True}],
    )
"""

# D5 8: the private DNS zone a VNet-integrated server registers in.
_POSTGRES_ZONE = """
from pulumi_azure_native import dbforpostgresql, privatedns

SUBNET = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/db"
zone = privatedns.PrivateZone(
    "registry-pg-dns", resource_group_name="rg", private_zone_name=ZONE, location="global"
)
dbforpostgresql.Server(
    "registry-pg",
    resource_group_name="rg",
    location="uaenorth",
    server_name="mlp-registry-pg-demo",
    version="17",
    network={
        "delegated_subnet_resource_id": SUBNET,
        "private_dns_zone_arm_resource_id": zone.id,
        "public_network_access": "Disabled",
    },
    tags=TAGS,
)
"""

_IB_POOL_AT_ZERO = """
from pulumi_azure_native import containerservice
from pulumi_kubernetes.batch.v1 import Job

containerservice.AgentPool(
    "gpuib",
    resource_group_name="rg",
    resource_name_="aks",
    agent_pool_name="gpuib",
    vm_size="Standard_ND96isr_H100_v5",
    enable_auto_scaling=True,
    min_count=MIN_COUNT,
    max_count=2,
    node_labels={"ml-platform/pool": "gpu-ib"},
    tags=TAGS,
)
Job(
    "fabric-test",
    metadata={"name": "fabric-test", "namespace": "ml"},
    spec={
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"ml-platform/pool": "gpu-ib"},
                "containers": [
                    {
                        "name": "nccl",
                        "image": "r.ae/nccl@sha256:" + "0" * 64,
                        "resources": {"limits": {"nvidia.com/gpu": "8", "rdma/shared_ib": "1"}},
                    }
                ],
            }
        }
    },
)
"""

_NAMED = """
from pulumi_azure_native import containerservice, keyvault

keyvault.Vault(
    "vault",
    resource_group_name="rg",
    location="uaenorth",
    vault_name=VAULT,
    properties={
        "tenant_id": "00000000-0000-0000-0000-000000000001",
        "sku": {"family": "A", "name": "standard"},
        "enable_rbac_authorization": True,
        "public_network_access": "Disabled",
        "network_acls": {"default_action": "Deny", "bypass": "AzureServices"},
    },
    tags=TAGS,
)
containerservice.AgentPool(
    "pool", resource_group_name="rg", resource_name_="aks", agent_pool_name=POOL, vm_size="Standard_D4s_v5",
    count=1, tags=TAGS,
)
"""

_STORAGE = """
from pulumi_azure_native import monitor, storage

account = storage.StorageAccount(
    "objects",
    resource_group_name="rg",
    location="uaenorth",
    account_name="mlpobjectsdemo",
    kind="StorageV2",
    sku={"name": "Standard_ZRS"},
    minimum_tls_version="TLS1_2",
    allow_blob_public_access=False,
    allow_shared_key_access=False,
    public_network_access="Disabled",
    encryption={"key_source": "Microsoft.Keyvault", "require_infrastructure_encryption": True},
    tags=TAGS,
)
if AUDITED:
    monitor.DiagnosticSetting(
        "objects-blob-audit",
        resource_uri=account.id.apply(lambda i: f"{i}/blobServices/default"),
        workspace_id="/subscriptions/s/resourceGroups/rg/providers/Microsoft.OperationalInsights/workspaces/w",
        logs=[{"category_group": "audit", "enabled": True}],
    )
"""

_CONFIDENTIAL_CLUSTER = """
from pulumi_azure_native import containerservice

containerservice.ManagedCluster(
    "aks",
    resource_group_name="rg",
    location="uaenorth",
    dns_prefix="aks",
    agent_pool_profiles=[{"name": "system", "mode": "System", "vm_size": "Standard_D4s_v5", "count": 1}],
    security_profile=SECURITY,
    api_server_access_profile={"enable_vnet_integration": True, "subnet_id": "/subnets/apiserver"},
    tags={**TAGS, "data-classification": "confidential"},
)
"""
_KMS = (
    '{"azure_key_vault_kms": {"enabled": True, "key_id": '
    '"https://v.vault.azure.net/keys/secrets-cmk/0123456789abcdef0123456789abcdef", '
    '"key_vault_network_access": "Private", "key_vault_resource_id": "/subscriptions/s/vaults/v"}}'
)

_VAULT_COMMAND = """
from pulumi_azure_native import keyvault
from pulumi_command import local

vault = keyvault.Vault(
    "creation-vault",
    resource_group_name="rg",
    location="uaenorth",
    vault_name="mlp-acrk-demo",
    properties={
        "tenant_id": "00000000-0000-0000-0000-000000000001",
        "sku": {"family": "A", "name": "standard"},
        "enable_rbac_authorization": True,
        "public_network_access": "Enabled",
        "network_acls": {"default_action": "Allow"},
    },
    tags=TAGS,
)
NAME = vault.name if FROM_VAULT else "mlp-acrk-demo"
local.Command(
    "reopen",
    update=pulumi.Output.from_input(NAME).apply(
        lambda n: f"az keyvault update --resource-group rg --name {n} --public-network-access Enabled"
    ),
)
"""

_PRIVATE_REGISTRY_PUSH = """
import pulumi_docker_build as docker_build
from pulumi_azure_native import containerregistry, network

registry = containerregistry.Registry(
    "acr",
    resource_group_name="rg",
    location="uaenorth",
    registry_name="mlpacrdemo",
    sku={"name": "Premium"},
    admin_user_enabled=False,
    public_network_access="Disabled",
    tags=TAGS,
)
endpoint = network.PrivateEndpoint(
    "acr-pe",
    resource_group_name="rg",
    location="uaenorth",
    subnet={"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/subnets/e"},
    private_link_service_connections=[
        {"name": "registry", "private_link_service_id": registry.id, "group_ids": ["registry"]}
    ],
    tags=TAGS,
)
dns = network.PrivateDnsZoneGroup(
    "acr-dns",
    resource_group_name="rg",
    private_endpoint_name=endpoint.name,
    private_dns_zone_configs=[{"name": "registry", "private_dns_zone_id": "/zones/privatelink.azurecr.io"}],
)
docker_build.Image(
    "app",
    context={"location": "."},
    tags=["mlpacrdemo.azurecr.io/app:1"],
    push=True,
    opts=pulumi.ResourceOptions(depends_on=[dns if WAIT else registry]),
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
    (
        "aks-version-past-end-of-life",
        AZURE,
        'VERSION = "1.33"\n' + _VERSIONED_CLUSTER,
        ("aks-version-supported", "aks"),
    ),
    ("aks-version-supported", AZURE, 'VERSION = "1.35"\n' + _VERSIONED_CLUSTER, None),
    (
        "key-without-deployer-grant",
        AZURE,
        "GRANT = False\n" + _RBAC_VAULT_KEY,
        ("azure-keyvault-deployer-data-role", "key"),
    ),
    ("key-after-deployer-grant", AZURE, "GRANT = True\n" + _RBAC_VAULT_KEY, None),
    (
        "ib-pool-at-zero",
        AZURE,
        "MIN_COUNT = 0\n" + _IB_POOL_AT_ZERO,
        ("aks-extended-resource-scale-from-zero", "gpuib"),
    ),
    ("ib-pool-at-one", AZURE, "MIN_COUNT = 1\n" + _IB_POOL_AT_ZERO, None),
    (
        "vault-name-double-hyphen",
        AZURE,
        'VAULT, POOL = "mlp--kv-demo", "inference"\n' + _NAMED,
        ("azure-resource-names", "vault"),
    ),
    (
        "agent-pool-name-with-hyphen",
        AZURE,
        'VAULT, POOL = "mlp-kv-demo", "gpu-ib"\n' + _NAMED,
        ("azure-resource-names", "pool"),
    ),
    ("arm-names-valid", AZURE, 'VAULT, POOL = "mlp-kv-demo", "gpuib"\n' + _NAMED, None),
    (
        "storage-without-audit-logs",
        AZURE,
        "AUDITED = False\n" + _STORAGE,
        ("azure-diagnostics-coverage", "objects"),
    ),
    ("storage-with-audit-logs", AZURE, "AUDITED = True\n" + _STORAGE, None),
    (
        "confidential-cluster-without-kms",
        AZURE,
        'SECURITY = {"workload_identity": {"enabled": True}}\n' + _CONFIDENTIAL_CLUSTER,
        ("aks-secrets-kms", "aks"),
    ),
    ("confidential-cluster-with-kms", AZURE, f"SECURITY = {_KMS}\n" + _CONFIDENTIAL_CLUSTER, None),
    # Review wt-azure3 A1: the reopen command named the vault by its random name, not the vault's output.
    (
        "keyvault-command-before-vault",
        AZURE,
        "FROM_VAULT = False\n" + _VAULT_COMMAND,
        ("azure-keyvault-command-after-vault", "reopen"),
    ),
    ("keyvault-command-after-vault", AZURE, "FROM_VAULT = True\n" + _VAULT_COMMAND, None),
    # Review wt-azure3 A2: the images waited for the registry only, not for its private endpoint's DNS.
    (
        "private-registry-push-before-dns",
        AZURE,
        "WAIT = False\n" + _PRIVATE_REGISTRY_PUSH,
        ("azure-registry-push-after-private-dns", "app"),
    ),
    ("private-registry-push-after-dns", AZURE, "WAIT = True\n" + _PRIVATE_REGISTRY_PUSH, None),
    (
        "key-in-private-vault-without-endpoint",
        AZURE,
        "GRANT, ENDPOINT = True, False\n" + _RBAC_VAULT_KEY + _VAULT_ENDPOINT,
        ("azure-keyvault-private-endpoint", "key"),
    ),
    (
        "key-in-private-vault-with-endpoint",
        AZURE,
        "GRANT, ENDPOINT = True, True\n" + _RBAC_VAULT_KEY + _VAULT_ENDPOINT,
        None,
    ),
    (
        "kms-public-with-firewalled-vault",
        AZURE,
        'GRANT, ENDPOINT, ACCESS = True, True, "Public"\n' + _RBAC_VAULT_KEY + _VAULT_ENDPOINT + _KMS_PUBLIC,
        ("aks-kms-public-vault-open", "aks"),
    ),
    (
        "kms-private-with-firewalled-vault",
        AZURE,
        'GRANT, ENDPOINT, ACCESS = True, True, "Private"\n' + _RBAC_VAULT_KEY + _VAULT_ENDPOINT + _KMS_PUBLIC,
        None,
    ),
    (
        "kms-key-rotates-without-notice",
        AZURE,
        'GRANT, ENDPOINT, ACCESS, NOTIFY = True, True, "Private", False\n'
        + _RBAC_VAULT_KEY
        + _VAULT_ENDPOINT
        + _KMS_KEY_POLICY
        + _KMS_PUBLIC,
        ("aks-kms-key-notifies", "aks"),
    ),
    (
        "kms-key-expires-and-notifies",
        AZURE,
        'GRANT, ENDPOINT, ACCESS, NOTIFY = True, True, "Private", True\n'
        + _RBAC_VAULT_KEY
        + _VAULT_ENDPOINT
        + _KMS_KEY_POLICY
        + _KMS_PUBLIC,
        None,
    ),
    (
        "api-server-subnet-not-delegated",
        AZURE,
        'API_PREFIX, DELEGATED, NAT = "10.0.16.0/28", False, True\n' + _SUBNETS,
        ("aks-api-server-subnet", "aks"),
    ),
    (
        "api-server-subnet-too-small",
        AZURE,
        'API_PREFIX, DELEGATED, NAT = "10.0.16.0/29", True, True\n' + _SUBNETS,
        ("aks-api-server-subnet", "aks"),
    ),
    (
        "node-subnet-without-nat",
        AZURE,
        'API_PREFIX, DELEGATED, NAT = "10.0.16.0/28", True, False\n' + _SUBNETS,
        ("aks-user-nat-subnets", "aks"),
    ),
    (
        "subnets-as-aks-needs",
        AZURE,
        'API_PREFIX, DELEGATED, NAT = "10.0.16.0/28", True, True\n' + _SUBNETS,
        None,
    ),
    (
        "postgres-without-audit-logs",
        AZURE,
        "AUDITED, HUMAN = False, True\n" + _POSTGRES,
        ("azure-diagnostics-coverage", "registry-pg"),
    ),
    ("postgres-with-audit-logs", AZURE, "AUDITED, HUMAN = True, True\n" + _POSTGRES, None),
    (
        "postgres-zone-outside-the-service-domain",
        AZURE,
        'ZONE = "registry.internal.example"\n' + _POSTGRES_ZONE,
        ("azure-postgres-private-dns-zone", "registry-pg"),
    ),
    (
        "postgres-zone-named-after-a-server",
        AZURE,
        'ZONE = "mlp-registry-pg-demo.postgres.database.azure.com"\n' + _POSTGRES_ZONE,
        ("azure-postgres-private-dns-zone", "registry-pg"),
    ),
    (
        "postgres-zone-as-the-stack-names-it",
        AZURE,
        'ZONE = "mlp-registry-pg-demo.private.postgres.database.azure.com"\n' + _POSTGRES_ZONE,
        None,
    ),
]
COVERED = {expected[0] for _, _, _, expected in CASES if expected is not None}
# The small programs leave their vaults and accounts without diagnostic settings on purpose; that policy is
# judged by its own two cases only.
DIAGNOSTICS = "azure-diagnostics-coverage"
# Likewise the small programs' vaults are private without an endpoint: judged by the ENDPOINT cases only.
VAULT_ENDPOINT = "azure-keyvault-private-endpoint"
# And their KMS keys have no rotation policy: judged by the NOTIFY cases only.
KMS_NOTICE = "aks-kms-key-notifies"


@pytest.mark.parametrize(("config", "body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_azure_deployability_policy(
    judge: Judge, config: str, body: str, expected: tuple[str, str] | None
) -> None:
    judged = COVERED - ({DIAGNOSTICS} if "AUDITED" not in body else set())
    judged -= {VAULT_ENDPOINT} if "ENDPOINT" not in body else set()
    judged -= {KMS_NOTICE} if "NOTIFY" not in body else set()
    findings = {f for f in found(judge(body, config)) if f[0] in judged}
    assert findings == ({expected} if expected else set())


NEW_AZURE_POLICIES = {
    "aks-version-supported",
    "azure-keyvault-deployer-data-role",
    "aks-extended-resource-scale-from-zero",
    "azure-resource-names",
    "azure-diagnostics-coverage",
    "aks-secrets-kms",
    "azure-keyvault-command-after-vault",
    "azure-registry-push-after-private-dns",
    "azure-keyvault-private-endpoint",
    "aks-kms-public-vault-open",
    "aks-api-server-subnet",
    "aks-user-nat-subnets",
    "azure-postgres-private-dns-zone",
    "aks-kms-key-notifies",
}


@pytest.mark.parametrize("human", [False, True])
def test_an_entra_only_server_without_a_human_administrator_is_advised(judge: Judge, human: bool) -> None:
    """Review azure.md D1 (D5 4): advisory, the group is the operator's to name."""
    body = f"AUDITED, HUMAN = True, {human}\n" + _POSTGRES
    advised = found(judge(body, AZURE), "advisory")
    assert (("azure-postgres-human-admin", "registry-pg") in advised) is not human


def test_every_new_policy_is_tested_both_ways() -> None:
    caught = {expected[0] for _, _, _, expected in CASES if expected is not None}
    assert caught >= NEW_AZURE_POLICIES


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_the_shipped_azure_stacks_pass_them(
    pack: PolicyPackSession, defaults: dict[str, PolicySettings], planned: Callable[[str], Plan], stack: str
) -> None:
    """The full plans (cloud and in-cluster layers) of the four Azure templates raise none of them."""
    violations = pack.judge(planned(stack).to_dict(), defaults)
    assert not [(v.policy, v.name, v.message) for v in violations if v.policy in NEW_AZURE_POLICIES]


# azure-resource-names, one rule per type the templates create (resource-name-rules, 11/20/2023 revision, and
# the federated identity credential's ARM template reference): a name the rule refuses, and the shipped name.
NAME_CASES = [
    ("azure-native:compute:DiskEncryptionSet", "des.keys", "ml-platform-des_1"),
    ("azure-native:operationalinsights:Workspace", "logs-", "azure-smb-dev-logs"),
    ("azure-native:storage:BlobContainer", "data--sets", "datasets"),
    ("azure-native:storage:FileShare", "training-", "training"),
    (
        "azure-native:network:PrivateEndpoint",
        "p" * 65,
        "azure-enterprise-prod-azure-registry-registry-pe22620046",
    ),
    ("azure-native:privatedns:PrivateZone", "localhost", "privatelink.blob.core.windows.net"),
    ("azure-native:resources:ResourceGroup", "ml-platform.", "ml-platform-azure-enterprise-prod"),
    ("azure-native:managedidentity:FederatedIdentityCredential", "-fic", "azure-smb-dev-training-federation"),
    ("azure-native:dbforpostgresql:Server", "mlp-Registry", "mlp-registry-0a1b2c3d4e5f"),
]


@pytest.mark.parametrize(
    ("resource_type", "bad", "good"), NAME_CASES, ids=[c[0].split(":")[-1] for c in NAME_CASES]
)
def test_arm_name_rules(resource_type: str, bad: str, good: str) -> None:
    """Judged in the pack's own environment, where the policy module imports."""
    script = (
        "import sys; from mlplatform_policies.deployability_azure import NAME_RULES as R; "
        "p = R[sys.argv[1]][2]; print(bool(p.fullmatch(sys.argv[2])), bool(p.fullmatch(sys.argv[3])))"
    )
    python = PACK_DIR / ".venv" / "bin" / "python"
    result = subprocess.run(
        [str(python), "-c", script, resource_type, bad, good],
        check=False,
        cwd=PACK_DIR,
        capture_output=True,
        text=True,
    )
    assert result.stdout.split() == ["False", "True"], result.stderr
