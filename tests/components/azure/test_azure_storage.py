"""Object storage, the NFS share and their private endpoints, as planned from the shipped templates."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi_azure_native import storage

from components.azure.shared_storage import file_service_template, files_sku
from components.azure.storage import blob_sku, storage_ip_rules
from components.config import parse_stack_config
from components.handle import SharedStorageKind
from mlplatform.plan import Plan
from tests.stack_variants import one, template

ACCOUNT = "azure-native:storage:StorageAccount"
PlanFn = Callable[[str], Plan]


def data_account(plan: Plan) -> dict[str, Any]:
    return one(plan, ACCOUNT, "-objects-account").inputs


def files_account(plan: Plan) -> dict[str, Any]:
    return one(plan, ACCOUNT, "-shared-account").inputs


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_storage_accounts_follow_the_baseline(cloud_plan: PlanFn, stack: str) -> None:
    plan = cloud_plan(stack)
    # Each account on its own domain's key, through its own encryption identity (docs/security.md,
    # "Keys per data domain").
    for account, key, identity in (
        (data_account(plan), "storage-cmk", "-storage-encryption-uai"),
        (files_account(plan), "training-data-cmk", "-shared-encryption-uai"),
    ):
        assert account["minimumTlsVersion"] == "TLS1_2"
        assert account["allowBlobPublicAccess"] is False
        assert account["allowSharedKeyAccess"] is False
        assert account["allowCrossTenantReplication"] is False
        assert account["networkRuleSet"]["defaultAction"] == "Deny"
        encryption = account["encryption"]
        assert encryption["keySource"] == "Microsoft.Keyvault"
        assert encryption["keyVaultProperties"]["keyName"] == key
        assert "keyVersion" not in encryption["keyVaultProperties"]
        assert identity in encryption["encryptionIdentity"]["encryptionUserAssignedIdentity"]
        assert account["identity"]["type"] == "UserAssigned"
    assert data_account(plan)["enableHttpsTrafficOnly"] is True
    assert data_account(plan)["kind"] == "StorageV2"


def test_smb_data_account_lets_the_allow_list_through(cloud_plan: PlanFn) -> None:
    account = data_account(cloud_plan("azure-smb-dev"))
    assert account["publicNetworkAccess"] == "Enabled"
    assert account["networkRuleSet"]["ipRules"] == [{"iPAddressOrRange": "203.0.113.0/24", "action": "Allow"}]


def test_enterprise_data_account_is_private(cloud_plan: PlanFn) -> None:
    account = data_account(cloud_plan("azure-enterprise-prod"))
    assert account["publicNetworkAccess"] == "Disabled"
    assert account["networkRuleSet"]["ipRules"] == []


@pytest.mark.parametrize(
    ("stack", "sku"),
    [
        ("azure-smb-dev", "Standard_LRS"),
        ("azure-enterprise-dev", "Standard_ZRS"),
        ("azure-enterprise-prod", "Standard_GRS"),
    ],
)
def test_redundancy_maps_to_the_sku(cloud_plan: PlanFn, stack: str, sku: str) -> None:
    assert data_account(cloud_plan(stack))["sku"] == {"name": sku}


def test_geo_redundancy_only_to_a_pair_inside_the_residency() -> None:
    config = parse_stack_config(template("azure-enterprise-prod"), "test")
    assert blob_sku(config) == "Standard_GRS"
    outside = config.model_copy(update={"region": "westeurope"})
    with pytest.raises(pulumi.RunError, match="outside the uae residency"):
        blob_sku(outside)


def test_premium_zrs_only_where_offered() -> None:
    config = parse_stack_config(template("azure-enterprise-prod"), "test")
    assert files_sku(config) == "Premium_ZRS"
    with pytest.raises(pulumi.RunError, match="no zone redundancy in uaecentral"):
        files_sku(config.model_copy(update={"region": "uaecentral"}))


def test_storage_firewall_takes_single_addresses_for_tiny_ranges() -> None:
    assert storage_ip_rules(("198.51.100.7/32", "203.0.113.0/31", "192.0.2.0/24")) == [
        {"i_p_address_or_range": a, "action": "Allow"}
        for a in ("198.51.100.7", "203.0.113.0", "203.0.113.1", "192.0.2.0/24")
    ]


def test_blobs_are_versioned_and_recoverable(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-smb-dev")
    service = one(plan, "azure-native:storage:BlobServiceProperties", "-objects-blob-service").inputs
    assert service["isVersioningEnabled"] is True
    assert service["deleteRetentionPolicy"] == {"enabled": True, "days": 90.0}
    assert service["containerDeleteRetentionPolicy"] == {"enabled": True, "days": 90.0}
    rule = one(plan, "azure-native:storage:ManagementPolicy", "-objects-lifecycle").inputs["policy"]["rules"][
        0
    ]
    assert rule["definition"]["actions"] == {"version": {"delete": {"daysAfterCreationGreaterThan": 90.0}}}
    containers = {
        r.inputs["containerName"]: r.inputs for r in plan.by_type("azure-native:storage:BlobContainer")
    }
    assert sorted(containers) == ["datasets", "models", "registry"]
    assert all(c["publicAccess"] == "None" for c in containers.values())


def test_nfs_share_is_premium_private_and_sized_from_config(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-enterprise-prod")
    account = files_account(plan)
    assert (account["kind"], account["sku"]) == ("FileStorage", {"name": "Premium_ZRS"})
    assert account["enableHttpsTrafficOnly"] is True
    assert account["publicNetworkAccess"] == "Disabled"
    share = one(plan, "azure-native:storage:FileShare", "-shared-share").inputs
    assert (share["enabledProtocols"], share["shareQuota"], share["shareName"]) == ("NFS", 4096.0, "training")
    assert files_account(cloud_plan("azure-smb-dev"))["sku"] == {"name": "Premium_LRS"}


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_private_endpoints_with_dns(cloud_plan: PlanFn, stack: str) -> None:
    plan = cloud_plan(stack)
    endpoints = [
        (r.inputs["privateLinkServiceConnections"][0]["groupIds"][0], r.inputs)
        for r in plan.by_type("azure-native:network:PrivateEndpoint")
    ]
    # Two vaults: the stack's key vault (keys.py AzureKeys) and the image-signing key's, which cosign signs
    # through (keys.py ImageSigningKey). An audited stack's lifecycle record account has a blob endpoint of
    # its own, in the same blob zone: its writers in the cluster append through it (record.py); the audit
    # archive has none (only diagnostic settings write it).
    record = ["blob"] if parse_stack_config(template(stack), stack).audited else []
    groups = sorted(["blob", "file", "registry", "vault", "vault", *record])
    assert sorted(group for group, _ in endpoints) == groups
    assert all("-network-endpoints-subnet" in e["subnet"]["id"] for _, e in endpoints)
    zones = {r.inputs["privateZoneName"] for r in plan.by_type("azure-native:privatedns:PrivateZone")}
    assert {z for z in zones if z.startswith("privatelink.")} == {
        "privatelink.blob.core.windows.net",
        "privatelink.file.core.windows.net",
        "privatelink.azurecr.io",
        "privatelink.vaultcore.azure.net",
    }
    # And on enterprise the registry database's own zone (its private access, registry_database.py).
    postgres = {z for z in zones if z.endswith(".private.postgres.database.azure.com")}
    assert len(postgres) == (1 if "enterprise" in stack else 0)
    assert zones == {z for z in zones if z.startswith("privatelink.")} | postgres
    zone_groups = plan.by_type("azure-native:network:PrivateDnsZoneGroup")
    assert sorted(g.inputs["privateDnsZoneConfigs"][0]["name"] for g in zone_groups) == groups


def test_handle_storage_uris_and_csi_volume(cloud_plan: PlanFn) -> None:
    outputs = cloud_plan("azure-smb-dev").outputs
    account = outputs["storageAccount"]
    assert outputs["modelsUri"] == f"https://{account}.blob.core.windows.net/models"
    shared = outputs["sharedStorage"]
    assert shared["protocol"] == "nfs"
    assert shared["shareName"] == "training"
    assert shared["storageAccount"].startswith("mlpfiles")
    assert SharedStorageKind.AZURE_FILES_NFS.value == "azure-files-nfs"


def test_nfs_mounts_through_the_tls_tunnel_and_the_account_refuses_clear_mounts(cloud_plan: PlanFn) -> None:
    """Issue 35 / compliance T7: every Azure Files NFS volume sets the CSI driver's ``encryptInTransit``
    (kubernetes-sigs/azurefile-csi-driver docs/driver-parameters.md, v1.33.0 on: the node mounts through
    AZNFS's stunnel TLS tunnel). The account requires secure transfer, which Microsoft documents as what
    makes every NFS mount encrypted (MicrosoftDocs/azure-docs articles/storage/files/
    encryption-in-transit-for-nfs-shares.md, "Enforce encryption in transit"), and its file service
    requires encryption in transit for NFS (``protocolSettings.nfs.encryptionInTransit.required``,
    storage API 2025-01-01: Azure/bicep-types-az generated/storage/microsoft.storage/2025-01-01/types.md;
    azure-rest-api-specs stable/2025-01-01 examples/FileServicesPut_EncryptionInTransitRequired.json). The
    pinned provider's typed file service (2024-01-01) has SMB settings only, so an Incremental ARM template
    deployment sets it; when a provider upgrade adds ``nfs`` to the typed SDK this fails: move the setting
    to ``storage.FileServiceProperties``."""
    plan = cloud_plan("azure-enterprise-prod")
    # The share's CSI volume attributes, as every PersistentVolume carries them (tests/judges/
    # test_transport.py judges the planned volumes).
    assert plan.outputs["sharedStorage"]["encryptInTransit"] == "true"
    account = one(plan, ACCOUNT, "-shared-account")
    name = account.inputs["accountName"]
    assert account.inputs["enableHttpsTrafficOnly"] is True
    assert set(inspect.signature(storage.ProtocolSettingsArgs).parameters) == {"smb"}
    deployment = one(plan, "azure-native:resources:Deployment", "-shared-file-service")
    assert account.urn in deployment.dependencies
    # A fixed name: a second `pulumi up` finds the same deployment (day 2), not a new one.
    assert deployment.inputs["deploymentName"] == f"{name}-file-service"
    assert deployment.inputs["resourceGroupName"] == account.inputs["resourceGroupName"]
    properties = deployment.inputs["properties"]
    assert properties["mode"] == "Incremental"  # Complete would delete the rest of the resource group
    [service] = properties["template"]["resources"]
    assert service == {
        "type": "Microsoft.Storage/storageAccounts/fileServices",
        "apiVersion": "2025-01-01",
        "name": f"{name}/default",
        "properties": {
            # The PUT sets the whole properties object: share soft delete is stated, not dropped
            # (storage.noncurrentVersionDays, 90 in the template, as the blobs' own).
            "shareDeleteRetentionPolicy": {"enabled": True, "days": 90.0},
            "protocolSettings": {"nfs": {"encryptionInTransit": {"required": True}}},
        },
    }
    # One manager of the file service: no typed FileServiceProperties beside the template.
    assert not plan.by_type("azure-native:storage:FileServiceProperties")
    security = (Path(__file__).parents[3] / "docs" / "security.md").read_text()
    (row,) = [line for line in security.splitlines() if line.startswith("| `azure-files-nfs` |")]
    assert "private endpoint" in row and "encryptInTransit" in row and "encryptionInTransit.required" in row


def test_share_soft_delete_keeps_at_most_what_azure_keeps() -> None:
    """Share soft delete lasts ``storage.noncurrentVersionDays``, capped at 365 (storage API 2025-01-01
    ``DeleteRetentionPolicy.days`` {minValue: 1, maxValue: 365}, Azure/bicep-types-az types.md)."""
    config = parse_stack_config(template("azure-enterprise-prod"), "test")
    longer = config.model_copy(
        update={"storage": config.storage.model_copy(update={"noncurrent_version_days": 1000})}
    )
    [service] = file_service_template("mlpfilesx", longer)["resources"]
    assert service["properties"]["shareDeleteRetentionPolicy"] == {"enabled": True, "days": 365}
