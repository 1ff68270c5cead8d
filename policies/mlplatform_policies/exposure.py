"""No public exposure: API endpoints, storage, node addresses, ingress rules and instance metadata.

Endpoint rules depend on the tier (the ``tier`` tag): enterprise clusters are private; an SMB cluster
may keep a public endpoint behind an allow-list, never one open to the internet. That every bucket has
a public access block is judged over the graph in ``stack.py``; its four flags are judged here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import ResourceValidationPolicy, Severity

from . import tokens
from .factory import Rule, by_type, on_props, resource_policy
from .settings import AZURE_ROLE_TAG, REGISTRY_CREATION_ROLE
from .subject import Subject
from .values import (
    Check,
    all_of,
    describe,
    each,
    elements,
    is_false,
    is_true,
    known,
    one_of,
    parse_document,
    require,
    statements,
)

OPEN_CIDRS = frozenset({"0.0.0.0/0", "::/0"})
_OPEN_AZURE_SOURCES = frozenset({"*", "0.0.0.0/0", "::/0", "internet", "any"})
_PUBLIC_ACLS = ("public-read", "public-read-write", "authenticated-read")
_PUBLIC_GRANTEES = (
    "http://acs.amazonaws.com/groups/global/AllUsers",
    "http://acs.amazonaws.com/groups/global/AuthenticatedUsers",
)
_PUBLIC_ACCESS_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _not_open(path: str, fix: str) -> Check:
    return require(path, lambda value: not OPEN_CIDRS & set(_listed(value)), fix)


def _eks_endpoint(subject: Subject) -> Iterator[str]:
    public = known(subject.get("vpcConfig.endpointPublicAccess"), "vpcConfig.endpointPublicAccess")
    if is_false(public):
        return
    cidrs = elements(subject.props, "vpcConfig.publicAccessCidrs")
    if subject.tier() == "enterprise":
        yield (
            f"vpcConfig.endpointPublicAccess is {describe(public)} (AWS defaults it to true); an enterprise "
            "cluster's API endpoint is private: set it false and endpointPrivateAccess true"
        )
    elif not cidrs or OPEN_CIDRS & set(cidrs):
        yield (
            f"vpcConfig.publicAccessCidrs is {describe(cidrs or None)} (unset means 0.0.0.0/0): list only "
            "your office or VPN ranges, or make the endpoint private"
        )


def _aks_endpoint(subject: Subject) -> Iterator[str]:
    private = known(subject.get("apiServerAccessProfile.enablePrivateCluster"), "enablePrivateCluster")
    ranges = elements(subject.props, "apiServerAccessProfile.authorizedIPRanges")
    if OPEN_CIDRS & set(ranges):
        yield "apiServerAccessProfile.authorizedIPRanges opens the API server to the internet"
    if is_true(private):
        return
    if subject.tier() == "enterprise":
        yield (
            f"apiServerAccessProfile.enablePrivateCluster is {describe(private)}; an enterprise cluster is "
            "private: set it true"
        )
    elif not ranges:
        yield (
            "apiServerAccessProfile.authorizedIPRanges is not set; a public API server needs authorized IP "
            "ranges (or make the cluster private)"
        )


def _enterprise_private(path: str) -> Rule:
    """An enterprise resource turns public network access off (private endpoints only)."""
    check = require(path, one_of("Disabled"), "an enterprise tier reaches it through private endpoints only")

    def rule(subject: Subject) -> Iterator[str]:
        if subject.tier() == "enterprise":
            yield from check(subject.props)

    return rule


_ENTERPRISE_PRIVATE_VAULT = _enterprise_private("properties.publicNetworkAccess")


def _vault_endpoint(subject: Subject) -> Iterator[str]:
    """Enterprise vaults are private, but for the vault a registry is created against, RBAC-only
    (settings.py, exception contract)."""
    creation = subject.tags().get(AZURE_ROLE_TAG) == REGISTRY_CREATION_ROLE
    rbac_only = is_true(subject.get("properties.enableRbacAuthorization")) and not subject.get(
        "properties.accessPolicies"
    )
    if not (creation and rbac_only):
        yield from _ENTERPRISE_PRIVATE_VAULT(subject)


def _public_statements(path: str) -> Check:
    """An ``Allow`` to everyone without a condition makes a bucket public."""

    def check(obj: Mapping[str, Any]) -> Iterator[str]:
        for index, statement in enumerate(statements(parse_document(obj.get(path), path))):
            principal = statement.get("Principal")
            everyone = principal == "*" or (
                isinstance(principal, Mapping) and "*" in _listed(principal.get("AWS"))
            )
            if statement.get("Effect") == "Allow" and everyone and not statement.get("Condition"):
                yield f"{path} statement {index} allows everyone (Principal *) without a condition"

    return check


_S3_ACL = require("acl", lambda acl: acl not in _PUBLIC_ACLS, "keep the bucket private")
_PUBLIC_STORAGE = {
    tokens.S3_PUBLIC_ACCESS_BLOCK: on_props(
        all_of(*(require(flag, is_true, "block public access") for flag in _PUBLIC_ACCESS_FLAGS))
    ),
    tokens.S3_ACCOUNT_PUBLIC_ACCESS_BLOCK: on_props(
        all_of(*(require(flag, is_true, "block public access") for flag in _PUBLIC_ACCESS_FLAGS))
    ),
    **dict.fromkeys(
        tokens.S3_ACLS,
        on_props(
            all_of(
                _S3_ACL,
                each(
                    "accessControlPolicy.grants",
                    require("grantee.uri", lambda uri: uri not in _PUBLIC_GRANTEES, "grant no public group"),
                ),
            )
        ),
    ),
    **dict.fromkeys(
        tokens.S3_BUCKETS,
        on_props(
            all_of(
                _S3_ACL,
                each(
                    "grants", require("uri", lambda uri: uri not in _PUBLIC_GRANTEES, "grant no public group")
                ),
                _public_statements("policy"),
            )
        ),
    ),
    tokens.S3_POLICY: on_props(_public_statements("policy")),
    tokens.STORAGE_ACCOUNT: on_props(
        all_of(
            require("allowBlobPublicAccess", is_false, "set it false"),
            require(
                "networkRuleSet.defaultAction", one_of("Deny"), "deny by default and allow known networks"
            ),
        )
    ),
    "azure-native:storage:BlobContainer": on_props(
        require("publicAccess", one_of(None, "None"), "keep containers private")
    ),
}

_ENDPOINTS = {
    "aws:eks/cluster:Cluster": _eks_endpoint,
    tokens.AKS_CLUSTER: _aks_endpoint,
    "azure-native:keyvault:Vault": _vault_endpoint,
    "azure-native:containerregistry:Registry": _enterprise_private("publicNetworkAccess"),
}

_NO_PUBLIC_IP = "nodes stay on private addresses"
_NODE_PUBLIC_IPS = {
    tokens.LAUNCH_TEMPLATE: on_props(
        each(
            "networkInterfaces", require("associatePublicIpAddress", lambda v: not is_true(v), _NO_PUBLIC_IP)
        )
    ),
    tokens.EC2_INSTANCE: on_props(
        require("associatePublicIpAddress", lambda v: not is_true(v), _NO_PUBLIC_IP)
    ),
    tokens.AKS_CLUSTER: on_props(
        each("agentPoolProfiles", require("enableNodePublicIP", lambda v: not is_true(v), _NO_PUBLIC_IP))
    ),
    tokens.AKS_POOL: on_props(require("enableNodePublicIP", lambda v: not is_true(v), _NO_PUBLIC_IP)),
}


def _azure_rule_open(rule: Mapping[str, Any]) -> Iterator[str]:
    if str(rule.get("direction")).lower() != "inbound" or str(rule.get("access")).lower() != "allow":
        return
    sources = [*_listed(rule.get("sourceAddressPrefix")), *_listed(rule.get("sourceAddressPrefixes"))]
    if any(str(source).lower() in _OPEN_AZURE_SOURCES for source in sources):
        yield f"sourceAddressPrefix allows inbound traffic from anywhere ({', '.join(map(str, sources))})"


_NO_WORLD = "allow only known ranges or security groups"
_OPEN_RULE = all_of(_not_open("cidrBlocks", _NO_WORLD), _not_open("ipv6CidrBlocks", _NO_WORLD))


def _ingress_rule(subject: Subject) -> Iterator[str]:
    if known(subject.get("type"), "type") == "ingress":
        yield from _OPEN_RULE(subject.props)


_INGRESS = {
    "aws:ec2/securityGroup:SecurityGroup": on_props(each("ingress", _OPEN_RULE)),
    "aws:ec2/securityGroupRule:SecurityGroupRule": _ingress_rule,
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": on_props(
        all_of(_not_open("cidrIpv4", _NO_WORLD), _not_open("cidrIpv6", _NO_WORLD))
    ),
    "azure-native:network:NetworkSecurityGroup": on_props(each("securityRules", _azure_rule_open)),
    "azure-native:network:SecurityRule": on_props(_azure_rule_open),
}

_METADATA = all_of(
    require("metadataOptions.httpTokens", one_of("required"), "require IMDSv2 session tokens"),
    require(
        "metadataOptions.httpPutResponseHopLimit", one_of(1, 1.0), "keep the token on the node (hop limit 1)"
    ),
)


def _imds(subject: Subject) -> Iterator[str]:
    if known(subject.get("metadataOptions.httpEndpoint"), "metadataOptions.httpEndpoint") != "disabled":
        yield from _METADATA(subject.props)


def _node_group_template(subject: Subject) -> Iterator[str]:
    if not subject.get("launchTemplate"):
        yield (
            "launchTemplate is not set; without one the pool's IMDS settings are EKS's, not yours: attach a "
            "launch template with metadataOptions"
        )


_IMDS = {
    tokens.LAUNCH_TEMPLATE: _imds,
    tokens.EC2_INSTANCE: _imds,
    "aws:eks/nodeGroup:NodeGroup": _node_group_template,
}

POLICIES: list[ResourceValidationPolicy] = [
    resource_policy(
        "no-public-endpoints",
        "Cluster API servers are private in the enterprise tier and behind an allow-list (never "
        "0.0.0.0/0) in the SMB tier; enterprise Key Vaults (but the RBAC-only vault a registry is created "
        "against) and registries have public network access off.",
        by_type(_ENDPOINTS),
        severity=Severity.HIGH,
    ),
    resource_policy(
        "no-public-storage",
        "No public buckets, ACLs, bucket policies or blob containers; public access blocks set all four "
        "flags; storage accounts deny by default and refuse public blob access.",
        by_type(_PUBLIC_STORAGE),
        severity=Severity.CRITICAL,
    ),
    resource_policy(
        "no-node-public-ip",
        "Nodes get no public IP addresses (launch templates, instances, AKS node pools).",
        by_type(_NODE_PUBLIC_IPS),
        severity=Severity.HIGH,
    ),
    resource_policy(
        "no-open-ingress",
        "No security group or network security group rule admits traffic from 0.0.0.0/0 or ::/0.",
        by_type(_INGRESS),
        severity=Severity.HIGH,
    ),
    resource_policy(
        "imdsv2-required",
        "Instances and launch templates require IMDSv2 tokens with hop limit 1; EKS node groups use a "
        "launch template so that holds.",
        by_type(_IMDS),
        severity=Severity.HIGH,
    ),
]
