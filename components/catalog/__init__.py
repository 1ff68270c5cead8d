"""Instance types the platform knows, per cloud: pure data, no cloud SDK.

Config validation fails closed on anything not listed here: a type we have no facts for (GPU count, RDMA
fabric, interfaces per card) would otherwise be guessed. On AWS, which types the region sells is recorded
with its source and date (``aws.SOLD_IN_REGION``); per-zone offerings change, so the preflight asks the
cloud.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.handle import Cloud, Fabric, PoolKind


@dataclass(frozen=True)
class InstanceType:
    name: str
    kind: PoolKind
    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str = ""
    # The RDMA fabric the type supports and how many fabric devices (EFA interfaces, InfiniBand HCAs)
    # each node has; Fabric.NONE and 0 where it has none.
    fabric: Fabric = Fabric.NONE
    fabric_devices: int = 0
    avx512: bool = False
    # The node's ``kubernetes.io/arch`` (Go's GOARCH), which the network operator's driver tag ends with.
    arch: str = "amd64"


def catalog(cloud: Cloud) -> dict[str, InstanceType]:
    from components.catalog import aws, azure

    return {Cloud.AWS: aws.INSTANCE_TYPES, Cloud.AZURE: azure.VM_SIZES}[cloud]
