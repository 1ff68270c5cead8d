"""Where every Azure resource of one stack lands, and what each one carries.

One stack is one resource group in one region. Every component receives the same ``AzureScope`` so the
resource group, region, tags, the deployer's identity and the deletion-protection rule are decided once,
not re-derived (and drifted) in each module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from components.config import EndpointAccess, PlatformConfig, PrincipalType


@dataclass(frozen=True)
class Deployer:
    """The principal running ``pulumi up`` (from ``authorization.getClientConfig``).

    Needed for ARM ids (built-in role definitions live under the subscription), the Entra tenant of the
    Key Vault and the cluster, and the cluster-admin grant the in-cluster layer deploys with.
    """

    subscription_id: str
    tenant_id: str
    object_id: str
    # From config (``azure.deployerPrincipalType``, or implied by ``azure.deployerLogin``), not guessed
    # from the environment: ARM refuses a role assignment whose declared principal type does not match
    # the principal (role-assignment REST API, PrincipalTypeNotMatch).
    principal_type: PrincipalType


@dataclass(frozen=True)
class AzureScope:
    config: PlatformConfig
    resource_group_name: pulumi.Input[str]
    deployer: Deployer
    # Suffix that makes globally unique names (storage, Key Vault, ACR) stable per subscription and stack.
    name_suffix: str

    @property
    def location(self) -> str:
        return self.config.region

    @property
    def tags(self) -> dict[str, str]:
        return self.config.base_tags()

    @property
    def public_endpoints(self) -> bool:
        """Whether service endpoints stay reachable from the allow-list (SMB) or only privately (enterprise).

        Follows the cluster's endpoint choice: a team that reaches its API server from the office also
        pushes images and datasets from there.
        """
        return self.config.cluster.endpoint is EndpointAccess.PUBLIC

    @property
    def allow_list(self) -> tuple[str, ...]:
        """CIDRs let through service firewalls (Key Vault, storage, registry); empty when private."""
        return self.config.cluster.public_access_cidrs if self.public_endpoints else ()

    @property
    def placed(self) -> dict[str, Any]:
        """Resource group, region and tags: the keyword arguments every regional, taggable resource takes."""
        return {"resource_group_name": self.resource_group_name, "location": self.location, "tags": self.tags}

    def opts(
        self,
        parent: pulumi.Resource,
        *,
        data: bool = False,
        depends_on: Sequence[pulumi.Resource] = (),
        ignore_changes: Sequence[str] = (),
    ) -> pulumi.ResourceOptions:
        """Child options; ``data=True`` marks a data-bearing resource: protected from deletion in prod."""
        return pulumi.ResourceOptions(
            parent=parent,
            protect=data and self.config.is_protected,
            depends_on=list(depends_on),
            ignore_changes=list(ignore_changes) or None,
        )
