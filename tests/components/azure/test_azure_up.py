"""What a real first ``pulumi up`` on Azure refuses that the mocks accept (issue 24, review azure.md A/C).

Each test names the rule and its source, and failed on the code before its fix.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pulumi
import pytest

from components.azure import versions
from components.azure.arm import ARM_TRANSPORT
from components.catalog.azure import aks_supported
from components.config import ConfigError, parse_stack_config
from mlplatform.mocks import SUBSCRIPTION_ID, TENANT_ID, PlanMocks
from mlplatform.plan import Plan, isolated
from tests.components.azure.azure_plan_support import AZURE_STACKS, PLATFORM
from tests.stack_variants import one, template

PlanFn = Callable[[str], Plan]
WAIT = "pulumi-python:dynamic:Resource"
VariantFn = Callable[[str, Callable[[dict[str, Any]], None]], Plan]

# "Tag names can't contain these characters: <, >, %, &, \, ?, /" (learn.microsoft.com/azure/
# azure-resource-manager/management/tag-resources#limitations).
_ARM_TAG_NAME_FORBIDDEN = re.compile(r"[<>%&\\?/]")


def _tag_names(value: Any) -> Iterator[str]:
    """Every key of every ``tags`` mapping anywhere in a resource's inputs (top level, pool profiles)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "tags" and isinstance(item, Mapping):
                yield from item
            else:
                yield from _tag_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tag_names(item)


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_no_azure_tag_name_arm_refuses(cloud_plan: PlanFn, stack: str) -> None:
    """A1: ARM answers InvalidTagNameCharacters for a tag name with ``/`` (the creation vault's role tag)."""
    bad = [
        (r.name, name)
        for r in cloud_plan(stack).resources
        if r.type.startswith("azure-native:")
        for name in _tag_names(r.inputs)
        if _ARM_TAG_NAME_FORBIDDEN.search(name)
    ]
    assert bad == []


def test_config_refuses_a_tag_name_arm_refuses() -> None:
    """A1, at the edge: a stack's own ``tags`` reach every resource, so a bad name fails at config time."""
    raw = template("azure-smb-dev")
    raw[PLATFORM]["tags"] = {"team/owner": "vision"}
    with pytest.raises(ConfigError, match=r"ml-platform:platform\.tags\.team/owner: Azure tag names"):
        parse_stack_config(raw, "Pulumi.azure-smb-dev.yaml")


@pytest.mark.parametrize("stack", ["azure-enterprise-dev", "azure-enterprise-prod"])
def test_enterprise_egress_is_a_nat_gateway_on_the_stack_subnet(cloud_plan: PlanFn, stack: str) -> None:
    """A2: "Managed NAT gateway is incompatible with custom virtual networks" (learn.microsoft.com/azure/
    aks/nat-gateway); with a VNet of one's own, ``userAssignedNATGateway`` and the gateway on the node
    subnet before the cluster (learn.microsoft.com/azure/aks/egress-outboundtype)."""
    plan = cloud_plan(stack)
    (cluster,) = plan.by_type("azure-native:containerservice:ManagedCluster")
    assert cluster.inputs["networkProfile"]["outboundType"] == "userAssignedNATGateway"
    (gateway,) = plan.by_type("azure-native:network:NatGateway")
    (address,) = plan.by_type("azure-native:network:PublicIPAddress")
    assert gateway.inputs["sku"] == {"name": "Standard"}
    assert address.inputs["sku"]["name"] == "Standard"
    assert address.inputs["publicIPAllocationMethod"] == "Static"
    assert gateway.property_dependencies["publicIpAddresses"] == [address.urn]
    nodes = one(plan, "azure-native:network:Subnet", "-nodes-subnet")
    assert nodes.property_dependencies["natGateway"] == [gateway.urn]
    assert cluster.inputs["agentPoolProfiles"][0]["vnetSubnetID"]


def test_config_refuses_managed_nat_gateway_with_the_stack_vnet() -> None:
    """A2, at the edge: AKS refuses managedNATGateway with a custom VNet (ManagedNATGatewayWithCustomVNet
    NotAllowed; kubernetes-sigs/cluster-api-provider-azure#5429)."""
    raw = template("azure-enterprise-prod")
    raw[PLATFORM]["azure"]["outboundType"] = "managedNATGateway"
    with pytest.raises(
        ConfigError, match=r"azure\.outboundType: managedNATGateway needs an AKS-managed VNet"
    ):
        parse_stack_config(raw, "Pulumi.azure-enterprise-prod.yaml")


KEY_VAULT_CRYPTO_OFFICER = "14b46e9e-c2b7-41b4-b07b-48a6ebf60603"
KEY_USE = ("encrypt", "decrypt", "wrap", "unwrap", "sign", "verify", "release")


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_deployer_may_create_keys_in_every_rbac_vault_and_uses_only_the_signing_key(
    cloud_plan: PlanFn, stack: str
) -> None:
    """A4: an RBAC vault authorises the deployer's key PUT against its data plane (ForbiddenByRbac
    without a Key Vault role; pulumi/pulumi-azure-native#890; Owner/Contributor carry no Key Vault
    DataActions, learn.microsoft.com/azure/key-vault/general/rbac-guide). Each vault holding keys grants
    the deployer one, and each key waits for the grant to propagate. Review 35 A5: on the vaults of keys
    only services use (the stack's keys, the registry's creation key) the role is the stack's key
    administration role, Key Vault Crypto Officer's key actions (``keys/*``, rbac-guide) less every
    cryptographic one, so the deployer keeps no standing use of a data key; on the signing vault, whose
    key it signs the images with, Key Vault Crypto Officer."""
    plan = cloud_plan(stack)
    urns = {r.urn: r for r in plan.resources}
    (administration,) = [
        d
        for d in plan.by_type("azure-native:authorization:RoleDefinition")
        if d.name.endswith("-key-administration")
    ]
    (permissions,) = administration.inputs["permissions"]
    assert permissions["dataActions"][0] == "Microsoft.KeyVault/vaults/keys/*"
    # Review 35 B2: nor backup or restore, which copy a key into another vault (Keys - Backup Key).
    assert permissions["notDataActions"] == [
        f"Microsoft.KeyVault/vaults/keys/{op}/action" for op in (*KEY_USE, "backup", "restore")
    ]
    for vault in plan.by_type("azure-native:keyvault:Vault"):
        assert vault.inputs["properties"]["enableRbacAuthorization"] is True
        grants = [
            g
            for g in plan.by_type("azure-native:authorization:RoleAssignment")
            if g.name.endswith(("-deployer-crypto-officer", "-deployer-key-administration"))
            and g.property_dependencies.get("scope") == [vault.urn]
        ]
        assert len(grants) == 1, vault.name
        assert grants[0].inputs["principalId"] == TENANT_ID  # the mocked getClientConfig().objectId
        assert grants[0].inputs["principalType"] == "User"
        role = grants[0].inputs["roleDefinitionId"]
        if "-signing-" in vault.name:
            assert role.endswith(KEY_VAULT_CRYPTO_OFFICER), vault.name
        else:
            assert grants[0].property_dependencies["roleDefinitionId"] == [administration.urn], vault.name
            assert grants[0].inputs["description"] == "ml-platform deployer: key administration"
        keys = [
            k
            for k in plan.by_type("azure-native:keyvault:Key")
            if k.property_dependencies["vaultName"] == [vault.urn]
        ]
        assert keys, vault.name
        for key in keys:
            waits = [urns[u] for u in key.dependencies if urns[u].type == WAIT]
            assert [list(w.dependencies) for w in waits] == [[grants[0].urn]], key.name


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_cluster_admin_grant_is_waited_on_five_minutes(cloud_plan: PlanFn, stack: str) -> None:
    """A6: "New role assignments can take up to five minutes to propagate" (learn.microsoft.com/azure/aks/
    manage-azure-rbac); the Kubernetes provider's first call gets 403 and is not retried before that."""
    (wait,) = [r for r in cloud_plan(stack).by_type(WAIT) if r.name.endswith("-cluster-admin-propagated")]
    assert wait.inputs["seconds"] >= 300


def test_config_refuses_an_infiniband_pool_at_zero() -> None:
    """A5: the AKS autoscaler reads a scale-from-zero node's extended resources only from scale-set tags
    ``k8s.io_cluster-autoscaler_node-template_resources_<name>``, each ``_`` read as ``/``
    (kubernetes/autoscaler cluster-autoscaler/cloudprovider/azure/azure_template.go), so no tag can
    declare ``rdma/shared_ib``: the fabric test and training stay Pending until ``up`` times out."""
    raw = template("azure-enterprise-dev")
    raw[PLATFORM]["nodePools"][2]["minSize"] = 0
    with pytest.raises(
        ConfigError, match=r"nodePools\[2\]\.minSize: an InfiniBand pool cannot scale up from 0"
    ):
        parse_stack_config(raw, "Pulumi.azure-enterprise-dev.yaml")


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_stacks_run_a_minor_aks_supports_today(cloud_plan: PlanFn, stack: str) -> None:
    """A3: AKS release calendar (learn.microsoft.com/azure/aks/supported-kubernetes-versions): 1.33 ended
    Jul 2026 (LTS only), 1.34 ends Nov 2026; the cluster and every pool run a minor supported after today."""
    plan = cloud_plan(stack)
    today = datetime.datetime.now(datetime.UTC).date()
    (cluster,) = plan.by_type("azure-native:containerservice:ManagedCluster")
    versions = {cluster.inputs["kubernetesVersion"]} | {
        p.inputs["orchestratorVersion"] for p in plan.by_type("azure-native:containerservice:AgentPool")
    }
    assert all(aks_supported(v, (today.year, today.month)) for v in versions), versions


@pytest.mark.parametrize("version", ["1.33", "1.34", "1.31"])
def test_config_refuses_a_minor_out_of_aks_support(version: str) -> None:
    """A3, at the edge: a minor past (or at) its AKS end of life, or not on the calendar, is refused."""
    raw = template("azure-smb-dev")
    raw[PLATFORM]["cluster"]["kubernetesVersion"] = version
    with pytest.raises(ConfigError, match=rf"kubernetesVersion: AKS does not support {version} after"):
        parse_stack_config(raw, "Pulumi.azure-smb-dev.yaml")


def _check_version(stack: str, offered: tuple[str, ...]) -> list[str]:
    """Run the version preflight of ``stack``'s config against the mocked ARM; returns the paths it read."""
    read: list[str] = []

    def run() -> None:
        pulumi.runtime.set_mocks(
            PlanMocks("", "uaenorth", offered_versions=offered),
            project="ml-platform",
            stack=stack,
            preview=True,
        )
        arm = ARM_TRANSPORT.get()
        assert arm is not None

        def recorded(request: httpx.Request) -> httpx.Response:
            read.append(f"GET {request.url.path}?{request.url.query.decode()}")
            return arm.handle_request(request)

        ARM_TRANSPORT.set(httpx.MockTransport(recorded))
        versions.require_version(parse_stack_config(template(stack), "test"))

    isolated(run)
    return read


def test_version_preflight_reads_what_az_aks_get_versions_reads() -> None:
    """A3 at preview: ``az aks get-versions --location`` is "Managed Clusters - List Kubernetes Versions"
    (GET .../providers/Microsoft.ContainerService/locations/{location}/kubernetesVersions)."""
    assert _check_version("azure-smb-dev", ("1.35", "1.36")) == [
        f"GET /subscriptions/{SUBSCRIPTION_ID}/providers/Microsoft.ContainerService/locations/uaenorth"
        "/kubernetesVersions?api-version=2025-09-01"
    ]


def test_version_not_offered_in_the_region_stops_with_the_command() -> None:
    with pytest.raises(pulumi.RunError) as error:
        _check_version("azure-smb-dev", ("1.36", "1.37"))
    message = str(error.value)
    assert "Kubernetes 1.35 (cluster.kubernetesVersion) is not offered by AKS in uaenorth" in message
    assert "offered: 1.36, 1.37" in message
    assert "`az aks get-versions --location uaenorth --output table`" in message


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_vaults_storage_and_registry_send_audit_logs_to_the_workspace(cloud_plan: PlanFn, stack: str) -> None:
    """C3: Key Vault logging (learn.microsoft.com/azure/key-vault/general/logging), Azure Storage and ACR
    resource logs: every vault, both storage services and the registry have an ``audit`` diagnostic
    setting to the stack's Log Analytics workspace (the AKS one already sends control-plane logs)."""
    plan = cloud_plan(stack)
    (workspace,) = plan.by_type("azure-native:operationalinsights:Workspace")
    settings = plan.by_type("azure-native:monitor:DiagnosticSetting")
    audited = set()
    # Audited stacks (enterprise, prod) keep an immutable archive (components/azure/audit.py).
    archives = [r.urn for r in plan.by_type("azure-native:storage:StorageAccount") if "audit" in r.name]
    assert len(archives) == (stack == "azure-enterprise-prod")
    for setting in settings:
        if "workspaceId" not in setting.inputs:
            # The AKS control plane's audit categories copied into the archive.
            assert setting.property_dependencies["storageAccountId"] == archives
            continue
        assert setting.property_dependencies["workspaceId"] == [workspace.urn]
        if setting.inputs.get("logs") == [{"categoryGroup": "audit", "enabled": True}]:
            audited |= set(setting.property_dependencies["resourceUri"])
    urns = {r.urn: r for r in plan.resources}
    for token in (
        "azure-native:keyvault:Vault",
        "azure-native:storage:StorageAccount",
        "azure-native:containerregistry:Registry",
    ):
        for resource in plan.by_type(token):
            assert resource.urn in audited, resource.name
    uris = [s.inputs["resourceUri"] for s in settings if "Services/default" in str(s.inputs["resourceUri"])]
    # The data account's blob and the share's file service, and on audited stacks the audit archive's and
    # the lifecycle record's blob services (record.py; platform.py audits its reads and appends).
    records = [r for r in plan.by_type("azure-native:storage:StorageAccount") if "-record-" in r.name]
    assert len(records) == len(archives)
    services = ["blobServices"] * (1 + len(archives) + len(records)) + ["fileServices"]
    assert sorted(u.rsplit("/", 2)[1] for u in uris) == services
    assert {urns[u].type for u in audited} >= {"azure-native:keyvault:Vault"}


def test_restricted_stacks_audit_reads_of_the_api_server(cloud_plan: PlanFn) -> None:
    """C3: ``kube-audit-admin`` leaves out get/list/watch (Secret reads); restricted data audits them with
    ``kube-audit`` (learn.microsoft.com/azure/aks/monitor-aks-reference)."""
    categories = {
        stack: {
            log["category"]
            for s in cloud_plan(stack).by_type("azure-native:monitor:DiagnosticSetting")
            for log in s.inputs["logs"]
            if "category" in log
        }
        for stack in ("azure-enterprise-dev", "azure-smb-dev")
    }
    assert "kube-audit" in categories["azure-enterprise-dev"]  # dataClassification: restricted
    assert "kube-audit" not in categories["azure-smb-dev"]
    # Not both: kube-audit-admin is kube-audit's subset (Azure review D3).
    assert "kube-audit-admin" not in categories["azure-enterprise-dev"]
    assert "kube-audit-admin" in categories["azure-smb-dev"]


@pytest.mark.parametrize("stack", ["azure-enterprise-prod", "azure-smb-dev"])
def test_the_subnets_of_the_vnet_are_written_one_at_a_time(cloud_plan: PlanFn, stack: str) -> None:
    """Azure review U2: ARM refuses a second concurrent write to one VNet's subnets with
    AnotherOperationInProgress (pulumi/pulumi-azure-native #699, #1024), and the four subnets depended
    only on the VNet; now each waits for the one before it, so they form one chain."""
    subnets = cloud_plan(stack).by_type("azure-native:network:Subnet")
    urns = {s.urn for s in subnets}
    before = {s.urn: [u for u in s.dependencies if u in urns] for s in subnets}
    assert len(subnets) >= 3
    assert sorted(len(b) for b in before.values()) == [0] + [1] * (len(subnets) - 1)
    assert len({b[0] for b in before.values() if b}) == len(subnets) - 1  # nobody waits on the same one
