"""The model registry's metadata store on Azure: Azure Database for PostgreSQL flexible server, private.

Every field follows the pulumi-azure-native ``dbforpostgresql.Server`` docstrings (API version
2025-08-01, the provider's default):
- private access (VNet integration): ``network.delegated_subnet_resource_id``, a subnet of the stack's VNet
  delegated to ``Microsoft.DBforPostgreSQL/flexibleServers`` (network.py), and
  ``network.private_dns_zone_arm_resource_id``, a private zone ``<name>.private.postgres.database.azure.com``
  linked to the VNet, both "required during creation"; ``public_network_access`` Disabled (what a
  VNet-integrated server reports; the pack checks it);
- TLS: the server parameter ``require_secure_transport`` ON (Azure Database for PostgreSQL "Secure
  connectivity with TLS and SSL": connections without TLS are refused);
- encrypted under the stack's customer key: ``data_encryption`` type AzureKeyVault with the storage
  purpose's versionless key URI (the flexible server follows the key's new versions when the URI names
  no version: "Data encryption with customer-managed keys", automatic key version updates), read through
  a user-assigned identity (``identity`` and ``primary_user_assigned_identity_id``) that holds Key Vault
  Crypto Service Encryption User on the key, granted and propagated before the server is created
  (identity.EncryptionIdentity, propagation.py): a customer key is set at creation only;
- authentication: Microsoft Entra only, no password at all (``auth_config``: password auth Disabled).
  The registry's workload identity is the server's Entra administrator (``AdministratorsMicrosoftEntra``)
  and logs in with a token for ``https://ossrdbms-aad.database.windows.net/.default`` as the password,
  fetched for every new connection by the image's launcher (workloads/registry/server/launch.py), so no
  secret is in Pulumi's state, the pod spec or a Kubernetes Secret;
- backups in the region: retention 7 days (14 in prod), ``geo_redundant_backup`` Disabled. A
  geo-redundant backup goes to the region's pair (Azure region pairs); uaenorth's is uaecentral, in the UAE
  but open only by support request (REFERENCE.md "UAE data residency"), and no other pair is in the UAE,
  so backups stay in the server's own region;
- prod: high availability ZoneRedundant where the region has availability zones (uaenorth), else
  SameZone (uaecentral has none: Azure availability zones, "Azure regions with availability zone
  support"); General Purpose, because HA is not offered on Burstable ("High availability in Azure
  Database for PostgreSQL flexible server", limitations); the server ``protect``ed as every data-bearing
  resource of the stack (scope.opts ``data=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import dbforpostgresql, privatedns

from components.azure.identity import EncryptionIdentity, EncryptionIdentityArgs
from components.azure.keys import KeyRef
from components.azure.scope import AzureScope
from components.config import EntraGroup
from components.handle import RegistryDatabase

PORT = 5432
DATABASE = "mlflow"
# Major version 17: one of the provider's PostgresMajorVersion values (16, 17, 18).
VERSION = "17"
# Compute per environment: Burstable B2s for dev, General Purpose D2ds_v5 for prod (HA needs it).
SKU = {
    "dev": {"name": "Standard_B2s", "tier": "Burstable"},
    "prod": {"name": "Standard_D2ds_v5", "tier": "GeneralPurpose"},
}
STORAGE_GIB = 32
BACKUP_RETENTION_DAYS = {"dev": 7, "prod": 14}
# UAE regions with availability zones (Azure availability zones, regions list: UAE North yes, UAE Central
# no); the standby goes to another zone there, to the same zone elsewhere.
ZONAL_REGIONS = frozenset({"uaenorth"})
# The resource the token's audience names (Entra authentication for Azure Database for PostgreSQL).
ENTRA_SCOPE = "https://ossrdbms-aad.database.windows.net/.default"


def high_availability(environment: str, location: str) -> dict[str, str]:
    """No standby outside prod; in prod another zone where the region has zones, else the same zone."""
    if environment != "prod":
        return {"mode": "Disabled"}
    return {"mode": "ZoneRedundant" if location in ZONAL_REGIONS else "SameZone"}


def server_name(suffix: str) -> str:
    """The server's name: 3-63 lowercase letters, digits and hyphens, globally unique (it names the
    server's host)."""
    return f"mlp-registry-{suffix}"


def dns_zone_name(server: str) -> str:
    """The private zone a VNet-integrated server registers in (its name ends in the service's suffix)."""
    return f"{server}.private.postgres.database.azure.com"


@dataclass(frozen=True)
class RegistryDatabaseArgs:
    scope: AzureScope
    key: KeyRef
    vnet_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    # The registry's workload identity: the server's Entra administrator, and the database user.
    login_name: pulumi.Input[str]
    login_object_id: pulumi.Input[str]
    # The humans' break-glass login: an Entra group as a second administrator (config
    # ``workloads.registry.databaseAdmins``).
    admins: EntraGroup | None = None


class AzureRegistryDatabase(pulumi.ComponentResource):
    """PostgreSQL flexible server for the model registry: private, TLS-only, under the stack's key."""

    def __init__(
        self, name: str, args: RegistryDatabaseArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:azure:RegistryDatabase", name, None, opts)
        scope = args.scope
        environment = "prod" if scope.config.environment == "prod" else "dev"
        host = server_name(scope.name_suffix)
        zone = privatedns.PrivateZone(
            f"{name}-pg-dns",
            resource_group_name=scope.resource_group_name,
            private_zone_name=dns_zone_name(host),
            location="global",
            tags=scope.tags,
            opts=scope.opts(self),
        )
        link = privatedns.VirtualNetworkLink(
            f"{name}-pg-dns-link",
            resource_group_name=scope.resource_group_name,
            private_zone_name=zone.name,
            virtual_network={"id": args.vnet_id},
            registration_enabled=False,
            location="global",
            tags=scope.tags,
            opts=scope.opts(self),
        )
        encryption = EncryptionIdentity(
            f"{name}-pg-encryption",
            EncryptionIdentityArgs(scope, args.key.key_id),
            pulumi.ResourceOptions(parent=self),
        )
        server = dbforpostgresql.Server(
            f"{name}-pg",
            server_name=host,
            version=VERSION,
            sku=SKU[environment],
            storage={"storage_size_gb": STORAGE_GIB, "auto_grow": "Enabled"},
            network={
                "delegated_subnet_resource_id": args.subnet_id,
                "private_dns_zone_arm_resource_id": zone.id,
                "public_network_access": "Disabled",
            },
            auth_config={
                "active_directory_auth": "Enabled",
                "password_auth": "Disabled",
                "tenant_id": scope.deployer.tenant_id,
            },
            identity={
                "type": "UserAssigned",
                "user_assigned_identities": encryption.identity_id.apply(lambda i: {i: {}}),
            },
            data_encryption={
                "type": "AzureKeyVault",
                "primary_key_uri": args.key.key_uri,
                "primary_user_assigned_identity_id": encryption.identity_id,
            },
            backup={
                "backup_retention_days": BACKUP_RETENTION_DAYS[environment],
                "geo_redundant_backup": "Disabled",
            },
            high_availability=high_availability(environment, scope.location),
            **scope.placed,
            # Autogrow doubles the disk when free space falls below 20 % and "storage can only be scaled
            # up, not down" (Azure Database for PostgreSQL, concepts-storage, "Storage autogrow"): the
            # refresh before every update reads the grown size, and sending STORAGE_GIB again would ask
            # for a shrink the service refuses (review azure.md A1). The declared size is the floor.
            opts=scope.opts(
                self,
                data=True,
                depends_on=[encryption.ready, link],
                ignore_changes=["storage.storageSizeGB"],
            ),
        )
        # A flexible server takes one operation at a time and refuses the next with ServerIsBusy
        # (Azure/azure-postgresql#134): the parameter, the administrator and the database in turn.
        tls = dbforpostgresql.Configuration(
            f"{name}-pg-tls",
            resource_group_name=scope.resource_group_name,
            server_name=server.name,
            configuration_name="require_secure_transport",
            value="ON",
            source="user-override",
            opts=scope.opts(self),
        )
        admin = dbforpostgresql.AdministratorsMicrosoftEntra(
            f"{name}-pg-admin",
            resource_group_name=scope.resource_group_name,
            server_name=server.name,
            object_id=args.login_object_id,
            principal_name=args.login_name,
            principal_type="ServicePrincipal",
            tenant_id=scope.deployer.tenant_id,
            opts=scope.opts(self, depends_on=[tls]),
        )
        # "You can configure multiple Microsoft Entra administrators", of types user, group or service
        # principal (Azure Database for PostgreSQL, concepts-azure-ad-authentication): a group's members
        # log in with their own Entra token, under the group's name (Azure review D1).
        if args.admins is not None:
            admin = dbforpostgresql.AdministratorsMicrosoftEntra(
                f"{name}-pg-admin-group",
                resource_group_name=scope.resource_group_name,
                server_name=server.name,
                object_id=args.admins.object_id,
                principal_name=args.admins.name,
                principal_type="Group",
                tenant_id=scope.deployer.tenant_id,
                opts=scope.opts(self, depends_on=[admin]),
            )
        database = dbforpostgresql.Database(
            f"{name}-pg-db",
            resource_group_name=scope.resource_group_name,
            server_name=server.name,
            database_name=DATABASE,
            charset="UTF8",
            collation="en_US.utf8",
            opts=scope.opts(self, data=True, depends_on=[admin]),
        )
        self.server_id: pulumi.Output[str] = server.id
        self.database = RegistryDatabase(
            host=server.fully_qualified_domain_name,
            port=PORT,
            database=DATABASE,
            username=args.login_name,
            entra=True,
        )
        self.ready: tuple[pulumi.Resource, ...] = (database, admin)
        self.register_outputs({"host": server.fully_qualified_domain_name})
