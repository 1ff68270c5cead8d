"""Azure built-in roles the platform grants, and the one helper that grants them.

Role definition ids are fixed GUIDs, the same in every tenant (learn.microsoft.com/azure/
role-based-access-control/built-in-roles). Grants are scoped to the narrowest resource that works: a key,
a container, a subnet, a registry.
"""

from __future__ import annotations

from enum import StrEnum

import pulumi
from pulumi_azure_native import authorization

from components.azure.scope import AzureScope


class BuiltInRole(StrEnum):
    # Wrap/unwrap with a Key Vault key: what Disks, Storage and ACR need for customer-managed keys.
    KEY_VAULT_CRYPTO_SERVICE_ENCRYPTION_USER = "e147488a-f6f5-4113-8e2d-b22465e65bf6"
    # Every key operation on a vault's data plane: what the deployer needs on an RBAC vault it creates keys
    # in; Owner and Contributor carry no Key Vault DataActions (learn.microsoft.com/azure/key-vault/
    # general/rbac-guide).
    KEY_VAULT_CRYPTO_OFFICER = "14b46e9e-c2b7-41b4-b07b-48a6ebf60603"
    # Encrypt/decrypt with a vault's keys: what AKS KMS etcd encryption needs of the cluster identity on an
    # RBAC vault; Key Vault Contributor (vault management, no data access) lets AKS create the private link
    # to a private vault (learn.microsoft.com/azure/aks/use-kms-etcd-encryption, "Assign permissions").
    KEY_VAULT_CRYPTO_USER = "12338af0-0e69-4776-bea7-57ae8d297424"
    KEY_VAULT_CONTRIBUTOR = "f25e0fa2-a7c8-4377-a976-54943a77a395"
    STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
    STORAGE_BLOB_DATA_READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
    # Pull artifacts from a registry: the kubelet's images, the admission verifier's signatures
    # (learn.microsoft.com/azure/role-based-access-control/built-in-roles/containers, AcrPull).
    ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
    # The AKS control plane joins load balancers and NICs to a subnet it does not own.
    NETWORK_CONTRIBUTOR = "4d97b98b-1d4f-4787-a291-c67834d212e7"
    # Azure RBAC for Kubernetes authorization (learn.microsoft.com/azure/aks/manage-azure-rbac; built-in
    # roles reference): everything on the cluster; read/write of most objects in a namespace, its Secrets
    # included, not Roles or RoleBindings; read-only of most objects, not Secrets, Roles or RoleBindings.
    AKS_RBAC_CLUSTER_ADMIN = "b1ff04bb-8a4e-4dc4-8eb5-8693973ce19b"
    AKS_RBAC_WRITER = "a7ffa36f-339b-4b5c-8bdf-e2c188b2c0eb"
    AKS_RBAC_READER = "7f6c6a51-bcf8-42ba-9220-52d62157d7db"
    # View and search a Log Analytics workspace's data and settings.
    LOG_ANALYTICS_READER = "73c42c96-874c-492b-b04d-ab87d138a893"
    # Read-only on one resource: what the AKS cluster identity needs on its disk encryption set.
    READER = "acdd72a7-3385-48ef-bd42-f606fba81ae7"


def role_definition_id(scope: AzureScope, role: BuiltInRole) -> str:
    return (
        f"/subscriptions/{scope.deployer.subscription_id}/providers/Microsoft.Authorization/"
        f"roleDefinitions/{role.value}"
    )


def assign_role(
    name: str,
    scope: AzureScope,
    *,
    role: BuiltInRole | pulumi.Output[str],
    principal_id: pulumi.Input[str],
    target_id: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    principal_type: str = "ServicePrincipal",
    description: str | None = None,
    condition: str | None = None,
) -> authorization.RoleAssignment:
    """Grant ``role`` (a built-in role, or a custom role definition's id) on ``target_id``, limited by an
    Azure ABAC ``condition`` where one is given (condition version 2.0, the only one ARM takes).

    The principal type is always declared (the SDK would otherwise send "User"). For managed identities
    it is ``ServicePrincipal``, which also spares ARM the Entra lookup that fails with PrincipalNotFound
    while a just-created identity replicates (ARM role-assignment docs).
    """
    return authorization.RoleAssignment(
        name,
        principal_id=principal_id,
        principal_type=principal_type,
        role_definition_id=role_definition_id(scope, role) if isinstance(role, BuiltInRole) else role,
        scope=target_id,
        opts=opts,
        **({"description": description} if description else {}),
        **({"condition": condition, "condition_version": "2.0"} if condition else {}),
    )


def custom_role(
    name: str,
    scope: AzureScope,
    *,
    role_name: str,
    description: str,
    permissions: dict[str, list[str]],
    opts: pulumi.ResourceOptions,
) -> pulumi.Output[str]:
    """A custom role defined on the stack's resource group, returning its definition's id.

    A resource group is the narrowest scope a custom role can be assignable at (Azure RBAC, "Azure custom
    roles", AssignableScopes); each assignment then narrows it to one resource. ``permissions`` holds
    ``actions``, ``data_actions`` and ``not_data_actions`` as the ARM Permission object names them.
    """
    group_id = pulumi.Output.concat(
        "/subscriptions/", scope.deployer.subscription_id, "/resourceGroups/", scope.resource_group_name
    )
    definition = authorization.RoleDefinition(
        name,
        role_name=role_name,
        description=description,
        role_type="CustomRole",
        scope=group_id,
        assignable_scopes=[group_id],
        permissions=[permissions],
        opts=opts,
    )
    role_id: pulumi.Output[str] = definition.id
    return role_id


def grant_key_use(
    name: str,
    scope: AzureScope,
    principal_id: pulumi.Input[str],
    key_id: pulumi.Input[str],
    parent: pulumi.Resource,
) -> authorization.RoleAssignment:
    """Let a service's identity wrap and unwrap with one key: what a customer-managed key's consumer needs."""
    return assign_role(
        name,
        scope,
        role=BuiltInRole.KEY_VAULT_CRYPTO_SERVICE_ENCRYPTION_USER,
        principal_id=principal_id,
        target_id=key_id,
        opts=scope.opts(parent),
    )
