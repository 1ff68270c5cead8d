"""Object storage for datasets and model artifacts: one StorageV2 account, three blob containers.

The account follows the storage baseline (REFERENCE.md): customer-managed key through a user-assigned
identity, HTTPS only with TLS 1.2, no public blob access, no shared-key (account key or SAS) auth so every
request is an Entra ID principal, network default Deny, and a private endpoint for the cluster. Deleted
blobs and containers stay recoverable and every overwrite keeps the previous version, for
``storage.noncurrentVersionDays`` days.

The datasets are a data domain of their own (issue 35 item 3; review rev35f A6): their container's
default encryption scope is under the datasets key, not the account's, and no blob may name another scope
("Encryption scopes for Blob storage": a container's default scope, with overrides denied, applies to
every blob written to it). A scope under a customer key needs the account's managed identity to use that
key and a vault with purge protection, in the account's region ("Create and manage encryption scopes");
the scope omits the key version, so it follows the key's rotation as the account does. Both container
settings are taken at creation only (Azure/azure-cli pull requests 26948 and 27791 removed them from
``az storage container-rm update``; Terraform's ``azurerm_storage_container`` marks them ForceNew), so a
stack whose ``datasets`` container exists without the scope keeps it on the account's key until it
migrates (``storage.onStackKey``; key_moves.py refuses the update that would replace it).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import storage

from components.azure import naming
from components.azure.identity import EncryptionIdentity
from components.azure.keys import KeyRef
from components.azure.private_endpoint import PrivateEndpoint, PrivateEndpointArgs
from components.azure.propagation import propagated
from components.azure.roles import grant_key_use
from components.azure.scope import AzureScope
from components.config import RESIDENCY_REGIONS, PlatformConfig, Redundancy
from components.handle import Cloud

# "registry": the model registry's artifacts (components/azure/registry_store.py).
DATASETS_CONTAINER = "datasets"
CONTAINERS = (DATASETS_CONTAINER, "models", "registry")
MODELS_CONTAINER = "models"
# The datasets container's default encryption scope, under the datasets key (key_moves.py reads it back).
DATASETS_SCOPE = "datasets"
# Azure region pairs: GRS replicates to the pair (REFERENCE.md, Azure region-pairs table).
REGION_PAIRS = {"uaenorth": "uaecentral", "uaecentral": "uaenorth"}
# Blob, container and file share soft delete keep deletions for 1-365 days (Azure blob soft delete docs;
# storage API 2025-01-01 ``DeleteRetentionPolicy.days`` {minValue: 1, maxValue: 365}, Azure/bicep-types-az
# generated/storage/microsoft.storage/2025-01-01/types.md).
_MAX_SOFT_DELETE_DAYS = 365


def objects_account_name(suffix: str) -> str:
    """The objects account's name (datasets, models, the registry's artifacts)."""
    return naming.storage_account_name("data", suffix)


def blob_sku(config: PlatformConfig) -> str:
    """The account SKU for ``storage.redundancy``; geo only where the paired region is in the residency."""
    if config.storage.redundancy is Redundancy.GEO:
        pair = REGION_PAIRS.get(config.region)
        allowed = RESIDENCY_REGIONS[config.residency][Cloud.AZURE]
        if pair not in allowed:
            raise pulumi.RunError(
                f"storage.redundancy geo would replicate {config.region} to {pair or 'an unknown pair'}, "
                f"outside the {config.residency.value} residency ({', '.join(allowed)})"
            )
        return "Standard_GRS"
    return {Redundancy.LOCAL: "Standard_LRS", Redundancy.ZONE: "Standard_ZRS"}[config.storage.redundancy]


def storage_ip_rules(cidrs: tuple[str, ...]) -> list[dict[str, str]]:
    """Storage firewall rules: /31 and /32 ranges are refused there and must be listed as addresses
    (Azure Storage network security docs)."""
    addresses: list[str] = []
    for cidr in cidrs:
        network = ipaddress.ip_network(cidr)
        addresses += [str(a) for a in network] if network.prefixlen >= 31 else [str(network)]
    return [{"i_p_address_or_range": address, "action": "Allow"} for address in addresses]


def hardened_account(
    scope: AzureScope, identity: EncryptionIdentity, key: KeyRef, *, public: bool
) -> dict[str, Any]:
    """Settings every storage account here shares: CMK, Entra-only auth, TLS 1.2, firewall default Deny.

    ``public`` keeps the public endpoint for the allow-list; otherwise only private endpoints reach it.
    """
    return {
        "identity": {"type": "UserAssigned", "user_assigned_identities": [identity.identity_id]},
        "encryption": {
            "key_source": "Microsoft.Keyvault",
            # No key version: the account follows the key's rotation within a day (Storage CMK docs).
            "key_vault_properties": {"key_vault_uri": key.vault_uri, "key_name": key.name},
            "encryption_identity": {"encryption_user_assigned_identity": identity.identity_id},
        },
        "minimum_tls_version": "TLS1_2",
        "allow_blob_public_access": False,
        "allow_shared_key_access": False,
        "default_to_o_auth_authentication": True,
        "allow_cross_tenant_replication": False,
        "public_network_access": "Enabled" if public else "Disabled",
        "network_rule_set": {
            "default_action": "Deny",
            "bypass": "AzureServices",
            "ip_rules": storage_ip_rules(scope.allow_list) if public else [],
        },
    }


def soft_delete_retention(config: PlatformConfig) -> dict[str, Any]:
    """How long a deleted blob, container or file share stays recoverable: ``storage.noncurrentVersionDays``,
    at most what Azure keeps (a year)."""
    return {"enabled": True, "days": min(config.storage.noncurrent_version_days, _MAX_SOFT_DELETE_DAYS)}


def versioned_blob_service(
    parent: pulumi.Resource,
    name: str,
    scope: AzureScope,
    account: storage.StorageAccount,
    **policies: pulumi.Input[Any],
) -> storage.BlobServiceProperties:
    """The account's blob service with versioning on (every store of the stack keeps its blobs' versions),
    and ``policies`` (soft-delete retention) where the store has them."""
    return storage.BlobServiceProperties(
        f"{name}-blob-service",
        resource_group_name=scope.resource_group_name,
        account_name=account.name,
        blob_services_name="default",
        is_versioning_enabled=True,
        **policies,
        opts=scope.opts(parent),
    )


@dataclass(frozen=True)
class ObjectStorageArgs:
    scope: AzureScope
    encryption_identity: EncryptionIdentity
    key: KeyRef
    endpoint_subnet_id: pulumi.Input[str]
    blob_dns_zone_id: pulumi.Input[str]
    # The datasets' own key; None keeps them on the account's (``storage.onStackKey`` lists datasets).
    datasets_key: KeyRef | None = None


class ObjectStorage(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: ObjectStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:azure:ObjectStorage", name, None, opts)
        scope = args.scope
        self.account_name = objects_account_name(scope.name_suffix)
        account = storage.StorageAccount(
            f"{name}-account",
            account_name=self.account_name,
            kind="StorageV2",
            sku={"name": blob_sku(scope.config)},
            enable_https_traffic_only=True,
            **hardened_account(scope, args.encryption_identity, args.key, public=scope.public_endpoints),
            **scope.placed,
            # The account reads its key while being created: the identity's grant must exist first.
            opts=scope.opts(self, data=True, depends_on=[args.encryption_identity.ready]),
        )
        self.account_id: pulumi.Output[str] = account.id
        self._protect_blobs(name, scope, account)
        datasets_scope = (
            self._datasets_scope(name, args, account, args.datasets_key)
            if args.datasets_key is not None
            else None
        )
        self.container_ids: dict[str, pulumi.Output[str]] = {
            container: self._container(
                name, scope, account, container, datasets_scope if container == DATASETS_CONTAINER else None
            ).id
            for container in CONTAINERS
        }
        PrivateEndpoint(
            f"{name}-blob",
            PrivateEndpointArgs(scope, args.endpoint_subnet_id, account.id, "blob", args.blob_dns_zone_id),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.models_uri = f"https://{self.account_name}.blob.core.windows.net/{MODELS_CONTAINER}"
        self.register_outputs({"accountId": account.id, "modelsUri": self.models_uri})

    def _container(
        self,
        name: str,
        scope: AzureScope,
        account: storage.StorageAccount,
        container: str,
        only_scope: storage.EncryptionScope | None,
    ) -> storage.BlobContainer:
        """A private container; with ``only_scope``, made once that scope is, with it as its default and no
        blob allowed another (both taken at creation only: the module docstring)."""
        encrypted = (
            {"default_encryption_scope": DATASETS_SCOPE, "deny_encryption_scope_override": True}
            if only_scope is not None
            else {}
        )
        return storage.BlobContainer(
            f"{name}-{container}",
            resource_group_name=scope.resource_group_name,
            account_name=account.name,
            container_name=container,
            public_access="None",
            **encrypted,
            opts=scope.opts(self, data=True, depends_on=[only_scope] if only_scope is not None else ()),
        )

    def _datasets_scope(
        self, name: str, args: ObjectStorageArgs, account: storage.StorageAccount, key: KeyRef
    ) -> storage.EncryptionScope:
        """The encryption scope under the datasets key. The account encrypts with its identity (the
        account's only one), so that identity is given use of this key too, and the scope waits for the
        grant to propagate; infrastructure encryption as the account has it (a scope of an account with it
        on has it regardless, "Create and manage encryption scopes")."""
        scope = args.scope
        grant = grant_key_use(
            f"{name}-datasets-key-user", scope, args.encryption_identity.principal_id, key.key_id, self
        )
        return storage.EncryptionScope(
            f"{name}-datasets-scope",
            resource_group_name=scope.resource_group_name,
            account_name=account.name,
            encryption_scope_name=DATASETS_SCOPE,
            source="Microsoft.KeyVault",
            # The versionless key URI: the scope follows the key's rotation.
            key_vault_properties={"key_uri": key.key_uri},
            require_infrastructure_encryption=account.encryption.apply(
                lambda encryption: bool(encryption and encryption.require_infrastructure_encryption)
            ),
            state="Enabled",
            opts=scope.opts(
                self, data=True, depends_on=[propagated(f"{name}-datasets", scope, [grant], self)]
            ),
        )

    def _protect_blobs(self, name: str, scope: AzureScope, account: storage.StorageAccount) -> None:
        days = scope.config.storage.noncurrent_version_days
        retention = soft_delete_retention(scope.config)
        versioned_blob_service(
            self,
            name,
            scope,
            account,
            delete_retention_policy=retention,
            container_delete_retention_policy=retention,
        )
        # Versions are kept for recovery, not forever: expire them after the configured days.
        storage.ManagementPolicy(
            f"{name}-lifecycle",
            resource_group_name=scope.resource_group_name,
            account_name=account.name,
            management_policy_name="default",
            policy={
                "rules": [
                    {
                        "name": "expire-noncurrent-versions",
                        "type": "Lifecycle",
                        "enabled": True,
                        "definition": {
                            "filters": {"blob_types": ["blockBlob"]},
                            "actions": {"version": {"delete": {"days_after_creation_greater_than": days}}},
                        },
                    }
                ]
            },
            opts=scope.opts(self),
        )
