"""GPU node pools are tainted, so only pods that tolerate the taint (GPU work) land on GPU nodes.

A pool is a GPU pool when its instance types are of the p or g families or its AMI is a GPU AMI (EKS),
or its VM size is N-series (AKS). EKS spells effects ``NO_SCHEDULE``; AKS taints are strings
``key[=value]:Effect``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import ResourceValidationPolicy, Severity

from . import tokens
from .factory import by_type, resource_policy
from .subject import Subject
from .values import elements, known

_EKS_GPU_FAMILY = re.compile(r"^(p|g|gr)\d")
_EKS_GPU_AMI = re.compile(r"NVIDIA|GPU")
_AKS_GPU_SIZE = re.compile(r"^standard_n", re.IGNORECASE)
_KEEP_OFF = {"NO_SCHEDULE", "NO_EXECUTE", "NoSchedule", "NoExecute"}


def _eks_is_gpu(subject: Subject) -> bool:
    families = [
        str(known(kind, "instanceTypes")).split(".")[0] for kind in elements(subject.props, "instanceTypes")
    ]
    ami = known(subject.get("amiType"), "amiType")
    return any(_EKS_GPU_FAMILY.match(family) for family in families) or bool(
        isinstance(ami, str) and _EKS_GPU_AMI.search(ami)
    )


def _eks_node_group(subject: Subject) -> Iterator[str]:
    key = subject.setting("gpuTaintKey")
    if not _eks_is_gpu(subject):
        return
    taints = elements(subject.props, "taints")
    if not any(
        isinstance(t, Mapping) and t.get("key") == key and t.get("effect") in _KEEP_OFF for t in taints
    ):
        yield f"GPU node group has no {key} taint with effect NO_SCHEDULE or NO_EXECUTE; add one"


def _aks_taint(taint: Any) -> tuple[str, str]:
    """``key[=value]:Effect`` → ``(key, Effect)``."""
    text = str(taint)
    head, _, effect = text.rpartition(":")
    return head.split("=", 1)[0], effect


def _aks_pool_problem(pool: Mapping[str, Any], key: str, where: str) -> Iterator[str]:
    size = known(pool.get("vmSize"), f"{where}vmSize")
    if not isinstance(size, str) or not _AKS_GPU_SIZE.match(size):
        return
    taints = [_aks_taint(taint) for taint in elements(pool, "nodeTaints")]
    if not any(taint_key == key and effect in _KEEP_OFF for taint_key, effect in taints):
        yield f"{where}nodeTaints: GPU pool ({size}) has no {key}=…:NoSchedule taint; add one"


def _aks_pool(subject: Subject) -> Iterator[str]:
    yield from _aks_pool_problem(subject.props, subject.setting("gpuTaintKey"), "")


def _aks_cluster(subject: Subject) -> Iterator[str]:
    for index, pool in enumerate(elements(subject.props, "agentPoolProfiles")):
        if isinstance(pool, Mapping):
            yield from _aks_pool_problem(pool, subject.setting("gpuTaintKey"), f"agentPoolProfiles[{index}].")


POLICIES: list[ResourceValidationPolicy] = [
    resource_policy(
        "gpu-nodes-tainted",
        "GPU node pools (EKS p/g families or GPU AMIs, AKS N-series) carry the nvidia.com/gpu taint with "
        "NoSchedule or NoExecute.",
        by_type(
            {
                "aws:eks/nodeGroup:NodeGroup": _eks_node_group,
                tokens.AKS_POOL: _aks_pool,
                tokens.AKS_CLUSTER: _aks_cluster,
            }
        ),
        severity=Severity.MEDIUM,
        settings=("gpuTaintKey",),
    ),
]
