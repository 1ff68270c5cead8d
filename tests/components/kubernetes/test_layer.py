"""The layer on the real templates: fabric add-ons only where that fabric exists, training's Pod
Security only as privileged as its fabric needs, and everything on the one cluster provider."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlplatform.plan import Plan
from mlplatform.report import HELM_RELEASE, kubernetes_objects

FABRIC_RELEASES = {"aws-efa-k8s-device-plugin", "network-operator"}


@pytest.mark.parametrize(
    ("stack", "fabric_releases", "training_level"),
    [
        ("aws-enterprise-prod", {"aws-efa-k8s-device-plugin"}, "restricted"),
        ("aws-smb-dev", set(), "restricted"),
        ("azure-enterprise-prod", {"network-operator"}, "privileged"),
        ("azure-smb-dev", set(), "restricted"),
    ],
)
def test_fabric_addons_and_training_privilege_follow_the_pools(
    stack: str, fabric_releases: set[str], training_level: str, planned: Callable[[str], Plan]
) -> None:
    plan = planned(stack)
    releases = {r.inputs["name"] for r in plan.by_type(HELM_RELEASE)}
    assert releases & FABRIC_RELEASES == fabric_releases
    assert "gpu-operator" in releases
    namespaces = {
        o["metadata"]["name"]: o["metadata"] for o in kubernetes_objects(plan) if o["kind"] == "Namespace"
    }
    assert namespaces["ml-training"]["labels"]["pod-security.kubernetes.io/enforce"] == training_level
    assert namespaces["ml-inference"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-smb-dev"])
def test_every_kubernetes_resource_uses_the_cluster_provider(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    plan = planned(stack)
    providers = plan.providers()
    k8s = [r for r in plan.resources if r.custom and r.type.startswith("kubernetes:")]
    assert k8s
    assert {providers[r.provider or ""].type for r in k8s} == {"pulumi:providers:kubernetes"}
    (provider,) = [p for p in providers.values() if p.type == "pulumi:providers:kubernetes"]
    assert "4dabf18193072939515e22adb298388d" in provider.inputs["kubeconfig"], "kubeconfig stays a secret"


def test_a_cloud_only_first_phase_registers_nothing_in_the_cluster(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("azure-enterprise-prod")  # the template with `kubernetes: {enabled: false}`
    assert not [
        r for r in plan.resources if r.type.startswith(("kubernetes:", "pulumi:providers:kubernetes"))
    ]
    assert plan.by_type("azure-native:containerservice:ManagedCluster")
