"""A real wait for Azure role assignments to take effect before their principal relies on them.

ARM answers a role assignment's PUT at once, but the grant reaches the services that check it (the AKS
API server's Azure RBAC webhook, Key Vault) minutes later (Azure RBAC troubleshooting, "role assignment
changes take effect"; Azure/bicep #16601). ``depends_on`` only orders the calls, so the first Kubernetes
call or a CMK consumer's first key unwrap would fail with 403. pulumi-time's ``Sleep`` is the usual
tool; it is not available to this project, so a small dynamic provider sleeps a bounded, configured
time on create (``azure.rbacPropagationSeconds``) and again whenever the grants it waits for change.
Reads, updates and deletes cost nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi.dynamic

from components.azure.scope import AzureScope


class _SleepProvider(pulumi.dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        time.sleep(float(props["seconds"]))
        return pulumi.dynamic.CreateResult(id_=f"waited-{int(props['seconds'])}s", outs=props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        # New grants need a new wait: replacing runs ``create`` (the sleep) again.
        changed = olds.get("grants") != news.get("grants")
        return pulumi.dynamic.DiffResult(changes=changed, replaces=["grants"] if changed else [])


class RbacPropagation(pulumi.dynamic.Resource):
    """Completes ``seconds`` after every grant in ``grants`` was created; dependants wait on it."""

    def __init__(
        self, name: str, seconds: int, grants: Sequence[pulumi.Resource], opts: pulumi.ResourceOptions
    ) -> None:
        ids = [grant.id for grant in grants if isinstance(grant, pulumi.CustomResource)]
        super().__init__(
            _SleepProvider(),
            name,
            {"seconds": seconds, "grants": ids},
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(grants))),
        )


def propagated(
    name: str,
    scope: AzureScope,
    grants: Sequence[pulumi.Resource],
    parent: pulumi.Resource,
    at_least: int = 0,
) -> RbacPropagation:
    """The wait for ``grants``: the stack's ``azure.rbacPropagationSeconds``, or ``at_least`` where the
    service that checks the grants documents a longer delay."""
    seconds = max(scope.config.azure.rbac_propagation_seconds, at_least)
    return RbacPropagation(f"{name}-propagated", seconds, grants, scope.opts(parent))
