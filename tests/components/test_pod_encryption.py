"""``cluster.podEncryption`` (issue 35): AKS pod-to-pod encryption by Advanced Container Networking
Services' WireGuard, refused in one line: AKS documents it as a preview, "not meant for production use"
(learn.microsoft.com/azure/aks/container-network-security-wireguard-encryption-concepts; review rev35d
A3), and the pinned provider's typed ManagedCluster API cannot express it."""

from __future__ import annotations

import copy
import inspect

import pytest
from pulumi_azure_native import containerservice

from components.config import AKS_API_VERSION, PLATFORM_KEY, ConfigError, PodEncryption, parse_stack_config
from tests.stack_variants import template


def test_the_pinned_provider_has_no_transit_encryption_on_the_cluster() -> None:
    """The refusal holds because the ManagedCluster API the pinned pulumi-azure-native sends (2025-09-01,
    managed_cluster.py "Uses Azure REST API version") has no ``transitEncryption`` in
    ``advancedNetworking.security``; later API versions do (Azure .NET SDK
    ``AdvancedNetworkingSecurity.TransitEncryption``: WireGuard, Cilium-based clusters only). When a
    provider upgrade adds it this fails: build the option (Cilium dataplane, ACNS enabled) instead."""
    assert f"Uses Azure REST API version {AKS_API_VERSION}." in inspect.getsource(
        containerservice.ManagedCluster
    )
    assert set(inspect.signature(containerservice.AdvancedNetworkingSecurityArgs).parameters) == {
        "advanced_network_policies",
        "enabled",
    }


@pytest.mark.parametrize(
    ("stack", "problem"),
    [
        (
            "azure-enterprise-prod",
            "cluster.podEncryption: wireguard is refused: AKS documents ACNS WireGuard encryption as a "
            "preview, not meant for production use (learn.microsoft.com/azure/aks/container-network-"
            "security-wireguard-encryption-concepts), and the pinned pulumi-azure-native's ManagedCluster "
            f"API {AKS_API_VERSION} has no advancedNetworking.security.transitEncryption",
        ),
        (
            "aws-enterprise-prod",
            "cluster.podEncryption: wireguard is AKS Advanced Container Networking Services; this stack's "
            "cloud is aws",
        ),
    ],
)
def test_wireguard_is_refused_in_one_line_naming_the_key(stack: str, problem: str) -> None:
    config = copy.deepcopy(template(stack))
    config[PLATFORM_KEY].setdefault("cluster", {})["podEncryption"] = "wireguard"
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(config, f"Pulumi.{stack}.yaml")
    [line] = raised.value.problems
    assert f"{PLATFORM_KEY}.{problem}" in line, line


def test_none_is_the_default_and_accepted() -> None:
    config = copy.deepcopy(template("azure-enterprise-prod"))
    assert parse_stack_config(config, "x").cluster.pod_encryption is PodEncryption.NONE
    config[PLATFORM_KEY].setdefault("cluster", {})["podEncryption"] = "none"
    assert parse_stack_config(config, "x").cluster.pod_encryption is PodEncryption.NONE
