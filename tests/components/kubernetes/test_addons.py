"""Add-ons follow the pools: fabric plugins only where that fabric exists, GPU add-ons only with GPUs,
every chart pinned for the control plane's version and tolerant of the taints of the pools it serves."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pulumi
import pytest

from components.handle import (
    GPU_TAINT_KEY,
    Cloud,
    ClusterHandle,
    Fabric,
    PoolHandle,
    PoolKind,
    StorageHandle,
    Taint,
)
from components.kubernetes.addons import (
    addon_charts,
    gpu_operator,
    nic_cluster_policy,
    operator_namespaces,
)
from components.kubernetes.tenancy import PodSecurity
from judges.kube import pods
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects

CPU = PoolHandle("cpu", PoolKind.CPU, "c7i.2xlarge", 0, Fabric.NONE, 0, 8, 16)


def _gpu(fabric: Fabric, devices: int, value: str) -> PoolHandle:
    return PoolHandle(
        "gpu", PoolKind.GPU, "x", 8, fabric, devices, 96, 1152, taints=(Taint(GPU_TAINT_KEY, value),)
    )


def _handle(cloud: Cloud, *pools: PoolHandle, autoscaler: bool = False) -> ClusterHandle:
    identities = {"cluster-autoscaler": {"eks.amazonaws.com/role-arn": "arn"}} if autoscaler else {}
    return ClusterHandle(
        cloud,
        "c",
        pulumi.Output.from_input("kubeconfig"),
        "1.33",
        pools,
        StorageHandle("s3://b"),
        "reg",
        identities=identities,
    )


def _releases(handle: ClusterHandle, operator: bool = True) -> set[str]:
    return {c.release for c in addon_charts(handle, "me-central-1", operator)}


def test_cpu_only_cluster_gets_no_gpu_or_fabric_addons() -> None:
    assert _releases(_handle(Cloud.AWS, CPU, autoscaler=True)) == {"metrics-server", "cluster-autoscaler"}
    assert _releases(_handle(Cloud.AZURE, CPU)) == set()
    assert operator_namespaces(_handle(Cloud.AWS, CPU), True) == []


def test_efa_pools_get_the_efa_plugin_and_never_the_network_operator() -> None:
    releases = _releases(_handle(Cloud.AWS, CPU, _gpu(Fabric.EFA, 32, "true")))
    assert {"gpu-operator", "aws-efa-k8s-device-plugin"} <= releases
    assert "network-operator" not in releases


def test_infiniband_pools_get_network_operator_and_rdma_in_the_gpu_operator() -> None:
    handle = _handle(Cloud.AZURE, CPU, _gpu(Fabric.INFINIBAND, 8, "present"))
    charts = {c.release: c for c in addon_charts(handle, "uaenorth", True)}
    assert set(charts) == {"gpu-operator", "network-operator"}
    assert charts["gpu-operator"].values["driver"] == {
        "enabled": True,
        "rdma": {"enabled": True, "useHostMofed": False},
    }
    # network-operator >= v24.10.0 has no rdmaSharedDevicePlugin/ofedDriver/deployCR values (REFERENCE.md):
    # the device plugin comes from the NicClusterPolicy applied after the chart.
    assert charts["network-operator"].values == {"nfd": {"enabled": False}}
    assert charts["network-operator"].after == ("gpu-operator",)
    levels = {s.name: s.pod_security for s in operator_namespaces(handle, True)}
    assert levels == {"gpu-operator": PodSecurity.PRIVILEGED, "network-operator": PodSecurity.PRIVILEGED}
    assert all(s.privilege_reason for s in operator_namespaces(handle, True))


def test_gpu_nodes_on_aws_keep_their_preinstalled_driver() -> None:
    charts = {
        c.release: c
        for c in addon_charts(_handle(Cloud.AWS, _gpu(Fabric.NONE, 0, "true")), "me-central-1", True)
    }
    assert charts["gpu-operator"].values["driver"]["enabled"] is False
    assert charts["gpu-operator"].values["toolkit"]["enabled"] is False
    assert charts["gpu-operator"].values["dcgmExporter"]["enabled"] is True


def test_device_plugin_instead_of_operator_only_where_drivers_are_preinstalled() -> None:
    assert "nvidia-device-plugin" in _releases(
        _handle(Cloud.AWS, _gpu(Fabric.NONE, 0, "true")), operator=False
    )
    with pytest.raises(ValueError, match="no preinstalled driver"):
        _releases(_handle(Cloud.AZURE, _gpu(Fabric.NONE, 0, "present")), operator=False)


SPOT = Taint("kubernetes.azure.com/scalesetpriority", "spot")


def test_gpu_daemons_tolerate_every_taint_of_every_gpu_pool_including_aks_spot() -> None:
    """AKS spot pools carry kubernetes.azure.com/scalesetpriority=spot:NoSchedule (AKS spot node pool
    docs); without it the GPU operator's device plugin never lands and no node offers nvidia.com/gpu."""
    spot_gpu = PoolHandle(
        "spot", PoolKind.GPU, "x", 1, Fabric.NONE, 0, 8, 56, taints=(Taint(GPU_TAINT_KEY, "present"), SPOT)
    )
    values = gpu_operator(_handle(Cloud.AZURE, CPU, spot_gpu)).values
    expected = [
        {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
        {"key": SPOT.key, "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert sorted(values["daemonsets"]["tolerations"], key=str) == sorted(expected, key=str)
    assert sorted(values["node-feature-discovery"]["worker"]["tolerations"], key=str) == sorted(
        expected, key=str
    )


def test_nic_cluster_policy_lands_on_infiniband_pools_only_with_the_shared_ib_plugin() -> None:
    """Azure/aks-rdma-infiniband configs/nicclusterpolicy/rdma-shared-device-plugin: resource shared_ib,
    vendor 15b3, link type infiniband; DOCA driver of network-operator v26.4.1 (hack/release.yaml)."""
    ib = PoolHandle(
        "ib",
        PoolKind.GPU,
        "x",
        8,
        Fabric.INFINIBAND,
        8,
        96,
        1900,
        labels={"ml-platform/pool": "ib"},
        taints=(Taint(GPU_TAINT_KEY, "present"),),
    )
    policy = nic_cluster_policy(_handle(Cloud.AZURE, CPU, ib), None)
    spec = policy["spec"]
    [term] = spec["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "ml-platform/pool", "operator": "In", "values": ["ib"]}]
    assert spec["tolerations"] == [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["ofedDriver"]["image"] == "doca-driver"
    [config] = json.loads(spec["rdmaSharedDevicePlugin"]["config"])["configList"]
    assert config["resourceName"] == "shared_ib"
    assert config["selectors"] == {"vendors": ["15b3"], "linkTypes": ["infiniband"]}


@pytest.mark.parametrize("cloud,fabric", [(Cloud.AWS, Fabric.EFA), (Cloud.AZURE, Fabric.INFINIBAND)])
def test_every_chart_is_pinned_and_tolerates_gpu_taint_by_key(cloud: Cloud, fabric: Fabric) -> None:
    for chart in addon_charts(_handle(cloud, CPU, _gpu(fabric, 8, "any")), "me-central-1", True):
        assert chart.pin.version and chart.pin.version[0] in "v0123456789", chart
        text = repr(chart.values)
        if chart.release not in ("metrics-server", "network-operator"):
            assert "'operator': 'Exists'" in text and GPU_TAINT_KEY in text, chart.release


def test_a_driver_upgrade_waits_for_running_ib_jobs_and_takes_every_node_at_once(
    planned: Callable[[str], Plan],
) -> None:
    """Earlier review D9 (review wt-cluster2 D3): one node at a time, force-drained, restarted a running IB
    job once per node. The NicClusterPolicy CRD (network-operator): ``maxParallelUpgrades`` 0 = no limit;
    ``waitForCompletion.podSelector`` (a label selector string) names the pods each node waits for."""
    objects = kubernetes_objects(planned("azure-enterprise-prod"))
    [policy] = [o for o in objects if o["kind"] == "NicClusterPolicy"]
    upgrade = policy["spec"]["ofedDriver"]["upgradePolicy"]
    assert upgrade["maxParallelUpgrades"] == 0
    selector = upgrade["waitForCompletion"]["podSelector"]
    assert re.fullmatch(r"[a-z0-9./-]+", selector), "an existence selector: one label key"
    training = [p for p in pods(objects) if p.namespace == "ml-training" and p.owner.kind == "Job"]
    assert training and all(selector in p.labels for p in training)
    assert upgrade["waitForCompletion"]["timeoutSeconds"] == 0
