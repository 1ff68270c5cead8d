"""fabric_profile: each fabric's resources, environment and exceptions, as REFERENCE.md lists them."""

from __future__ import annotations

import dataclasses

import pytest

from components.handle import Fabric, PoolHandle, PoolKind, Taint
from workloads.fabric import NCCL_TOPOLOGY_CONFIGMAP, fabric_profile

GPU_TAINT = (Taint("nvidia.com/gpu", "true"),)
EFA_P4D = PoolHandle("efa", PoolKind.GPU, "p4d.24xlarge", 8, Fabric.EFA, 4, 96, 1152, taints=GPU_TAINT)
EFA_P5 = PoolHandle("efa5", PoolKind.GPU, "p5.48xlarge", 8, Fabric.EFA, 32, 192, 2048, taints=GPU_TAINT)
IB_H100 = PoolHandle("ib", PoolKind.GPU, "Standard_ND96isr_H100_v5", 8, Fabric.INFINIBAND, 8, 96, 1900)
GPU_PLAIN = PoolHandle("gpu", PoolKind.GPU, "g6e.12xlarge", 4, Fabric.NONE, 0, 48, 384, taints=GPU_TAINT)
CPU = PoolHandle("cpu", PoolKind.CPU, "m7i.4xlarge", 0, Fabric.NONE, 0, 16, 64)


def test_cpu_pool_needs_nothing() -> None:
    profile = fabric_profile(CPU)
    assert (dict(profile.resources), dict(profile.env), profile.capabilities) == ({}, {}, ())


def test_plain_gpu_pool_gets_gpus_and_nccl_basics() -> None:
    profile = fabric_profile(GPU_PLAIN)
    assert dict(profile.resources) == {"nvidia.com/gpu": "4"}
    assert dict(profile.env) == {"NCCL_SOCKET_IFNAME": "^lo", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert not profile.annotations


def test_efa_pool_gets_devices_hugepages_and_libfabric_env() -> None:
    profile = fabric_profile(EFA_P4D)
    assert dict(profile.resources) == {
        "nvidia.com/gpu": "8",
        "vpc.amazonaws.com/efa": "4",
        "hugepages-2Mi": "5120Mi",
    }
    assert {k: profile.env[k] for k in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE")} == {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
    }
    assert profile.env["NCCL_SOCKET_IFNAME"] == "^lo"
    assert profile.capabilities == ()
    assert all("hostPath" not in v for v in profile.volumes), "hostPath /dev/infiniband silently disables EFA"


def test_efa_device_count_follows_the_pool_and_rdma_flag_only_where_documented() -> None:
    profile = fabric_profile(EFA_P5)
    assert profile.resources["vpc.amazonaws.com/efa"] == "32"
    assert "FI_EFA_USE_DEVICE_RDMA" not in profile.env


def test_infiniband_pool_gets_rdma_ipc_lock_topology_and_documented_skips() -> None:
    profile = fabric_profile(IB_H100)
    assert dict(profile.resources) == {"nvidia.com/gpu": "8", "rdma/shared_ib": "1"}
    assert profile.capabilities == ("IPC_LOCK",)
    assert profile.env["NCCL_IB_DISABLE"] == "0"
    assert profile.env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert profile.env["NCCL_TOPO_FILE"].endswith("/ndv5-topo.xml")
    assert [v["configMap"] for v in profile.volumes] == [{"name": NCCL_TOPOLOGY_CONFIGMAP, "optional": True}]
    skips = sorted(v for k, v in profile.annotations.items() if k.startswith("checkov.io/skip"))
    assert [s.split("=", 1)[0] for s in skips] == ["CKV_K8S_23", "CKV_K8S_25", "CKV_K8S_37", "CKV_K8S_40"]
    # IPC_LOCK reaches the effective set of a root process only (kubernetes/kubernetes#56374).
    assert profile.run_as_root
    assert all(len(s.split("=", 1)[1]) > 20 for s in skips), "each skip carries its reason"
    assert "IPC_LOCK" in profile.annotations["policy.ml-platform.io/capabilities-reason"]


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        (dataclasses.replace(IB_H100, instance_type="Standard_ND40rs_v2"), "no NCCL topology"),
        (dataclasses.replace(EFA_P4D, fabric_devices_per_node=0), "fabric_devices_per_node"),
        (dataclasses.replace(CPU, fabric=Fabric.EFA, fabric_devices_per_node=1), "without GPUs"),
    ],
)
def test_combinations_we_cannot_vouch_for_fail_closed(pool: PoolHandle, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fabric_profile(pool)
