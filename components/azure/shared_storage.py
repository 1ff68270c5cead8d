"""Shared training storage: an Azure Files NFS 4.1 share every training pod mounts read-write.

Checkpoints are written to a temp file and renamed into place; NFS gives that rename, a blob mount does
not (REFERENCE.md). NFS shares need a premium FileStorage account. NFS 4.1 has no encryption of its own:
every volume mounts with the driver's ``encryptInTransit`` (``ENCRYPT_IN_TRANSIT``), so the node mounts
through the AZNFS mount helper's TLS tunnel (stunnel verifying the DigiCert Global Root G2 chain and the
name ``*.file.core.windows.net``: Azure/AZNFS-mount src/nfsv4mountscript.sh, lib/common.sh
``get_check_host_value``). The account still does not require secure transfer: the driver itself turns it
off for NFS "even though encryptInTransit is enabled" (azurefile-csi-driver pkg/azurefile/
controllerserver.go), and the server-side requirement (``protocolSettings.nfs.encryptionInTransit``,
storage API 2025-01-01) is not in the pinned provider's typed SDK (2024-01-01): it needs a local SDK the
Pulumi CLI generates (``pulumi package add azure-native storage 2025-01-01``), so it is not set; the
account has no public endpoint at all and is reached only through the private endpoint in the cluster's
VNet, and that remainder is the documented exception ``azure-files-nfs`` (docs/security.md, "The
exceptions", "The share's server-side requirement"). At rest it is encrypted with the storage
customer-managed key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import storage

from components.azure import naming
from components.azure.identity import EncryptionIdentity
from components.azure.keys import KeyRef
from components.azure.private_endpoint import PrivateEndpoint, PrivateEndpointArgs
from components.azure.scope import AzureScope
from components.azure.storage import hardened_account
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
            # The driver mounts NFS only with secure transfer off, encryptInTransit or not; the account is
            # private-endpoint-only instead (module doc).
            enable_https_traffic_only=False,
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
