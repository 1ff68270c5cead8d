"""Deployability on Azure: rules ARM, Key Vault and AKS enforce at deploy time that an offline plan
(and Pulumi's mocks) accept. Each rule names its source.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import Policy, Severity

from . import tokens
from .factory import Finding, by_type, resource_policy, stack_policy
from .kubernetes import namespace_of
from .subject import Graph, Subject
from .values import is_unknown

DISK_ENCRYPTION_SET = "azure-native:compute:DiskEncryptionSet"
KEY_VAULT = "azure-native:keyvault:Vault"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
# A Key Vault key identifier with its version: https://<vault>.vault.azure.net/keys/<name>/<version>,
# the version 32 hex characters (Key Vault "About keys, secrets and certificates", object identifiers).
_VERSIONED_KEY = re.compile(r"^https://[^/]+/keys/[^/]+/[0-9a-fA-F]{32}$")
# AKS workload identity (learn.microsoft.com/azure/aks/workload-identity-overview, "Service account
# labels and annotations"): the service account names the identity, the pod opts in with the label.
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
USE_LABEL = "azure.workload.identity/use"
MANAGED_CLUSTER = "azure-native:containerservice:ManagedCluster"
# "Tag names can't contain these characters: <, >, %, &, \\, ?, /" (learn.microsoft.com/azure/
# azure-resource-manager/management/tag-resources#limitations); ARM answers InvalidTagNameCharacters.
_TAG_NAME_FORBIDDEN = re.compile(r"[<>%&\\?/]")


def _tag_names(value: Any) -> Iterator[str]:
    """Every key of every ``tags`` mapping in a resource's inputs (top level and nested, e.g. the
    agent pool profiles of a managed cluster)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "tags" and isinstance(item, Mapping):
                yield from (str(name) for name in item)
            else:
                yield from _tag_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tag_names(item)


def _tag_name_charset(subject: Subject) -> Iterator[str]:
    if subject.package != "azure-native" or subject.is_provider:
        return
    for name in _tag_names(subject.props):
        if _TAG_NAME_FORBIDDEN.search(name):
            yield f"tag name {name!r} contains a character ARM refuses in tag names (< > % & \\ ? /)"


def _managed_nat_with_own_subnet(subject: Subject) -> Iterator[str]:
    """ "Managed NAT gateway is incompatible with custom virtual networks" (learn.microsoft.com/azure/aks/
    nat-gateway); AKS answers ManagedNATGatewayWithCustomVNetNotAllowed on ``vnetSubnetID``
    (kubernetes-sigs/cluster-api-provider-azure#5429). Bring-your-own subnets take userAssignedNATGateway."""
    if subject.get("networkProfile.outboundType") != "managedNATGateway":
        return
    profiles = subject.get("agentPoolProfiles")
    if isinstance(profiles, list) and any(isinstance(p, Mapping) and p.get("vnetSubnetID") for p in profiles):
        yield (
            "outboundType managedNATGateway with agent pools on the stack's own subnet (vnetSubnetID): AKS "
            "refuses it; use userAssignedNATGateway with a NAT gateway on that subnet"
        )


def _versioned_key_url(subject: Subject) -> Iterator[str]:
    """compute DiskEncryptionSet: "Fully versioned Key Url pointing to a key in KeyVault. Version segment
    of the Url is required regardless of rotationToLatestKeyVersionEnabled value" (azure-native SDK,
    KeyForDiskEncryptionSet.keyUrl); ARM refuses a versionless URL."""
    url = subject.get("activeKey.keyUrl")
    if url is None or is_unknown(url):
        return
    if not isinstance(url, str) or not _VERSIONED_KEY.match(url):
        yield (
            f"activeKey.keyUrl {url!r} has no key version; use the key's versioned URI "
            "(keyUriWithVersion) and ignore later changes of it (rotation moves the version)"
        )


def _vault_name_reuse(graph: Graph) -> Iterator[Finding]:
    """Key Vault soft delete with purge protection keeps a deleted vault's name reserved until the
    retention period ends, 7-90 days (Key Vault soft-delete overview): a stack that may be destroyed
    (its data not protected) and recreated cannot take the same fixed name again. Such a vault's name
    must come from something that changes per creation (a random resource), not a literal."""
    for vault in graph.of(KEY_VAULT):
        if not vault.get("properties.enablePurgeProtection") or vault.protect:
            continue
        name = vault.get("vaultName")
        if (
            isinstance(name, str)
            and not is_unknown(name)
            and not vault.property_dependencies.get("vaultName")
        ):
            yield (
                vault.urn,
                f"vault name {name!r} is fixed on a purge-protected vault of an unprotected stack: once "
                "destroyed, the name stays reserved for the retention period; add a random part to the name "
                "or protect the vault",
            )


def _federated_service_accounts(graph: Graph) -> set[tuple[Any, Any]]:
    return {
        (namespace_of(account), account.get("metadata.name"))
        for account in graph.of(SERVICE_ACCOUNT)
        if CLIENT_ID_ANNOTATION in account.annotations()
    }


def _template_labels(subject: Subject) -> Mapping[str, Any]:
    """The pod's labels: beside the pod spec (``spec.template.spec`` → ``spec.template.metadata``)."""
    labels = subject.get(tokens.POD_SPEC_PATHS[subject.type].removesuffix("spec") + "metadata.labels")
    return labels if isinstance(labels, Mapping) else {}


def _workload_identity_label(graph: Graph) -> Iterator[Finding]:
    """AKS workload identity injects the federated token only into pods labelled
    ``azure.workload.identity/use: "true"`` (AKS workload identity overview): a pod whose service account
    is federated but which lacks the label runs without its identity and fails at its first Azure call."""
    federated = _federated_service_accounts(graph)
    for workload in graph.of(*tokens.WORKLOADS):
        spec = workload.get(tokens.POD_SPEC_PATHS[workload.type])
        account = spec.get("serviceAccountName") if isinstance(spec, Mapping) else None
        if (namespace_of(workload), account) in federated and _template_labels(workload).get(
            USE_LABEL
        ) != "true":
            yield (
                workload.urn,
                f"service account {account!r} is federated ({CLIENT_ID_ANNOTATION}) but the pod template "
                f'lacks the label {USE_LABEL}: "true"; without it no token is injected',
            )


POLICIES: list[Policy] = [
    resource_policy(
        "azure-tag-name-charset",
        "Azure tag names contain none of < > % & \\ ? / (ARM tag-resources limitations).",
        _tag_name_charset,
        severity=Severity.HIGH,
    ),
    resource_policy(
        "aks-managed-nat-byo-subnet",
        "An AKS cluster on its own subnet does not use outboundType managedNATGateway (AKS NAT gateway "
        "docs).",
        by_type({MANAGED_CLUSTER: _managed_nat_with_own_subnet}),
        severity=Severity.HIGH,
    ),
    resource_policy(
        "azure-des-versioned-key",
        "A disk encryption set's active key is a versioned Key Vault key URL (compute API).",
        by_type({DISK_ENCRYPTION_SET: _versioned_key_url}),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-key-vault-name-reuse",
        "A purge-protected Key Vault of an unprotected stack does not take a fixed name (soft delete keeps "
        "deleted names reserved).",
        _vault_name_reuse,
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-workload-identity-label",
        'Pods whose service account is federated carry azure.workload.identity/use: "true".',
        _workload_identity_label,
        severity=Severity.HIGH,
    ),
]
