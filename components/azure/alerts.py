"""Security alerts on an audited Azure stack: log search alert rules over its Log Analytics workspace
(docs/compliance.md, "Alerts and runbook").

The rules query the tables the stack's diagnostic settings fill: ``AzureActivity`` (the subscription's
Activity Log, audit.py), ``AKSAuditAdmin`` (kube-audit-admin) and ``AKSAudit`` (kube-audit, restricted
data only), with the columns of the Azure Monitor Logs table reference. They fire into Azure Monitor
with no action group: the operator attaches the security team's action group, which a later ``pulumi
up`` keeps (``actions`` is left to the cloud).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import monitor

from components.azure.scope import AzureScope
from components.config import DataClassification


@dataclass(frozen=True)
class LogAlert:
    # ``{audit}``: the table of the cluster's API-server audit stream, AKSAudit where kube-audit is sent
    # (restricted data), AKSAuditAdmin elsewhere (cluster.py).
    query: str
    description: str
    # The rule needs the full API-server audit (kube-audit), sent for restricted data only (cluster.py).
    restricted_only: bool = False


LOG_ALERTS: dict[str, LogAlert] = {
    "diagnostic-setting-deleted": LogAlert(
        'AzureActivity | where OperationNameValue =~ "MICROSOFT.INSIGHTS/DIAGNOSTICSETTINGS/DELETE"'
        ' and ActivityStatusValue =~ "Success"',
        "a diagnostic setting (an audit export) was deleted",
    ),
    "defender-plan-changed": LogAlert(
        'AzureActivity | where OperationNameValue =~ "MICROSOFT.SECURITY/PRICINGS/WRITE"',
        "a Defender for Cloud plan was changed",
    ),
    "key-vault-changed-or-deleted": LogAlert(
        'AzureActivity | where OperationNameValue in~ ("MICROSOFT.KEYVAULT/VAULTS/DELETE",'
        ' "MICROSOFT.KEYVAULT/VAULTS/WRITE", "MICROSOFT.KEYVAULT/VAULTS/ACCESSPOLICIES/WRITE")'
        ' and ActivityStatusValue =~ "Success"',
        "a Key Vault was deleted or its settings or access changed",
    ),
    # kubectl 1.30 and later exec over WebSocket, a get (kubernetes/kubectl#1761), which AKSAuditAdmin
    # (kube-audit-admin) leaves out: only kube-audit (AKSAudit, restricted stacks) sees it. Elsewhere the
    # rule reads AKSAuditAdmin and sees SPDY exec (a create) only (docs/compliance.md).
    "pod-exec-or-attach": LogAlert(
        '{audit} | where tostring(ObjectRef.subresource) in ("exec", "attach") and Verb in ("create", "get")',
        "someone opened a shell in (exec) or attached to a pod",
    ),
    "secret-read-by-person": LogAlert(
        'AKSAudit | where tostring(ObjectRef.resource) == "secrets" and Verb in ("get", "list", "watch")'
        ' and not(tostring(User.username) startswith "system:")',
        "a Secret was read by a principal that is not an in-cluster identity",
        restricted_only=True,
    ),
}
# How often each rule runs and over what window (ISO 8601 durations, scheduledQueryRules API).
EVERY = "PT5M"


def security_alerts(
    name: str, scope: AzureScope, workspace_id: pulumi.Input[str], parent: pulumi.Resource
) -> list[monitor.ScheduledQueryRule]:
    restricted = scope.config.data_classification is DataClassification.RESTRICTED
    return [
        monitor.ScheduledQueryRule(
            f"{name}-{alert_name}",
            rule_name=f"{scope.config.stack_name}-{alert_name}",
            description=f"{alert.description} (runbook: docs/compliance.md, {alert_name})",
            kind="LogAlert",
            enabled=True,
            severity=1,
            scopes=[workspace_id],
            evaluation_frequency=EVERY,
            window_size=EVERY,
            criteria={
                "all_of": [
                    {
                        "query": alert.query.replace(
                            "{audit}", "AKSAudit" if restricted else "AKSAuditAdmin"
                        ),
                        "time_aggregation": "Count",
                        "operator": "GreaterThan",
                        "threshold": 0,
                        "failing_periods": {
                            "number_of_evaluation_periods": 1,
                            "min_failing_periods_to_alert": 1,
                        },
                    }
                ]
            },
            # A table appears in the workspace with its first record (AKSAuditAdmin after the first
            # change): the rule is made before then.
            skip_query_validation=True,
            **scope.placed,
            opts=scope.opts(parent, ignore_changes=["actions"]),
        )
        for alert_name, alert in LOG_ALERTS.items()
        if restricted or not alert.restricted_only
    ]
