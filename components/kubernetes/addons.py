"""Cluster add-ons as pinned Helm charts with their values in code, chosen from the ClusterHandle.

Which add-ons a cluster gets is data about the handle: GPU pools get the NVIDIA GPU operator (or the
bare device plugin), EFA pools the EFA device plugin, InfiniBand pools the NVIDIA network operator with
the RDMA shared device plugin. Each lands only where it belongs (node selectors) and tolerates the GPU
taint by key with ``operator: Exists``, since the taint's value differs per cloud.

Chart versions are pinned to releases seen published (source beside each). Charts render on the cluster,
not offline: ``mlplatform plan`` lists releases but cannot show their objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from components.handle import GPU_TAINT_KEY, Cloud, ClusterHandle, Fabric
from components.kubernetes import kueue
from components.kubernetes.tenancy import NamespaceSpec, PodSecurity

GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
GPU_OPERATOR_NAMESPACE = "gpu-operator"
NETWORK_OPERATOR_NAMESPACE = "network-operator"
MONITORING_NAMESPACE = "monitoring"

# EKS's AL2023_x86_64_NVIDIA AMI ships the driver and container toolkit; AKS GPU pools are created
# with the driver left to the GPU operator (REFERENCE.md, "AWS EKS with EFA" / "Azure AKS with InfiniBand").
_NODE_IMAGE_HAS_GPU_DRIVER = {Cloud.AWS: True, Cloud.AZURE: False}
# AKS runs metrics-server and the cluster autoscaler itself; EKS does not.
_NEEDS_METRICS_SERVER = {Cloud.AWS: True, Cloud.AZURE: False}


@dataclass(frozen=True)
class Chart:
    """One Helm release: chart coordinates, pinned version, target namespace and values."""

    release: str
    chart: str
    version: str
    repo: str
    namespace: str
    values: dict[str, Any] = field(default_factory=dict)


def gpu_operator(handle: ClusterHandle) -> Chart:
    """NVIDIA GPU operator v25.3.4 (NVIDIA/gpu-operator Helm index), with the DCGM exporter on."""
    preinstalled = _NODE_IMAGE_HAS_GPU_DRIVER[handle.cloud]
    infiniband = Fabric.INFINIBAND in handle.fabrics
    return Chart(
        release="gpu-operator",
        chart="gpu-operator",
        version="v25.3.4",
        repo="https://helm.ngc.nvidia.com/nvidia",
        namespace=GPU_OPERATOR_NAMESPACE,
        values={
            "driver": {"enabled": not preinstalled, "rdma": {"enabled": infiniband, "useHostMofed": False}},
            "toolkit": {"enabled": not preinstalled},
            "dcgmExporter": {"enabled": True},
            "daemonsets": {"tolerations": [GPU_TOLERATION]},
            "node-feature-discovery": {"worker": {"tolerations": [GPU_TOLERATION]}},
        },
    )


def device_plugin(handle: ClusterHandle) -> Chart:
    """The bare NVIDIA device plugin 0.17.1 (terraform-aws-eks-blueprints patterns), for clusters that
    opt out of the operator; it needs drivers on the node image."""
    if not _NODE_IMAGE_HAS_GPU_DRIVER[handle.cloud]:
        raise ValueError(f"{handle.cloud} GPU nodes have no preinstalled driver: keep gpuOperator on")
    return Chart(
        release="nvidia-device-plugin",
        chart="nvidia-device-plugin",
        version="0.17.1",
        repo="https://nvidia.github.io/k8s-device-plugin",
        namespace="kube-system",
        values={"nodeSelector": {"nvidia.com/gpu.present": "true"}, "tolerations": [GPU_TOLERATION]},
    )


def efa_device_plugin() -> Chart:
    """AWS EFA device plugin v0.5.7 (eks-charts; terraform-aws-eks-blueprints patterns/targeted-odcr)."""
    return Chart(
        release="aws-efa-k8s-device-plugin",
        chart="aws-efa-k8s-device-plugin",
        version="v0.5.7",
        repo="https://aws.github.io/eks-charts",
        namespace="kube-system",
        values={"nodeSelector": {"vpc.amazonaws.com/efa.present": "true"}, "tolerations": [GPU_TOLERATION]},
    )


def network_operator() -> Chart:
    """NVIDIA network operator 25.4.0 with the RDMA shared device plugin exposing ``rdma/shared_ib``
    for Mellanox (vendor 15b3) InfiniBand ports (Azure/aks-rdma-infiniband)."""
    return Chart(
        release="network-operator",
        chart="network-operator",
        version="25.4.0",
        repo="https://helm.ngc.nvidia.com/nvidia",
        namespace=NETWORK_OPERATOR_NAMESPACE,
        values={
            # The GPU operator already runs node-feature-discovery; one NFD per cluster.
            "nfd": {"enabled": False},
            "deployCR": True,
            "ofedDriver": {"deploy": True, "tolerations": [GPU_TOLERATION]},
            "rdmaSharedDevicePlugin": {
                "deploy": True,
                "resources": [{"name": "shared_ib", "vendors": ["15b3"], "linkTypes": ["infiniband"]}],
                "tolerations": [GPU_TOLERATION],
            },
        },
    )


def metrics_server() -> Chart:
    """metrics-server 3.12.2 (kubernetes-sigs chart): the inference HPA scales on its CPU metrics."""
    return Chart(
        release="metrics-server",
        chart="metrics-server",
        version="3.12.2",
        repo="https://kubernetes-sigs.github.io/metrics-server/",
        namespace="kube-system",
        values={"replicas": 2, "podDisruptionBudget": {"enabled": True, "minAvailable": 1}},
    )


def cluster_autoscaler(handle: ClusterHandle, region: str) -> Chart:
    """cluster-autoscaler chart 9.43.2 (kubernetes.github.io/autoscaler), discovering node groups by
    the tags the AWS adapter puts on them and running under its IRSA role."""
    return Chart(
        release="cluster-autoscaler",
        chart="cluster-autoscaler",
        version="9.43.2",
        repo="https://kubernetes.github.io/autoscaler",
        namespace="kube-system",
        values={
            "cloudProvider": "aws",
            "awsRegion": region,
            "autoDiscovery": {"clusterName": handle.name},
            "rbac": {
                "serviceAccount": {
                    "name": "cluster-autoscaler",
                    "annotations": dict(handle.identities["cluster-autoscaler"]),
                }
            },
            "extraArgs": {"balance-similar-node-groups": True, "skip-nodes-with-local-storage": False},
        },
    )


def kueue_chart() -> Chart:
    """Kueue 0.19.2 (kubernetes-sigs/kueue charts/kueue at v0.19.2; registry.k8s.io's OCI chart)."""
    return Chart(
        release=kueue.RELEASE,
        chart="kueue",
        version="0.19.2",
        repo="oci://registry.k8s.io/kueue/charts",
        namespace=kueue.NAMESPACE,
        values=kueue.chart_values(),
    )


def operator_namespaces(handle: ClusterHandle, gpu_operator_on: bool) -> list[NamespaceSpec]:
    """Namespaces whose operators load kernel modules and mount host paths: privileged, in writing."""
    specs = []
    if handle.has_gpus and gpu_operator_on:
        specs.append(
            NamespaceSpec(
                GPU_OPERATOR_NAMESPACE,
                PodSecurity.PRIVILEGED,
                "NVIDIA GPU operator: driver/toolkit daemonsets load kernel modules and mount host paths",
                guarded=False,
            )
        )
    if Fabric.INFINIBAND in handle.fabrics:
        specs.append(
            NamespaceSpec(
                NETWORK_OPERATOR_NAMESPACE,
                PodSecurity.PRIVILEGED,
                "NVIDIA network operator: MOFED driver and RDMA device plugin need host access",
                guarded=False,
            )
        )
    return specs


def addon_charts(handle: ClusterHandle, region: str, gpu_operator_on: bool) -> list[Chart]:
    """Every add-on this cluster needs, from what its pools are."""
    charts: list[Chart] = []
    if handle.has_gpus:
        charts.append(gpu_operator(handle) if gpu_operator_on else device_plugin(handle))
    if Fabric.EFA in handle.fabrics:
        charts.append(efa_device_plugin())
    if Fabric.INFINIBAND in handle.fabrics:
        charts.append(network_operator())
    if _NEEDS_METRICS_SERVER[handle.cloud]:
        charts.append(metrics_server())
    if "cluster-autoscaler" in handle.identities:
        charts.append(cluster_autoscaler(handle, region))
    return charts
