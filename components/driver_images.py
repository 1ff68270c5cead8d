"""The driver images the NVIDIA operators pull per node OS: the one rule the renderer (through the mirror
lock) and ``mlplatform images mirror`` (what it copies) share.

Both operators take a driver's ``version`` as the start of a tag and append the node's OS to it, unless
the version is a digest:

- gpu-operator ``resolveDriverTag`` (controllers/object_controls.go): ``ImagePath`` joins ``repository/
  image`` and ``version`` (``@`` where the version starts ``sha256:``), then appends ``-<ID><VERSION_ID>``
  of the first GPU node's os-release (NFD labels ``system-os_release.ID``/``VERSION_ID``) unless the
  reference holds ``sha256:``: ``driver:595.91.07-ubuntu24.04``.
- network-operator ``getMofedDriverImageName`` (pkg/state/state_ofed.go): ``<version>-<os><os version>-
  <arch>`` per node pool, or ``repository/image@version`` where the version starts ``sha256``:
  ``doca-driver:<version>-ubuntu24.04-amd64``.

So the image the nodes run is the suffixed tag, which is what must be mirrored and pinned; the stack
knows the OS (``azure.osSku`` and the Kubernetes version) and the architecture (the VM sizes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class AksOsSku(StrEnum):
    """AKS agent pool ``osSku`` values with the Ubuntu the operators' driver images are built for, of
    those the pinned pulumi-azure-native knows (its ``containerservice.OSSKU``: no Ubuntu2404 yet)."""

    UBUNTU = "Ubuntu"
    UBUNTU_2204 = "Ubuntu2204"


# AKS "Upgrade the OS version" (learn.microsoft.com/azure/aks/upgrade-os-version, "Supported OS
# versions"): osSku Ubuntu follows the Kubernetes version, Ubuntu 22.04 the default for 1.25 to 1.34 and
# Ubuntu 24.04 for 1.35+; Ubuntu2204 names its own.
_UBUNTU_2404_FROM = (1, 35)
_NAMED = {AksOsSku.UBUNTU_2204: "22.04"}


@dataclass(frozen=True)
class NodeOs:
    """What the operators read from a GPU node: os-release ``ID`` and ``VERSION_ID``, and
    ``kubernetes.io/arch``."""

    id: str
    version: str
    arch: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "version": self.version, "arch": self.arch}

    @classmethod
    def from_dict(cls, value: Mapping[str, object]) -> NodeOs:
        return cls(str(value["id"]), str(value["version"]), str(value["arch"]))


def aks_node_os(os_sku: AksOsSku, kubernetes_version: str, arch: str) -> NodeOs:
    """The Ubuntu an AKS pool of ``os_sku`` runs at ``kubernetes_version`` (``"1.35"``)."""
    if os_sku in _NAMED:
        return NodeOs("ubuntu", _NAMED[os_sku], arch)
    minor = tuple(int(part) for part in kubernetes_version.split(".")[:2])
    return NodeOs("ubuntu", "24.04" if minor >= _UBUNTU_2404_FROM else "22.04", arch)


def gpu_driver_tag(version: str, node: NodeOs) -> str:
    """gpu-operator ``resolveDriverTag``: ``<version>-<ID><VERSION_ID>``."""
    return f"{version}-{node.id}{node.version}"


def doca_driver_tag(version: str, node: NodeOs) -> str:
    """network-operator ``getMofedDriverImageName``: ``<version>-<os><os version>-<arch>``."""
    return f"{version}-{node.id}{node.version}-{node.arch}"


# (custom resource kind, its spec field) -> how its operator completes the driver's tag.
DRIVER_TAGS: dict[tuple[str, str], Callable[[str, NodeOs], str]] = {
    ("ClusterPolicy", "driver"): gpu_driver_tag,
    ("NicClusterPolicy", "ofedDriver"): doca_driver_tag,
}
