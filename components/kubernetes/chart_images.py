"""Where each pinned chart takes its images from its values, so a stack with a mirror lock installs every
chart from the mirror by digest (components/image_mirror.py).

A chart composes an image reference from a few values (``repository`` and ``tag``; ``registry``,
``repository``, ``tag`` and ``sha``; the NVIDIA operators' ``repository``, ``image`` and ``version``).
Each ``ChartImage`` names one such place: its path in the chart's values, the chart's default reference
there (its ``values.yaml``, with ``.Chart.AppVersion`` where the template defaults to it) and how the
chart's templates compose it. ``mirrored_values`` sets every place to the lock's ``<mirror>@<digest>``.
Only images the platform's releases render are listed (a component the values leave off names none).
tests/components/kubernetes/test_chart_images.py renders each pinned chart and finds every default here
among its images and none left upstream with the mirror's values; tests/components/test_image_mirror.py
plans stacks with a lock and finds every rendered image below the stack's registry by digest. A chart
bump that moves an image fails there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from components.driver_images import NodeOs, gpu_driver_tag
from components.image_mirror import ImageRef, MirrorLock

Style = Callable[[ImageRef], dict[str, Any]]


def _tagged(ref: ImageRef) -> str:
    """``<tag>@<digest>``: what a template that writes ``<repository>:<tag>`` needs to name the digest."""
    assert ref.digest is not None
    return f"{ref.tag}@{ref.digest}" if ref.tag else ref.digest


def joined(key: str) -> Style:
    """``{repository: host/path, <key>: tag}``, composed ``repository:<key>`` (most charts)."""
    return lambda ref: {"repository": ref.repository, key: _tagged(ref)}


def split(key: str, *, digest_only: bool = False) -> Style:
    """``{repository: host/dir, image: name, <key>: tag}`` (the NVIDIA operators: NVIDIA/gpu-operator
    internal/image/image.go ``ImagePath`` joins ``repository/image`` and ``version`` with ``@`` where the
    version starts ``sha256:``, else ``:``). ``digest_only``: the bare digest, for the DOCA driver, whose
    operator takes a version as a digest only where it starts ``sha256`` (components/driver_images.py)."""

    def values(ref: ImageRef) -> dict[str, Any]:
        directory, _, name = ref.path.rpartition("/")
        version = ref.digest if digest_only else _tagged(ref)
        return {"repository": f"{ref.host}/{directory}", "image": name, key: version}

    return values


def registry_sha(*, prefixed: bool) -> Style:
    """``{registry, repository, tag, sha}``, composed ``registry/repository:tag@sha256:<sha>``
    (kube-prometheus-stack: ``sha`` is hex; its kube-state-metrics subchart: ``sha`` is ``sha256:...``)."""

    def values(ref: ImageRef) -> dict[str, Any]:
        assert ref.digest is not None
        sha = ref.digest if prefixed else ref.digest.removeprefix("sha256:")
        return {"registry": ref.host, "repository": ref.path, "tag": ref.tag, "sha": sha}

    return values


def registry_digest(ref: ImageRef) -> dict[str, Any]:
    """prometheus-node-exporter: ``registry/repository:tag[-distroless]@digest``."""
    tag = ref.tag or ""
    distroless = tag.endswith("-distroless")
    return {
        "registry": ref.host,
        "repository": ref.path,
        "tag": tag.removesuffix("-distroless"),
        "distroless": distroless,
        "digest": ref.digest,
    }


@dataclass(frozen=True)
class ChartImage:
    """One image a chart renders: where in its values, the chart's default there, how it is composed."""

    path: tuple[str, ...]
    default: str
    style: Style
    # A driver image: how its operator completes the tag with the node's OS (components/driver_images.py).
    driver_tag: Callable[[str, NodeOs], str] | None = None

    def _node(self, values: Mapping[str, Any]) -> Any:
        node: Any = values
        for key in self.path:
            node = node.get(key) if isinstance(node, Mapping) else None
        return node

    def switched_off(self, values: Mapping[str, Any]) -> bool:
        """The values set ``enabled: false`` where this image is."""
        node = self._node(values)
        return isinstance(node, Mapping) and node.get("enabled") is False

    def source(self, values: Mapping[str, Any], node_os: NodeOs | None = None) -> str:
        """The reference the release's pods pull: the default, with a ``repository`` our values set
        there (the EFA plugin's regional registry); a driver's tag as its operator completes it for
        ``node_os`` (where the stack names one: the GPU nodes of a stack whose operator installs the
        driver)."""
        node = self._node(values)
        repository = node.get("repository") if isinstance(node, Mapping) else None
        ref = ImageRef.parse(self.default)
        if isinstance(repository, str):
            ref = replace(ImageRef.parse(repository), tag=ref.tag, digest=ref.digest)
        if self.driver_tag is not None and node_os is not None and ref.tag:
            ref = replace(ref, tag=self.driver_tag(ref.tag, node_os))
        return str(ref)


_GPU_OPERATOR = "nvcr.io/nvidia/gpu-operator:v26.7.0"
_DRIVER_MANAGER = "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0"
_DEVICE_PLUGIN = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
_NVIDIA = split("version")

# (chart, version) -> its images. Defaults from each chart's values.yaml at that version.
CHART_IMAGES: dict[tuple[str, str], tuple[ChartImage, ...]] = {
    ("gpu-operator", "v26.7.0"): (
        ChartImage(("operator",), _GPU_OPERATOR, _NVIDIA),
        ChartImage(("validator",), _GPU_OPERATOR, _NVIDIA),
        ChartImage(("nodeStatusExporter",), _GPU_OPERATOR, _NVIDIA),
        ChartImage(("driver",), "nvcr.io/nvidia/driver:595.91.07", _NVIDIA, gpu_driver_tag),
        ChartImage(("driver", "manager"), _DRIVER_MANAGER, _NVIDIA),
        ChartImage(("vgpuManager", "driverManager"), _DRIVER_MANAGER, _NVIDIA),
        ChartImage(("vfioManager",), _DRIVER_MANAGER, _NVIDIA),
        ChartImage(("vfioManager", "driverManager"), _DRIVER_MANAGER, _NVIDIA),
        ChartImage(("toolkit",), "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0", _NVIDIA),
        ChartImage(("devicePlugin",), _DEVICE_PLUGIN, _NVIDIA),
        ChartImage(("gfd",), _DEVICE_PLUGIN, _NVIDIA),
        ChartImage(("dcgm",), "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04", _NVIDIA),
        ChartImage(("dcgmExporter",), "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless", _NVIDIA),
        ChartImage(("migManager",), "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0", _NVIDIA),
        ChartImage(("gds",), "nvcr.io/nvidia/cloud-native/nvidia-fs:2.29.4", _NVIDIA),
        ChartImage(("gdrcopy",), "nvcr.io/nvidia/cloud-native/gdrdrv:v2.6", _NVIDIA),
        ChartImage(("vgpuDeviceManager",), "nvcr.io/nvidia/cloud-native/vgpu-device-manager:v0.5.0", _NVIDIA),
        ChartImage(("sandboxDevicePlugin",), "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.6.0", _NVIDIA),
        ChartImage(
            ("kataSandboxDevicePlugin",),
            "nvcr.io/nvidia/cloud-native/nvidia-sandbox-device-plugin:v0.0.5",
            _NVIDIA,
        ),
        ChartImage(("ccManager",), "nvcr.io/nvidia/cloud-native/k8s-cc-manager:v0.4.3", _NVIDIA),
        # The node-feature-discovery subchart (appVersion v0.19.0).
        ChartImage(
            ("node-feature-discovery", "image"),
            "registry.k8s.io/nfd/node-feature-discovery:v0.19.0",
            joined("tag"),
        ),
    ),
    ("network-operator", "26.4.1"): (
        ChartImage(("operator",), "nvcr.io/nvidia/cloud-native/network-operator:v26.4.1", split("tag")),
        ChartImage(
            ("operator", "ofedDriver", "initContainer"),
            "nvcr.io/nvidia/mellanox/network-operator-init-container:network-operator-v26.4.1",
            split("version"),
        ),
    ),
    ("aws-efa-k8s-device-plugin", "v0.5.30"): (
        ChartImage(
            ("image",),
            "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20",
            joined("tag"),
        ),
    ),
    ("nvidia-device-plugin", "0.17.1"): (
        ChartImage(("image",), "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", joined("tag")),
    ),
    ("metrics-server", "3.13.1"): (
        ChartImage(("image",), "registry.k8s.io/metrics-server/metrics-server:v0.8.1", joined("tag")),
    ),
    **{
        ("cluster-autoscaler", version): (
            ChartImage(("image",), f"registry.k8s.io/autoscaling/cluster-autoscaler:{tag}", joined("tag")),
        )
        for version, tag in (("9.51.0", "v1.33.0"), ("9.53.0", "v1.34.2"), ("9.59.0", "v1.35.0"))
    },
    ("kueue", "0.19.2"): (
        ChartImage(
            ("controllerManager", "manager", "image"), "registry.k8s.io/kueue/kueue:v0.19.2", joined("tag")
        ),
    ),
    ("policy-controller", "0.10.6"): (
        ChartImage(
            ("webhook", "image"),
            "ghcr.io/sigstore/policy-controller/policy-controller@sha256:"
            "0bcd60beb93f4427c29cf3a669743caf58490e98ded4380c33c09f092734a6ab",
            joined("version"),
        ),
        ChartImage(("leasescleanup", "image"), "cgr.dev/chainguard/kubectl:latest-dev", joined("version")),
    ),
    ("kube-prometheus-stack", "88.5.3"): (
        ChartImage(
            ("prometheusOperator", "image"),
            "quay.io/prometheus-operator/prometheus-operator:v0.93.1",
            registry_sha(prefixed=False),
        ),
        ChartImage(
            ("prometheusOperator", "prometheusConfigReloader", "image"),
            "quay.io/prometheus-operator/prometheus-config-reloader:v0.93.1",
            registry_sha(prefixed=False),
        ),
        ChartImage(
            ("prometheusOperator", "thanosImage"),
            "quay.io/thanos/thanos:v0.42.4",
            registry_sha(prefixed=False),
        ),
        ChartImage(
            ("prometheusOperator", "admissionWebhooks", "patch", "image"),
            "ghcr.io/jkroepke/kube-webhook-certgen:1.8.7",
            registry_sha(prefixed=False),
        ),
        ChartImage(
            ("alertmanager", "alertmanagerSpec", "image"),
            "quay.io/prometheus/alertmanager:v0.34.0",
            registry_sha(prefixed=False),
        ),
        ChartImage(
            ("prometheus", "prometheusSpec", "image"),
            "quay.io/prometheus/prometheus:v3.14.0-distroless",
            registry_sha(prefixed=False),
        ),
        ChartImage(
            ("kube-state-metrics", "image"),
            "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0",
            registry_sha(prefixed=True),
        ),
        ChartImage(
            ("prometheus-node-exporter", "image"),
            "quay.io/prometheus/node-exporter:v1.12.1-distroless",
            registry_digest,
        ),
    ),
}


def operator_image(
    spec: Mapping[str, str], lock: MirrorLock | None, *, source: str | None = None
) -> dict[str, str]:
    """An image in the NVIDIA operators' custom-resource shape (``repository``, ``image``, ``version``)
    that the program writes itself (the NicClusterPolicy's), through the lock where the stack has one.
    ``source``: the image the nodes pull where it is not the spec's (a driver: its OS-completed tag),
    pinned by its bare digest."""
    if lock is None:
        return dict(spec)
    pinned = lock.pin(source or f"{spec['repository']}/{spec['image']}:{spec['version']}")
    return split("version", digest_only=source is not None)(ImageRef.parse(pinned))


def chart_images(chart: str, version: str) -> tuple[ChartImage, ...]:
    """The images a pinned chart renders (none listed for a chart the platform does not pin)."""
    return CHART_IMAGES.get((chart, version), ())


def mirrored_values(
    chart: str, version: str, values: Mapping[str, Any], lock: MirrorLock, node_os: NodeOs | None
) -> dict[str, Any]:
    """``values`` with every image of the chart set to the lock's mirror by digest (``LockError`` names
    an image the lock lacks); a driver by its tag for ``node_os`` and that tag's digest, none where the
    values switch the driver off (the node image has it: no pod pulls it)."""
    result: dict[str, Any] = dict(values)
    for image in chart_images(chart, version):
        if image.driver_tag is not None and image.switched_off(values):
            continue
        ref = ImageRef.parse(lock.pin(image.source(values, node_os)))
        node = result
        for key in image.path:
            node[key] = dict(node.get(key) or {})
            node = node[key]
        node.update(image.style(ref))
    return result
