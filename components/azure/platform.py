"""The Azure adapter: one stack's resource group, network, keys, storage, AKS cluster, pools and registry,
handed back as a ``ClusterHandle``.

Order matters only where Azure reads something at creation: keys and their grants before the encrypted
services, the disk encryption set's grant before the cluster, the cluster's OIDC issuer before the
federated credentials. Everything else follows from the outputs passed along.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi_azure_native import authorization, resources

from components.azure import naming
from components.azure.access import PeopleAccess, PeopleAccessArgs
from components.azure.audit import AuditArchive, AuditArchiveArgs
from components.azure.budget import monthly_budget
from components.azure.cluster import AksCluster, ClusterArgs, SecretsEncryption
from components.azure.diagnostics import archived_logs, audit_logs, service_id
from components.azure.features import require_features
from components.azure.identity import (
    EncryptionIdentity,
    EncryptionIdentityArgs,
    FederatedIdentity,
    FederatedIdentityArgs,
    Grant,
)
from components.azure.key_moves import refuse_silent_key_moves
from components.azure.keys import AzureKeys, ImageSigningKey, KeysArgs, SigningKeyArgs
from components.azure.network import (
    BLOB_ZONE,
    FILE_ZONE,
    REGISTRY_ZONE,
    VAULT_ZONE,
    AzureNetwork,
    NetworkArgs,
    workload_egress,
)
from components.azure.node_pools import (
    NodePools,
    NodePoolsArgs,
    gpu_node_os,
    pool_handle,
    pools_summary,
    system_pool_profile,
    warn_system_pool_drift,
)
from components.azure.record import LifecycleRecord, record_store
from components.azure.registry import AzureRegistry, RegistryArgs
from components.azure.registry_database import AzureRegistryDatabase, RegistryDatabaseArgs
from components.azure.registry_store import REGISTRY_CONTAINER, registry_backend
from components.azure.roles import BuiltInRole
from components.azure.scope import AzureScope, Deployer
from components.azure.shared_storage import SharedFileStorage, SharedFileStorageArgs
from components.azure.storage import DATASETS_CONTAINER, ObjectStorage, ObjectStorageArgs
from components.azure.versions import require_version
from components.azure.zones import require_zones
from components.config import PROJECT, EndpointAccess, KeyDomain, PlatformConfig, shared_stores
from components.handle import (
    API_SERVER_PEER,
    API_SERVER_PORT,
    IMAGE_VERIFIER,
    IMAGE_VERIFIER_KEY,
    PUBLIC_NETWORK,
    RECORD_WRITERS,
    WORKLOAD_IDENTITIES,
    Cloud,
    ClusterHandle,
    Peer,
    SharedStorageKind,
    StorageHandle,
)

# Least privilege per workload: training reads datasets and writes models, inference only reads models
# (pack policy identity-per-role; review I1: training held Contributor on datasets, which it never writes).
WORKLOAD_GRANTS: dict[str, tuple[tuple[BuiltInRole, str], ...]] = {
    "training": (
        (BuiltInRole.STORAGE_BLOB_DATA_READER, "datasets"),
        (BuiltInRole.STORAGE_BLOB_DATA_CONTRIBUTOR, "models"),
    ),
    "inference": ((BuiltInRole.STORAGE_BLOB_DATA_READER, "models"),),
    # The only identity with rights on the registry's container: the server proxies every transfer.
    "registry": ((BuiltInRole.STORAGE_BLOB_DATA_CONTRIBUTOR, REGISTRY_CONTAINER),),
}


class AzurePlatform(pulumi.ComponentResource):
    def __init__(self, name: str, config: PlatformConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:Platform", name, None, opts)
        require_features(config)
        require_zones(config)
        require_version(config)
        warn_system_pool_drift(config, parent=self)
        refuse_silent_key_moves(config, parent=self)
        self._child = pulumi.ResourceOptions(parent=self)
        scope = self._scope(name, config)
        monthly_budget(f"{name}-budget", scope, self._child)
        network = AzureNetwork(f"{name}-network", NetworkArgs(scope), self._child)
        keys = AzureKeys(
            f"{name}-keys",
            KeysArgs(scope, network.endpoint_subnet_id, network.dns_zone_ids[VAULT_ZONE]),
            self._child,
        )
        objects, shared = self._storage(name, scope, network, keys)
        cluster = AksCluster(
            f"{name}-cluster",
            ClusterArgs(
                scope,
                network.vnet_id,
                keys.disk_encryption_set_id,
                system_pool_profile(config, network.node_subnet_id),
                SecretsEncryption(
                    keys.for_domain(KeyDomain.SECRETS), keys.vault_id, network.api_server_subnet_id
                ),
                grants=(keys.disk_grant,),
                route_table_id=network.route_table_id,
            ),
            self._child,
        )
        pools = NodePools(
            f"{name}-pools", NodePoolsArgs(scope, cluster.cluster_name, network.node_subnet_id), self._child
        )
        signing = ImageSigningKey(
            f"{name}-signing",
            SigningKeyArgs(scope, network.endpoint_subnet_id, network.dns_zone_ids[VAULT_ZONE]),
            self._child,
        )
        registry = AzureRegistry(
            f"{name}-registry",
            RegistryArgs(
                scope,
                keys.for_domain(KeyDomain.IMAGES),
                cluster.kubelet_object_id,
                network.endpoint_subnet_id,
                network.dns_zone_ids[REGISTRY_ZONE],
                signing.signing,
                keys.administration_role,
            ),
            self._child,
        )
        archive = self._audit_archive(name, scope, keys, cluster)
        audited = {
            "keys-vault": keys.vault.id,
            "registry-creation-vault": registry.creation_vault_id,
            # Every signature is an AuditEvent on this vault: who signed which digest, and when.
            "signing-vault": signing.vault_id,
            "registry": registry.registry_id,
            "objects-blob": service_id(objects.account_id, "blob"),
        }
        if shared is not None:
            audited["shared-file"] = service_id(shared.account_id, "file")
        record = self._lifecycle_record(name, scope, network, keys)
        if record is not None:
            # Every read and append of the record, with its caller (StorageRead, StorageWrite).
            audited["record-blob"] = service_id(record.account_id, "blob")
        for what, resource_id in audited.items():
            audit_logs(f"{name}-{what}", scope, resource_id, cluster.workspace_id, self, archive_id=archive)
        identities = self._workload_identities(name, scope, cluster, objects, record)
        identities[IMAGE_VERIFIER_KEY] = self._verifier_identity(name, scope, cluster, signing, registry)
        database = self._registry_database(name, scope, network, keys, identities["registry"])
        if database is not None:
            # A flexible server has no audit category group: its server log carries connections and,
            # with pgaudit, statements (Azure Monitor supported logs, flexibleServers: PostgreSQLLogs).
            audit_logs(
                f"{name}-registry-pg",
                scope,
                database.server_id,
                cluster.workspace_id,
                self,
                archive_id=archive,
                categories=("PostgreSQLLogs",),
            )
        if archive is not None:
            # Reads of the archive itself go to the workspace (into itself they would log their own writes).
            audit_logs(f"{name}-audit-blob", scope, service_id(archive, "blob"), cluster.workspace_id, self)
            archived_logs(
                f"{name}-cluster", scope, cluster.cluster.id, archive, cluster.audit_log_categories(), self
            )
        PeopleAccess(
            f"{name}-access",
            PeopleAccessArgs(
                scope,
                cluster.cluster.id,
                keys.vault_id,
                cluster.workspace_id,
                archive_account_id=archive,
                record_container_id=record.container_id if record is not None else None,
                key_administration=keys.administration_role,
                record_account_id=record.account_id if record is not None else None,
                datasets_container=(objects.container_ids[DATASETS_CONTAINER], DATASETS_CONTAINER),
            ),
            self._child,
        )
        self.handle = ClusterHandle(
            cloud=Cloud.AZURE,
            name=config.stack_name,
            kubeconfig=cluster.kubeconfig,
            kubernetes_version=config.cluster.kubernetes_version,
            pools=tuple(pool_handle(config, pool) for pool in config.node_pools),
            storage=StorageHandle(bucket_uri=objects.models_uri, shared=shared.shared if shared else None),
            registry=registry.login_server,
            registry_login=registry.login,
            identities={workload: identity.annotations for workload, identity in identities.items()},
            node_pools=(pools,),
            pod_labels={workload: identity.pod_labels for workload, identity in identities.items()},
            workload_egress=workload_egress(config.network.cidr),
            # A private cluster's API server is a private endpoint in the VNet (AKS docs, "Create a
            # private AKS cluster"); otherwise its public address, unknown before deployment.
            api_server=Peer(
                API_SERVER_PEER,
                config.network.cidr if config.cluster.endpoint is EndpointAccess.PRIVATE else PUBLIC_NETWORK,
                API_SERVER_PORT,
            ),
            lifecycle_record=record_store(record.uri, config.network.cidr) if record is not None else None,
            gpu_node_os=gpu_node_os(config),
            registry_backend=registry_backend(
                objects.account_name,
                config.network.cidr,
                database.database if database else None,
                database.ready if database else (),
            ),
        )
        self.exports: dict[str, pulumi.Input[Any]] = {
            "clusterName": cluster.cluster_name,
            "resourceGroup": scope.resource_group_name,
            "kubeconfig": cluster.kubeconfig,
            "oidcIssuerUrl": cluster.oidc_issuer_url,
            "keyVault": keys.vault_name,
            # Each data domain's key (domain -> ARM id), as AWS exports ``kmsKeys``.
            "keyVaultKeys": {domain.value: ref.key_id for domain, ref in keys.domains.items()},
            "storageAccount": objects.account_name,
            "modelsUri": objects.models_uri,
            "sharedStorage": dict(shared.shared.csi["volumeAttributes"]) if shared else None,
            "registry": registry.login_server,
            # What `mlplatform images mirror` completes the driver images' tags with, as the operators do.
            "gpuNodeOs": node_os.as_dict() if (node_os := gpu_node_os(config)) else None,
            # What operators verify the stack's images with: `cosign verify --key <this>` (docs/images.md).
            "imageSigningKey": signing.signing.key,
            "nodePools": pools_summary(config),
            "workloadIdentities": {workload: identity.client_id for workload, identity in identities.items()},
        }
        if record is not None:
            # Where the record is (``--record``), and the role the people who approve and promote are
            # given on its account (docs/lifecycle.md, "The record").
            self.exports["lifecycleRecord"] = record.uri
            self.exports["lifecycleRecordWriterRole"] = record.writer_role_id
        self.register_outputs(self.exports)

    def _audit_archive(
        self, name: str, scope: AzureScope, keys: AzureKeys, cluster: AksCluster
    ) -> pulumi.Output[str] | None:
        """The immutable audit archive's id where the stack is audited (config ``audit``), else ``None``."""
        if not scope.config.audited:
            return None
        key = keys.for_domain(KeyDomain.LOGS)
        identity = EncryptionIdentity(
            f"{name}-audit-encryption", EncryptionIdentityArgs(scope, key.key_id), self._child
        )
        archive = AuditArchive(
            f"{name}-audit", AuditArchiveArgs(scope, identity, key, cluster.workspace_id), self._child
        )
        return archive.account_id

    def _scope(self, name: str, config: PlatformConfig) -> AzureScope:
        """The resource group and the facts every component shares (scope.py)."""
        client = authorization.get_client_config()
        group = resources.ResourceGroup(
            f"{name}-rg",
            resource_group_name=f"{PROJECT}-{config.stack_name}",
            location=config.region,
            tags={**config.base_tags(), **(config.budget.tags() if config.budget else {})},
            opts=pulumi.ResourceOptions(parent=self),
        )
        return AzureScope(
            config=config,
            resource_group_name=group.name,
            deployer=Deployer(
                client.subscription_id,
                client.tenant_id,
                client.object_id,
                config.azure.principal_type,
            ),
            name_suffix=naming.name_suffix(client.subscription_id, pulumi.get_project(), pulumi.get_stack()),
        )

    def _storage(
        self, name: str, scope: AzureScope, network: AzureNetwork, keys: AzureKeys
    ) -> tuple[ObjectStorage, SharedFileStorage | None]:
        """Object storage always, its datasets container under the datasets key (on the storage key where
        ``storage.onStackKey`` keeps it there); the NFS share when config asks for shared storage, under the
        training data key with an identity of its own (the storage identity where ``storage.onStackKey``
        keeps the share on the storage key, as a stack made before the split has it)."""
        key = keys.for_domain(KeyDomain.OBJECTS)
        identity = EncryptionIdentity(
            f"{name}-storage-encryption", EncryptionIdentityArgs(scope, key.key_id), self._child
        )
        subnet = network.endpoint_subnet_id
        datasets_key = keys.for_domain(KeyDomain.DATASETS)
        objects = ObjectStorage(
            f"{name}-objects",
            ObjectStorageArgs(
                scope,
                identity,
                key,
                subnet,
                network.dns_zone_ids[BLOB_ZONE],
                datasets_key=datasets_key if datasets_key is not key else None,
            ),
            self._child,
        )
        if scope.config.shared_storage is not SharedStorageKind.AZURE_FILES_NFS:
            return objects, None
        training_key = keys.for_domain(KeyDomain.TRAINING_DATA)
        if training_key is not key:
            identity = EncryptionIdentity(
                f"{name}-shared-encryption", EncryptionIdentityArgs(scope, training_key.key_id), self._child
            )
        shared = SharedFileStorage(
            f"{name}-shared",
            SharedFileStorageArgs(
                scope,
                identity,
                training_key,
                subnet,
                network.dns_zone_ids[FILE_ZONE],
                stores=shared_stores(scope.config),
            ),
            self._child,
        )
        return objects, shared

    def _registry_database(
        self, name: str, scope: AzureScope, network: AzureNetwork, keys: AzureKeys, login: FederatedIdentity
    ) -> AzureRegistryDatabase | None:
        """Enterprise registries keep their metadata in PostgreSQL, under the registry database's key (data
        at rest), in the subnet the network delegates to it when config asks for a managed database."""
        if network.database_subnet_id is None:
            return None
        return AzureRegistryDatabase(
            f"{name}-registry",
            RegistryDatabaseArgs(
                scope,
                keys.for_domain(KeyDomain.REGISTRY_DATABASE),
                network.vnet_id,
                network.database_subnet_id,
                login.identity_name,
                login.principal_id,
                scope.config.workloads.registry.database_admins,
            ),
            self._child,
        )

    def _verifier_identity(
        self,
        name: str,
        scope: AzureScope,
        cluster: AksCluster,
        signing: ImageSigningKey,
        registry: AzureRegistry,
    ) -> FederatedIdentity:
        """The admission verifier's identity (components/kubernetes/image_verification.py): it reads the
        signing key's public half (a key read), granted on that one key; the role's wrap and unwrap do
        nothing on a key whose operations are sign and verify only (keys.py ImageSigningKey). And it pulls
        the signatures from the stack's registry (AcrPull, on that registry): policy-controller reads the
        registry as its pod's own identity, its ACR helper taking azidentity's default credential (the
        workload identity the webhook injects: AZURE_CLIENT_ID, AZURE_TENANT_ID and the token file) and
        exchanging its ARM token for a registry refresh token (pkg/webhook/registryauth/azure/
        acrhelper.go, v0.13.1)."""
        return FederatedIdentity(
            f"{name}-image-verifier-identity",
            FederatedIdentityArgs(
                scope,
                IMAGE_VERIFIER,
                cluster.oidc_issuer_url,
                (
                    Grant(
                        BuiltInRole.KEY_VAULT_CRYPTO_SERVICE_ENCRYPTION_USER,
                        signing.key_id,
                        "signing-key-read",
                    ),
                    Grant(BuiltInRole.ACR_PULL, registry.registry_id, "registry-pull"),
                ),
            ),
            self._child,
        )

    def _lifecycle_record(
        self, name: str, scope: AzureScope, network: AzureNetwork, keys: AzureKeys
    ) -> LifecycleRecord | None:
        """The lifecycle record in every audited stack (docs/lifecycle.md, "The record"), under the
        object-data key with an encryption identity of its own, as AWS's record bucket."""
        if not scope.config.audited:
            return None
        key = keys.for_domain(KeyDomain.OBJECTS)
        identity = EncryptionIdentity(
            f"{name}-record-encryption", EncryptionIdentityArgs(scope, key.key_id), self._child
        )
        return LifecycleRecord(
            f"{name}-record",
            ObjectStorageArgs(
                scope, identity, key, network.endpoint_subnet_id, network.dns_zone_ids[BLOB_ZONE]
            ),
            self._child,
        )

    def _workload_identities(
        self,
        name: str,
        scope: AzureScope,
        cluster: AksCluster,
        objects: ObjectStorage,
        record: LifecycleRecord | None,
    ) -> dict[str, FederatedIdentity]:
        """One federated identity per workload service account, granted its containers; where the stack
        keeps a lifecycle record, the registry the writer role on its account, and the rollout and the
        drift monitor each an identity of its own that reads the record's container."""
        accounts = dict(WORKLOAD_IDENTITIES)
        grants = {
            workload: tuple(
                Grant(role, objects.container_ids[container], f"{container}-{role.name.lower()}")
                for role, container in WORKLOAD_GRANTS.get(workload, ())
            )
            for workload in WORKLOAD_IDENTITIES
        }
        if record is not None:
            # The registry is the record's only writer: it appends every event for the user it
            # authenticated (workloads/registry/server/guard.py ``record_events``, review rev40c A1). The
            # rollout and the drift monitor append through it and read the record themselves.
            accounts |= RECORD_WRITERS
            reader = (Grant(BuiltInRole.STORAGE_BLOB_DATA_READER, record.container_id, "record-reader"),)
            grants |= dict.fromkeys(RECORD_WRITERS, reader)
            grants["registry"] += (Grant(record.writer_role_id, record.account_id, "record-writer"),)
        return {
            workload: FederatedIdentity(
                f"{name}-{workload}-identity",
                FederatedIdentityArgs(scope, service_account, cluster.oidc_issuer_url, grants[workload]),
                self._child,
            )
            for workload, service_account in accounts.items()
        }
