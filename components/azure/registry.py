"""The container registry workload images are pulled from: ACR Premium, private, customer-managed key.

Premium is the tier with customer-managed keys, private endpoints and firewall rules (ACR service tiers).
No admin user and no anonymous pull: pushes and pulls are Entra principals, and the nodes pull with the
kubelet identity's AcrPull grant. Nodes reach the registry through its private endpoint on every tier;
enterprise disables the public endpoint (and exports, so images cannot be copied out of the registry),
SMB keeps it for the allow-list so a team can push from its office.

The customer-managed key lives behind the Key Vault firewall, which ACR can pass only with its
system-assigned identity, and ACR takes a key at creation only through a user-assigned one. So the
registry is created on a key in a vault it can reach (keys.RegistryCreationKey), and then rotated to the
firewalled key through its system-assigned identity, as Microsoft documents for a firewalled vault
("Encrypt registry using a customer-managed key", Advanced scenario: Key Vault firewall). The rotation
is ``az acr encryption rotate-key`` (ARM has no separate resource for it, and the registry's own
encryption cannot name an identity that exists only after creation), run by ``pulumi up`` where the
Azure CLI is logged in to the stack's subscription (README.md "Prerequisites").
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import containerregistry
from pulumi_command import local

from components.azure import naming
from components.azure.identity import EncryptionIdentity, EncryptionIdentityArgs
from components.azure.keys import KeyRef, RegistryCreationKey
from components.azure.private_endpoint import PrivateEndpoint, PrivateEndpointArgs
from components.azure.propagation import propagated
from components.azure.roles import BuiltInRole, assign_role, grant_key_use
from components.azure.scope import AzureScope
from components.handle import ImageSigning, RegistryLogin

# The user name that goes with an ACR access token from `az acr login --expose-token` (Microsoft Learn,
# "Authenticate with an Azure container registry": "az acr login with --expose-token").
ACR_TOKEN_USER = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class RegistryArgs:
    scope: AzureScope
    key: KeyRef
    kubelet_object_id: pulumi.Input[str]
    endpoint_subnet_id: pulumi.Input[str]
    dns_zone_id: pulumi.Input[str]
    # The stack's image-signing key (keys.py); every image pushed with the registry's login is signed.
    signing: ImageSigning
    # The stack's key administration role (keys.py ``key_administration_role``): the deployer's on the
    # creation key's vault.
    key_administration: pulumi.Output[str]


class AzureRegistry(pulumi.ComponentResource):
    def __init__(self, name: str, args: RegistryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:Registry", name, None, opts)
        scope = args.scope
        child = pulumi.ResourceOptions(parent=self)
        creation_key = RegistryCreationKey(f"{name}-creation", scope, args.key_administration, child)
        identity = EncryptionIdentity(
            f"{name}-encryption", EncryptionIdentityArgs(scope, creation_key.key.key_id), opts=child
        )
        registry_name = naming.registry_name(scope.name_suffix)
        reopened = self._reopen_creation_vault(name, scope, registry_name, creation_key)
        registry = containerregistry.Registry(
            f"{name}-acr",
            registry_name=registry_name,
            sku={"name": "Premium"},
            admin_user_enabled=False,
            anonymous_pull_enabled=False,
            # The user-assigned identity reads the creation key; the system-assigned one, the firewalled key
            # after the rotation. ACR takes its user-assigned identities as a map keyed by resource id.
            identity={
                "type": "SystemAssigned, UserAssigned",
                "user_assigned_identities": identity.identity_id.apply(lambda i: {i: {}}),
            },
            encryption={
                "status": "enabled",
                "key_vault_properties": {
                    "key_identifier": creation_key.key.key_uri,
                    "identity": identity.client_id,
                },
            },
            **self._network(scope),
            **scope.placed,
            # A customer-managed key can only be set at creation, and the key must be usable by then. The
            # rotation below moves the registry to another key, which is no drift to undo.
            opts=scope.opts(
                self, data=True, depends_on=[identity.ready, reopened], ignore_changes=["encryption"]
            ),
        )
        self._rotate_to(name, scope, registry, registry_name, args.key, creation_key)
        self.registry_id: pulumi.Output[str] = registry.id
        self.creation_vault_id = creation_key.vault_id
        endpoint = PrivateEndpoint(
            f"{name}-registry",
            PrivateEndpointArgs(scope, args.endpoint_subnet_id, registry.id, "registry", args.dns_zone_id),
            opts=pulumi.ResourceOptions(parent=self),
        )
        assign_role(
            f"{name}-kubelet-pull",
            scope,
            role=BuiltInRole.ACR_PULL,
            principal_id=args.kubelet_object_id,
            target_id=registry.id,
            opts=scope.opts(self),
        )
        # Known before deployment (public-cloud login servers are <name>.azurecr.io, ACR docs), so image
        # references built from it are plain strings the Kubernetes layer can validate.
        self.login_server = f"{registry_name}.azurecr.io"
        # What `pulumi up` pushes the stack's images with (components/images.py): an ACR token for the
        # deployer's Azure CLI login, read on every run (it lasts 3 hours). No admin user: the push is the
        # deployer's Entra identity (Owner/Contributor or AcrPush). The token is a data-plane call to the
        # registry (``az acr login --expose-token`` exchanges an Entra token at
        # https://<login server>/oauth2/exchange, azure-cli acr/_docker_utils.py), and so is the push: with
        # the public endpoint disabled both go through the private endpoint, which a runner in the VNet
        # finds only once the zone group has written the privatelink.azurecr.io record ("Connect privately
        # to an Azure container registry using Azure Private Link"; review wt-azure3 A2). Both wait for the
        # zone group on every tier: on SMB a runner inside the VNet resolves through the same linked zone.
        zone_group = endpoint.zone_group
        token = local.run_output(
            command=pulumi.Output.all(registry.name, zone_group.id).apply(
                lambda a: login_command(scope.deployer.subscription_id, a[0])
            )
        )
        self.login = RegistryLogin(
            address=self.login_server,
            username=ACR_TOKEN_USER,
            password=token.stdout,
            ready=(registry, zone_group),
            signing=args.signing,
            password_command=registry.name.apply(lambda n: login_command(scope.deployer.subscription_id, n)),
        )
        self.register_outputs({"loginServer": registry.login_server})

    def _reopen_creation_vault(
        self, name: str, scope: AzureScope, registry_name: str, creation_key: RegistryCreationKey
    ) -> local.Command:
        """Open the creation vault again before a registry is created again on its key (review azure.md D3).

        The rotation closes that vault once the registry is on the firewalled key, and ARM never reopens it
        (its network settings are ignoreChanges, keys.py): a registry created again (a new name, group or
        region, all set only at creation) could not reach its creation key. The vault is created open, so
        there is nothing to do when this command is created: it has no ``create`` (pulumi-command runs
        nothing then, local/commandController.go ``Create``) and runs its ``update`` when the registry's
        creation-time identity in ``environment`` changes (an ``environment`` change is an update;
        ``triggers`` would replace it, which runs ``create``: pulumi-command v1.2.1, common/inputs.go
        ``replaceOnChanges``). The command names the vault by its own name output, so it waits for the
        vault (review A1: built from the random name alone, it raced the vault's creation). The rotation,
        which reruns for a new registry, closes the vault again.
        """
        command = pulumi.Output.all(scope.resource_group_name, creation_key.vault_name).apply(
            lambda a: reopen_command(scope.deployer.subscription_id, a[0], a[1])
        )
        return local.Command(
            f"{name}-creation-vault-reopen",
            update=command,
            environment={
                "REGISTRY_NAME": registry_name,
                "REGISTRY_GROUP": scope.resource_group_name,
                "REGISTRY_LOCATION": scope.location,
            },
            opts=scope.opts(self),
        )

    def _rotate_to(
        self,
        name: str,
        scope: AzureScope,
        registry: containerregistry.Registry,
        registry_name: str,
        key: KeyRef,
        creation_key: RegistryCreationKey,
    ) -> None:
        """Grant the registry's system-assigned identity the firewalled key, wait for the grant to take
        effect, then rotate to that key (versionless: ACR follows its new versions) and close the creation
        vault. Runs again if the key or the registry changes."""
        principal_id = registry.identity.apply(lambda i: i.principal_id)
        grant = grant_key_use(f"{name}-system-key-user", scope, principal_id, key.key_id, self)
        command = pulumi.Output.all(scope.resource_group_name, key.key_uri, creation_key.vault_name).apply(
            lambda a: rotation_command(scope.deployer.subscription_id, a[0], registry_name, a[1], a[2])
        )
        local.Command(
            f"{name}-key-rotation",
            create=command,
            # Again for a new key or a new registry (created on the creation key, D3).
            triggers=[key.key_uri, registry.id],
            opts=scope.opts(self, depends_on=[propagated(f"{name}-system-key", scope, [grant], self)]),
        )

    @staticmethod
    def _network(scope: AzureScope) -> dict[str, Any]:
        if not scope.public_endpoints:
            return {
                "public_network_access": "Disabled",
                "policies": {"export_policy": {"status": "disabled"}},
            }
        return {
            "public_network_access": "Enabled",
            "network_rule_bypass_options": "AzureServices",
            "network_rule_set": {
                "default_action": "Deny",
                "ip_rules": [{"i_p_address_or_range": cidr, "action": "Allow"} for cidr in scope.allow_list],
            },
        }


def login_command(subscription_id: str, registry: str) -> str:
    """``az acr login --expose-token`` prints an access token for ``registry`` instead of calling docker."""
    login = ["az", "acr", "login", "--subscription", subscription_id, "--name", registry, "--expose-token"]
    return shlex.join([*login, "--output", "tsv", "--query", "accessToken"])


def rotation_command(
    subscription_id: str, resource_group: str, registry: str, key_uri: str, creation_vault: str
) -> str:
    """The shell command that moves ``registry`` to ``key_uri`` and then closes the creation vault.

    ``--identity [system]`` is the CLI's name for the system-assigned identity (``az acr encryption
    rotate-key``); a versionless key URI turns on automatic rotation. The vault is closed only once the
    rotation succeeded: before that the registry still needs it.
    """
    common = ["--subscription", subscription_id, "--resource-group", resource_group, "--output", "none"]
    rotate = ["az", "acr", "encryption", "rotate-key", *common, "--name", registry]
    rotate += ["--identity", "[system]", "--key-encryption-key", key_uri]
    close = ["az", "keyvault", "update", *common, "--name", creation_vault]
    close += ["--public-network-access", "Disabled", "--default-action", "Deny"]
    return f"{shlex.join(rotate)} && {shlex.join(close)}"


def reopen_command(subscription_id: str, resource_group: str, creation_vault: str) -> str:
    """The shell command that lets a registry being created reach its creation key again (the inverse of
    the close in ``rotation_command``)."""
    common = ["--subscription", subscription_id, "--resource-group", resource_group, "--output", "none"]
    reopen = ["az", "keyvault", "update", *common, "--name", creation_vault]
    return shlex.join([*reopen, "--public-network-access", "Enabled", "--default-action", "Allow"])
