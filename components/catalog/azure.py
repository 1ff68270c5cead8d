"""Azure VM sizes for AKS node pools.

Sources: learn.microsoft.com/azure/virtual-machines/sizes (ND H100 v5, NDasrA100 v4, NDm A100 v4,
NCasT4 v3, NC A100 v4, NCads H100 v5, Dsv5, Fsv2 series pages) and Azure/aks-rdma-infiniband
(REFERENCE.md). The ND96 sizes have eight InfiniBand HCAs, one per GPU (NDR 400 Gb/s on H100 v5,
HDR 200 Gb/s on A100 v4). Dsv5 (Ice Lake) and Fsv2 (Cascade Lake) run Intel Xeon with AVX-512.
"""

from __future__ import annotations

from components.catalog import InstanceType
from components.handle import Fabric, PoolKind

_GPU = PoolKind.GPU
_CPU = PoolKind.CPU
_IB = Fabric.INFINIBAND

VM_SIZES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("Standard_ND96isr_H100_v5", _GPU, 96, 1900, 8, "H100", _IB, 8),
        InstanceType("Standard_ND96asr_v4", _GPU, 96, 900, 8, "A100-40GB", _IB, 8),
        InstanceType("Standard_ND96amsr_A100_v4", _GPU, 96, 1900, 8, "A100-80GB", _IB, 8),
        InstanceType("Standard_NC4as_T4_v3", _GPU, 4, 28, 1, "T4"),
        InstanceType("Standard_NC8as_T4_v3", _GPU, 8, 56, 1, "T4"),
        InstanceType("Standard_NC24ads_A100_v4", _GPU, 24, 220, 1, "A100-80GB"),
        InstanceType("Standard_NC40ads_H100_v5", _GPU, 40, 320, 1, "H100-NVL"),
        InstanceType("Standard_D2s_v5", _CPU, 2, 8, avx512=True),
        InstanceType("Standard_D4s_v5", _CPU, 4, 16, avx512=True),
        InstanceType("Standard_D8s_v5", _CPU, 8, 32, avx512=True),
        InstanceType("Standard_D16s_v5", _CPU, 16, 64, avx512=True),
        InstanceType("Standard_F8s_v2", _CPU, 8, 16, avx512=True),
        InstanceType("Standard_F16s_v2", _CPU, 16, 32, avx512=True),
    )
}


# AKS end of life per Kubernetes minor, as (year, month): the AKS Kubernetes release calendar
# (learn.microsoft.com/azure/aks/supported-kubernetes-versions; MicrosoftDocs/azure-aks-docs
# articles/aks/supported-kubernetes-versions.md), read 2026-11-26. AKS creates clusters only on versions
# `az aks get-versions` lists for the region, and force-upgrades a cluster at end of support. 1.33 lives on
# only as LTS (Premium tier with supportPlan AKSLongTermSupport), which this platform does not buy. Refresh
# when AKS moves; 1.36 and 1.37 are GA but their end of life is not in the sources read here.
AKS_END_OF_LIFE: dict[str, tuple[int, int]] = {
    "1.33": (2026, 7),
    "1.34": (2026, 11),
    "1.35": (2027, 3),
}


def aks_supported(version: str, today: tuple[int, int]) -> bool:
    """Whether AKS supports ``version`` after the month ``today`` (a version ending this month is out)."""
    end = AKS_END_OF_LIFE.get(version)
    return end is not None and end > today
