"""How much of a node one training pod asks for, derived from the pool's instance type.

A training pod owns its node (one pod per node, ``nproc_per_node`` = GPUs per node), so it asks for what
the kubelet leaves allocatable, less headroom for the pool's DaemonSets (CNI, CSI, device plugins, DCGM
and node exporters). Requests equal limits (Guaranteed QoS: the last pods the kubelet evicts).

Allocatable is capacity minus kube-reserved minus the hard eviction threshold. The pool handle does not
say which cloud's node image runs, so the reservation is the larger of the two documented formulas:

- EKS AMI (awslabs/amazon-eks-ami, nodeadm kubelet config; the same in its bootstrap.sh): kube-reserved
  CPU = 6% of the first core, 1% of the second, 0.5% of the third and fourth, 0.25% of every further
  core; memory = 11 MiB x max pods + 255 MiB; ``evictionHard memory.available < 100Mi``.
- AKS ("Node resource reservations in AKS", AKS 1.29+): kube-reserved CPU from a table by core count
  (60m at 1 core ... 740m at 64 cores); memory = min(20 MB x max pods + 50 MB, 25% of memory);
  ``memory.available < 100Mi`` eviction.

Max pods is taken as 250, the highest default of the two (AKS Azure CNI Overlay; EKS prefix delegation
caps at 250 too), which over-reserves at most a few GiB on a GPU node. Pre-allocated huge pages leave
node memory allocatable (the kubelet subtracts them), so a fabric's huge pages come off the memory too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from components.handle import PoolHandle

MAX_PODS = 250
EVICTION_HARD_MIB = 100
# Share of allocatable left to the pool's DaemonSets: our choice, not a cloud fact.
DAEMONSET_HEADROOM = 0.10
# AKS kube-reserved CPU (millicores) by host cores; between rows, the next larger row applies.
_AKS_CPU_RESERVED_M = ((1, 60), (2, 100), (4, 140), (8, 180), (16, 260), (32, 420), (64, 740))


@dataclass(frozen=True)
class PodSize:
    """Requests (= limits) of the trainer container and the size of its memory-backed ``/dev/shm``."""

    cpu: int
    memory_gib: int
    shm_gib: int


def eks_reserved(vcpus: int, memory_mib: int) -> tuple[float, float]:
    """(CPU millicores, memory MiB) the EKS AMI reserves for the kubelet and container runtime."""
    del memory_mib  # the EKS formula depends on pod density, not on memory
    shares = ((1, 0.06), (1, 0.01), (2, 0.005), (math.inf, 0.0025))
    cpu_m, left = 0.0, float(vcpus)
    for cores, share in shares:
        used = min(left, cores)
        cpu_m += used * 1000 * share
        left -= used
    return cpu_m, 11 * MAX_PODS + 255


def aks_reserved(vcpus: int, memory_mib: int) -> tuple[float, float]:
    """(CPU millicores, memory MiB) AKS reserves (memory given in MB there; MiB here over-reserves)."""
    cpu_m = next((m for cores, m in _AKS_CPU_RESERVED_M if vcpus <= cores), _AKS_CPU_RESERVED_M[-1][1])
    return float(cpu_m), min(20 * MAX_PODS + 50, 0.25 * memory_mib)


def pod_size(pool: PoolHandle, hugepages_mib: int = 0) -> PodSize:
    """What one training pod requests on a node of ``pool`` (whole CPUs and GiB, rounded down)."""
    memory_mib = pool.memory_gib * 1024
    reserved = [eks_reserved(pool.vcpus, memory_mib), aks_reserved(pool.vcpus, memory_mib)]
    cpu_m = pool.vcpus * 1000 - max(r[0] for r in reserved)
    free_mib = memory_mib - max(r[1] for r in reserved) - EVICTION_HARD_MIB - hugepages_mib
    keep = 1 - DAEMONSET_HEADROOM
    cpu = max(1, math.floor(cpu_m * keep / 1000))
    memory_gib = max(2, math.floor(free_mib * keep / 1024))
    # DataLoader workers and NCCL's intra-node transport use /dev/shm; it counts against the memory limit.
    return PodSize(cpu=cpu, memory_gib=memory_gib, shm_gib=max(1, memory_gib // 4))
