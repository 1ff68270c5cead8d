"""Audit logs of the resources that hold or guard data, sent to the stack's Log Analytics workspace.

Key use and denials on the vaults (Key Vault logging, learn.microsoft.com/azure/key-vault/general/
logging), reads, writes and deletes on the blob and file services (Azure Storage monitoring: the
setting goes on ``<account>/blobServices/default`` and ``<account>/fileServices/default``, not the
account) and registry logins and repository events (ACR monitoring reference). Each resource's ``audit``
category group (Azure Monitor "diagnostic settings", category groups) names its audit categories, so new
ones AKS-style services add are included without a code change. Retention is the workspace's, by
environment (cluster.py: a year in production, a month elsewhere).
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import monitor

from components.azure.scope import AzureScope


def audit_logs(
    name: str,
    scope: AzureScope,
    resource_id: pulumi.Input[str],
    workspace_id: pulumi.Input[str],
    parent: pulumi.Resource,
) -> monitor.DiagnosticSetting:
    """Send ``resource_id``'s audit category group to the workspace."""
    return monitor.DiagnosticSetting(
        f"{name}-audit",
        resource_uri=resource_id,
        workspace_id=workspace_id,
        log_analytics_destination_type="Dedicated",
        logs=[{"category_group": "audit", "enabled": True}],
        opts=scope.opts(parent),
    )


def service_id(account_id: pulumi.Input[str], service: str) -> pulumi.Output[str]:
    """A storage account's blob or file service, the resource its data-plane logs belong to."""
    return pulumi.Output.concat(account_id, f"/{service}Services/default")
