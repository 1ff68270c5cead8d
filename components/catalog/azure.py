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
