"""The container registry workload images are pulled from: ACR Premium, private, customer-managed key.

Premium is the tier with customer-managed keys, private endpoints and firewall rules (ACR service tiers).
No admin user and no anonymous pull: pushes and pulls are Entra principals, and the nodes pull with the
kubelet identity's AcrPull grant. Nodes reach the registry through its private endpoint on every tier;
enterprise disables the public endpoint (and exports, so images cannot be copied out of the registry),
SMB keeps it for the allow-list so a team can push from its office.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import containerregistry

from components.azure import naming
from components.azure.identity import EncryptionIdentity, EncryptionIdentityArgs
from components.azure.keys import KeyRef
from components.azure.private_endpoint import PrivateEndpoint, PrivateEndpointArgs
from components.azure.roles import BuiltInRole, assign_role
from components.azure.scope import AzureScope


@dataclass(frozen=True)
class RegistryArgs:
    scope: AzureScope
    key: KeyRef
    kubelet_object_id: pulumi.Input[str]
    endpoint_subnet_id: pulumi.Input[str]
    dns_zone_id: pulumi.Input[str]


class AzureRegistry(pulumi.ComponentResource):
    def __init__(self, name: str, args: RegistryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:Registry", name, None, opts)
        scope = args.scope
        identity = EncryptionIdentity(
            f"{name}-encryption",
            EncryptionIdentityArgs(scope, args.key.key_id),
            opts=pulumi.ResourceOptions(parent=self),
        )
        registry_name = naming.registry_name(scope.name_suffix)
        registry = containerregistry.Registry(
            f"{name}-acr",
            registry_name=registry_name,
            sku={"name": "Premium"},
            admin_user_enabled=False,
            anonymous_pull_enabled=False,
            # ACR takes its user-assigned identities as a map keyed by resource id.
            identity={
                "type": "UserAssigned",
                "user_assigned_identities": identity.identity_id.apply(lambda i: {i: {}}),
            },
            encryption={
                "status": "enabled",
                # Versionless key: ACR picks up new key versions on its own (ACR CMK docs).
                "key_vault_properties": {"key_identifier": args.key.key_uri, "identity": identity.client_id},
            },
            **self._network(scope),
            **scope.placed,
            # A customer-managed key can only be set at creation, and the key must be usable by then.
            opts=scope.opts(self, data=True, depends_on=[identity.ready]),
        )
        PrivateEndpoint(
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
        self.register_outputs({"loginServer": registry.login_server})

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
