"""The AKS control plane as planned from the shipped templates: access, identity, network, encryption."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any

import pytest

from components.azure.cluster import CONTROL_PLANE_LOGS, cluster_cidrs
from components.azure.roles import BuiltInRole
from mlplatform.plan import SECRET_SIG, Plan
from tests.components.azure.azure_plan_support import role_assignments, target
from tests.stack_variants import one

CLUSTER = "azure-native:containerservice:ManagedCluster"
PlanFn = Callable[[str], Plan]


def cluster(plan: Plan) -> dict[str, Any]:
    (resource,) = plan.by_type(CLUSTER)
    return resource.inputs


def _vnet_integrated(access: dict[str, Any]) -> dict[str, Any]:
    """The API server profile less its VNet integration (asserted in test_secrets_encrypted_with_kms...)."""
    assert access.pop("enableVnetIntegration") is True
    assert "-network-apiserver-subnet" in access.pop("subnetId")
    return access


def test_smb_api_server_is_public_behind_the_allow_list(cloud_plan: PlanFn) -> None:
    access = _vnet_integrated(dict(cluster(cloud_plan("azure-smb-dev"))["apiServerAccessProfile"]))
    assert access == {"enablePrivateCluster": False, "authorizedIPRanges": ["203.0.113.0/24"]}


def test_enterprise_api_server_is_private(cloud_plan: PlanFn) -> None:
    access = _vnet_integrated(dict(cluster(cloud_plan("azure-enterprise-prod"))["apiServerAccessProfile"]))
    assert access == {
        "enablePrivateCluster": True,
        "enablePrivateClusterPublicFQDN": False,
        "privateDNSZone": "system",
    }


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_secrets_encrypted_with_kms_under_the_stacks_private_vault(cloud_plan: PlanFn, stack: str) -> None:
    """Review azure.md C2; AKS KMS etcd encryption (learn.microsoft.com/azure/aks/use-kms-etcd-encryption):
    a versioned key id, ``Private`` network access with the vault's resource id (required for Private,
    containerservice AzureKeyVaultKms), the vault not in "selected networks" mode (unsupported), API Server
    VNet Integration on a delegated subnet of at least /28 (the only path to a private vault,
    api-server-vnet-integration), and the cluster's user-assigned identity granted Key Vault Crypto User
    and Key Vault Contributor on the vault, waited on before the cluster is created."""
    plan = cloud_plan(stack)
    inputs = cluster(plan)
    kms = inputs["securityProfile"]["azureKeyVaultKms"]
    vault = one(plan, "azure-native:keyvault:Vault", "-keys-vault")
    assert kms["enabled"] is True and kms["keyVaultNetworkAccess"] == "Private"
    assert re.fullmatch(
        r"https://mlp-kv-[0-9a-z-]+\.vault\.azure\.net/keys/secrets-cmk/[0-9a-f]{32}", kms["keyId"]
    )
    assert target(kms["keyVaultResourceId"]) == vault.name
    assert vault.inputs["properties"]["publicNetworkAccess"] == "Disabled"
    access = inputs["apiServerAccessProfile"]
    assert access["enableVnetIntegration"] is True
    api_server_subnet = one(plan, "azure-native:network:Subnet", "-network-apiserver-subnet")
    assert target(access["subnetId"]) == api_server_subnet.name
    subnet = api_server_subnet.inputs
    assert subnet["delegations"] == [
        {"name": "delegation", "serviceName": "Microsoft.ContainerService/managedClusters"}
    ]
    assert ipaddress.ip_network(subnet["addressPrefix"]).prefixlen <= 28
    (network,) = role_assignments(plan, BuiltInRole.NETWORK_CONTRIBUTOR)
    (crypto,) = role_assignments(plan, BuiltInRole.KEY_VAULT_CRYPTO_USER)
    (contributor,) = role_assignments(plan, BuiltInRole.KEY_VAULT_CONTRIBUTOR)
    # Review B10: encrypt/decrypt on the Secrets key alone (the vault holds every domain's key); the
    # management-plane Contributor (no data access) on the vault for the private link.
    assert crypto["scope"].endswith("/keys/secrets-cmk") and crypto["scope"] != kms["keyVaultResourceId"]
    assert contributor["scope"] == kms["keyVaultResourceId"]
    for grant in (crypto, contributor):
        assert grant["principalId"] == network["principalId"]  # the control-plane identity
        assert grant["principalType"] == "ServicePrincipal"


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_entra_id_only_access_with_workload_identity(cloud_plan: PlanFn, stack: str) -> None:
    inputs = cluster(cloud_plan(stack))
    assert inputs["aadProfile"]["managed"] is True
    assert inputs["aadProfile"]["enableAzureRBAC"] is True
    assert inputs["disableLocalAccounts"] is True
    assert inputs["enableRBAC"] is True
    assert inputs["securityProfile"]["workloadIdentity"] == {"enabled": True}
    assert inputs["oidcIssuerProfile"] == {"enabled": True}


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_overlay_network_with_cilium_policy(cloud_plan: PlanFn, stack: str) -> None:
    network = cluster(cloud_plan(stack))["networkProfile"]
    assert network["networkPlugin"] == "azure"
    assert network["networkPluginMode"] == "overlay"
    assert network["networkDataplane"] == "cilium"
    assert network["networkPolicy"] == "cilium"


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_version_upgrades_and_disk_encryption_set(cloud_plan: PlanFn, stack: str) -> None:
    inputs = cluster(cloud_plan(stack))
    assert inputs["kubernetesVersion"] == "1.35"
    assert inputs["autoUpgradeProfile"] == {"upgradeChannel": "patch", "nodeOSUpgradeChannel": "NodeImage"}
    assert "-keys-des" in inputs["diskEncryptionSetID"]
    assert inputs["identity"]["type"] == "UserAssigned"


def test_production_gets_the_sla_tier(cloud_plan: PlanFn) -> None:
    assert cluster(cloud_plan("azure-enterprise-prod"))["sku"]["tier"] == "Standard"
    assert cluster(cloud_plan("azure-smb-dev"))["sku"]["tier"] == "Free"


def test_control_plane_logs_go_to_log_analytics(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-enterprise-prod")
    setting = one(plan, "azure-native:monitor:DiagnosticSetting", "-cluster-diagnostics").inputs
    assert "-cluster-logs" in setting["workspaceId"]
    assert setting["resourceUri"].endswith("/containerservice/azure-enterprise-prod")
    # A restricted stack sends kube-audit (reads included) in place of its subset kube-audit-admin
    # (Azure review D3: both ingested every write twice).
    restricted = ["kube-audit" if c == "kube-audit-admin" else c for c in CONTROL_PLANE_LOGS]
    assert [log["category"] for log in setting["logs"]] == restricted
    workspace = one(plan, "azure-native:operationalinsights:Workspace", "-cluster-logs").inputs
    assert workspace["features"] == {"disableLocalAuth": True}


def test_control_plane_may_use_the_vnet_and_deployer_administers(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-smb-dev")
    (network,) = role_assignments(plan, BuiltInRole.NETWORK_CONTRIBUTOR)
    assert "-network-vnet" in network["scope"]
    assert network["principalType"] == "ServicePrincipal"
    (admin,) = role_assignments(plan, BuiltInRole.AKS_RBAC_CLUSTER_ADMIN)
    assert admin["scope"].endswith("/containerservice/azure-smb-dev")
    assert admin["principalType"] in {"User", "ServicePrincipal"}


def test_kubeconfig_is_a_secret_output(cloud_plan: PlanFn) -> None:
    kubeconfig = cloud_plan("azure-smb-dev").outputs["kubeconfig"]
    assert SECRET_SIG in kubeconfig
    assert kubeconfig["value"].startswith("apiVersion: v1")


def test_overlay_ranges_avoid_the_vnet() -> None:
    assert cluster_cidrs("10.60.0.0/16").pods == "10.244.0.0/16"
    moved = cluster_cidrs("10.0.0.0/8")
    assert (moved.pods, moved.services, moved.dns_service_ip) == (
        "192.168.0.0/16",
        "172.16.0.0/16",
        "172.16.0.10",
    )
