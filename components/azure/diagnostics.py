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
    *,
    archive_id: pulumi.Input[str] | None = None,
    categories: tuple[str, ...] = (),
) -> monitor.DiagnosticSetting:
    """Send ``resource_id``'s audit category group (or the named ``categories``, for a resource type
    without one) to the workspace, and to the immutable audit archive (audit.py) when given."""
    logs = [{"category": c, "enabled": True} for c in categories] or [
        {"category_group": "audit", "enabled": True}
    ]
    return monitor.DiagnosticSetting(
        f"{name}-audit",
        resource_uri=resource_id,
        workspace_id=workspace_id,
        storage_account_id=archive_id,
        log_analytics_destination_type="Dedicated",
        logs=logs,
        opts=scope.opts(parent),
    )


def archived_logs(
    name: str,
    scope: AzureScope,
    resource_id: pulumi.Input[str],
    archive_id: pulumi.Input[str],
    categories: tuple[str, ...],
    parent: pulumi.Resource,
) -> monitor.DiagnosticSetting:
    """A second setting that copies ``categories`` of a resource whose workspace setting lives elsewhere
    (the AKS control plane, cluster.py) into the audit archive."""
    return monitor.DiagnosticSetting(
        f"{name}-archive",
        resource_uri=resource_id,
        storage_account_id=archive_id,
        logs=[{"category": c, "enabled": True} for c in categories],
        opts=scope.opts(parent),
    )


def service_id(account_id: pulumi.Input[str], service: str) -> pulumi.Output[str]:
    """A storage account's blob or file service, the resource its data-plane logs belong to."""
    return pulumi.Output.concat(account_id, f"/{service}Services/default")
