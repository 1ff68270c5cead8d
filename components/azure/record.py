"""The model lifecycle record on Azure (workloads/registry/record.py, docs/lifecycle.md "The record"), as
AWS keeps it in an Object-Locked bucket (components/aws/storage.py):

- a storage account of its own, under the stack's object-data key, tagged ``lifecycle-record`` for the
  pack, whose every blob version is immutable for ``audit.retentionDays`` (account-level version-level
  immutability, a time-based policy locked from the second ``pulumi up`` on, as the audit archive's,
  audit.py; no protected append writes: events are block blobs written once). A version under a locked
  time-based policy can be neither modified nor deleted by anyone until it expires (Azure Storage,
  "Time-based retention policies for immutable blob data");
- one container, ``lifecycle-record``, the record's root (``azblob://ACCOUNT/lifecycle-record``);
- a custom role, the record's writer: create a blob, read blobs and the container's properties, nothing
  else. ``blobs/add/action`` is "Create a blob or snapshot, or append data" and cannot replace a blob,
  which needs ``blobs/write``; no ``blobs/delete`` (Azure Storage, "Actions and attributes for Azure role
  assignment conditions for Azure Blob Storage"). Storage Blob Data Contributor carries write and delete
  and is too wide. The rollout's and the drift monitor's federated identities hold it on the account;
  the people who approve and promote are given it by their group (the export ``lifecycleRecordWriterRole``).
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import storage

from components.azure import naming
from components.azure.arm import arm_reader
from components.azure.audit import archive_state, immutability
from components.azure.network import subnet_plan
from components.azure.private_endpoint import PrivateEndpoint, PrivateEndpointArgs
from components.azure.roles import custom_role
from components.azure.storage import ObjectStorageArgs, blob_sku, hardened_account, versioned_blob_service
from components.config import AZURE_ROLE_TAG, PROJECT
from components.handle import PUBLIC_NETWORK, Peer, RecordStore

# The record's account, by its role tag: the pack's ``lifecycle-record-locked`` finds it so
# (policies/mlplatform_policies/settings.py, as AWS's bucket: components/aws/storage.py).
LIFECYCLE_RECORD_ROLE = "lifecycle-record"
RECORD_CONTAINER = "lifecycle-record"
_BLOBS = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
# What the writer may do: Get Container Properties (the writer refuses a container without immutability)
# is the container read action; List Blobs and Get Blob are blobs/read; Put Blob of a new blob is
# blobs/add/action (Azure Storage REST API, "Authorize with Microsoft Entra ID", permissions for Blob
# service operations).
RECORD_WRITER_ACTIONS = ("Microsoft.Storage/storageAccounts/blobServices/containers/read",)
RECORD_WRITER_DATA_ACTIONS = (f"{_BLOBS}/read", f"{_BLOBS}/add/action")


class LifecycleRecord(pulumi.ComponentResource):
    """The immutable record account, its container and the writer role."""

    def __init__(
        self, name: str, args: ObjectStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:azure:LifecycleRecord", name, None, opts)
        scope = args.scope
        config = scope.config
        account_name = naming.storage_account_name("record", scope.name_suffix)
        resource_group = f"{PROJECT}-{config.stack_name}"
        with arm_reader() as arm:
            state = archive_state(
                arm, resource_group, account_name, config.audit.retention_days, what="lifecycle record"
            )
        account = storage.StorageAccount(
            f"{name}-account",
            account_name=account_name,
            kind="StorageV2",
            sku={"name": blob_sku(config)},
            enable_https_traffic_only=True,
            immutable_storage_with_versioning=immutability(
                config.audit.retention_days, state, append_writes=False
            ),
            # People append from where they reach the registry: the public endpoint only where the stack
            # has one (its allow-list), as the data account's; the cluster through the private endpoint.
            **hardened_account(scope, args.encryption_identity, args.key, public=scope.public_endpoints),
            resource_group_name=scope.resource_group_name,
            location=scope.location,
            tags={**scope.tags, AZURE_ROLE_TAG: LIFECYCLE_RECORD_ROLE},
            opts=scope.opts(self, data=True, depends_on=[args.encryption_identity.ready]),
        )
        versioned_blob_service(self, name, scope, account)
        container = storage.BlobContainer(
            f"{name}-container",
            resource_group_name=scope.resource_group_name,
            account_name=account.name,
            container_name=RECORD_CONTAINER,
            public_access="None",
            opts=scope.opts(self, data=True),
        )
        PrivateEndpoint(
            f"{name}-blob",
            PrivateEndpointArgs(scope, args.endpoint_subnet_id, account.id, "blob", args.blob_dns_zone_id),
            opts=pulumi.ResourceOptions(parent=self),
        )
        writer_role = custom_role(
            f"{name}-writer",
            scope,
            role_name=f"{PROJECT}-{config.stack_name}-lifecycle-record-writer",
            description="Append to and read the model lifecycle record; no overwrite, no delete",
            # Each assignment is on the record's account.
            permissions={
                "actions": list(RECORD_WRITER_ACTIONS),
                "data_actions": list(RECORD_WRITER_DATA_ACTIONS),
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.account_id: pulumi.Output[str] = account.id
        self.container_id: pulumi.Output[str] = container.id
        self.writer_role_id = writer_role
        # Where the record is written and read (``--record``, ``$MLPLATFORM_RECORD``).
        self.uri = f"azblob://{account_name}/{RECORD_CONTAINER}"
        self.register_outputs({"accountId": account.id, "uri": self.uri, "writerRole": writer_role})


def record_store(uri: str, vnet_cidr: str) -> RecordStore:
    """The record as the writers in the cluster reach it: the blob private endpoint in the endpoints'
    subnet and Entra ID's token exchange over public HTTPS (as the registry reaches its store,
    registry_store.py); the account is named in the URI, so no client environment."""
    plan = subnet_plan(vnet_cidr)
    return RecordStore(
        uri, (Peer("record-private-endpoint", plan.endpoints, 443), Peer("entra-id", PUBLIC_NETWORK, 443))
    )
