"""The Kubernetes version, checked against what AKS offers in the region before anything is created.

AKS creates a cluster only on a version it lists for the region, and the list moves every few months
(AKS release calendar, learn.microsoft.com/azure/aks/supported-kubernetes-versions). Config refuses a
minor past its end of life on the pinned calendar (components/catalog/azure.py); at preview the program
also reads the region's live list, the resource ``az aks get-versions --location <region>`` reads
(REST "Managed Clusters - List Kubernetes Versions", ``GET /subscriptions/{sub}/providers/
Microsoft.ContainerService/locations/{location}/kubernetesVersions``, containerservice 2025-09-01: a
``values`` list of ``{version, isPreview, capabilities.supportPlan, patchVersions}``), and stops with that
command when the minor is not offered generally available, or cannot be read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pulumi

from components.azure.arm import ArmReader, ArmReadError, arm_reader
from components.config import PlatformConfig

KUBERNETES_VERSIONS_API_VERSION = "2025-09-01"
# The support plan of versions AKS supports without the LTS add-on (containerservice KubernetesSupportPlan).
KUBERNETES_OFFICIAL = "KubernetesOfficial"


def offered_minors(answer: Mapping[str, Any]) -> set[str]:
    """The minors AKS offers generally available with standard support, from a kubernetesVersions answer."""
    return {
        str(entry.get("version"))
        for entry in answer.get("values", [])
        if not entry.get("isPreview")
        and KUBERNETES_OFFICIAL in entry.get("capabilities", {}).get("supportPlan", [KUBERNETES_OFFICIAL])
    }


def _version_problems(arm: ArmReader, config: PlatformConfig) -> Iterator[str]:
    version, location = config.cluster.kubernetes_version, config.region
    path = (
        f"/subscriptions/{arm.subscription_id}/providers/Microsoft.ContainerService/locations/{location}"
        "/kubernetesVersions"
    )
    try:
        answer = arm.get(path, {"api-version": KUBERNETES_VERSIONS_API_VERSION})
    except ArmReadError as exc:
        offered, unreadable = set(), f" (unreadable: {exc})"
    else:
        offered, unreadable = offered_minors(answer), ""
    if version not in offered:
        listed = ", ".join(sorted(offered, key=lambda v: tuple(int(p) for p in v.split(".")))) or "none"
        yield (
            f"Kubernetes {version} (cluster.kubernetesVersion) is not offered by AKS in {location}"
            f"{unreadable}; offered: {listed}. Check with "
            f"`az aks get-versions --location {location} --output table` and pin an offered minor"
        )


def require_version(config: PlatformConfig) -> None:
    """Raise one ``RunError`` when AKS does not offer the stack's Kubernetes minor in its region."""
    with arm_reader() as arm:
        problems = list(_version_problems(arm, config))
    if problems:
        raise pulumi.RunError("\n".join(problems))
