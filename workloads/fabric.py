"""Fabric is data: what a node pool's interconnect asks of a training pod, in one place.

``fabric_profile`` turns a ``PoolHandle`` (GPUs per node, fabric none | efa | infiniband) into device
resources, NCCL / libfabric environment, extra capabilities, volumes and the checkov skips that document
the one accepted exception. The training Job applies the profile without knowing which cloud it is on.
Facts and their sources: /work/shared/REFERENCE.md (EFA from terraform-aws-eks-blueprints
``nvidia-gpu-efa``; InfiniBand from Azure/aks-rdma-infiniband).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from components.handle import Fabric, PoolHandle


class ImageTarget(StrEnum):
    """The training Dockerfile's targets (workloads/training/Dockerfile): one per pool fabric."""

    CPU = "cpu"
    EFA = "efa"
    INFINIBAND = "infiniband"


# The target whose userspace NCCL needs on each fabric: without it NCCL silently falls back to sockets.
IMAGE_TARGETS: Mapping[Fabric, ImageTarget] = MappingProxyType(
    {Fabric.NONE: ImageTarget.CPU, Fabric.EFA: ImageTarget.EFA, Fabric.INFINIBAND: ImageTarget.INFINIBAND}
)

# All GPU pods: NCCL must not pick the loopback interface for bootstrap, and async error handling lets
# a rank that sees a peer die abort instead of hanging in a collective until the timeout.
_GPU_ENV = {"NCCL_SOCKET_IFNAME": "^lo", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}

_EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"}
# GPUDirect RDMA over EFA is documented as required on p4d/p4de; elsewhere libfabric's default stands.
_EFA_DEVICE_RDMA_FAMILIES = ("p4d.", "p4de.")
_EFA_HUGEPAGES = {"hugepages-2Mi": "5120Mi"}

_INFINIBAND_ENV = {
    "NCCL_IB_DISABLE": "0",
    "NCCL_NET_GDR_LEVEL": "SYS",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "NCCL_SOCKET_IFNAME": "eth0",
}
# NCCL topology files per InfiniBand SKU, as Azure publishes them (Azure/azhpc-images topology/; on HPC
# images at /opt/microsoft/<file>). Operators load them into this ConfigMap (docs/kubernetes.md); the
# volume is optional because NCCL warns and detects the topology itself when the file is absent. Unknown SKUs
# fail closed.
NCCL_TOPOLOGY_CONFIGMAP = "nccl-topology"
NCCL_TOPOLOGY_DIR = "/etc/nccl/topology"
NCCL_TOPOLOGY_FILES = {
    "Standard_ND96isr_H100_v5": "ndv5-topo.xml",
    "Standard_ND96asr_v4": "ndv4-topo.xml",
    "Standard_ND96amsr_A100_v4": "ndv4-topo.xml",
}
# checkov flags any added capability twice (CKV_K8S_25 added, CKV_K8S_37 assigned); IPC_LOCK is the one
# documented exception: NCCL pins RDMA memory on InfiniBand. The capability reaches a process's
# effective set only for UID 0: Kubernetes/containerd never put added capabilities in the ambient set,
# so a non-root process loses them at execve (kubernetes/kubernetes#56374, open) and RDMA registration
# runs under the node's 64 KiB memlock limit (Azure/aks-rdma-infiniband, "A pod without this [IPC_LOCK]
# will have a low locked memory value"). So the trainer runs as root with every other capability
# dropped (checkov CKV_K8S_23/40), in a namespace whose admission policy forbids everything else.
_IPC_LOCK_REASON = (
    "IPC_LOCK, as UID 0 (inert for non-root, kubernetes#56374), lets NCCL pin RDMA memory on InfiniBand "
    "(documented exception, REFERENCE.md)"
)
_IPC_LOCK_SKIPS = {
    "checkov.io/skip1": f"CKV_K8S_25={_IPC_LOCK_REASON}",
    "checkov.io/skip2": f"CKV_K8S_37={_IPC_LOCK_REASON}",
    "checkov.io/skip3": f"CKV_K8S_23={_IPC_LOCK_REASON}",
    "checkov.io/skip4": f"CKV_K8S_40={_IPC_LOCK_REASON}",
    # The policy pack's exception contract (policies/mlplatform_policies/settings.py).
    "policy.ml-platform.io/capabilities-reason": _IPC_LOCK_REASON,
}


@dataclass(frozen=True)
class FabricProfile:
    """What the trainer container needs on a pool: merged into requests/limits, env and pod spec."""

    resources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    capabilities: tuple[str, ...] = ()
    # Added capabilities take effect only for UID 0 (kubernetes/kubernetes#56374): run as root.
    run_as_root: bool = False
    volumes: tuple[Mapping[str, Any], ...] = ()
    volume_mounts: tuple[Mapping[str, Any], ...] = ()
    # Annotations for the workload object's top-level metadata (checkov skips with their reasons).
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def fabric_profile(pool: PoolHandle) -> FabricProfile:
    """The profile for ``pool``; raises ``ValueError`` for combinations we cannot vouch for."""
    gpu: dict[str, str] = {"nvidia.com/gpu": str(pool.gpus_per_node)} if pool.gpus_per_node > 0 else {}
    gpu_env = _GPU_ENV if gpu else {}
    if pool.fabric is not Fabric.NONE and not gpu:
        raise ValueError(
            f"pool {pool.name!r}: fabric {pool.fabric.value} without GPUs is not a training pool"
        )
    if pool.fabric is Fabric.NONE:
        return FabricProfile(resources=gpu, env=gpu_env)
    if pool.fabric is Fabric.EFA:
        if pool.fabric_devices_per_node < 1:
            raise ValueError(f"pool {pool.name!r}: fabric efa needs fabric_devices_per_node >= 1")
        rdma = (
            {"FI_EFA_USE_DEVICE_RDMA": "1"}
            if pool.instance_type.startswith(_EFA_DEVICE_RDMA_FAMILIES)
            else {}
        )
        # Never hostPath-mount /dev/infiniband here: it silently disables EFA (the device plugin mounts it).
        return FabricProfile(
            resources={**gpu, "vpc.amazonaws.com/efa": str(pool.fabric_devices_per_node), **_EFA_HUGEPAGES},
            env={**gpu_env, **_EFA_ENV, **rdma},
        )
    topology = NCCL_TOPOLOGY_FILES.get(pool.instance_type)
    if topology is None:
        known = ", ".join(NCCL_TOPOLOGY_FILES)
        raise ValueError(f"pool {pool.name!r}: no NCCL topology for {pool.instance_type!r} (known: {known})")
    return FabricProfile(
        resources={**gpu, "rdma/shared_ib": "1"},
        env={**gpu_env, **_INFINIBAND_ENV, "NCCL_TOPO_FILE": f"{NCCL_TOPOLOGY_DIR}/{topology}"},
        capabilities=("IPC_LOCK",),
        run_as_root=True,
        volumes=(
            {"name": "nccl-topology", "configMap": {"name": NCCL_TOPOLOGY_CONFIGMAP, "optional": True}},
        ),
        volume_mounts=({"name": "nccl-topology", "mountPath": NCCL_TOPOLOGY_DIR, "readOnly": True},),
        annotations=_IPC_LOCK_SKIPS,
    )
