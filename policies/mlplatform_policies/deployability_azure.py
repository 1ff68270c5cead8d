"""Deployability on Azure: rules ARM, Key Vault and AKS enforce at deploy time that an offline plan
(and Pulumi's mocks) accept. Each rule names its source.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import Policy, Severity

from . import tokens
from .audit import granted_data_actions
from .factory import ADVISORY, Finding, by_type, per_node, resource_policy, stack_policy
from .kubernetes import namespace_of
from .shell import az_invocations, option
from .subject import Graph, Subject
from .values import elements, is_unknown

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


AGENT_POOL = "azure-native:containerservice:AgentPool"
KEY = "azure-native:keyvault:Key"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
DIAGNOSTIC_SETTING = "azure-native:monitor:DiagnosticSetting"
REGISTRY = "azure-native:containerregistry:Registry"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"

# AKS end of life per Kubernetes minor, (year, month): the AKS Kubernetes release calendar
# (learn.microsoft.com/azure/aks/supported-kubernetes-versions; MicrosoftDocs/azure-aks-docs
# articles/aks/supported-kubernetes-versions.md), read 2026-11-26. A minor not listed is unsupported as far
# as this table knows: refresh it when AKS moves (1.36 and 1.37 are GA; their end of life was not read).
AKS_END_OF_LIFE: dict[str, tuple[int, int]] = {"1.33": (2026, 7), "1.34": (2026, 11), "1.35": (2027, 3)}
# Long-term support, Premium tier with supportPlan AKSLongTermSupport only (same calendar).
AKS_LTS_END: dict[str, tuple[int, int]] = {"1.33": (2027, 7)}
_MINOR = re.compile(r"^(\d+\.\d+)(\.\d+)?$")


def _aks_version(subject: Subject) -> Iterator[str]:
    """AKS creates and upgrades clusters only on supported minors, and force-upgrades a cluster at end of
    support; a version past its end of life on the day of the check fails the next ``up``."""
    today = datetime.datetime.now(datetime.UTC).date()
    month = (today.year, today.month)
    lts = subject.get("sku.tier") == "Premium" and subject.get("supportPlan") == "AKSLongTermSupport"
    versions = [
        ("kubernetesVersion", subject.get("kubernetesVersion")),
        ("orchestratorVersion", subject.get("orchestratorVersion")),
    ]
    versions += [
        (f"agentPoolProfiles[{i}].orchestratorVersion", p.get("orchestratorVersion"))
        for i, p in enumerate(elements(subject.props, "agentPoolProfiles"))
        if isinstance(p, Mapping)
    ]
    for where, version in versions:
        if not isinstance(version, str) or is_unknown(version):
            continue
        match = _MINOR.match(version)
        minor = match.group(1) if match else version
        end = (AKS_LTS_END if lts else AKS_END_OF_LIFE).get(minor)
        if end is None or end <= month:
            supported = [v for v, e in AKS_END_OF_LIFE.items() if e > month]
            yield (
                f"{where} {version} is out of AKS support on {today:%Y-%m-%d} (AKS release calendar); "
                f"supported: {', '.join(supported) or 'none in the pinned table'}"
            )


# Key Vault roles that carry key create/get data actions: Crypto Officer and Administrator
# (learn.microsoft.com/azure/key-vault/general/rbac-guide), or a custom role whose data actions do (the
# stack's key administration role, components/azure/keys.py).
_KEY_WRITER_ROLES = {
    "14b46e9e-c2b7-41b4-b07b-48a6ebf60603": "Key Vault Crypto Officer",
    "00482a5a-887f-4fb3-b363-3b7fe8e74483": "Key Vault Administrator",
}
_KEY_WRITES = ("Microsoft.KeyVault/vaults/keys/write", "Microsoft.KeyVault/vaults/keys/read")


def _reaches(graph: Graph, start: Subject, goal: set[str]) -> bool:
    """Whether ``start`` depends on any URN in ``goal``, directly or through other resources."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        subject = todo.pop()
        urns = set(subject.dependencies) | {u for us in subject.property_dependencies.values() for u in us}
        if urns & goal:
            return True
        for urn in urns - seen:
            seen.add(urn)
            found = graph.find(urn)
            if found is not None:
                todo.append(found)
    return False


def _writes_keys(grant: Subject, graph: Graph) -> bool:
    """Whether a role assignment's role creates and reads keys: a built-in key writer, or a custom role
    granting both."""
    if str(grant.get("roleDefinitionId") or "").rsplit("/", 1)[-1] in _KEY_WRITER_ROLES:
        return True
    return set(granted_data_actions(grant, graph, _KEY_WRITES, {})) == set(_KEY_WRITES)


def _deployer_key_role(key: Subject, graph: Graph) -> Iterator[str]:
    """ARM's ``vaults/keys`` PUT (and azure-native's existence GET) is authorised against the RBAC vault's
    data plane for the caller: ``ForbiddenByRbac`` without a Key Vault data role (pulumi/pulumi-azure-native
    #890; the provider's keyvault example grants the deployer first). Owner and Contributor carry no Key
    Vault DataActions (Key Vault RBAC guide). The key must wait for such a grant on its vault."""
    vaults = [
        v
        for v in graph.linked(key, "vaultName", (KEY_VAULT,), identity="vaultName")
        if v.get("properties.enableRbacAuthorization") is True
    ]
    for vault in vaults:
        grants = {
            grant.urn
            for grant in graph.of(ROLE_ASSIGNMENT)
            if _writes_keys(grant, graph)
            and vault.urn in {v.urn for v in graph.linked(grant, "scope", (KEY_VAULT,))}
        }
        if not grants or not _reaches(graph, key, grants):
            yield (
                f"key {key.get('keyName')!r} is written to an RBAC vault without waiting for a Key Vault "
                "Crypto Officer (or Administrator) grant on that vault: ARM refuses the key ForbiddenByRbac; "
                "grant the deployer the role on the vault and make the key depend on it"
            )


# Resources a pod may request that the autoscaler's scale-from-zero template knows without a tag: what the
# scale set's SKU and the pool give it (kubernetes/autoscaler cluster-autoscaler/cloudprovider/azure/
# azure_template.go, buildNodeFromTemplate).
_TEMPLATE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods", "nvidia.com/gpu")
_RESOURCE_TAG = "k8s.io_cluster-autoscaler_node-template_resources_"
POOL_LABEL = "ml-platform/pool"


def _extended_requests(workload: Subject) -> set[str]:
    spec = workload.get(tokens.POD_SPEC_PATHS[workload.type])
    if not isinstance(spec, Mapping):
        return set()
    names: set[str] = set()
    for container in [*elements(spec, "containers"), *elements(spec, "initContainers")]:
        if not isinstance(container, Mapping):
            continue
        for kind in ("requests", "limits"):
            amounts = (container.get("resources") or {}).get(kind) or {}
            names |= {
                str(n)
                for n in amounts
                if n not in _TEMPLATE_RESOURCES and not str(n).startswith("hugepages-")
            }
    return names


def _pool_selector(workload: Subject) -> Any:
    spec = workload.get(tokens.POD_SPEC_PATHS[workload.type])
    selector = spec.get("nodeSelector") if isinstance(spec, Mapping) else None
    return selector.get(POOL_LABEL) if isinstance(selector, Mapping) else None


def _scale_from_zero(pool: Subject, graph: Graph) -> Iterator[str]:
    """A pool at minCount 0 is built by the AKS autoscaler from the scale set: extended resources only from
    tags ``k8s.io_cluster-autoscaler_node-template_resources_<name>``, every ``_`` of ``<name>`` read as
    ``/`` (azure_template.go, extractAllocatableResourcesFromScaleSet; AKS copies pool tags to the scale
    set). A resource whose name has ``_`` after the ``/`` (``rdma/shared_ib``) cannot be declared at all."""
    if pool.get("minCount") != 0:
        return
    label = (
        (pool.get("nodeLabels") or {}).get(POOL_LABEL)
        if isinstance(pool.get("nodeLabels"), Mapping)
        else None
    )
    if not isinstance(label, str):
        return
    tags = pool.tags()
    for workload in graph.of(*tokens.WORKLOADS):
        if _pool_selector(workload) != label:
            continue
        for resource in sorted(_extended_requests(workload)):
            suffix = resource.split("/", 1)[-1]
            if "_" in suffix:
                yield (
                    f"pool {label!r} scales from 0 but {workload.name} requests {resource}, which no "
                    "scale-set tag can declare ('_' reads as '/'): the pods stay Pending; keep minCount >= 1"
                )
            elif _RESOURCE_TAG + resource.replace("/", "_") not in tags:
                yield (
                    f"pool {label!r} scales from 0 but {workload.name} requests {resource} and the pool has "
                    f"no {_RESOURCE_TAG}{resource.replace('/', '_')} tag: the autoscaler never scales it up"
                )


# Key Vault command groups whose items live in a vault named by ``--vault-name`` (``--name`` is the item's);
# the other ``az keyvault`` commands name the vault itself with ``--name``/``-n`` (azure-cli keyvault).
_VAULT_ITEM_GROUPS = ("key", "secret", "certificate")


def _keyvault_targets(command: str) -> Iterator[str]:
    """The vault names each ``az keyvault`` invocation in a shell command line runs against."""
    for words in az_invocations(command):
        if words[:2] == ["az", "keyvault"]:
            item = len(words) > 2 and words[2] in _VAULT_ITEM_GROUPS
            name = option(words, "--vault-name") if item else option(words, "--name", "-n")
            if name:
                yield name


def _keyvault_command_after_vault(command: Subject, graph: Graph) -> Iterator[str]:
    """A local command that runs ``az keyvault ... --name X`` must wait for the stack's vault X.

    ``az keyvault update`` is a GET of the vault followed by a PUT (azure-cli keyvault, generic update):
    started before the vault exists it answers ResourceNotFound and the command, and everything waiting on
    it, fails. The engine starts a resource as soon as the resources it depends on are done, so the
    command must depend on the vault, directly or through others (review wt-azure3 A1)."""
    for phase in ("create", "update", "delete"):
        line = command.get(phase)
        if not isinstance(line, str) or is_unknown(line):
            continue
        for name in dict.fromkeys(_keyvault_targets(line)):
            vaults = {v.urn for v in graph.of(KEY_VAULT) if v.get("vaultName") == name}
            if vaults and not _reaches(graph, command, vaults):
                yield (
                    f"its {phase} command runs az keyvault against vault {name!r} without depending on that "
                    "vault: it can start before the vault exists (ResourceNotFound); build the command from "
                    "the vault's name output or depend on the vault"
                )


IMAGE = "docker-build:index:Image"
PRIVATE_ENDPOINT = "azure-native:network:PrivateEndpoint"
ZONE_GROUP = "azure-native:network:PrivateDnsZoneGroup"


def _pushes_to(image: Subject, login_server: str) -> bool:
    tags = image.get("tags")
    return image.get("push") is True and any(
        isinstance(tag, str) and tag.lower().startswith(f"{login_server}/") for tag in (tags or [])
    )


def _registry_zone_groups(graph: Graph, registry: Subject) -> set[str]:
    """The DNS zone groups of the private endpoints whose Private Link service is ``registry``."""
    endpoints = {
        endpoint.urn
        for endpoint in graph.of(PRIVATE_ENDPOINT)
        for target in graph.linked(endpoint, "privateLinkServiceConnections", (REGISTRY,))
        if target.urn == registry.urn
    }
    return {
        group.urn
        for group in graph.of(ZONE_GROUP)
        if endpoints & {e.urn for e in graph.linked(group, "privateEndpointName", (PRIVATE_ENDPOINT,))}
    }


def _push_after_private_dns(image: Subject, graph: Graph) -> Iterator[str]:
    """An image pushed to a registry whose public endpoint is disabled goes through the registry's private
    endpoint, which a client in the VNet resolves only once the endpoint's DNS zone group has written the
    privatelink.azurecr.io record ("Connect privately to an Azure container registry using Azure Private
    Link"); before that the push (and the ``az acr login --expose-token`` exchange at the login server,
    azure-cli acr/_docker_utils.py) is refused or does not resolve (review wt-azure3 A2)."""
    for registry in graph.of(REGISTRY):
        name = registry.get("registryName")
        if registry.get("publicNetworkAccess") != "Disabled" or not isinstance(name, str) or is_unknown(name):
            continue
        login_server = f"{name.lower()}.azurecr.io"
        if not _pushes_to(image, login_server):
            continue
        groups = _registry_zone_groups(graph, registry)
        if not groups or not _reaches(graph, image, groups):
            yield (
                f"pushes to {login_server}, whose public endpoint is disabled, without waiting for the DNS "
                "zone group of the registry's private endpoint: the push cannot reach the registry yet; "
                "depend on the zone group"
            )


# ARM naming rules ("Naming rules and restrictions for Azure resources", learn.microsoft.com/azure/
# azure-resource-manager/management/resource-name-rules; MicrosoftDocs/azure-docs
# articles/azure-resource-manager/management/resource-name-rules.md): type -> (name input, scope of
# uniqueness, rule). AKS agent pools: learn.microsoft.com/azure/aks/use-system-pools#limitations (Linux).
# Rows read from that page's ms.date 11/20/2023 revision; where the page is silent, the type's ARM template
# reference (learn.microsoft.com/azure/templates/...) gives the name's pattern.
# Left out, their rule not sourced here: network:NatGateway (no natGateways row in that revision; the REST
# reference was not reachable), keyvault:Key (no vaults/keys row in the rows read),
# network:PrivateDnsZoneGroup, containerservice:MaintenanceConfiguration and monitor:DiagnosticSetting (no
# row). Not ours to check: authorization:RoleAssignment (a GUID, "roleAssignments | tenant | 36", that
# azure-native generates when unset), storage:BlobServiceProperties and storage:ManagementPolicy (must be
# ``default``; azure-native sets it).
_ARM_80 = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,78}[A-Za-z0-9_])?$")
POSTGRES_SERVER = "azure-native:dbforpostgresql:Server"
NAME_RULES: dict[str, tuple[str, str, re.Pattern[str]]] = {
    KEY_VAULT: ("vaultName", "global", re.compile(r"^(?!.*--)[A-Za-z][A-Za-z0-9-]{1,22}[A-Za-z0-9]$")),
    STORAGE_ACCOUNT: ("accountName", "global", re.compile(r"^[a-z0-9]{3,24}$")),
    REGISTRY: ("registryName", "global", re.compile(r"^[A-Za-z0-9]{5,50}$")),
    MANAGED_CLUSTER: (
        "resourceName",
        "resource group",
        re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$"),
    ),
    AGENT_POOL: ("agentPoolName", "cluster", re.compile(r"^[a-z][a-z0-9]{0,11}$")),
    "azure-native:managedidentity:UserAssignedIdentity": (
        "resourceName",
        "resource group",
        re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{2,127}$"),
    ),
    "azure-native:network:VirtualNetwork": (
        "virtualNetworkName",
        "resource group",
        re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}[A-Za-z0-9_]$"),
    ),
    "azure-native:network:Subnet": ("subnetName", "virtual network", _ARM_80),
    "azure-native:network:NetworkSecurityGroup": ("networkSecurityGroupName", "resource group", _ARM_80),
    "azure-native:network:PublicIPAddress": ("publicIpAddressName", "resource group", _ARM_80),
    "azure-native:network:RouteTable": ("routeTableName", "resource group", _ARM_80),
    "azure-native:privatedns:VirtualNetworkLink": ("virtualNetworkLinkName", "private DNS zone", _ARM_80),
    # Microsoft.DBforPostgreSQL "servers | global | 3-63 | Lowercase letters, hyphens and numbers. Can't start
    # or end with hyphen." (the flexible server's name is its host name, <name>.postgres.database.azure.com).
    # Its databases are left out: "servers / databases | servers | Not specified".
    POSTGRES_SERVER: ("serverName", "global", re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")),
    # "diskEncryptionSets | resource group | 1-80 | Alphanumerics, underscores, and hyphens."
    DISK_ENCRYPTION_SET: ("diskEncryptionSetName", "resource group", re.compile(r"^[A-Za-z0-9_-]{1,80}$")),
    # Microsoft.OperationalInsights "workspaces | resource group | 4-63 | Alphanumerics and hyphens. Start and
    # end with alphanumeric."
    "azure-native:operationalinsights:Workspace": (
        "workspaceName",
        "resource group",
        re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{2,61}[A-Za-z0-9]$"),
    ),
    # "storageAccounts / blobServices / containers | storage account | 3-63 | Lowercase letters, numbers, and
    # hyphens. Start with lowercase letter or number. Can't use consecutive hyphens."
    "azure-native:storage:BlobContainer": (
        "containerName",
        "storage account",
        re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{2,62}$"),
    ),
    # "storageAccounts / fileServices / shares | storage account | 3-63 | Lowercase letters, numbers, and
    # hyphens. Can't start or end with hyphen. Can't use consecutive hyphens."
    "azure-native:storage:FileShare": (
        "shareName",
        "storage account",
        re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$"),
    ),
    # "privateEndpoints | resource group | 2-64 | Alphanumerics, underscores, periods, and hyphens. Start with
    # alphanumeric. End alphanumeric or underscore."
    "azure-native:network:PrivateEndpoint": (
        "privateEndpointName",
        "resource group",
        re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}[A-Za-z0-9_]$"),
    ),
    # "privateDnsZones | resource group | 1-63 characters, 2 to 34 labels | Each label can contain
    # alphanumerics, underscores, and hyphens. Each label is separated by a period."
    "azure-native:privatedns:PrivateZone": (
        "privateZoneName",
        "resource group",
        re.compile(r"^(?=.{1,63}$)[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){1,33}$"),
    ),
    # "resourcegroups | subscription | 1-90 | Underscores, hyphens, periods, parentheses, and letters or
    # digits (Char.IsLetterOrDigit). Can't end with period." (``\w`` is Unicode letters, digits and ``_``.)
    "azure-native:resources:ResourceGroup": (
        "resourceGroupName",
        "subscription",
        re.compile(r"^[\w().-]{0,89}[\w()-]$"),
    ),
    # No row on the page; the ARM template reference of userAssignedIdentities/federatedIdentityCredentials
    # (learn.microsoft.com/azure/templates/microsoft.managedidentity/userassignedidentities/
    # federatedidentitycredentials): name "Pattern = ^[a-zA-Z0-9]{1}[a-zA-Z0-9-_]{2,119}$".
    "azure-native:managedidentity:FederatedIdentityCredential": (
        "federatedIdentityCredentialResourceName",
        "user-assigned identity",
        re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{2,119}$"),
    ),
}
# azure-native names a resource without a name input after its logical name plus 8 random characters.
_AUTONAME_SUFFIX = "x" * 8


def _arm_name(subject: Subject) -> Iterator[str]:
    rule = NAME_RULES.get(subject.type)
    if rule is None:
        return
    prop, scope, pattern = rule
    name = subject.get(prop)
    if is_unknown(name):
        return
    where = prop if name is not None else f"autoname {subject.name!r} + 8 characters"
    candidate = name if isinstance(name, str) else subject.name + _AUTONAME_SUFFIX
    if not pattern.fullmatch(candidate):
        yield (
            f"{where}: {candidate!r} breaks ARM's naming rule for this type (unique per {scope}; must match "
            f"{pattern.pattern}); ARM refuses the PUT"
        )


# Resources whose audit logs the stack must keep (review azure.md C3; Key Vault logging, Azure Storage
# monitoring, ACR monitoring reference): each is the resourceUri (a storage account through its service)
# of a diagnostic setting that sends logs.
ENTRA_ADMIN = "azure-native:dbforpostgresql:AdministratorsMicrosoftEntra"
SUBNET = "azure-native:network:Subnet"
# The registry's PostgreSQL too (review azure.md C1, D5 1: a flexible server's logins and pgaudit go to
# its server log, PostgreSQLLogs, through a diagnostic setting; Azure Monitor supported logs).
_AUDITED = (KEY_VAULT, STORAGE_ACCOUNT, REGISTRY, POSTGRES_SERVER)


def _diagnostics_coverage(graph: Graph) -> Iterator[Finding]:
    covered = {
        target.urn
        for setting in graph.of(DIAGNOSTIC_SETTING)
        if any(isinstance(log, Mapping) and log.get("enabled") for log in elements(setting.props, "logs"))
        for target in graph.linked(setting, "resourceUri", _AUDITED)
    }
    for resource in graph.of(*_AUDITED):
        if resource.urn not in covered:
            yield (
                resource.urn,
                "no diagnostic setting sends this resource's logs anywhere (a storage account through its "
                "blobServices/fileServices): add one with the audit category group to the stack's workspace",
            )


# Data classifications whose Kubernetes Secrets must be encrypted under the stack's key.
_KMS_CLASSIFICATIONS = ("confidential", "restricted")


def _secrets_kms(subject: Subject) -> Iterator[str]:
    """AKS KMS etcd encryption (learn.microsoft.com/azure/aks/use-kms-etcd-encryption): enabled with a key
    id; ``Private`` network access needs the vault's resource id (containerservice AzureKeyVaultKms) and
    API Server VNet Integration ("KMS only supports API Server VNet Integration for private key vault")."""
    if subject.tags().get("data-classification") not in _KMS_CLASSIFICATIONS:
        return
    kms = subject.get("securityProfile.azureKeyVaultKms")
    if not isinstance(kms, Mapping) or kms.get("enabled") is not True or not kms.get("keyId"):
        yield (
            "Kubernetes Secrets are not encrypted under a customer-managed key: set "
            "securityProfile.azureKeyVaultKms {enabled, keyId} (AKS KMS etcd encryption)"
        )
        return
    if kms.get("keyVaultNetworkAccess") == "Private":
        if not kms.get("keyVaultResourceId"):
            yield "azureKeyVaultKms.keyVaultNetworkAccess Private needs keyVaultResourceId"
        if subject.get("apiServerAccessProfile.enableVnetIntegration") is not True:
            yield (
                "KMS with a private vault needs API Server VNet Integration "
                "(apiServerAccessProfile.enableVnetIntegration and subnetId)"
            )


def _private_vault_endpoint(key: Subject, graph: Graph) -> Iterator[str]:
    """Review azure.md U1: "Creating or updating keys in a private key vault that doesn't have a private
    endpoint isn't supported" (learn.microsoft.com/azure/aks/use-kms-etcd-encryption)."""
    for vault in graph.linked(key, "vaultName", (KEY_VAULT,), "vaultName"):
        if vault.get("properties.publicNetworkAccess") != "Disabled":
            continue
        endpoints = [
            e
            for e in graph.of(PRIVATE_ENDPOINT)
            if vault.urn in {v.urn for v in graph.linked(e, "privateLinkServiceConnections", (KEY_VAULT,))}
            and any(
                "vault" in (c.get("groupIds") or [])
                for c in elements(e.props, "privateLinkServiceConnections")
                if isinstance(c, Mapping)
            )
        ]
        if not endpoints:
            yield (
                "key in a vault with public access disabled and no private endpoint (group vault): give the "
                "vault one in the endpoints' subnet, with its privatelink.vaultcore.azure.net record"
            )


PRIVATE_ZONE = "azure-native:privatedns:PrivateZone"
_POSTGRES_ZONE_SUFFIX = ".postgres.database.azure.com"


def _postgres_private_zone(server: Subject, graph: Graph) -> Iterator[str]:
    """Review azure.md D5 8. A flexible server with private access names a private DNS zone that, made
    through an API, ARM template or Terraform, must "end with ``.postgres.database.azure.com``", of the
    form ``[name1].[name2].postgres.database.azure.com`` or ``[name].postgres.database.azure.com``, where
    "the name can't be the name you use for one of your Azure Databases for PostgreSQL flexible server
    instances or an error message will be shown during provisioning" (learn.microsoft.com/azure/
    postgresql/flexible-server/concepts-networking-private, private DNS zone)."""
    zone_id = server.get("network.privateDnsZoneArmResourceId")
    zones = [z.get("privateZoneName") for z in graph.linked(server, "network", (PRIVATE_ZONE,))]
    if not zones and isinstance(zone_id, str) and not is_unknown(zone_id):
        zones = [zone_id.rstrip("/").rsplit("/", 1)[-1]]
    servers = {s.get("serverName") for s in graph.of(POSTGRES_SERVER)}
    for zone in zones:
        if not isinstance(zone, str) or is_unknown(zone):
            continue
        label = zone.lower().removesuffix(_POSTGRES_ZONE_SUFFIX)
        if label == zone.lower():
            yield (
                f"private DNS zone {zone!r} does not end with {_POSTGRES_ZONE_SUFFIX}: the server refuses "
                f"it; name it <server>.private{_POSTGRES_ZONE_SUFFIX}"
            )
        elif label in servers:
            yield (
                f"private DNS zone {zone!r} is [name]{_POSTGRES_ZONE_SUFFIX} with a flexible server's name: "
                f"provisioning fails; name it <server>.private{_POSTGRES_ZONE_SUFFIX}"
            )


def _human_database_admin(graph: Graph) -> Iterator[Finding]:
    """Review azure.md D1 (D5 4): "Only a Microsoft Entra administrator ... can initially connect" and
    "you can configure multiple Microsoft Entra administrators" (concepts-azure-ad-authentication)."""
    for server in graph.of(POSTGRES_SERVER):
        if server.get("authConfig.passwordAuth") != "Disabled":
            continue
        admins = [
            a
            for a in graph.of(ENTRA_ADMIN)
            if server.urn in {s.urn for s in graph.linked(a, "serverName", (POSTGRES_SERVER,), "serverName")}
        ]
        if not any(a.get("principalType") in ("User", "Group") for a in admins):
            yield (
                server.urn,
                "Entra-only server whose administrators are all service principals: no person can log in "
                "(a failed migration, a restore check); add a group (workloads.registry.databaseAdmins)",
            )


def _kms_public_vault(cluster: Subject, graph: Graph) -> Iterator[str]:
    """D5 6: KMS ``Public`` access with a firewalled vault: "Azure Key Vault with a firewall setting ... or
    'disable public access' isn't supported" for a public key vault (AKS KMS docs, Limitations)."""
    kms = cluster.get("securityProfile.azureKeyVaultKms")
    if not isinstance(kms, Mapping) or kms.get("enabled") is not True:
        return
    if kms.get("keyVaultNetworkAccess", "Public") != "Public":
        return
    vaults = {v.urn: v for v in graph.linked(cluster, "securityProfile", (KEY_VAULT,))}
    for key in graph.linked(cluster, "securityProfile", (KEY,)):
        vaults.update((v.urn, v) for v in graph.linked(key, "vaultName", (KEY_VAULT,), "vaultName"))
    for vault in vaults.values():
        if (
            vault.get("properties.publicNetworkAccess") == "Disabled"
            or vault.get("properties.networkAcls.defaultAction") == "Deny"
        ):
            yield (
                "KMS keyVaultNetworkAccess Public with a vault behind a firewall or with public access "
                "disabled: set Private, keyVaultResourceId and API Server VNet Integration"
            )


def _kms_key_notifies(cluster: Subject, graph: Graph) -> Iterator[str]:
    """Review of issue 38, B7: AKS KMS holds a versioned key id and fails with "KeyExpired" once that
    version expires ("it is your responsibility to manage the key lifecycle", AKS KMS etcd encryption
    docs), and rewriting every Secret after a rotation is the operator's step ("Remember to update all
    secrets after key rotation", same page, Rotate existing keys). Only a rotation policy whose versions
    expire (``attributes.expiryTime``, "when a new KeyVaultKey version created from this policy will
    expire") with a Notify action before expiry (``timeBeforeExpiry``, Key Vault keys
    ``KeyRotationLifetimeAction``) raises the near-expiry event that prompts that step."""
    if cluster.get("securityProfile.azureKeyVaultKms.enabled") is not True:
        return
    for key in graph.linked(cluster, "securityProfile", (KEY,)):
        policy = key.get("properties.rotationPolicy")
        policy = policy if isinstance(policy, Mapping) else {}
        attributes = policy.get("attributes")
        expires = attributes.get("expiryTime") if isinstance(attributes, Mapping) else None
        notifies = any(
            isinstance(action, Mapping)
            and str((action.get("action") or {}).get("type", "")).lower() == "notify"
            and (action.get("trigger") or {}).get("timeBeforeExpiry")
            for action in elements(policy, "lifetimeActions")
        )
        if not (expires and notifies):
            yield (
                f"AKS KMS key {key.get('keyName')!r} has no rotation policy with an expiry and a Notify "
                "before it: nothing prompts the rotation runbook that moves the cluster to a new version "
                "and rewrites every Secret; set attributes.expiryTime and a notify lifetime action with "
                "timeBeforeExpiry"
            )


_API_SERVER_DELEGATION = "Microsoft.ContainerService/managedClusters"


def _api_server_subnet(cluster: Subject, graph: Graph) -> Iterator[str]:
    """D5 7: API Server VNet Integration puts the API server in a subnet delegated to
    Microsoft.ContainerService/managedClusters, /28 at least (API Server VNet Integration docs)."""
    if cluster.get("apiServerAccessProfile.enableVnetIntegration") is not True:
        return
    for subnet in graph.linked(cluster, "apiServerAccessProfile", (SUBNET,)):
        services = {
            d.get("serviceName") for d in elements(subnet.props, "delegations") if isinstance(d, Mapping)
        }
        if _API_SERVER_DELEGATION not in services:
            yield f"API server subnet is not delegated to {_API_SERVER_DELEGATION}"
        prefix = subnet.get("addressPrefix")
        if isinstance(prefix, str) and "/" in prefix and int(prefix.rsplit("/", 1)[1]) > 28:
            yield f"API server subnet {prefix} is smaller than the /28 AKS needs"


def _nat_subnets(cluster: Subject, graph: Graph) -> Iterator[str]:
    """D5 5, the inverse of aks-managed-nat-byo-subnet: with userAssignedNATGateway every node subnet
    carries the NAT gateway, or its nodes have no outbound path (AKS docs, "Create a NAT gateway: user
    assigned")."""
    if cluster.get("networkProfile.outboundType") != "userAssignedNATGateway":
        return
    for subnet in graph.linked(cluster, "agentPoolProfiles", (SUBNET,)):
        if not subnet.get("natGateway.id"):
            yield f"node subnet {subnet.name} has no natGateway under outboundType userAssignedNATGateway"


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
    resource_policy(
        "aks-version-supported",
        "AKS cluster and node pool Kubernetes minors are inside AKS support on the day of the check (AKS "
        "release calendar, learn.microsoft.com/azure/aks/supported-kubernetes-versions; dated table).",
        by_type(dict.fromkeys((MANAGED_CLUSTER, AGENT_POOL), _aks_version)),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-keyvault-deployer-data-role",
        "A key written to an RBAC Key Vault waits for a Key Vault Crypto Officer or Administrator grant on "
        "that vault (Key Vault RBAC guide; pulumi/pulumi-azure-native#890).",
        per_node((KEY,), _deployer_key_role),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aks-extended-resource-scale-from-zero",
        "An AKS pool at minCount 0 declares, by scale-set tag, every extended resource its pods request, and "
        "none it cannot declare (cluster-autoscaler azure_template.go).",
        per_node((AGENT_POOL,), _scale_from_zero),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-keyvault-command-after-vault",
        "A local command that runs az keyvault against a vault of the stack depends on that vault (azure-cli "
        "keyvault update is a GET then a PUT of the vault).",
        per_node((tokens.LOCAL_COMMAND,), _keyvault_command_after_vault),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-registry-push-after-private-dns",
        "An image pushed to a registry with public network access disabled waits for the DNS zone group of "
        "that registry's private endpoint (ACR Private Link docs).",
        per_node((IMAGE,), _push_after_private_dns),
        severity=Severity.HIGH,
    ),
    resource_policy(
        "azure-resource-names",
        "Names follow ARM's length, character and uniqueness-scope rules for their type (Naming rules and "
        "restrictions for Azure resources; AKS system pools limitations).",
        _arm_name,
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-keyvault-private-endpoint",
        "A key written into a vault with public access disabled has a private endpoint (group vault) on "
        "that vault (AKS KMS etcd encryption docs: keys in a private vault without one are not supported).",
        per_node((KEY,), _private_vault_endpoint),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-postgres-private-dns-zone",
        "A PostgreSQL flexible server's private DNS zone ends with .postgres.database.azure.com and is not "
        "[server name].postgres.database.azure.com (Azure Database for PostgreSQL, networking with private "
        "access).",
        per_node((POSTGRES_SERVER,), _postgres_private_zone),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-postgres-human-admin",
        "An Entra-only PostgreSQL flexible server has a user or group administrator besides service "
        "principals (Azure Database for PostgreSQL, Microsoft Entra authentication concepts).",
        _human_database_admin,
        severity=Severity.MEDIUM,
        enforcement=ADVISORY,
    ),
    stack_policy(
        "aks-kms-public-vault-open",
        "AKS KMS with keyVaultNetworkAccess Public uses a vault without a firewall (AKS KMS etcd encryption "
        "docs, Limitations).",
        per_node((MANAGED_CLUSTER,), _kms_public_vault),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aks-kms-key-notifies",
        "The Key Vault key AKS KMS encrypts Secrets with expires and notifies before it (Key Vault key "
        "rotation policy; AKS KMS etcd encryption docs, key lifecycle and Rotate existing keys).",
        per_node((MANAGED_CLUSTER,), _kms_key_notifies),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aks-api-server-subnet",
        "API Server VNet Integration's subnet is delegated to Microsoft.ContainerService/managedClusters "
        "and is /28 or larger (AKS API Server VNet Integration docs).",
        per_node((MANAGED_CLUSTER,), _api_server_subnet),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aks-user-nat-subnets",
        "With outboundType userAssignedNATGateway every node subnet carries the NAT gateway (AKS docs, "
        "managed and user-assigned NAT gateway).",
        per_node((MANAGED_CLUSTER,), _nat_subnets),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-diagnostics-coverage",
        "Every Key Vault, storage account, container registry and PostgreSQL flexible server sends its logs "
        "through a diagnostic setting (Key Vault logging; Azure Storage, ACR and Azure Monitor supported "
        "logs references).",
        _diagnostics_coverage,
        severity=Severity.HIGH,
    ),
    resource_policy(
        "aks-secrets-kms",
        "Confidential and restricted AKS clusters encrypt Secrets with AKS KMS under a Key Vault key; a "
        "private vault goes with API Server VNet Integration (AKS KMS etcd encryption docs).",
        by_type({MANAGED_CLUSTER: _secrets_kms}),
        severity=Severity.HIGH,
    ),
]
