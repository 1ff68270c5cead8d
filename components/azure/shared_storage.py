"""Shared training storage: an Azure Files NFS 4.1 share every training pod mounts read-write.

Checkpoints are written to a temp file and renamed into place; NFS gives that rename, a blob mount does
not (REFERENCE.md). NFS shares need a premium FileStorage account. NFS 4.1 has no encryption of its own:
every volume mounts with the driver's ``encryptInTransit`` (``ENCRYPT_IN_TRANSIT``), so the node mounts
through the AZNFS mount helper's TLS tunnel (stunnel verifying the DigiCert Global Root G2 chain and the
name ``*.file.core.windows.net``: Azure/AZNFS-mount src/nfsv4mountscript.sh, lib/common.sh
``get_check_host_value``). The share's server side refuses clear mounts, by two settings: the account
requires secure transfer (``enableHttpsTrafficOnly``), which Microsoft documents as what makes every NFS
mount of the account's shares encrypted ("Encryption in transit for NFS Azure file shares", "Enforce
encryption in transit": MicrosoftDocs/azure-docs articles/storage/files/encryption-in-transit-for-nfs-
shares.md, 2025-06-27), and its file service requires encryption in transit for NFS
(``protocolSettings.nfs.encryptionInTransit.required``), a setting of storage API 2025-01-01 that the pinned
provider's typed ``storage.FileServiceProperties`` (2024-01-01) lacks, so the program sets it through an
ARM template deployment (``file_service_template``). (The CSI driver turns secure transfer off only on
accounts it creates itself, dynamic provisioning: pkg/azurefile/controllerserver.go; these volumes are
static, on this account.) The account
has no public endpoint at all and is reached only through the private endpoint in the cluster's VNet.
What stays excepted is docs/security.md's ``azure-files-nfs`` ("The exceptions"). At rest it is encrypted
with the training data's customer-managed key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi_azure_native import resources, storage

from components.azure import naming
from components.azure.identity import EncryptionIdentity
from components.azure.keys import KeyRef
from components.azure.private_endpoint import PrivateEndpoint, PrivateEndpointArgs
from components.azure.scope import AzureScope
from components.azure.storage import hardened_account, soft_delete_retention
from components.config import PlatformConfig, Redundancy
from components.handle import PosixOwner, SharedStorage, SharedStorageKind, Store

CSI_DRIVER = "file.csi.azure.com"
SHARE_NAME = "training"
# Recommended NFS mount option for Azure Files on AKS (AKS troubleshooting, "Use mountOptions settings
# in Azure Files"): several TCP connections per mount.
MOUNT_OPTIONS = ("nconnect=4",)
# The driver's volume attribute (and StorageClass parameter) for NFS encryption in transit: the node
# mounts with ``-t aznfs`` (AZNFS's stunnel TLS tunnel) instead of plain NFS; from driver v1.33.0
# (kubernetes-sigs/azurefile-csi-driver docs/driver-parameters.md ``volumeAttributes.encryptInTransit``,
# pkg/azurefile/nodeserver.go; learn.microsoft.com/azure/storage/files/encryption-in-transit-for-nfs-shares).
ENCRYPT_IN_TRANSIT = {"encryptInTransit": "true"}
# The volumes' source revision (SharedStorage.source_revision): the first volumes mounted in clear; those
# mounting through the TLS tunnel are new ones, so an existing stack's update moves to them.
SOURCE_REVISION = "tls"
# The driver chmods an NFS share's mount root to ``mountPermissions``, 0777 unless a volume says
# otherwise (azurefile-csi-driver docs/driver-parameters.md, "mountPermissions"); the root stays root's.
MOUNT_ROOT = PosixOwner(0, 0, 0o777)
# Premium (SSD) file shares with ZRS are offered in a listed subset of regions; uaenorth is on the list,
# uaecentral is not (learn.microsoft.com/azure/storage/files/redundancy-premium-file-shares).
_PREMIUM_ZRS_REGIONS = frozenset({"uaenorth"})
# A store a workload owns alone is a share of its own (NFS shares have no access points): the smallest
# premium share, 100 GiB (Azure Files docs, "Understand Azure Files billing", provisioned v1: "the
# minimum size is 100 GiB").
STORE_QUOTA_GIB = 100
# The file service's NFS setting exists from storage API 2025-01-01: ``ProtocolSettings.nfs`` →
# ``NfsSetting.encryptionInTransit`` → ``EncryptionInTransit.required: bool`` ("Indicates whether
# encryption in transit is required"; Azure/bicep-types-az generated/storage/microsoft.storage/2025-01-01/
# types.md; Azure/azure-rest-api-specs specification/storage/resource-manager/Microsoft.Storage/stable/
# 2025-01-01/examples/FileServicesPut_EncryptionInTransitRequired.json). pulumi-azure-native 3.29.0's typed
# ``storage.FileServiceProperties`` is 2024-01-01 (SMB settings only; other versions need ``pulumi package
# add``), so an ARM template deployment, which takes any published API version of a type, carries it.
FILE_SERVICE_API_VERSION = "2025-01-01"
FILE_SERVICE_TYPE = "Microsoft.Storage/storageAccounts/fileServices"
# ARM's resource-group deployment template schema (Azure Resource Manager, "Understand the structure and
# syntax of ARM templates").
TEMPLATE_SCHEMA = "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#"


def file_service_template(account_name: str, config: PlatformConfig) -> dict[str, Any]:
    """The ARM template of the account's file service: NFS encryption in transit required, and share
    soft delete for ``storage.noncurrentVersionDays``. A PUT of ``fileServices/default``
    (FileServices_SetServiceProperties) sets the whole properties object, so the template carries every
    file-service property the stack wants: CORS stays unset (none: NFS shares serve no browser), SMB
    settings are moot on an NFS-only account."""
    return {
        "$schema": TEMPLATE_SCHEMA,
        "contentVersion": "1.0.0.0",
        "resources": [
            {
                "type": FILE_SERVICE_TYPE,
                "apiVersion": FILE_SERVICE_API_VERSION,
                "name": f"{account_name}/default",
                "properties": {
                    "shareDeleteRetentionPolicy": soft_delete_retention(config),
                    "protocolSettings": {"nfs": {"encryptionInTransit": {"required": True}}},
                },
            }
        ],
    }


def files_sku(config: PlatformConfig) -> str:
    """Premium files have LRS and ZRS only; ``geo`` gets ZRS, the most a premium share offers."""
    if config.storage.redundancy is Redundancy.LOCAL:
        return "Premium_LRS"
    if config.region not in _PREMIUM_ZRS_REGIONS:
        raise pulumi.RunError(
            f"premium file shares have no zone redundancy in {config.region}; set storage.redundancy: local "
            "or storage.shared: none"
        )
    return "Premium_ZRS"


@dataclass(frozen=True)
class SharedFileStorageArgs:
    scope: AzureScope
    encryption_identity: EncryptionIdentity
    key: KeyRef
    endpoint_subnet_id: pulumi.Input[str]
    file_dns_zone_id: pulumi.Input[str]
    # Workloads that own a store alone, namespace -> share name (SharedStorage.stores).
    stores: Mapping[str, str] = field(default_factory=dict)


class SharedFileStorage(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: SharedFileStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:azure:SharedFileStorage", name, None, opts)
        scope = args.scope
        account_name = naming.storage_account_name("files", scope.name_suffix)
        account = storage.StorageAccount(
            f"{name}-account",
            account_name=account_name,
            kind="FileStorage",
            sku={"name": files_sku(scope.config)},
            # Secure transfer required: every NFS mount must be encrypted in transit (module doc). An update
            # in place (StorageAccounts_Update takes supportsHttpsTrafficOnly), no replacement.
            enable_https_traffic_only=True,
            **hardened_account(scope, args.encryption_identity, args.key, public=False),
            **scope.placed,
            opts=scope.opts(self, data=True, depends_on=[args.encryption_identity.ready]),
        )
        capacity = scope.config.storage.shared_capacity_gib

        def share(label: str, share_name: str, quota: int) -> storage.FileShare:
            return storage.FileShare(
                label,
                resource_group_name=scope.resource_group_name,
                account_name=account.name,
                share_name=share_name,
                enabled_protocols="NFS",
                share_quota=quota,
                # The CSI driver chmods the mount root after mounting (mountPermissions, default 0777) so
                # the non-root trainer can write; root squash would turn that chmod into a permission error.
                root_squash="NoRootSquash",
                opts=scope.opts(self, data=True),
            )

        def csi(share_name: str) -> dict[str, object]:
            return {
                "driver": CSI_DRIVER,
                # Any string unique in the cluster; the driver refuses "#" in a self-chosen handle
                # (azurefile-csi-driver deploy/example/pv-azurefile-nfs.yaml).
                "volumeHandle": f"{account_name}-{share_name}",
                "volumeAttributes": {
                    "resourceGroup": scope.resource_group_name,
                    "storageAccount": account_name,
                    "shareName": share_name,
                    "protocol": "nfs",
                    **ENCRYPT_IN_TRANSIT,
                },
            }

        # One manager of the file service (nothing else here sets it); a stable deployment name, so a second
        # plan is the same deployment. Incremental: nothing else in the resource group is touched.
        resources.Deployment(
            f"{name}-file-service",
            resource_group_name=scope.resource_group_name,
            deployment_name=f"{account_name}-file-service",
            properties={"mode": "Incremental", "template": file_service_template(account_name, scope.config)},
            tags=scope.tags,
            opts=scope.opts(self, depends_on=[account]),
        )
        training = share(f"{name}-share", SHARE_NAME, capacity)
        stores = {}
        for namespace, share_name in sorted(args.stores.items()):
            share(f"{name}-{share_name}", share_name, STORE_QUOTA_GIB)
            stores[namespace] = Store(share_name, csi(share_name))
        PrivateEndpoint(
            f"{name}-file",
            PrivateEndpointArgs(scope, args.endpoint_subnet_id, account.id, "file", args.file_dns_zone_id),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.account_id: pulumi.Output[str] = account.id
        self.shared = SharedStorage(
            kind=SharedStorageKind.AZURE_FILES_NFS,
            csi=csi(SHARE_NAME),
            capacity_gib=capacity,
            mount_options=MOUNT_OPTIONS,
            owner=MOUNT_ROOT,
            stores=stores,
            source_revision=SOURCE_REVISION,
        )
        self.register_outputs({"accountId": account.id, "shareId": training.id})
