"""Node pools: the System pool choice, the hardening every pool shares, GPU, spot and InfiniBand pools,
and the PoolHandles the Kubernetes layer reads."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pulumi
import pytest
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.azure import zones
from components.azure.arm import ArmReader
from components.azure.node_pools import agent_pool_names, pool_handle, system_pool, warn_system_pool_drift
from components.config import PlatformConfig, parse_stack_config
from components.handle import POOL_LABEL, Fabric, PoolKind, Taint
from mlplatform.errors import InputError
from mlplatform.mocks import ExistingAccount, PlanMocks
from mlplatform.plan import Plan, isolated
from tests.components.azure.azure_plan_support import PLATFORM
from tests.stack_variants import cloud_only, one, plan_config, template

AGENT_POOL = "azure-native:containerservice:AgentPool"
PlanFn = Callable[[str], Plan]


def config_of(stack: str) -> PlatformConfig:
    return parse_stack_config(template(stack), stack)


def all_pools(plan: Plan) -> list[dict[str, Any]]:
    (cluster,) = plan.by_type("azure-native:containerservice:ManagedCluster")
    return [*cluster.inputs["agentPoolProfiles"], *(r.inputs for r in plan.by_type(AGENT_POOL))]


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_every_pool_is_hardened(cloud_plan: PlanFn, stack: str) -> None:
    pools = all_pools(cloud_plan(stack))
    assert len(pools) == len(template(stack)["ml-platform:platform"]["nodePools"])
    for pool in pools:
        assert pool["enableEncryptionAtHost"] is True
        assert pool["enableNodePublicIP"] is False
        assert pool["osDiskType"] == "Managed"
        assert (pool["osType"], pool["osSKU"]) == ("Linux", "Ubuntu")
        assert pool["enableAutoScaling"] is True
        assert "-network-nodes-subnet" in pool["vnetSubnetID"]
        assert pool["orchestratorVersion"] == "1.35"


def test_first_cpu_pool_is_the_system_pool(cloud_plan: PlanFn) -> None:
    (system,) = [p for p in all_pools(cloud_plan("azure-smb-dev")) if p["mode"] == "System"]
    assert (system["name"], system["vmSize"], system["minCount"]) == ("cpu", "Standard_D8s_v5", 1.0)
    assert system["nodeTaints"] == []


def test_smb_spot_gpu_pool_scales_to_zero(cloud_plan: PlanFn) -> None:
    pool = one(cloud_plan("azure-smb-dev"), AGENT_POOL, "-pools-gpu").inputs
    assert (pool["scaleSetPriority"], pool["scaleSetEvictionPolicy"], pool["spotMaxPrice"]) == (
        "Spot",
        "Delete",
        -1.0,
    )
    assert (pool["minCount"], pool["maxCount"], pool["count"]) == (0.0, 2.0, 0.0)
    assert pool["nodeTaints"] == [
        "nvidia.com/gpu=present:NoSchedule",
        "kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
    ]
    assert pool["nodeLabels"] == {POOL_LABEL: "gpu", "kubernetes.azure.com/scalesetpriority": "spot"}
    assert pool["gpuProfile"] == {"driver": "None"}


def test_infiniband_pool(cloud_plan: PlanFn) -> None:
    pool = one(cloud_plan("azure-enterprise-prod"), AGENT_POOL, "-pools-gpu-ib").inputs
    assert pool["agentPoolName"] == "gpuib"
    assert pool["vmSize"] == "Standard_ND96isr_H100_v5"
    assert pool["mode"] == "User"
    assert pool["nodeTaints"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert pool["nodeLabels"] == {POOL_LABEL: "gpu-ib"}
    assert pool["gpuProfile"] == {"driver": "None"}
    assert (pool["minCount"], pool["maxCount"]) == (2.0, 4.0)
    assert "scaleSetPriority" not in pool


def test_handles_describe_fabric_taints_and_labels() -> None:
    config = config_of("azure-enterprise-prod")
    handles = {p.name: pool_handle(config, p) for p in config.node_pools}
    infiniband = handles["gpu-ib"]
    assert (infiniband.fabric, infiniband.fabric_devices_per_node, infiniband.gpus_per_node) == (
        Fabric.INFINIBAND,
        8,
        8,
    )
    assert infiniband.taints == (Taint("nvidia.com/gpu", "present"),)
    assert infiniband.node_selector == {POOL_LABEL: "gpu-ib"}
    assert (handles["inference"].fabric, handles["inference"].fabric_devices_per_node) == (Fabric.NONE, 0)
    assert handles["inference"].taints == ()
    spot = pool_handle(config_of("azure-smb-dev"), config_of("azure-smb-dev").pool("gpu"))
    assert [t.key for t in spot.taints] == ["nvidia.com/gpu", "kubernetes.azure.com/scalesetpriority"]
    assert spot.kind is PoolKind.GPU


def test_system_pool_skips_spot_and_gpu_pools() -> None:
    raw = template("azure-smb-dev")
    pools = raw["ml-platform:platform"]["nodePools"]
    raw["ml-platform:platform"]["nodePools"] = [
        pools[1],
        {**pools[0], "name": "spotcpu", "spot": True},
        pools[0],
    ]
    assert system_pool(parse_stack_config(raw, "test")).name == "cpu"


def test_pool_names_that_collapse_in_aks_are_refused() -> None:
    raw = template("azure-enterprise-prod")
    pools = raw["ml-platform:platform"]["nodePools"]
    pools.append({**pools[1], "name": "infer-ence"})
    config = parse_stack_config(raw, "test")
    with pytest.raises(pulumi.RunError, match="both become AKS pool 'inference'"):
        agent_pool_names(config)


def _with_zones(stack: str, pool_zones: dict[str, list[str]]) -> dict[str, Any]:
    config = cloud_only(template(stack))
    config[PLATFORM]["azure"]["poolZones"] = pool_zones
    return config


def test_zonal_pools_spread_over_their_zones(tmp_path: Path) -> None:
    """AKS AgentPool ``availabilityZones`` (containerservice 2025-09-01 SDK: "The list of Availability zones
    to use for nodes"): the pools listed under azure.poolZones spread over exactly those zones, after
    the preflight read the size's zones from Resource SKUs (what `az vm list-skus --zone` reads); the
    other pools stay regional."""
    config = _with_zones("azure-enterprise-prod", {"system": ["1", "2", "3"], "inference": ["1", "2", "3"]})
    plan = plan_config(config, tmp_path, "azure-enterprise-prod")
    spread = {p.get("name") or p["agentPoolName"]: p.get("availabilityZones") for p in all_pools(plan)}
    assert spread == {"system": ["1", "2", "3"], "inference": ["1", "2", "3"], "gpuib": None}


def test_a_size_not_offered_in_a_zone_stops_the_program() -> None:
    """Resource SKUs answer a zone withheld from the subscription as a ``Zone`` restriction
    (NotAvailableForSubscription, restrictionInfo.zones; Microsoft Learn "zone not available for
    subscription" troubleshooting): the preflight fails closed with the command to check."""
    config = parse_stack_config(_with_zones("azure-enterprise-prod", {"inference": ["1", "2"]}), "test")

    def run() -> None:
        mocks = PlanMocks("", "uaenorth", zone_restricted_sizes=frozenset({"Standard_F16s_v2"}))
        pulumi.runtime.set_mocks(mocks, project="ml-platform", stack="test", preview=True)
        zones.require_zones(config)

    with pytest.raises(pulumi.RunError) as error:
        isolated(run)
    assert str(error.value) == (
        "node pool 'inference': Standard_F16s_v2 is not offered to this subscription in uaenorth zone(s) "
        "1, 2; check with `az vm list-skus --location uaenorth --size Standard_F16s_v2 --zone --all "
        "--output table` and change the pool's zones"
    )


def test_offered_zones_reads_location_and_zone_restrictions() -> None:
    """Resource Skus - List (Microsoft.Compute 2021-07-01): ``locationInfo[].zones`` are the size's
    zones; a ``Location`` restriction withholds the region, a ``Zone`` restriction its listed zones."""
    sku = {
        "resourceType": "virtualMachines",
        "name": "Standard_D8s_v5",
        "locationInfo": [{"location": "UAENorth", "zones": ["1", "2", "3"]}],
        "restrictions": [
            {"type": "Zone", "restrictionInfo": {"locations": ["UAENorth"], "zones": ["2"]}},
            {"type": "Location", "restrictionInfo": {"locations": ["westus"]}},
        ],
    }
    assert zones.offered_zones([sku], "Standard_D8s_v5", "uaenorth") == {"1", "3"}
    assert zones.offered_zones([sku], "Standard_D16s_v5", "uaenorth") == set()
    region_withheld = {
        **sku,
        "restrictions": [{"type": "Location", "restrictionInfo": {"locations": ["uaenorth"]}}],
    }
    assert zones.offered_zones([region_withheld], "Standard_D8s_v5", "uaenorth") == set()


@pytest.mark.parametrize(
    ("pool_zones", "problem"),
    [
        ({"gpu-ib": ["1", "2"]}, "azure.poolZones.gpu-ib: an InfiniBand pool stays in one zone"),
        ({"gpu": ["1", "2"]}, "azure.poolZones.gpu: no node pool is named gpu"),
        ({"inference": ["1"]}, "azure.poolZones.inference: list two or more distinct zones"),
    ],
)
def test_pool_zones_config_errors_name_the_key(
    tmp_path: Path, pool_zones: dict[str, list[str]], problem: str
) -> None:
    with pytest.raises(InputError) as error:
        plan_config(_with_zones("azure-enterprise-prod", pool_zones), tmp_path, "azure-enterprise-prod")
    (message,) = error.value.problems
    assert problem in message


def test_every_pool_size_is_checked_in_the_region_and_for_encryption_at_host() -> None:
    """D2: a regional pool too fails at AgentPool create when its size is withheld from the region
    (a ``Location`` restriction, Resource Skus - List) or lacks ``EncryptionAtHostSupported``, which every
    pool turns on ("Use the Azure CLI to enable end-to-end encryption using encryption at host": ``az vm
    list-skus`` with ``capabilities[?name=='EncryptionAtHostSupported' && value=='True']``). The preflight
    reads the SKUs for every pool, zonal or not."""
    config = parse_stack_config(template("azure-enterprise-prod"), "test")
    sizes = {pool.instance_type for pool in config.node_pools}
    system, gpu = config.pool("system").instance_type, config.pool("gpu-ib").instance_type

    def sku(size: str) -> dict[str, Any]:
        capable = "False" if size == system else "True"
        withheld = (
            [{"type": "Location", "restrictionInfo": {"locations": ["uaenorth"]}}] if size == gpu else []
        )
        return {
            "resourceType": "virtualMachines",
            "name": size,
            "locationInfo": [{"location": "UAENorth", "zones": []}],
            "capabilities": [{"name": "EncryptionAtHostSupported", "value": capable}],
            "restrictions": withheld,
        }

    transport = httpx.MockTransport(lambda _: httpx.Response(200, json={"value": [sku(s) for s in sizes]}))
    with httpx.Client(base_url="https://management.azure.com", transport=transport) as client:
        problems = list(zones._zone_problems(ArmReader(client, "sub"), config))
    assert [p.split(":")[0] for p in problems] == ["node pool 'system'", "node pool 'gpu-ib'"]
    assert "does not support encryption at host" in problems[0]
    assert f"{gpu} is not offered to this subscription in uaenorth" in problems[1]


SYSTEM_STACK = "azure-enterprise-prod"
# The live System pool's ARM path: resource group ml-platform-<stack>, cluster <stack>, pool ``system``.
SYSTEM_PATH = f"ml-platform-{SYSTEM_STACK}/{SYSTEM_STACK}/system"


def _created(cloud_plan: PlanFn) -> dict[str, Any]:
    """The System pool as the shipped stack created it (the cluster's inline profile), after the autoscaler
    moved its node count."""
    (cluster,) = cloud_plan(SYSTEM_STACK).by_type("azure-native:containerservice:ManagedCluster")
    return {**cluster.inputs["agentPoolProfiles"][0], "count": 4}


def _edited(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    config = cloud_only(template(SYSTEM_STACK))
    edit(config["ml-platform:platform"])
    return config


def _drift_warnings(config: dict[str, Any], pools: dict[str, Any]) -> list[str]:
    """What ``warn_system_pool_drift`` logs for ``config`` in a subscription holding ``pools``."""
    warnings: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logger = logging.Logger("drift")
    logger.addHandler(Lines(logging.WARNING))
    parsed = parse_stack_config(config, SYSTEM_STACK)

    def run() -> None:
        mocks = PlanMocks("", "uaenorth", existing=ExistingAccount(agent_pools=pools))
        pulumi.runtime.set_mocks(
            mocks, project="ml-platform", stack=SYSTEM_STACK, preview=True, logger=logger
        )

        def program() -> None:
            warn_system_pool_drift(parsed, pulumi.ComponentResource("test:index:Parent", "parent"))

        _sync_await(run_pulumi_func(program))

    isolated(run)
    return warnings


def test_an_unedited_or_new_system_pool_is_not_warned_about(cloud_plan: PlanFn) -> None:
    """A new stack (no pool to read: ARM's 404) and one whose System pool is as created, at whatever node
    count the autoscaler chose, plan with no warning."""
    config = cloud_only(template(SYSTEM_STACK))
    assert _drift_warnings(config, {}) == []
    assert _drift_warnings(config, {SYSTEM_PATH: _created(cloud_plan)}) == []


def test_an_edit_of_the_system_pool_is_warned_with_the_command_that_applies_it(
    tmp_path: Path, cloud_plan: PlanFn
) -> None:
    """The cluster ignores ``agentPoolProfiles`` (creation-only, azure-native ManagedCluster docs), so an
    edit of the System pool's bounds and labels plans no change: a silent no-op. The plan says so in one
    line naming the stack key and the ``az aks nodepool update`` that applies it (Update-AzAksNodePool,
    Azure PowerShell reference: MinCount, MaxCount, NodeLabel are updated in place)."""

    def edit(platform: dict[str, Any]) -> None:
        platform["nodePools"][0].update(minSize=4, maxSize=8, labels={"team": "core"})

    plan = plan_config(
        _edited(edit),
        tmp_path,
        SYSTEM_STACK,
        existing=ExistingAccount(agent_pools={SYSTEM_PATH: _created(cloud_plan)}),
    )
    (cluster,) = plan.by_type("azure-native:containerservice:ManagedCluster")
    assert "agentPoolProfiles" in cluster.ignore_changes
    [line] = [w for w in plan.warnings if "nodePools" in w]
    assert line.startswith("ml-platform:platform.nodePools[0] (system, the AKS System pool system): ")
    assert "minSize 4 (AKS has 3), maxSize 8 (AKS has 5), labels" in line
    assert line.endswith(
        f"; run `az aks nodepool update --resource-group ml-platform-{SYSTEM_STACK} --cluster-name "
        f"{SYSTEM_STACK} --name system --update-cluster-autoscaler --min-count 4 --max-count 8 "
        "--labels ml-platform/pool=system team=core`"
    )


def test_what_aks_cannot_change_in_place_is_warned_as_a_new_pool(cloud_plan: PlanFn) -> None:
    """A VM size is not among Update-AzAksNodePool's parameters: a new System pool, no update command. A
    taint follows from where workloads run: moving training onto the System pool drops its
    CriticalAddonsOnly taint, which ``--node-taints ""`` clears."""

    def resize(platform: dict[str, Any]) -> None:
        platform["nodePools"][0]["instanceType"] = "Standard_D16s_v5"

    [line] = _drift_warnings(_edited(resize), {SYSTEM_PATH: _created(cloud_plan)})
    assert "instanceType 'Standard_D16s_v5' (AKS has 'Standard_D8s_v5')" in line
    assert line.endswith(
        "; instanceType change only by a new System pool (`az aks nodepool add --mode System`)"
    )
    assert "az aks nodepool update" not in line

    def train_on_system(platform: dict[str, Any]) -> None:
        platform["workloads"]["training"]["pool"] = "system"

    [line] = _drift_warnings(_edited(train_on_system), {SYSTEM_PATH: _created(cloud_plan)})
    assert "taints (workloads.*.pool) [] (AKS has ['CriticalAddonsOnly=true:NoSchedule'])" in line
    assert line.endswith('--name system --node-taints ""`')
