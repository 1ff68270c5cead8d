"""Each pinned chart's image table (components/kubernetes/chart_images.py) against the packaged chart, as
Helm renders it: every default the table names is what the chart renders by default, and the values
``mirrored_values`` sets leave none of them upstream, for every pinned version (the shipped stacks use
only some: cluster-autoscaler per control-plane minor, the bare device plugin where the GPU operator is
off). The lock here is a FIXTURE (synthetic digests); tests/components/test_image_mirror.py plans whole
stacks with one.

Rule and source: a chart composes each image from its values (its templates and ``values.yaml`` at the
pinned version, in ``charts/``); ``name:tag@digest`` is one reference, resolved by its digest
(distribution/reference).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import pytest

from components.driver_images import NodeOs
from components.image_mirror import ImageRef, LockError, MirrorLock
from components.kubernetes.chart_images import CHART_IMAGES, mirrored_values
from components.kubernetes.charts import cache_dir, package_file, render
from mlplatform.mirror import image_references

# What a chart needs to render at all (cluster-autoscaler refuses to render without a node group source).
_REQUIRED = {"cluster-autoscaler": {"autoDiscovery": {"clusterName": "c"}}}
_MIRROR = "registry.example/s/mirror/"
# The GPU nodes' OS, to which the GPU operator completes the driver's tag (components/driver_images.py).
_NODE_OS = NodeOs("ubuntu", "24.04", "amd64")


def _rendered(chart: str, version: str, values: Mapping[str, Any]) -> set[str]:
    path = cache_dir() / package_file(chart, version)
    return set(image_references(render(path, values, chart, "ns", {}).objects, _NODE_OS))


def _sources(chart: str, version: str) -> set[str]:
    """The table's images as the release's pods pull them: each default, a driver's tag completed."""
    return {image.source({}, _NODE_OS) for image in CHART_IMAGES[(chart, version)]}


def _lock(chart: str, version: str) -> MirrorLock:
    return MirrorLock(
        "fixture",
        {
            source: (
                _MIRROR + source.partition("@")[0],
                "sha256:" + hashlib.sha256(source.encode()).hexdigest(),
            )
            for source in _sources(chart, version)
        },
    )


@pytest.mark.parametrize(("chart", "version"), sorted(CHART_IMAGES))
def test_the_table_names_what_the_chart_renders_and_the_mirror_replaces_it(chart: str, version: str) -> None:
    values = _REQUIRED.get(chart, {})
    upstream = _rendered(chart, version, values)
    defaults = _sources(chart, version)
    assert defaults <= upstream, f"{chart} {version} no longer renders {sorted(defaults - upstream)}"
    lock = _lock(chart, version)
    mirrored = _rendered(chart, version, mirrored_values(chart, version, values, lock, _NODE_OS))
    assert not defaults & mirrored
    pinned = {i for i in mirrored if i.startswith(_MIRROR)}
    assert {ImageRef.parse(i).digest for i in pinned} == {digest for _, digest in lock.images.values()}
    assert all(re.search(r"@sha256:[0-9a-f]{64}$", i) for i in pinned)


def test_a_repository_the_values_set_is_the_source_looked_up() -> None:
    """The EFA plugin comes from the stack region's EKS registry (addons.efa_device_plugin): that, with
    the chart's tag, is the image the lock must hold."""
    regional = "759879836304.dkr.ecr.me-central-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"
    [image] = CHART_IMAGES[("aws-efa-k8s-device-plugin", "v0.5.30")]
    assert image.source({"image": {"repository": regional}}) == f"{regional}:v0.5.20"
    assert image.source({}) == image.default


def test_a_driver_the_values_switch_off_is_pulled_by_no_one_and_left_out_of_the_lock() -> None:
    """EKS nodes have the driver (the GPU operator's ``driver.enabled: false``): no driver tag exists for
    the version alone, and nothing pulls it, so the lock need not hold it."""
    chart, version = "gpu-operator", "v26.7.0"
    full = _lock(chart, version)
    driver = next(s for s in full.images if ImageRef.parse(s).path == "nvidia/driver")
    lock = MirrorLock("fixture", {s: v for s, v in full.images.items() if s != driver})
    values = {"driver": {"enabled": False}}
    mirrored = mirrored_values(chart, version, values, lock, None)["driver"]
    assert mirrored["enabled"] is False and not {"repository", "image", "version"} & set(mirrored)
    with pytest.raises(LockError, match="nvidia/driver:595"):
        mirrored_values(chart, version, {}, lock, _NODE_OS)
