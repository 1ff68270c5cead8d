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
reads ``features/{name}``, so the program makes that one ARM GET itself, with the token and subscription
of the provider's own login (``authorization.getClientToken`` / ``getClientConfig``). The offline plan's
mocks answer it as ARM does, through ``ARM_TRANSPORT``.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

import httpx
import pulumi
from pulumi_azure_native import authorization

from components.config import PlatformConfig
from components.handle import Fabric

REGISTERED = "Registered"
# Azure public cloud's Resource Manager endpoint (the only cloud this platform deploys to).
ARM_ENDPOINT = "https://management.azure.com"
FEATURES_API_VERSION = "2021-07-01"
_READ_TIMEOUT_SECONDS = 30.0
# The HTTP transport ARM reads go through: the network by default; the offline plan's mocks set one that
# answers like ARM (mlplatform/mocks.py), so the plan runs this module's real request and parsing.
ARM_TRANSPORT: ContextVar[httpx.BaseTransport | None] = ContextVar("arm_transport", default=None)


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


def feature_state(client: httpx.Client, subscription_id: str, feature: SubscriptionFeature) -> str:
    """``properties.state`` as ``az feature show`` prints it, or why it could not be read."""
    try:
        response = client.get(
            feature.resource_id(subscription_id), params={"api-version": FEATURES_API_VERSION}
        )
    except httpx.HTTPError as exc:
        return f"unreadable ({type(exc).__name__}: {exc})"
    if response.is_error:
        # ARM error bodies are {"error": {"code", "message"}} (ARM common error response).
        return f"unreadable (HTTP {response.status_code}: {response.text.strip()})"
    state = response.json().get("properties", {}).get("state")
    return str(state) if state else "unreadable (no properties.state in the answer)"


def require_features(config: PlatformConfig) -> None:
    """Raise one ``RunError`` naming every missing feature and how to register it."""
    subscription_id = authorization.get_client_config().subscription_id
    token = authorization.get_client_token().token
    with httpx.Client(
        base_url=ARM_ENDPOINT,
        transport=ARM_TRANSPORT.get(),
        headers={"Authorization": f"Bearer {token}"},
        timeout=_READ_TIMEOUT_SECONDS,
    ) as client:
        missing = [
            f"subscription feature {f.namespace}/{f.name} is {state}; needed because {f.why}. "
            f"Fix: {f.register_commands}"
            for f in required_features(config)
            if (state := feature_state(client, subscription_id, f)) != REGISTERED
        ]
    if missing:
        raise pulumi.RunError("\n".join(missing))
