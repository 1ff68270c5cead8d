"""The Azure audit archive, Activity Log export and alerts as planned (components/azure/audit.py, alerts.py).

Sources: azure-native ``AccountImmutabilityPolicyProperties.state`` ("A policy can only be created in a
Disabled or Unlocked state ... Only a policy in an Unlocked state can transition to a Locked state");
Azure Monitor "Activity log event schema" (the eight categories); Azure Monitor Logs table reference
(AzureActivity, AKSAuditAdmin, AKSAudit).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pulumi
import pytest

from components.azure.alerts import LOG_ALERTS
from components.azure.arm import ArmReader
from components.azure.audit import ACTIVITY_LOG_CATEGORIES, LOCKED, UNLOCKED, archive_state
from mlplatform.plan import Plan


def reader(status: int, locked_days: int | None = None) -> ArmReader:
    body: dict[str, object] = {"name": "x"}
    if locked_days is not None:
        policy = {"immutabilityPeriodSinceCreationInDays": locked_days, "state": LOCKED}
        body["properties"] = {
            "immutableStorageWithVersioning": {"enabled": True, "immutabilityPolicy": policy}
        }
    transport = httpx.MockTransport(lambda request: httpx.Response(status, json=body))
    return ArmReader(httpx.Client(base_url="https://management.azure.com", transport=transport), "sub")


def test_the_archive_is_locked_once_it_exists() -> None:
    assert archive_state(reader(404), "rg", "mlpaudit0", 365) == UNLOCKED
    assert archive_state(reader(200), "rg", "mlpaudit0", 365) == LOCKED
    assert archive_state(reader(200, 365), "rg", "mlpaudit0", 730) == LOCKED


def test_a_shorter_retention_than_the_locked_archive_stops_the_preview() -> None:
    """azure-native AccountImmutabilityPolicyProperties.state: a Locked policy "only allows the increase
    of the immutability retention period"; lowering it would fail at `pulumi up`."""
    with pytest.raises(pulumi.RunError, match=r"audit\.retentionDays: 365 is shorter than the 730 days"):
        archive_state(reader(200, 730), "rg", "mlpaudit0", 365)


def test_an_unreadable_archive_stops_the_preview() -> None:
    with pytest.raises(pulumi.RunError, match="cannot read the audit archive mlpaudit0: HTTP 403"):
        archive_state(reader(403), "rg", "mlpaudit0", 365)


def test_the_activity_log_goes_to_the_archive_and_the_workspace(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("azure-enterprise-prod")
    (archive,) = [r for r in plan.by_type("azure-native:storage:StorageAccount") if "audit" in r.name]
    policy = archive.inputs["immutableStorageWithVersioning"]["immutabilityPolicy"]
    assert policy["allowProtectedAppendWrites"] is True
    assert policy["immutabilityPeriodSinceCreationInDays"] == 365
    (export,) = [s for s in plan.by_type("azure-native:monitor:DiagnosticSetting") if "activity" in s.name]
    assert export.inputs["resourceUri"] == "/subscriptions/00000000-0000-0000-0000-000000000000"
    assert [log["category"] for log in export.inputs["logs"]] == list(ACTIVITY_LOG_CATEGORIES)
    assert export.property_dependencies["storageAccountId"] == [archive.urn]


@pytest.mark.parametrize(
    ("stack", "secret_reads"), [("azure-enterprise-prod", True), ("azure-smb-prod", False)]
)
def test_alerts_query_the_workspace_and_keep_an_attached_action_group(
    cloud_plan: Callable[[str], Plan], stack: str, secret_reads: bool
) -> None:
    """Secret reads are only in kube-audit, which restricted stacks alone send (cluster.py)."""
    plan = cloud_plan(stack)
    (workspace,) = plan.by_type("azure-native:operationalinsights:Workspace")
    rules = {
        r.inputs["ruleName"].removeprefix(f"{stack}-"): r
        for r in plan.by_type("azure-native:monitor:ScheduledQueryRule")
    }
    expected = {name for name, alert in LOG_ALERTS.items() if secret_reads or not alert.restricted_only}
    assert set(rules) == expected and ("secret-read-by-person" in rules) is secret_reads
    for rule in rules.values():
        assert rule.property_dependencies["scopes"] == [workspace.urn]
        assert rule.ignore_changes == ("actions",)
    # kubectl 1.30+ exec is a WebSocket get (kubernetes/kubectl#1761), which only kube-audit (AKSAudit)
    # carries: the restricted stack's rule reads it; AKSAuditAdmin "excludes get and list".
    (exec_rule,) = [c["query"] for c in rules["pod-exec-or-attach"].inputs["criteria"]["allOf"]]
    assert exec_rule.startswith("AKSAudit |" if secret_reads else "AKSAuditAdmin |")
    assert 'Verb in ("create", "get")' in exec_rule
