"""Key Vault, customer-managed keys, the disk encryption set and the container registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from components.azure.roles import BuiltInRole
from mlplatform.plan import Plan
from tests.components.azure.azure_plan_support import named, of_type, role_assignments, target

PlanFn = Callable[[str], Plan]
REGISTRY = "azure-native:containerregistry:Registry"


def vault(plan: Plan) -> dict[str, Any]:
    (resource,) = of_type(plan, "azure-native:keyvault:Vault")
    properties: dict[str, Any] = resource.inputs["properties"]
    return properties


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_vault_keeps_keys_recoverable_and_uses_rbac(azure_plan: PlanFn, stack: str) -> None:
    properties = vault(azure_plan(stack))
    assert properties["enableRbacAuthorization"] is True
    assert properties["enableSoftDelete"] is True
    assert properties["enablePurgeProtection"] is True
    assert properties["softDeleteRetentionInDays"] == 90.0
    assert properties["networkAcls"]["defaultAction"] == "Deny"
    assert properties["networkAcls"]["bypass"] == "AzureServices"


def test_enterprise_vault_has_no_public_access_and_hsm_keys(azure_plan: PlanFn) -> None:
    plan = azure_plan("azure-enterprise-prod")
    assert vault(plan)["publicNetworkAccess"] == "Disabled"
    assert vault(plan)["networkAcls"]["ipRules"] == []
    assert vault(plan)["sku"] == {"family": "A", "name": "premium"}
    assert {k.inputs["properties"]["kty"] for k in of_type(plan, "azure-native:keyvault:Key")} == {"RSA-HSM"}


def test_smb_vault_denies_all_but_the_allow_list(azure_plan: PlanFn) -> None:
    properties = vault(azure_plan("azure-smb-dev"))
    assert properties["publicNetworkAccess"] == "Enabled"
    assert properties["networkAcls"]["ipRules"] == [{"value": "203.0.113.0/24"}]


def test_one_rotating_rsa_key_per_consumer(azure_plan: PlanFn) -> None:
    keys = {
        k.inputs["keyName"]: k.inputs["properties"]
        for k in of_type(azure_plan("azure-smb-dev"), "azure-native:keyvault:Key")
    }
    assert sorted(keys) == ["disks-cmk", "registry-cmk", "storage-cmk"]
    for properties in keys.values():
        assert (properties["kty"], properties["keySize"]) == ("RSA", 3072.0)
        actions = properties["rotationPolicy"]["lifetimeActions"]
        assert {"trigger": {"timeAfterCreate": "P90D"}, "action": {"type": "rotate"}} in actions


def test_disk_encryption_set_follows_the_disks_key_and_is_granted_on_it(azure_plan: PlanFn) -> None:
    plan = azure_plan("azure-smb-dev")
    des = named(plan, "azure-native:compute:DiskEncryptionSet", "-keys-des").inputs
    assert des["identity"] == {"type": "SystemAssigned"}
    assert des["encryptionType"] == "EncryptionAtRestWithCustomerKey"
    assert des["rotationToLatestKeyVersionEnabled"] is True
    assert "-keys-disks" in des["activeKey"]["keyUrl"]
    grants = role_assignments(plan, BuiltInRole.KEY_VAULT_CRYPTO_SERVICE_ENCRYPTION_USER)
    # The disk set on the disks key; the storage identity and the registry identity on theirs.
    assert sorted(target(g["scope"]).rsplit("-", 1)[1] for g in grants) == ["disks", "registry", "storage"]
    assert all(g["principalType"] == "ServicePrincipal" for g in grants)


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_registry_is_premium_encrypted_and_keyless(azure_plan: PlanFn, stack: str) -> None:
    plan = azure_plan(stack)
    registry = named(plan, REGISTRY, "-registry-acr").inputs
    assert registry["sku"] == {"name": "Premium"}
    assert registry["adminUserEnabled"] is False
    assert registry["anonymousPullEnabled"] is False
    assert registry["encryption"]["status"] == "enabled"
    assert "-keys-registry" in registry["encryption"]["keyVaultProperties"]["keyIdentifier"]
    assert registry["identity"]["type"] == "UserAssigned"
    (pull,) = role_assignments(plan, BuiltInRole.ACR_PULL)
    assert "-registry-acr" in pull["scope"]


def test_enterprise_registry_is_private_smb_registry_firewalled(azure_plan: PlanFn) -> None:
    enterprise = named(azure_plan("azure-enterprise-prod"), REGISTRY, "-registry-acr").inputs
    assert enterprise["publicNetworkAccess"] == "Disabled"
    assert enterprise["policies"] == {"exportPolicy": {"status": "disabled"}}
    smb = named(azure_plan("azure-smb-dev"), REGISTRY, "-registry-acr").inputs
    assert smb["publicNetworkAccess"] == "Enabled"
    assert smb["networkRuleSet"] == {
        "defaultAction": "Deny",
        "ipRules": [{"iPAddressOrRange": "203.0.113.0/24", "action": "Allow"}],
    }
