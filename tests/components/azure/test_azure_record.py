"""The model lifecycle record on Azure (components/azure/record.py; docs/lifecycle.md, "The record").

Issue 40, "An append-only record": every alias move, approval and rollout step appended to object storage
under the stack's key with immutability in the region, which the identities that act cannot rewrite:
account-level version-level immutability for ``audit.retentionDays`` (Azure Storage, "Time-based
retention policies for immutable blob data"), and writers holding a custom role with only
``blobs/add/action`` and ``blobs/read`` (Azure Storage, "Actions and attributes for Azure role assignment
conditions for Azure Blob Storage": add/action creates a blob, write replaces one, delete removes one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.azure.network import subnet_plan
from components.azure.record import (
    RECORD_CONTAINER,
    RECORD_WRITER_ACTIONS,
    RECORD_WRITER_DATA_ACTIONS,
    lock_command,
)
from components.config import AZURE_ROLE_TAG, parse_stack_config
from mlplatform.mocks import SUBSCRIPTION_ID
from mlplatform.plan import Plan
from tests.components.azure.azure_plan_support import target
from tests.stack_variants import one, template

PlanFn = Callable[[str], Plan]
STACK = "azure-enterprise-prod"
ACCOUNT = "azure-enterprise-prod-azure-record-account"
WRITER = "azure-enterprise-prod-azure-record-writer"
BLOBS = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"


def _kubernetes(plan: Plan, kind: str, name: str) -> dict[str, Any]:
    [found] = [
        r.inputs
        for r in plan.resources
        if r.type.startswith("kubernetes:")
        and r.inputs.get("kind") == kind
        and r.inputs.get("metadata", {}).get("name") == name
        and r.inputs.get("metadata", {}).get("namespace") == "ml-inference"
    ]
    return found


def test_the_record_is_its_own_immutable_account_under_the_object_data_key(cloud_plan: PlanFn) -> None:
    plan = cloud_plan(STACK)
    config = parse_stack_config(template(STACK), STACK)
    account = one(plan, "azure-native:storage:StorageAccount", "-record-account").inputs
    # Version-level immutability support, which only the account's creation sets; the policy is the lock
    # command's, the same whatever exists (a second plan is a no-op: test_record_lock.py).
    assert account["immutableStorageWithVersioning"] == {"enabled": True}
    lock = one(plan, "command:local:Command", "-record-immutability-lock")
    assert (
        lock.inputs["create"]
        == lock.inputs["update"]
        == lock_command(
            SUBSCRIPTION_ID, f"ml-platform-{STACK}", account["accountName"], config.audit.retention_days
        )
    )
    assert "delete" not in lock.inputs, "a locked policy cannot be removed: nothing runs on delete"
    assert one(plan, "azure-native:storage:StorageAccount", "-record-account").urn in lock.dependencies
    # No event before the lock holds: the container, the record's root, waits for it.
    assert lock.urn in one(plan, "azure-native:storage:BlobContainer", "-record-container").dependencies
    assert account["tags"][AZURE_ROLE_TAG] == "lifecycle-record"
    assert account["encryption"]["keyVaultProperties"]["keyName"] == "storage-cmk"
    assert (account["allowSharedKeyAccess"], account["allowBlobPublicAccess"]) == (False, False)
    assert one(plan, "azure-native:storage:BlobServiceProperties", "-record-blob-service").inputs[
        "isVersioningEnabled"
    ]
    container = one(plan, "azure-native:storage:BlobContainer", "-record-container").inputs
    assert (container["containerName"], container["publicAccess"]) == (RECORD_CONTAINER, "None")
    # Reached from the cluster through a private endpoint; every read and append logged.
    endpoint = one(plan, "azure-native:network:PrivateEndpoint", "-record-blob-pe").inputs
    assert target(endpoint["privateLinkServiceConnections"][0]["privateLinkServiceId"]) == ACCOUNT
    audit = one(plan, "azure-native:monitor:DiagnosticSetting", "-record-blob-audit").inputs
    assert audit["resourceUri"].endswith("/blobServices/default")
    assert plan.outputs["lifecycleRecord"] == f"azblob://{account['accountName']}/{RECORD_CONTAINER}"


def test_only_the_registry_holds_the_create_only_writer_role(cloud_plan: PlanFn) -> None:
    """Review rev40c A1: the registry appends every event for the user it authenticated; the rollout and
    the drift monitor, each its own federated identity, read the record's container and append through
    the registry."""
    plan = cloud_plan(STACK)
    role = one(plan, "azure-native:authorization:RoleDefinition", "-record-writer").inputs
    assert role["roleType"] == "CustomRole"
    assert role["permissions"] == [
        {"actions": list(RECORD_WRITER_ACTIONS), "dataActions": list(RECORD_WRITER_DATA_ACTIONS)}
    ]
    assert set(RECORD_WRITER_DATA_ACTIONS) == {f"{BLOBS}/read", f"{BLOBS}/add/action"}
    assignments = [
        r
        for r in plan.by_type("azure-native:authorization:RoleAssignment")
        if target(r.inputs["scope"]) == ACCOUNT
    ]
    assert sorted(r.name for r in assignments) == [
        "azure-enterprise-prod-azure-registry-identity-record-writer"
    ]
    readers = {
        r.name
        for r in plan.by_type("azure-native:authorization:RoleAssignment")
        if r.name.endswith("-record-reader")
    }
    assert readers == {
        "azure-enterprise-prod-azure-drift-monitor-identity-record-reader",
        "azure-enterprise-prod-azure-rollout-identity-record-reader",
    }
    assert {target(r.inputs["roleDefinitionId"]) for r in assignments} == {WRITER}
    subjects = {
        r.name.removeprefix("azure-enterprise-prod-azure-").removesuffix("-identity-federation"): r.inputs[
            "subject"
        ]
        for r in plan.by_type("azure-native:managedidentity:FederatedIdentityCredential")
    }
    assert subjects["rollout"] == "system:serviceaccount:ml-inference:rollout"
    assert subjects["drift-monitor"] == "system:serviceaccount:ml-inference:drift-monitor"


def test_the_rollout_appends_to_the_record_as_its_federated_identity(planned: PlanFn) -> None:
    plan = planned(STACK)
    cron = _kubernetes(plan, "CronJob", "inference-rollout")
    template_ = cron["spec"]["jobTemplate"]["spec"]["template"]
    [container] = template_["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MLPLATFORM_RECORD"] == plan.outputs["lifecycleRecord"]
    # AKS workload identity: the pod's label and its ServiceAccount's client id (AKS docs, "Use Microsoft
    # Entra Workload ID with AKS").
    assert template_["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert template_["spec"]["serviceAccountName"] == "rollout"
    account = _kubernetes(plan, "ServiceAccount", "rollout")
    assert (
        account["metadata"]["annotations"]["azure.workload.identity/client-id"]
        == (plan.outputs["workloadIdentities"]["rollout"])
    )
    # Out to the record's private endpoint (the endpoints' subnet) and Entra ID's token exchange.
    policy = _kubernetes(plan, "NetworkPolicy", "inference-rollout")
    allowed = {
        (block["ipBlock"]["cidr"], port["port"])
        for rule in policy["spec"]["egress"]
        for block in rule.get("to", [])
        if "ipBlock" in block
        for port in rule.get("ports", [])
    }
    endpoints = subnet_plan(parse_stack_config(template(STACK), STACK).network.cidr).endpoints
    assert {(endpoints, 443), ("0.0.0.0/0", 443)} <= allowed


def test_an_unaudited_stack_keeps_no_record_and_no_writer(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-smb-dev")
    assert not [r for r in plan.by_type("azure-native:storage:StorageAccount") if "record" in r.name]
    assert not [r for r in plan.by_type("azure-native:authorization:RoleDefinition") if "record" in r.name]
    assert "lifecycleRecord" not in plan.outputs
    assert not {"rollout", "drift-monitor"} & set(plan.outputs["workloadIdentities"])
