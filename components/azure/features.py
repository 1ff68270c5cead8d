"""Subscription preview features the platform depends on, checked before anything is created.

Without them Azure accepts the cluster and fails a node pool many minutes later (or, for InfiniBand,
silently places nodes on different fabrics), so the program stops at preview with the command that fixes
it, and fails closed: a state it cannot read counts as missing.

The state is read from the resource ``az feature show`` reads, the Features API's
``GET /subscriptions/{sub}/providers/Microsoft.Features/providers/{namespace}/features/{name}``
(azure-cli: ``az feature show`` is ``FeatureClient.features.get(resource_provider_namespace,
feature_name)``; REST "Features - Get", api-version 2021-07-01), not azure-native's
``getSubscriptionFeatureRegistration``, which reads a different resource
(``.../featureProviders/{namespace}/subscriptionFeatureRegistrations/{name}``). No azure-native function
reads ``features/{name}``, so the program makes that GET itself (arm.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.azure.arm import ArmReader, ArmReadError, arm_reader
from components.config import PlatformConfig
from components.handle import Fabric

REGISTERED = "Registered"
FEATURES_API_VERSION = "2021-07-01"


@dataclass(frozen=True)
class SubscriptionFeature:
    namespace: str
    name: str
    why: str

    def resource_id(self, subscription_id: str) -> str:
        """The ARM id ``az feature show`` reads (its ``id`` field)."""
        return (
            f"/subscriptions/{subscription_id}/providers/Microsoft.Features/providers/{self.namespace}"
            f"/features/{self.name}"
        )

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


def feature_state(arm: ArmReader, feature: SubscriptionFeature) -> str:
    """``properties.state`` as ``az feature show`` prints it, or why it could not be read."""
    try:
        answer = arm.get(feature.resource_id(arm.subscription_id), {"api-version": FEATURES_API_VERSION})
    except ArmReadError as exc:
        return f"unreadable ({exc})"
    state = answer.get("properties", {}).get("state")
    return str(state) if state else "unreadable (no properties.state in the answer)"


def require_features(config: PlatformConfig) -> None:
    """Raise one ``RunError`` naming every missing feature and how to register it."""
    with arm_reader() as arm:
        missing = [
            f"subscription feature {f.namespace}/{f.name} is {state}; needed because {f.why}. "
            f"Fix: {f.register_commands}"
            for f in required_features(config)
            if (state := feature_state(arm, f)) != REGISTERED
        ]
    if missing:
        raise pulumi.RunError("\n".join(missing))
