"""AKS node pools from config pools: one builder for the System pool and every User pool.

The System pool (what AKS needs to exist before anything else) is the first on-demand CPU pool in config;
it is declared inside the cluster, the rest are ``AgentPool`` resources. Every pool gets the same
hardening: encryption at host, no node public IPs, managed OS disks (so the disk encryption set's key
covers them and rotates without draining nodes), Ubuntu (the OS the GPU and Network operators ship
drivers for, used for every pool so all nodes share one image family).

GPU pools carry ``nvidia.com/gpu=present:NoSchedule`` and leave the driver to the GPU operator
(``gpuProfile.driver: None``). InfiniBand pools are one pool per fabric: a pool is one scale set, and the
``AKSInfinibandSupport`` feature keeps a scale set's nodes on one InfiniBand network. Spot pools are
evicted with Delete (a deallocated spot node still bills its disk) and carry AKS's spot taint so that
only pods that tolerate eviction land there.

The System pool carries ``CriticalAddonsOnly=true:NoSchedule`` when no workload is placed on it, so
user pods cannot crowd out CoreDNS and the other kube-system pods, which AKS makes tolerate that taint
(AKS "manage system node pools"); our add-ons then run on the untainted user pools. A stack whose
workloads run on the System pool (a single-CPU-pool SMB stack) leaves it untainted.

AKS runs one operation on a cluster's agent pools at a time and refuses a second with
``OperationNotAllowed`` (REFERENCE.md): the User pools are created one after another.

The cluster ignores its inline ``agentPoolProfiles`` after creation (cluster.py), so an edit of the System
pool's config entry changes nothing in Azure. ``warn_system_pool_drift`` says so at every plan: it reads
the live System pool (azure-native ``containerservice.get_agent_pool``) and warns, in one line naming the
stack key and the command, where the stack file declares something the pool does not have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import containerservice

from components.azure import naming
from components.azure.scope import AzureScope
from components.azure.zones import pool_zones
from components.config import AZURE_DUTY_CYCLE_TAG, PLATFORM_KEY, PROJECT, NodePoolConfig, PlatformConfig
from components.driver_images import NodeOs, aks_node_os
from components.handle import GPU_TAINT_KEY, POOL_LABEL, Fabric, PoolHandle, PoolKind, Taint

# AKS's GPU taint value (Azure/aks-rdma-infiniband, REFERENCE.md); tolerations match the key only.
GPU_TAINT = Taint(GPU_TAINT_KEY, "present")
# Label and taint AKS puts on spot nodes; declared too so the pool spec matches what AKS reports
# (learn.microsoft.com/azure/aks/spot-node-pool).
SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
SPOT_TAINT = Taint(SPOT_LABEL, "spot")
# AKS's taint for System pools reserved to critical add-ons (learn.microsoft.com/azure/aks/use-system-pools).
CRITICAL_ADDONS_TAINT = Taint("CriticalAddonsOnly", "true")
# Spot price cap -1: pay up to the on-demand price, evicted for capacity only (AKS spot docs).
_SPOT_MAX_PRICE = -1.0


def system_pool(config: PlatformConfig) -> NodePoolConfig:
    """The first on-demand CPU pool: AKS System pools cannot be spot, and GPU nodes are too dear to idle
    running CoreDNS and metrics-server."""
    for pool in config.node_pools:
        if pool.kind is PoolKind.CPU and not pool.spot:
            return pool
    raise pulumi.RunError(
        "an AKS cluster needs an on-demand CPU node pool for its System pool; add one to "
        "ml-platform:platform.nodePools"
    )


def pool_labels(pool: NodePoolConfig) -> dict[str, str]:
    labels = {**pool.labels, POOL_LABEL: pool.name}
    if pool.spot:
        labels[SPOT_LABEL] = "spot"
    return labels


def reserved_system_pool(config: PlatformConfig) -> bool:
    """Whether the System pool is kept for critical add-ons: no workload is placed on it."""
    workloads = (config.workloads.training, config.workloads.inference)
    return all(w is None or w.pool != system_pool(config).name for w in workloads)


def pool_taints(config: PlatformConfig, pool: NodePoolConfig) -> tuple[Taint, ...]:
    taints = (GPU_TAINT,) if pool.kind is PoolKind.GPU else ()
    if pool.name == system_pool(config).name and reserved_system_pool(config):
        taints = (*taints, CRITICAL_ADDONS_TAINT)
    return (*taints, SPOT_TAINT) if pool.spot else taints


def gpu_node_os(config: PlatformConfig) -> NodeOs | None:
    """The OS and architecture of the stack's GPU nodes, which the NVIDIA operators' driver tags name;
    None without GPU pools."""
    archs = sorted({config.instance_type(p).arch for p in config.node_pools if p.kind is PoolKind.GPU})
    if not archs:
        return None
    if len(archs) > 1:
        raise ValueError(f"GPU pools of several architectures ({', '.join(archs)}): one driver tag each")
    return aks_node_os(config.azure.os_sku, config.cluster.kubernetes_version, archs[0])


def pool_handle(config: PlatformConfig, pool: NodePoolConfig) -> PoolHandle:
    itype = config.instance_type(pool)
    return PoolHandle(
        name=pool.name,
        kind=pool.kind,
        instance_type=pool.instance_type,
        gpus_per_node=itype.gpus,
        fabric=pool.fabric,
        fabric_devices_per_node=itype.fabric_devices if pool.fabric is Fabric.INFINIBAND else 0,
        vcpus=itype.vcpus,
        memory_gib=itype.memory_gib,
        labels=pool_labels(pool),
        taints=pool_taints(config, pool),
        spot=pool.spot,
    )


def agent_pool_settings(
    config: PlatformConfig, pool: NodePoolConfig, *, system: bool, subnet_id: pulumi.Input[str]
) -> dict[str, Any]:
    """The agent-pool properties shared by the cluster's inline System profile and ``AgentPool``."""
    # A System pool needs at least one node (count 1-1000 for System pools, AKS AgentPool API).
    min_count = max(pool.min_size, 1) if system else pool.min_size
    settings: dict[str, Any] = {
        "mode": "System" if system else "User",
        "type": "VirtualMachineScaleSets",
        "vm_size": pool.instance_type,
        "os_type": "Linux",
        "os_sku": config.azure.os_sku.value,
        "orchestrator_version": config.cluster.kubernetes_version,
        "vnet_subnet_id": subnet_id,
        "enable_auto_scaling": True,
        "min_count": min_count,
        "max_count": pool.max_size,
        "count": max(pool.desired_size or 0, min_count),
        "enable_node_public_ip": False,
        "enable_encryption_at_host": True,
        "os_disk_type": "Managed",
        "os_disk_size_gb": pool.disk_size_gib,
        "node_labels": pool_labels(pool),
        "node_taints": [f"{t.key}={t.value}:{t.effect.value}" for t in pool_taints(config, pool)],
        "tags": {**config.base_tags(), AZURE_DUTY_CYCLE_TAG: f"{config.duty_cycle(pool):g}"},
    }
    if zones := pool_zones(config, pool):
        settings["availability_zones"] = zones
    if pool.kind is PoolKind.GPU:
        settings["gpu_profile"] = {"driver": "None" if config.kubernetes.gpu_operator else "Install"}
    if pool.spot:
        settings |= {
            "scale_set_priority": "Spot",
            "scale_set_eviction_policy": "Delete",
            "spot_max_price": _SPOT_MAX_PRICE,
        }
    return settings


def system_pool_profile(config: PlatformConfig, subnet_id: pulumi.Input[str]) -> dict[str, Any]:
    pool = system_pool(config)
    return {
        "name": naming.agent_pool_name(pool.name),
        **agent_pool_settings(config, pool, system=True, subnet_id=subnet_id),
    }


# How ``az aks nodepool update`` sets each group of a pool's properties, from the declared settings.
_UPDATE_FLAGS: dict[str, Callable[[dict[str, Any]], str]] = {
    "autoscaler": lambda d: (
        f"--update-cluster-autoscaler --min-count {d['min_count']} --max-count {d['max_count']}"
    ),
    # An empty value clears the pool's labels or taints.
    "labels": lambda d: (
        "--labels " + (" ".join(f"{k}={v}" for k, v in sorted(d["node_labels"].items())) or '""')
    ),
    "taints": lambda d: "--node-taints " + (",".join(d["node_taints"]) or '""'),
}
# The System pool's properties an edit of its config entry changes: ``agent_pool_settings``' key (also the
# attribute ``get_agent_pool`` returns), the stack key that sets it, and the ``_UPDATE_FLAGS`` group that
# changes it on the live pool. AKS updates a pool's autoscaler bounds, node labels and node taints in
# place (Update-AzAksNodePool, Azure PowerShell reference: MinCount, MaxCount, NodeLabel, NodeTaint); its
# VM size, OS disk size and zones are not among them and change only by a new pool (None). The taints
# follow from where workloads run (``pool_taints``), not from a key of the pool.
_SYSTEM_POOL_EDITS: tuple[tuple[str, str, str | None], ...] = (
    ("min_count", "minSize", "autoscaler"),
    ("max_count", "maxSize", "autoscaler"),
    ("node_labels", "labels", "labels"),
    ("node_taints", "taints (workloads.*.pool)", "taints"),
    ("vm_size", "instanceType", None),
    ("os_disk_size_gb", "diskSizeGib", None),
    ("availability_zones", "azure.poolZones", None),
)


def _normal(value: Any) -> Any:
    """A property as compared: unset and empty alike, lists in any order."""
    if value is None or value in ([], {}):
        return None
    return sorted(value) if isinstance(value, list) else value


def system_pool_drift(config: PlatformConfig, live: Any) -> str | None:
    """The warning for a live System pool (``get_agent_pool``'s result) that lacks what the stack file
    declares for it, or None."""
    pool = system_pool(config)
    declared = agent_pool_settings(config, pool, system=True, subnet_id="")
    differ = [
        (key, stack_key, group)
        for key, stack_key, group in _SYSTEM_POOL_EDITS
        if _normal(declared.get(key)) != _normal(getattr(live, key, None))
    ]
    if not differ:
        return None
    name = naming.agent_pool_name(pool.name)
    edits = ", ".join(
        f"{stack_key} {declared.get(key)!r} (AKS has {getattr(live, key, None)!r})"
        for key, stack_key, _ in differ
    )
    line = (
        f"{PLATFORM_KEY}.nodePools[{config.node_pools.index(pool)}] ({pool.name}, the AKS System pool "
        f"{name}): the stack file sets {edits}, which `pulumi up` does not apply to the System pool "
        "(docs/operations.md, 'Grow or shrink a node pool')"
    )
    if groups := list(dict.fromkeys(group for _, _, group in differ if group is not None)):
        flags = " ".join(_UPDATE_FLAGS[group](declared) for group in groups)
        line += (
            f"; run `az aks nodepool update --resource-group {PROJECT}-{config.stack_name} --cluster-name "
            f"{config.stack_name} --name {name} {flags}`"
        )
    if new := [stack_key for _, stack_key, group in differ if group is None]:
        line += f"; {', '.join(new)} change only by a new System pool (`az aks nodepool add --mode System`)"
    return line


def warn_system_pool_drift(config: PlatformConfig, parent: pulumi.Resource) -> None:
    """Warn (``system_pool_drift``) where the stack's live System pool differs from its config entry. The
    lookup fails where the cluster does not exist yet (a new stack: nothing to compare), and where the
    deployer may not read it: then nothing is said."""
    try:
        live = containerservice.get_agent_pool(
            agent_pool_name=naming.agent_pool_name(system_pool(config).name),
            resource_group_name=f"{PROJECT}-{config.stack_name}",
            resource_name=config.stack_name,
            opts=pulumi.InvokeOptions(parent=parent),
        )
    except Exception:  # the provider's lookup error: no such pool (or no read right on it)
        return
    if message := system_pool_drift(config, live):
        pulumi.log.warn(message, resource=parent)


def agent_pool_names(config: PlatformConfig) -> dict[str, str]:
    """Config pool name -> AKS pool name, refusing two config names that collapse to one AKS name."""
    names = {pool.name: naming.agent_pool_name(pool.name) for pool in config.node_pools}
    seen: dict[str, str] = {}
    for pool, aks_name in names.items():
        if aks_name in seen:
            raise pulumi.RunError(
                f"node pools {seen[aks_name]!r} and {pool!r} both become AKS pool {aks_name!r} "
                "(AKS names are up to 12 lowercase letters and digits); rename one"
            )
        seen[aks_name] = pool
    return names


def pools_summary(config: PlatformConfig) -> list[dict[str, Any]]:
    """The stack output describing each pool: enough to see what `pulumi up` will bill for."""
    names, system = agent_pool_names(config), system_pool(config).name
    return [
        {
            "name": pool.name,
            "aksName": names[pool.name],
            "mode": "System" if pool.name == system else "User",
            "vmSize": pool.instance_type,
            "kind": pool.kind.value,
            "fabric": pool.fabric.value,
            "gpusPerNode": config.instance_type(pool).gpus,
            "minSize": pool.min_size,
            "maxSize": pool.max_size,
            "spot": pool.spot,
        }
        for pool in config.node_pools
    ]


@dataclass(frozen=True)
class NodePoolsArgs:
    scope: AzureScope
    cluster_name: pulumi.Input[str]
    subnet_id: pulumi.Input[str]


class NodePools(pulumi.ComponentResource):
    """The User pools: every config pool but the System one."""

    def __init__(self, name: str, args: NodePoolsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:NodePools", name, None, opts)
        scope = args.scope
        config = scope.config
        names = agent_pool_names(config)
        system = system_pool(config).name
        self.pools: dict[str, containerservice.AgentPool] = {}
        previous: list[pulumi.Resource] = []
        for pool in config.node_pools:
            if pool.name == system:
                continue
            agent_pool = containerservice.AgentPool(
                f"{name}-{pool.name}",
                resource_group_name=scope.resource_group_name,
                resource_name_=args.cluster_name,
                agent_pool_name=names[pool.name],
                **agent_pool_settings(config, pool, system=False, subnet_id=args.subnet_id),
                # One agent-pool operation at a time: each pool waits for the one before it. The
                # autoscaler owns the node count after creation.
                opts=scope.opts(self, depends_on=previous, ignore_changes=["count"]),
            )
            self.pools[pool.name] = agent_pool
            previous = [agent_pool]
        self.register_outputs({"pools": {n: p.name for n, p in self.pools.items()}})
