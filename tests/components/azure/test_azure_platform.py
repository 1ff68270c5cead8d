"""The Azure adapter end to end: full plans of the four templates, the handle it returns, tags and region
on everything, deletion protection in production, and the preflight failures."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pulumi
import pytest
from pulumi.runtime.sync_await import _sync_await

from components.azure import features
from components.azure.arm import ARM_TRANSPORT
from components.azure.identity import CLIENT_ID_ANNOTATION
from components.azure.keys import REGISTRY_CREATION_ROLE
from components.azure.platform import AzurePlatform
from components.azure.record import LIFECYCLE_RECORD_ROLE
from components.config import AZURE_DUTY_CYCLE_TAG, AZURE_ROLE_TAG, parse_stack_config
from components.handle import Cloud, ClusterHandle, Fabric, SharedStorageKind
from mlplatform.errors import InputError
from mlplatform.mocks import SUBSCRIPTION_ID, PlanMocks
from mlplatform.plan import Plan, isolated
from tests.components.azure.azure_plan_support import AZURE_STACKS, PLATFORM
from tests.stack_variants import cloud_only, plan_config, template

PlanFn = Callable[[str], Plan]
# Azure resource types that take no tags or no location of their own (sub-resources and extensions).
UNTAGGED = {
    "azure-native:network:Subnet",
    "azure-native:network:PrivateDnsZoneGroup",
    "azure-native:authorization:RoleAssignment",
    "azure-native:managedidentity:FederatedIdentityCredential",
    "azure-native:storage:BlobServiceProperties",
    "azure-native:storage:BlobContainer",
    "azure-native:storage:FileShare",
    "azure-native:storage:ManagementPolicy",
    "azure-native:monitor:DiagnosticSetting",
    # A cluster's sub-resource: no tags or location of its own (containerservice MaintenanceConfiguration).
    "azure-native:containerservice:MaintenanceConfiguration",
    # A flexible server's parameter, database and Entra administrator: ARM sub-resources without tags
    # (none is among the taggable types of the provider's schema, mlplatform_policies/taggable_types.txt).
    "azure-native:dbforpostgresql:AdministratorsMicrosoftEntra",
    "azure-native:dbforpostgresql:Configuration",
    "azure-native:dbforpostgresql:Database",
    # A subscription's Defender plan (security Pricing: scopeId, pricingName, pricingTier, no tags).
    "azure-native:security:Pricing",
    # The lifecycle record's writer role (a custom role definition: not among the taggable types).
    "azure-native:authorization:RoleDefinition",
    # The datasets' encryption scope: a storage account's sub-resource without tags or location (not among
    # the taggable types; pulumi-azure-native 3.29.0 storage.EncryptionScope takes neither).
    "azure-native:storage:EncryptionScope",
}
# The role tags the policy pack's contracts read: the registry's creation vault (its exception), the
# lifecycle record's account (lifecycle-record-locked, keys-per-domain).
ROLES = {REGISTRY_CREATION_ROLE, LIFECYCLE_RECORD_ROLE}
# The NFS account's file-service template deployment is a resource-group deployment, whose data ARM keeps
# with its resource group (uaenorth): its `location` is "only required at the tenant and management group
# scope" (Azure SDK for .NET, ArmDeploymentWhatIfContent.Location).
UNLOCATED = UNTAGGED | {
    "azure-native:keyvault:Key",
    "azure-native:containerservice:AgentPool",
    "azure-native:resources:Deployment",
}
GLOBAL = {"azure-native:privatedns:PrivateZone", "azure-native:privatedns:VirtualNetworkLink"}


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_full_template_plans_in_seconds(planned: PlanFn, stack: str) -> None:
    started = time.perf_counter()
    plan = planned(stack)
    assert time.perf_counter() - started < 30
    assert plan.outputs["cloud"] == "azure"
    assert any(r.type == "azure-native:containerservice:ManagedCluster" for r in plan.resources)


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_everything_is_tagged_and_in_region(cloud_plan: PlanFn, stack: str) -> None:
    plan = cloud_plan(stack)
    tags = parse_stack_config(template(stack), stack).base_tags()
    azure = [r for r in plan.resources if r.type.startswith("azure-native:")]
    for resource in azure:
        if resource.type not in UNTAGGED:
            # The base tags, and a role only where the policy pack's exception contract reads one.
            own = dict(resource.inputs.get("tags", {}))
            assert own.pop(AZURE_ROLE_TAG, REGISTRY_CREATION_ROLE) in ROLES, resource.name
            # And on each pool its duty cycle, where cost estimates read it (docs/cost.md).
            if resource.type == "azure-native:containerservice:AgentPool":
                assert 0 <= float(own.pop(AZURE_DUTY_CYCLE_TAG)) <= 1, resource.name
            assert own == tags, resource.name
        if resource.type not in UNLOCATED:
            expected = "global" if resource.type in GLOBAL else "uaenorth"
            assert resource.inputs.get("location") == expected, resource.name


def test_nodes_and_endpoints_subnets_deny_the_internet(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-enterprise-prod")
    groups = [r for r in plan.resources if r.type == "azure-native:network:NetworkSecurityGroup"]
    assert len(groups) == 2
    for group in groups:
        (rule,) = group.inputs["securityRules"]
        assert (rule["direction"], rule["access"], rule["sourceAddressPrefix"]) == (
            "Inbound",
            "Deny",
            "Internet",
        )
    subnets = {
        r.name.rsplit("-", 2)[1]: r.inputs for r in plan.resources if r.type == "azure-native:network:Subnet"
    }
    assert subnets["nodes"]["addressPrefix"] == "10.71.0.0/18"
    assert subnets["endpoints"]["addressPrefix"] == "10.71.64.0/18"
    assert subnets["endpoints"]["privateEndpointNetworkPolicies"] == "Enabled"
    # The third quarter starts with the API server's delegated /28 (API Server VNet Integration, C2).
    assert subnets["apiserver"]["addressPrefix"] == "10.71.128.0/28"
    assert "networkSecurityGroup" not in subnets["apiserver"]


def _data_bearing(protected: dict[str, bool]) -> dict[str, bool]:
    suffixes = (
        "-keys-vault",
        "-keys-disks",
        "-keys-storage",
        "-keys-registry",
        "-keys-des",
        "-objects-account",
        "-objects-datasets",
        "-objects-models",
        "-objects-registry",
        "-shared-account",
        "-shared-share",
        "-registry-acr",
    )
    return {name: flag for name, flag in protected.items() if name.endswith(suffixes)}


@pytest.mark.parametrize(("stack", "protect"), [("azure-smb-prod", True), ("azure-smb-dev", False)])
def test_production_protects_data_bearing_resources(
    cloud_plan: Callable[[str], Plan], stack: str, protect: bool
) -> None:
    protected = {r.name: r.protect for r in cloud_plan(stack).resources}
    data = _data_bearing(protected)
    assert len(data) == 12
    assert set(data.values()) == {protect}
    assert not protected[f"{stack}-azure-cluster-aks"]


def test_infiniband_on_a_size_without_it_names_the_supported_sizes(tmp_path: Path) -> None:
    config = cloud_only(template("azure-enterprise-dev"))
    config[PLATFORM]["nodePools"][2]["instanceType"] = "Standard_NC24ads_A100_v4"
    with pytest.raises(InputError) as error:
        plan_config(config, tmp_path, "azure-enterprise-dev")
    (problem,) = error.value.problems
    assert "nodePools[2].fabric" in problem
    assert "Standard_ND96isr_H100_v5" in problem and "Standard_ND96asr_v4" in problem


def _check_features(stack: str, unregistered: frozenset[str]) -> list[str]:
    """Run the feature check of ``stack``'s real config against the plan's mocked ARM, which answers as
    ``az feature show`` does; returns the paths it read."""
    read: list[str] = []

    def run() -> None:
        pulumi.runtime.set_mocks(
            PlanMocks("", "uaenorth", unregistered), project="ml-platform", stack=stack, preview=True
        )
        arm = ARM_TRANSPORT.get()
        assert arm is not None

        def recorded(request: httpx.Request) -> httpx.Response:
            read.append(f"{request.method} {request.url.path}?{request.url.query.decode()}")
            return arm.handle_request(request)

        ARM_TRANSPORT.set(httpx.MockTransport(recorded))
        features.require_features(parse_stack_config(template(stack), "test"))

    isolated(run)
    return read


def test_feature_check_reads_what_az_feature_show_reads() -> None:
    """azure-cli: `az feature show` is FeatureClient.features.get(namespace, name), i.e. REST "Features -
    Get" on /subscriptions/{sub}/providers/Microsoft.Features/providers/{ns}/features/{name}; both
    features registered, the enterprise stack (InfiniBand pool) passes."""
    subscription = f"/subscriptions/{SUBSCRIPTION_ID}/providers/Microsoft.Features/providers"
    assert _check_features("azure-enterprise-prod", frozenset()) == [
        f"GET {subscription}/Microsoft.Compute/features/EncryptionAtHost?api-version=2021-07-01",
        f"GET {subscription}/Microsoft.ContainerService/features/AKSInfinibandSupport?api-version=2021-07-01",
    ]
    assert features.required_features(parse_stack_config(template("azure-smb-dev"), "test")) == (
        features.ENCRYPTION_AT_HOST,
    )


def test_unregistered_feature_stops_the_program_with_the_command() -> None:
    """ARM answers an unregistered feature with properties.state "NotRegistered" (Features - Get); the
    check fails closed and names the az commands that register it."""
    with pytest.raises(pulumi.RunError) as error:
        _check_features("azure-enterprise-prod", frozenset({"AKSInfinibandSupport"}))
    message = str(error.value)
    assert "subscription feature Microsoft.ContainerService/AKSInfinibandSupport is NotRegistered" in message
    assert "az feature register --namespace Microsoft.ContainerService --name AKSInfinibandSupport" in message
    assert "EncryptionAtHost" not in message


def test_unreadable_feature_state_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused read (here ARM's 401 for a request without a bearer token) is not taken as Registered."""
    monkeypatch.setattr(
        "pulumi_azure_native.authorization.get_client_token", lambda: SimpleNamespace(token="")
    )
    with pytest.raises(pulumi.RunError) as error:
        _check_features("azure-smb-dev", frozenset())
    assert "Microsoft.Compute/EncryptionAtHost is unreadable (HTTP 401" in str(error.value)
    assert "AuthenticationFailed" in str(error.value)


async def _resolve(value: Any) -> Any:
    return await pulumi.Output.from_input(value).future()


def _handle(stack: str) -> tuple[ClusterHandle, dict[str, Any]]:
    """Build the adapter under the plan's mocks and resolve the handle's deploy-time values."""

    def build() -> tuple[ClusterHandle, dict[str, Any]]:
        pulumi.runtime.set_mocks(PlanMocks("", "uaenorth"), project="ml-platform", stack=stack, preview=True)
        handle = AzurePlatform(stack, parse_stack_config(template(stack), stack)).handle
        shared = handle.storage.shared
        assert shared is not None
        unresolved = {
            "identities": handle.identities,
            "resourceGroup": shared.csi["volumeAttributes"]["resourceGroup"],
        }
        return handle, _sync_await(_resolve(unresolved))

    return isolated(build)


def test_handle_contents() -> None:
    handle, resolved = _handle("azure-enterprise-prod")
    assert (handle.cloud, handle.name, handle.kubernetes_version) == (
        Cloud.AZURE,
        "azure-enterprise-prod",
        "1.35",
    )
    assert handle.fabrics == frozenset({Fabric.INFINIBAND})
    assert [p.name for p in handle.pools] == ["system", "inference", "gpu-ib"]
    assert isinstance(handle.registry, str) and handle.registry.endswith(".azurecr.io")
    assert isinstance(handle.storage.bucket_uri, str)
    assert handle.storage.bucket_uri.endswith(".blob.core.windows.net/models")
    # The workloads', the admission verifier's, and the lifecycle record's writers' (an audited stack).
    assert sorted(resolved["identities"]) == [
        "drift-monitor",
        "image-verifier",
        "inference",
        "registry",
        "rollout",
        "training",
    ]
    assert handle.lifecycle_record is not None
    assert all(list(a) == [CLIENT_ID_ANNOTATION] for a in resolved["identities"].values())
    shared = handle.storage.shared
    assert shared is not None
    assert (shared.kind, shared.capacity_gib, shared.mount_options) == (
        SharedStorageKind.AZURE_FILES_NFS,
        4096,
        ("nconnect=4",),
    )
    attributes = shared.csi["volumeAttributes"]
    assert shared.csi["driver"] == "file.csi.azure.com"
    assert shared.csi["volumeHandle"] == f"{attributes['storageAccount']}-training"
    assert "#" not in shared.csi["volumeHandle"]
    assert (attributes["shareName"], attributes["protocol"]) == ("training", "nfs")
    assert resolved["resourceGroup"]
