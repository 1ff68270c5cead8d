"""Managed identities: one per workload (federated to its Kubernetes service account), one per encrypting
service (granted use of its customer-managed key).

The service accounts are the shared contract in ``components.handle.WORKLOAD_IDENTITIES``: the federated
credential pins that exact ``system:serviceaccount:<namespace>:<name>`` subject, and the Kubernetes layer
creates those very service accounts annotated with the handle's ``identities[workload]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import managedidentity

from components.azure.propagation import propagated
from components.azure.roles import BuiltInRole, assign_role, grant_key_use
from components.azure.scope import AzureScope
from components.handle import WorkloadIdentity
from components.ordering import after

# Audience of the projected service-account token Entra ID exchanges (AKS workload identity docs,
# learn.microsoft.com/azure/aks/workload-identity-deploy-cluster).
TOKEN_EXCHANGE_AUDIENCE = "api://AzureADTokenExchange"
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
# The webhook injects the token volume and AZURE_* variables only into pods with this label (AKS
# workload identity docs, "Service account labels and annotations"; REFERENCE.md).
USE_LABEL = "azure.workload.identity/use"


@dataclass(frozen=True)
class Grant:
    # A built-in role, or a custom role definition's id (the lifecycle record's writer, record.py).
    role: BuiltInRole | pulumi.Output[str]
    target_id: pulumi.Input[str]
    # Names the role assignment: roles repeat across targets, so the role alone would collide.
    label: str


@dataclass(frozen=True)
class FederatedIdentityArgs:
    scope: AzureScope
    service_account: WorkloadIdentity
    oidc_issuer_url: pulumi.Input[str]
    grants: tuple[Grant, ...] = field(default_factory=tuple)


class FederatedIdentity(pulumi.ComponentResource):
    """A user-assigned identity that exactly one Kubernetes service account can assume."""

    def __init__(
        self, name: str, args: FederatedIdentityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:azure:FederatedIdentity", name, None, opts)
        scope = args.scope
        identity = managedidentity.UserAssignedIdentity(f"{name}-uai", **scope.placed, opts=scope.opts(self))
        # Pinned to one issuer, one subject and the token-exchange audience: a token from another cluster,
        # namespace or service account is refused by Entra ID.
        federation = managedidentity.FederatedIdentityCredential(
            f"{name}-federation",
            resource_group_name=scope.resource_group_name,
            resource_name_=identity.name,
            issuer=args.oidc_issuer_url,
            subject=args.service_account.subject,
            audiences=[TOKEN_EXCHANGE_AUDIENCE],
            opts=scope.opts(self),
        )
        grants = [
            assign_role(
                f"{name}-{grant.label}",
                scope,
                role=grant.role,
                principal_id=identity.principal_id,
                target_id=grant.target_id,
                opts=scope.opts(self),
            )
            for grant in args.grants
        ]
        # The service account's annotation (the client ID) resolves only once the credential exists and
        # the grants have propagated (propagation.py): its pods start with every right they need.
        ready = [federation, propagated(name, scope, grants, self)] if grants else [federation]
        self.client_id: pulumi.Output[str] = identity.client_id
        self.principal_id: pulumi.Output[str] = identity.principal_id
        self.identity_name: pulumi.Output[str] = identity.name
        self.annotations: dict[str, pulumi.Input[str]] = {
            CLIENT_ID_ANNOTATION: after(identity.client_id, ready)
        }
        self.pod_labels: dict[str, str] = {USE_LABEL: "true"}
        self.register_outputs({"clientId": identity.client_id, "principalId": identity.principal_id})


@dataclass(frozen=True)
class EncryptionIdentityArgs:
    scope: AzureScope
    key_id: pulumi.Input[str]


class EncryptionIdentity(pulumi.ComponentResource):
    """A user-assigned identity a service encrypts with, allowed to wrap and unwrap with one key.

    User-assigned because Storage and ACR read the key while they are being created, before a
    system-assigned identity could exist to be granted (ACR: a customer-managed key can only be set at
    creation, with a user-assigned identity). Dependants wait on ``ready``: the grant, propagated
    (propagation.py), so the service's first unwrap is not refused.
    """

    def __init__(
        self, name: str, args: EncryptionIdentityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:azure:EncryptionIdentity", name, None, opts)
        scope = args.scope
        identity = managedidentity.UserAssignedIdentity(f"{name}-uai", **scope.placed, opts=scope.opts(self))
        grant = grant_key_use(f"{name}-key-user", scope, identity.principal_id, args.key_id, self)
        self.ready: pulumi.Resource = propagated(name, scope, [grant], self)
        self.identity_id: pulumi.Output[str] = identity.id
        self.client_id: pulumi.Output[str] = identity.client_id
        # For a second key the same service encrypts with: the objects account's datasets scope (storage.py).
        self.principal_id: pulumi.Output[str] = identity.principal_id
        self.register_outputs({"id": identity.id, "clientId": identity.client_id})
