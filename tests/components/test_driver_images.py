"""The NVIDIA drivers' image tags per node OS (components/driver_images.py).

Rules and their sources:
- AKS "Upgrade the OS version" (learn.microsoft.com/azure/aks/upgrade-os-version, "Supported OS
  versions"): osSku Ubuntu follows the Kubernetes version, Ubuntu 22.04 the default for 1.25 to 1.34,
  Ubuntu 24.04 for 1.35+; osSku Ubuntu2204 names its own.
- gpu-operator ``resolveDriverTag``: ``<version>-<os-release ID><VERSION_ID>``.
- network-operator ``getMofedDriverImageName``: ``<version>-<os><os version>-<arch>``
  (its test: ``mofed:5.7-1.0.0.0-ubuntu20.04-amd64``).
"""

from __future__ import annotations

import pytest

from components.driver_images import AksOsSku, NodeOs, aks_node_os, doca_driver_tag, gpu_driver_tag


@pytest.mark.parametrize(
    ("sku", "kubernetes", "ubuntu"),
    [
        (AksOsSku.UBUNTU, "1.28", "22.04"),
        (AksOsSku.UBUNTU, "1.34", "22.04"),
        (AksOsSku.UBUNTU, "1.35", "24.04"),
        (AksOsSku.UBUNTU, "1.39", "24.04"),
        (AksOsSku.UBUNTU_2204, "1.35", "22.04"),
    ],
)
def test_an_aks_pool_runs_the_ubuntu_of_its_os_sku_and_kubernetes_version(
    sku: AksOsSku, kubernetes: str, ubuntu: str
) -> None:
    assert aks_node_os(sku, kubernetes, "amd64") == NodeOs("ubuntu", ubuntu, "amd64")


def test_each_operator_completes_its_drivers_tag_as_its_source_does() -> None:
    node = NodeOs("ubuntu", "20.04", "amd64")
    assert gpu_driver_tag("595.91.07", node) == "595.91.07-ubuntu20.04"
    assert doca_driver_tag("5.7-1.0.0.0", node) == "5.7-1.0.0.0-ubuntu20.04-amd64"
