"""The subscription's audit trail and threat detection for one stack (docs/compliance.md).

- An audit archive: a storage account in the stack's region whose blobs are immutable for
  ``audit.retentionDays`` (account-level, version-level time-based immutability, with protected append
  writes, since diagnostic settings write append blobs: Azure Storage "Configure immutability policies
  for blob versions"; Azure Monitor "Diagnostic settings", storage destinations).
- The subscription's Activity Log, every category, into the archive and the stack's Log Analytics
  workspace (Azure Monitor "Activity log" schema, categories).
- Log search alerts on the workspace for security events (alerts.py).
- Microsoft Defender plans on the subscription: Containers (AKS: control-plane audit analysis, runtime
  protection), Key Vault, Storage and open-source relational databases (the registry's PostgreSQL)
  (Defender for Cloud REST API, Pricings).

A time-based immutability policy can be created only ``Unlocked`` and locked by a later update, never
unlocked again (azure-native ``AccountImmutabilityPolicyProperties.state``). So the preview reads the
archive: absent, the first ``pulumi up`` creates it unlocked and says the next one locks it; present,
the policy is ``Locked``. Subscription-wide settings (the Activity Log export, Defender plans) are kept
when the stack is destroyed: detection must outlive one stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import monitor, security, storage

from components.azure import naming
from components.azure.alerts import security_alerts
from components.azure.arm import ArmReader, ArmReadError, arm_reader
from components.azure.identity import EncryptionIdentity
from components.azure.keys import KeyRef
from components.azure.scope import AzureScope
from components.azure.storage import blob_sku, hardened_account, versioned_blob_service
from components.config import AZURE_ROLE_TAG, PROJECT, DetectionSource

# Activity Log categories (Azure Monitor "Azure Activity Log event schema": the eight categories).
ACTIVITY_LOG_CATEGORIES = (
    "Administrative",
    "Security",
    "ServiceHealth",
    "Alert",
    "Recommendation",
    "Policy",
    "Autoscale",
    "ResourceHealth",
)
# Defender for Cloud plans by pricing name, with the sub-plan where the plan has several (Defender for
# Cloud REST API "Pricings - Update": KeyVaults PerKeyVault, StorageAccounts DefenderForStorageV2).
DEFENDER_PLANS: dict[str, str | None] = {
    "Containers": None,
    "KeyVaults": "PerKeyVault",
    "StorageAccounts": "DefenderForStorageV2",
    "OpenSourceRelationalDatabases": None,
}
STANDARD_TIER = "Standard"
# Storage resource provider API the archive is read with (Storage Accounts - Get Properties).
STORAGE_API_VERSION = "2023-05-01"
LOCKED, UNLOCKED = "Locked", "Unlocked"
# The tag on the archive that tells the policy pack the subscription's Defender plans are someone
# else's (``audit.detection: existing``), checked at preview (``check_existing_plans``). ARM refuses "/"
# in tag names (config.AZURE_ROLE_TAG).
THREAT_DETECTION_TAG = AZURE_ROLE_TAG.replace("role", "threat-detection")


def check_existing_plans(subscription: str) -> None:
    """Raise a ``RunError`` naming every Defender plan of ``DEFENDER_PLANS`` not on Standard."""
    off = []
    for plan in DEFENDER_PLANS:
        tier = security.get_pricing(pricing_name=plan, scope_id=subscription).pricing_tier
        if tier != STANDARD_TIER:
            off.append(f"{plan} is {tier}")
    if off:
        raise pulumi.RunError(
            f"audit.detection existing: Defender plans of {subscription} are off: {', '.join(off)}; turn "
            "them on with: az security pricing create -n <plan> --tier standard"
        )


def archive_account_name(suffix: str) -> str:
    return naming.storage_account_name("audit", suffix)


def existing_account(arm: ArmReader, resource_group: str, account: str, what: str) -> dict[str, Any] | None:
    """ARM's view of the immutable account ``what`` (the audit archive, the lifecycle record); None while
    the first ``pulumi up`` is yet to create it."""
    path = (
        f"/subscriptions/{arm.subscription_id}/resourceGroups/{resource_group}"
        f"/providers/Microsoft.Storage/storageAccounts/{account}"
    )
    try:
        return arm.get(path, {"api-version": STORAGE_API_VERSION})
    except ArmReadError as exc:
        if exc.status == 404:
            return None
        raise pulumi.RunError(f"cannot read the {what} {account}: {exc}") from exc


def refuse_shorter_retention(found: dict[str, Any], retention_days: int, account: str, what: str) -> None:
    """A locked policy "only allows the increase of the immutability retention time" (azure-native
    ``AccountImmutabilityPolicyProperties.state``): a shorter ``audit.retentionDays`` stops the preview
    rather than fail ``pulumi up`` half-way."""
    immutable = (found.get("properties") or {}).get("immutableStorageWithVersioning") or {}
    policy = immutable.get("immutabilityPolicy") or {}
    locked_days = policy.get("immutabilityPeriodSinceCreationInDays")
    if policy.get("state") == LOCKED and isinstance(locked_days, int) and retention_days < locked_days:
        raise pulumi.RunError(
            f"audit.retentionDays: {retention_days} is shorter than the {locked_days} days {what} "
            f"{account} is locked for; a locked immutability policy can only be lengthened"
        )


def archive_state(
    arm: ArmReader, resource_group: str, account: str, retention_days: int, what: str = "audit archive"
) -> str:
    """``Locked`` when the immutable account ``what`` exists (its unlocked policy is then locked),
    ``Unlocked`` when the first ``pulumi up`` is yet to create it; a shorter retention than the locked
    one is refused (``refuse_shorter_retention``)."""
    found = existing_account(arm, resource_group, account, what)
    if found is None:
        pulumi.warn(
            f"{what} {account}: created with an unlocked immutability policy (Azure creates it "
            "no other way); the next `pulumi up` locks it"
        )
        return UNLOCKED
    refuse_shorter_retention(found, retention_days, account, what)
    return LOCKED


def immutability(retention_days: int, state: str, *, append_writes: bool = True) -> dict[str, Any]:
    """Account-level version-level immutability: every blob version kept ``retention_days`` from its
    creation. ``append_writes``: appends to append blobs stay allowed (what diagnostic settings write)."""
    return {
        "enabled": True,
        "immutability_policy": {
            "immutability_period_since_creation_in_days": retention_days,
            "state": state,
            "allow_protected_append_writes": append_writes,
        },
    }


@dataclass(frozen=True)
class AuditArchiveArgs:
    scope: AzureScope
    encryption_identity: EncryptionIdentity
    key: KeyRef
    workspace_id: pulumi.Input[str]


class AuditArchive(pulumi.ComponentResource):
    """The immutable archive, the Activity Log export and the Defender plans."""

    def __init__(self, name: str, args: AuditArchiveArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:AuditArchive", name, None, opts)
        scope = args.scope
        config = scope.config
        account_name = archive_account_name(scope.name_suffix)
        with arm_reader() as arm:
            state = archive_state(
                arm, f"{PROJECT}-{config.stack_name}", account_name, config.audit.retention_days
            )
        settings = hardened_account(scope, args.encryption_identity, args.key, public=False)
        # Azure Monitor writes as a trusted Microsoft service, which a firewall lets through only while
        # public network access is on with default Deny (Azure Storage network security, "Trusted
        # access"); no address is allowed.
        settings["public_network_access"] = "Enabled"
        subscription = f"/subscriptions/{scope.deployer.subscription_id}"
        existing = config.audit.detection is DetectionSource.EXISTING
        placed = scope.placed
        if existing:
            check_existing_plans(subscription)
            placed = {**placed, "tags": {**scope.tags, THREAT_DETECTION_TAG: DetectionSource.EXISTING.value}}
        account = storage.StorageAccount(
            f"{name}-account",
            account_name=account_name,
            kind="StorageV2",
            sku={"name": blob_sku(config)},
            enable_https_traffic_only=True,
            immutable_storage_with_versioning=immutability(config.audit.retention_days, state),
            **settings,
            **placed,
            opts=scope.opts(self, data=True, depends_on=[args.encryption_identity.ready]),
        )
        versioned_blob_service(self, name, scope, account)
        self.account_id: pulumi.Output[str] = account.id
        kept = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        monitor.DiagnosticSetting(
            f"{name}-activity-log",
            name=f"{PROJECT}-{config.stack_name}-activity",
            resource_uri=subscription,
            storage_account_id=account.id,
            workspace_id=args.workspace_id,
            logs=[{"category": category, "enabled": True} for category in ACTIVITY_LOG_CATEGORIES],
            opts=kept,
        )
        for plan, sub_plan in () if existing else DEFENDER_PLANS.items():
            security.Pricing(
                f"{name}-defender-{plan.lower()}",
                scope_id=subscription,
                pricing_name=plan,
                pricing_tier=STANDARD_TIER,
                sub_plan=sub_plan,
                opts=kept,
            )
        security_alerts(name, scope, args.workspace_id, self)
        self.register_outputs({"accountId": account.id})
