"""Key Vault, customer-managed keys, the disk encryption set and the container registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from components.azure.roles import BuiltInRole
from mlplatform.plan import Plan
from tests.components.azure.azure_plan_support import role_assignments
from tests.stack_variants import one

PlanFn = Callable[[str], Plan]
REGISTRY = "azure-native:containerregistry:Registry"


def vault(plan: Plan) -> dict[str, Any]:
    """The platform's vault (the other one exists for the registry's creation, test_azure_deployability)."""
    properties: dict[str, Any] = one(plan, "azure-native:keyvault:Vault", "-keys-vault").inputs["properties"]
    return properties


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_vault_keeps_keys_recoverable_and_uses_rbac(cloud_plan: PlanFn, stack: str) -> None:
    properties = vault(cloud_plan(stack))
    assert properties["enableRbacAuthorization"] is True
    assert properties["enableSoftDelete"] is True
    assert properties["enablePurgeProtection"] is True
    assert properties["softDeleteRetentionInDays"] == 90.0
    assert properties["networkAcls"]["defaultAction"] == "Deny"
    assert properties["networkAcls"]["bypass"] == "AzureServices"


def test_enterprise_vault_has_no_public_access_and_hsm_keys(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-enterprise-prod")
    assert vault(plan)["publicNetworkAccess"] == "Disabled"
    assert vault(plan)["networkAcls"]["ipRules"] == []
    assert vault(plan)["sku"] == {"family": "A", "name": "premium"}
    kty = {
        k.inputs["keyName"]: k.inputs["properties"]["kty"] for k in plan.by_type("azure-native:keyvault:Key")
    }
    # The image-signing key is EC (cosign signs with ECDSA P-256), HSM-backed like the others.
    assert kty.pop("image-signing") == "EC-HSM"
    assert set(kty.values()) == {"RSA-HSM"}
    for other in ("-registry-creation-vault", "-signing-vault"):
        properties = one(plan, "azure-native:keyvault:Vault", other).inputs["properties"]
        assert properties["sku"] == {"family": "A", "name": "premium"}


def test_smb_vault_is_private_too(cloud_plan: PlanFn) -> None:
    """AKS KMS cannot use a vault in "selected networks" mode ("allow public access from specific virtual
    networks and IP addresses ... isn't supported", learn.microsoft.com/azure/aks/use-kms-etcd-encryption,
    Limitations); the SMB vault holds the Secrets key, so it is private like the enterprise one."""
    properties = vault(cloud_plan("azure-smb-dev"))
    assert properties["publicNetworkAccess"] == "Disabled"
    assert properties["networkAcls"] == {"defaultAction": "Deny", "bypass": "AzureServices", "ipRules": []}


def test_one_rotating_rsa_key_per_data_domain(cloud_plan: PlanFn) -> None:
    """azure-smb-dev has the NFS share but no managed database and no audit archive: no key for those."""
    keys = {
        k.inputs["keyName"]: k.inputs["properties"]
        for k in cloud_plan("azure-smb-dev").by_type("azure-native:keyvault:Key")
    }
    # The image-signing key signs, it encrypts nothing (test_image_provenance.py).
    assert keys.pop("image-signing")["kty"] == "EC"
    assert sorted(keys) == [
        "datasets-cmk",
        "disks-cmk",
        "registry-cmk",
        "registry-creation",
        "secrets-cmk",
        "storage-cmk",
        "training-data-cmk",
    ]
    for properties in keys.values():
        assert (properties["kty"], properties["keySize"]) == ("RSA", 3072.0)
        actions = properties["rotationPolicy"]["lifetimeActions"]
        assert {"trigger": {"timeAfterCreate": "P90D"}, "action": {"type": "rotate"}} in actions


def test_the_secrets_key_expires_and_notifies_before(cloud_plan: PlanFn) -> None:
    """Review of issue 38, B7: a non-expiring, rotate-only Secrets key never fires the near-expiry event the
    KMS rotation runbook starts from, so the cluster stayed on its first version. Its versions now expire a
    year after they are made, with a Notify 30 days before (learn.microsoft.com, Key Vault keys
    ``KeyRotationPolicy.ExpiresIn``: "when a new KeyVaultKey version created from this policy will expire";
    ``KeyRotationLifetimeAction.TimeBeforeExpiry``: "duration before expiry to attempt to Rotate or
    Notify"). AKS KMS fails on an expired version ("KeyExpired", use-kms-etcd-encryption): the event for
    the cluster's version comes 30 days ahead of that."""
    (secrets,) = [
        k.inputs["properties"]
        for k in cloud_plan("azure-smb-dev").by_type("azure-native:keyvault:Key")
        if k.inputs["keyName"] == "secrets-cmk"
    ]
    policy = secrets["rotationPolicy"]
    assert policy["attributes"] == {"expiryTime": "P1Y"}
    assert {"trigger": {"timeBeforeExpiry": "P30D"}, "action": {"type": "notify"}} in policy[
        "lifetimeActions"
    ]
    assert {"trigger": {"timeAfterCreate": "P90D"}, "action": {"type": "rotate"}} in policy["lifetimeActions"]


def test_disk_encryption_set_follows_the_disks_key_and_is_granted_on_it(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-smb-dev")
    des = one(plan, "azure-native:compute:DiskEncryptionSet", "-keys-des").inputs
    assert des["identity"] == {"type": "SystemAssigned"}
    assert des["encryptionType"] == "EncryptionAtRestWithCustomerKey"
    assert des["rotationToLatestKeyVersionEnabled"] is True
    assert "/keys/disks-cmk/" in des["activeKey"]["keyUrl"]
    grants = role_assignments(plan, BuiltInRole.KEY_VAULT_CRYPTO_SERVICE_ENCRYPTION_USER)
    # The disk set on the disks key; the storage and shared identities each on their domain's key, the
    # storage identity on the datasets' too (the data account's encryption scope uses it); the registry's
    # user-assigned identity on the key it is created with, its system-assigned identity on the firewalled
    # one; the image verifier's identity on the signing key, whose public half it reads (docs/images.md).
    assert sorted(g["scope"].rsplit("/", 1)[1] for g in grants) == [
        "datasets-cmk",
        "disks-cmk",
        "image-signing",
        "registry-cmk",
        "registry-creation",
        "storage-cmk",
        "training-data-cmk",
    ]
    assert all(g["principalType"] == "ServicePrincipal" for g in grants)


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_registry_is_premium_encrypted_and_keyless(cloud_plan: PlanFn, stack: str) -> None:
    plan = cloud_plan(stack)
    registry = one(plan, REGISTRY, "-registry-acr").inputs
    assert registry["sku"] == {"name": "Premium"}
    assert registry["adminUserEnabled"] is False
    assert registry["anonymousPullEnabled"] is False
    assert registry["encryption"]["status"] == "enabled"
    assert registry["identity"]["type"] == "SystemAssigned, UserAssigned"
    # Pulls: the nodes' (kubelet identity) and the admission verifier's, which reads signatures.
    pulls = role_assignments(plan, BuiltInRole.ACR_PULL)
    assert len(pulls) == 2 and all(p["scope"].endswith(f"/{registry['registryName']}") for p in pulls)


def test_enterprise_registry_is_private_smb_registry_firewalled(cloud_plan: PlanFn) -> None:
    enterprise = one(cloud_plan("azure-enterprise-prod"), REGISTRY, "-registry-acr").inputs
    assert enterprise["publicNetworkAccess"] == "Disabled"
    assert enterprise["policies"] == {"exportPolicy": {"status": "disabled"}}
    smb = one(cloud_plan("azure-smb-dev"), REGISTRY, "-registry-acr").inputs
    assert smb["publicNetworkAccess"] == "Enabled"
    assert smb["networkRuleSet"] == {
        "defaultAction": "Deny",
        "ipRules": [{"iPAddressOrRange": "203.0.113.0/24", "action": "Allow"}],
    }


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_the_private_vaults_keys_are_written_through_its_private_endpoint(
    cloud_plan: PlanFn, stack: str
) -> None:
    """Azure review U1: "Creating or updating keys in a private key vault that doesn't have a private
    endpoint isn't supported" (AKS KMS docs); the stack's vault has public access disabled and had none.
    Now a ``vault`` endpoint with its DNS record in the vault Private Link zone exists before any key."""
    plan = cloud_plan(stack)
    urns = {r.urn: r for r in plan.resources}
    private = [
        v
        for v in plan.by_type("azure-native:keyvault:Vault")
        if v.inputs["properties"].get("publicNetworkAccess") == "Disabled"
    ]
    assert private
    for vault in private:
        (endpoint,) = [
            e
            for e in plan.by_type("azure-native:network:PrivateEndpoint")
            if vault.urn in e.dependencies
            and e.inputs["privateLinkServiceConnections"][0]["groupIds"] == ["vault"]
        ]
        (zone_group,) = [
            g
            for g in plan.by_type("azure-native:network:PrivateDnsZoneGroup")
            if endpoint.urn in g.dependencies
        ]
        zones = [
            urns[u] for u in zone_group.dependencies if urns[u].type == "azure-native:privatedns:PrivateZone"
        ]
        assert [z.inputs["privateZoneName"] for z in zones] == ["privatelink.vaultcore.azure.net"]
        keys = [k for k in plan.by_type("azure-native:keyvault:Key") if vault.urn in k.dependencies]
        assert keys and all(zone_group.urn in k.dependencies for k in keys)
