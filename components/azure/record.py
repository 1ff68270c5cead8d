"""The model lifecycle record on Azure (workloads/registry/record.py, docs/lifecycle.md "The record"), as
AWS keeps it in an Object-Locked bucket (components/aws/storage.py):

- a storage account of its own, under the stack's object-data key, tagged ``lifecycle-record`` for the
  pack, made with version-level immutability support (``immutableStorageWithVersioning.enabled``, which
  only an account's creation can set), whose every blob version is immutable for ``audit.retentionDays``
  under a **locked** time-based policy from the first ``pulumi up`` on (no protected append writes:
  events are block blobs written once). A version under a locked time-based policy can be neither
  modified nor deleted by anyone until it expires, and the policy can then only be lengthened (Azure
  Storage, "Time-based retention policies for immutable blob data");
- the lock, ``az storage account update`` (``lock_command``): Azure creates such a policy only Disabled
  or Unlocked and locks it only on a later update ("A policy can only be created in a Disabled or
  Unlocked state ... Only a policy in an Unlocked state can transition to a Locked state which cannot be
  reverted": azure-native ``AccountImmutabilityPolicyProperties.state``; azure-cli's ``storage account
  update --immutability-state``), so the account declares the support alone and this command, run by
  the first ``pulumi up`` right after the account and before the container, sets the policy and locks
  it. Neither input depends on what exists: a second plan is a no-op; a longer ``audit.retentionDays``
  changes the command, which runs again and extends the lock; a shorter one stops the preview;
- one container, ``lifecycle-record``, the record's root (``azblob://ACCOUNT/lifecycle-record``),
  created once the lock holds;
- a custom role, the record's writer: create a blob, read blobs and the container's properties, nothing
  else. ``blobs/add/action`` is "Create a blob or snapshot, or append data" and cannot replace a blob,
  which needs ``blobs/write``; no ``blobs/delete`` (Azure Storage, "Actions and attributes for Azure role
  assignment conditions for Azure Blob Storage"). Storage Blob Data Contributor carries write and delete
  and is too wide. The rollout's and the drift monitor's federated identities hold it on the account;
  the people who approve and promote are given it by their group (the export ``lifecycleRecordWriterRole``).
"""

from __future__ import annotations

import shlex

import pulumi
from pulumi_azure_native import storage
from pulumi_command import local

from components.azure import naming
from components.azure.arm import arm_reader
from components.azure.audit import LOCKED, existing_account, refuse_shorter_retention
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
        what = "lifecycle record"
        with arm_reader() as arm:
            found = existing_account(arm, resource_group, account_name, what)
        if found is not None:
            refuse_shorter_retention(found, config.audit.retention_days, account_name, what)
        account = storage.StorageAccount(
            f"{name}-account",
            account_name=account_name,
            kind="StorageV2",
            sku={"name": blob_sku(config)},
            enable_https_traffic_only=True,
            # The support only: the policy is the lock command's (declared here, it would have to say
            # Unlocked at creation and Locked after: a change on the second plan).
            immutable_storage_with_versioning={"enabled": True},
            # People append from where they reach the registry: the public endpoint only where the stack
            # has one (its allow-list), as the data account's; the cluster through the private endpoint.
            **hardened_account(scope, args.encryption_identity, args.key, public=scope.public_endpoints),
            resource_group_name=scope.resource_group_name,
            location=scope.location,
            tags={**scope.tags, AZURE_ROLE_TAG: LIFECYCLE_RECORD_ROLE},
            opts=scope.opts(self, data=True, depends_on=[args.encryption_identity.ready]),
        )
        versioned_blob_service(self, name, scope, account)
        locking = lock_command(
            scope.deployer.subscription_id, resource_group, account_name, config.audit.retention_days
        )
        lock = local.Command(
            f"{name}-immutability-lock",
            create=locking,
            # A new period changes the line: an update, which runs it again (extends the lock).
            update=locking,
            # Nothing on delete: no one can remove a locked policy.
            opts=scope.opts(self, depends_on=[account]),
        )
        container = storage.BlobContainer(
            f"{name}-container",
            resource_group_name=scope.resource_group_name,
            account_name=account.name,
            container_name=RECORD_CONTAINER,
            public_access="None",
            opts=scope.opts(self, data=True, depends_on=[lock]),
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


def lock_command(subscription_id: str, resource_group: str, account: str, retention_days: int) -> str:
    """The shell command that gives ``account`` its time-based policy of ``retention_days`` and locks it.

    A policy not yet locked is set Unlocked first (the only state Azure creates one in; no protected
    append writes), then Locked; a locked one is only set Locked again with ``retention_days``, which
    extends it (the preview refused a shorter one: ``refuse_shorter_retention``). So it is safe to run on
    an account any earlier release locked. The last ``az`` call fails the command unless Azure took it.
    """
    common = ["--subscription", subscription_id, "--resource-group", resource_group, "--name", account]
    state = ["az", "storage", "account", "show", *common, "--output", "tsv"]
    state += ["--query", "immutableStorageWithVersioning.immutabilityPolicy.state"]
    update = ["az", "storage", "account", "update", *common, "--output", "none"]
    period = ["--immutability-period", str(retention_days)]
    create = [*update, *period, "--immutability-state", "Unlocked"]
    create += ["--allow-protected-append-writes", "false"]
    locked = [*update, *period, "--immutability-state", LOCKED]
    return (
        f'state=$({shlex.join(state)}) && {{ [ "$state" = {LOCKED} ] || {shlex.join(create)}; }} && '
        f"{shlex.join(locked)}"
    )


def record_store(uri: str, vnet_cidr: str) -> RecordStore:
    """The record as the writers in the cluster reach it: the blob private endpoint in the endpoints'
    subnet and Entra ID's token exchange over public HTTPS (as the registry reaches its store,
    registry_store.py); the account is named in the URI, so no client environment."""
    plan = subnet_plan(vnet_cidr)
    return RecordStore(
        uri, (Peer("record-private-endpoint", plan.endpoints, 443), Peer("entra-id", PUBLIC_NETWORK, 443))
    )
