"""Subscription preview features the platform depends on, checked before anything is created.

Without them Azure accepts the cluster and fails a node pool many minutes later (or, for InfiniBand,
silently places nodes on different fabrics). ``azure-native`` can read a registration
(``features:getSubscriptionFeatureRegistration``), so the program stops at preview with the command
that fixes it. Under the offline plan the mocks answer "Registered".
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import features

from components.config import PlatformConfig
from components.handle import Fabric

REGISTERED = "Registered"


@dataclass(frozen=True)
class SubscriptionFeature:
    namespace: str
    name: str
    why: str

    @property
    def register_commands(self) -> str:
        return (
            f"az feature register --namespace {self.namespace} --name {self.name}; wait until "
            f"`az feature show --namespace {self.namespace} --name {self.name} --query properties.state` "
            f"is Registered; then az provider register --namespace {self.namespace}"
        )


# Keeps every node of an InfiniBand pool on one physical fabric (Azure/aks-rdma-infiniband README).
INFINIBAND = SubscriptionFeature(
    "Microsoft.ContainerService", "AKSInfinibandSupport", "InfiniBand node pools land on one fabric"
)
# Host-based encryption of temp disks and disk caches (learn.microsoft.com/azure/aks/enable-host-encryption).
ENCRYPTION_AT_HOST = SubscriptionFeature(
    "Microsoft.Compute", "EncryptionAtHost", "every node pool encrypts at host"
)


def required_features(config: PlatformConfig) -> tuple[SubscriptionFeature, ...]:
    infiniband = any(p.fabric is Fabric.INFINIBAND for p in config.node_pools)
    return (ENCRYPTION_AT_HOST, INFINIBAND) if infiniband else (ENCRYPTION_AT_HOST,)


def feature_state(feature: SubscriptionFeature) -> str:
    """The registration state, or a description of why it could not be read."""
    try:
        result = features.get_subscription_feature_registration(
            provider_namespace=feature.namespace, feature_name=feature.name
        )
    except Exception as exc:  # the invoke raises a bare Exception carrying the ARM error
        return f"unreadable ({exc})"
    properties = result.properties
    return (properties.state if properties is not None else None) or "NotRegistered"


def require_features(config: PlatformConfig) -> None:
    """Raise one ``RunError`` naming every missing feature and how to register it."""
    missing = [
        f"subscription feature {f.namespace}/{f.name} is {state}; needed because {f.why}. "
        f"Fix: {f.register_commands}"
        for f in required_features(config)
        if (state := feature_state(f)) != REGISTERED
    ]
    if missing:
        raise pulumi.RunError("\n".join(missing))
