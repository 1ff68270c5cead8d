"""Deployability on AWS, judged on the whole program: what makes a first ``pulumi up`` fail or a deployed
platform break although every resource on its own is valid (review ``aws.md``, issue 23).

Ordering: the engine creates resources in parallel unless one depends on another, so where an AWS API
checks another resource synchronously, the dependency the analyzer sees (``dependencies``, the engine's
graph) must be there. Names: the APIs' length limits, counting the suffix Pulumi's autonaming or the
provider's name prefix adds. Versions and registries: tables with their source and the date they were
read, updated by hand. Each policy's description names its source.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import Severity

from . import tokens
from .factory import ADVISORY, Finding, by_type, per_node, resource_policy, stack_policy
from .subject import Graph, Subject
from .values import elements, is_unknown, known, parse_document, statements

LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
LEGACY_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
NAT_GATEWAY = "aws:ec2/natGateway:NatGateway"
INTERNET_GATEWAY = "aws:ec2/internetGateway:InternetGateway"
IGW_ATTACHMENT = "aws:ec2/internetGatewayAttachment:InternetGatewayAttachment"
VPC = "aws:ec2/vpc:Vpc"
DEFAULT_SG = "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
K8S_PROVIDER = "pulumi:providers:kubernetes"
EKS_ADDON = "aws:eks/addon:Addon"
IAM_ROLE = "aws:iam/role:Role"
ECR_REPOSITORY = "aws:ecr/repository:Repository"
ECR_LIFECYCLE = "aws:ecr/lifecyclePolicy:LifecyclePolicy"
DATA_REPOSITORY_ASSOCIATION = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
BUCKET_VERSIONING = (
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:s3/bucketVersioningV2:BucketVersioningV2",
)
RDS_INSTANCE = "aws:rds/instance:Instance"

# The LNET port FSx checks at CreateFileSystem (FSx for Lustre user guide, "File system access control
# with Amazon VPC"; aws/aws-parallelcluster #6181).
_LNET_PORT = 988

# End of EKS standard support per minor: EKS user guide, "Understand the Kubernetes version lifecycle on
# EKS" (14 months after release), dates as endoflife.date/amazon-eks records the EKS release calendar,
# read 2026-11-26. Updated by hand; a version missing here is reported, never assumed supported.
EKS_STANDARD_SUPPORT_END = {
    "1.29": datetime.date(2025, 3, 23),
    "1.30": datetime.date(2025, 7, 23),
    "1.31": datetime.date(2025, 11, 26),
    "1.32": datetime.date(2026, 3, 23),
    "1.33": datetime.date(2026, 7, 29),
    "1.34": datetime.date(2026, 12, 2),
    "1.35": datetime.date(2027, 3, 27),
}
EKS_VERSIONS_READ = "2026-11-26"

# An image in an AWS account's ECR registry: the region is the fourth label of the host.
_ECR_IMAGE = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/")

# Name length limits, by type: (input, limit, source). A ``<input>Prefix`` gets the provider's 26
# characters (terraform-plugin-sdk helper/id UniqueIDSuffixLength); an autoname adds "-" and 7.
_NAME_LIMITS: dict[str, tuple[str, int, str]] = {
    NODE_GROUP: ("nodeGroupName", 63, "pulumi-aws eks.NodeGroup: can't be longer than 63 characters"),
    EKS_CLUSTER: ("name", 100, "EKS API reference, CreateCluster name: 1-100 characters"),
    "aws:iam/policy:Policy": ("name", 128, "IAM API reference, CreatePolicy PolicyName: 1-128"),
    "aws:iam/instanceProfile:InstanceProfile": (
        "name",
        128,
        "IAM API reference, CreateInstanceProfile InstanceProfileName: 1-128",
    ),
    tokens.LAUNCH_TEMPLATE: (
        "name",
        128,
        "EC2 API reference, CreateLaunchTemplate LaunchTemplateName: 3-128",
    ),
    SECURITY_GROUP: ("name", 255, "EC2 API reference, CreateSecurityGroup GroupName: up to 255"),
    LOG_GROUP: ("name", 512, "CloudWatch Logs API reference, CreateLogGroup logGroupName: 1-512"),
    **dict.fromkeys(tokens.S3_BUCKETS, ("bucket", 63, "S3 user guide, bucket naming rules: 3-63 characters")),
}
_PREFIX_SUFFIX = 26
_AUTONAME_SUFFIX = 8

# RFC 5737 documentation ranges: no real client comes from them.
_DOCUMENTATION = tuple(
    ipaddress.IPv4Network(c) for c in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)


def _closure(subject: Subject, graph: Graph) -> set[str]:
    """Every URN ``subject`` waits for, directly or through what it depends on."""
    seen: set[str] = set()
    todo = list(subject.dependencies)
    while todo:
        urn = todo.pop()
        if urn not in seen:
            seen.add(urn)
            found = graph.find(urn)
            if found is not None:
                todo.extend(found.dependencies)
    return seen


def _covers(rule: Subject, port: int) -> bool:
    protocol = rule.get("ipProtocol") or rule.get("protocol")
    if protocol in ("-1", -1, "all"):
        return True
    low, high = rule.get("fromPort"), rule.get("toPort")
    return isinstance(low, (int, float)) and isinstance(high, (int, float)) and low <= port <= high


def _lustre_after_rules(lustre: Subject, graph: Graph) -> Iterator[str]:
    groups = {g.urn for g in graph.linked(lustre, "securityGroupIds", (SECURITY_GROUP,))}
    if not groups:
        return
    rules = [
        r
        for r in graph.of(INGRESS_RULE, LEGACY_RULE)
        if _covers(r, _LNET_PORT)
        and (r.get("type") or "ingress") == "ingress"
        and {g.urn for g in graph.linked(r, "securityGroupId", (SECURITY_GROUP,))} & groups
    ]
    waits = _closure(lustre, graph)
    if not rules:
        yield f"no ingress rule on the file system's security group admits TCP {_LNET_PORT} (LNET)"
    elif not any(r.urn in waits for r in rules):
        yield (
            f"created in parallel with the {_LNET_PORT} rule(s) {', '.join(r.name for r in rules)}: "
            "CreateFileSystem checks the group at once and fails with InvalidNetworkSettings; add "
            "depends_on on the rules"
        )


def _nat_after_gateway(nat: Subject, graph: Graph) -> Iterator[str]:
    if nat.get("connectivityType") not in (None, "public"):
        return
    gateways = {g.urn for g in graph.of(INTERNET_GATEWAY, IGW_ATTACHMENT)}
    if gateways and not gateways & _closure(nat, graph):
        yield (
            "public NAT gateway does not wait for the VPC's internet gateway: created first it fails "
            "with Gateway.NotAttached; add depends_on on the gateway"
        )


def _default_sg_closed(vpc: Subject, graph: Graph) -> Iterator[str]:
    managed = [
        d for d in graph.of(DEFAULT_SG) if vpc.urn in {v.urn for v in graph.linked(d, "vpcId", (VPC,))}
    ]
    if not managed:
        yield (
            "the VPC's default security group keeps AWS's rules (all from itself, all egress); adopt it "
            "with an aws:ec2/defaultSecurityGroup:DefaultSecurityGroup without rules"
        )
        return
    for group in managed:
        if elements(group.props, "ingress") or elements(group.props, "egress"):
            yield f"default security group {group.name} has rules; leave ingress and egress empty"


def _is_prod(subject: Subject) -> bool:
    return subject.tags().get("environment") == "prod"


def _prod_protected(graph: Graph) -> Iterator[Finding]:
    for cluster in graph.of(EKS_CLUSTER):
        if _is_prod(cluster) and not (cluster.get("deletionProtection") is True or cluster.protect):
            yield cluster.urn, "prod EKS cluster without deletionProtection or protect"
    for group in graph.of(LOG_GROUP):
        if _is_prod(group) and not group.protect:
            yield group.urn, "prod log group (audit trail) without protect"


def _today() -> datetime.date:
    return datetime.datetime.now(datetime.UTC).date()


def _standard_support(subject: Subject) -> Iterator[str]:
    version = known(subject.get("version"), "version")
    if not isinstance(version, str):
        return
    minor = ".".join(version.split(".")[:2])
    end = EKS_STANDARD_SUPPORT_END.get(minor)
    if end is None:
        yield (
            f"Kubernetes {version} is not in the pack's EKS support table (read {EKS_VERSIONS_READ}); "
            "add its end of standard support from the EKS version lifecycle page"
        )
    elif end < _today():
        yield (
            f"Kubernetes {minor} left EKS standard support on {end.isoformat()}: extended support is "
            "billed at a higher rate; move to a version in standard support"
        )


def _stack_regions(graph: Graph) -> set[str]:
    return {r for s in graph.subjects if s.package == "aws" for r in [s.aws_region()] if isinstance(r, str)}


def _images(subject: Subject) -> Iterator[Any]:
    spec = subject.get(tokens.POD_SPEC_PATHS[subject.type])
    if isinstance(spec, Mapping):
        for field in ("initContainers", "containers"):
            for container in elements(spec, field):
                if isinstance(container, Mapping):
                    yield container.get("image")


def _regional_images(graph: Graph) -> Iterator[Finding]:
    regions = _stack_regions(graph)
    if not regions:
        return
    for workload in graph.of(*tokens.WORKLOADS):
        for image in _images(workload):
            match = _ECR_IMAGE.match(image) if isinstance(image, str) and not is_unknown(image) else None
            if match and match.group(2) not in regions:
                yield (
                    workload.urn,
                    f"image {image} is pulled from ECR in {match.group(2)}, outside the stack's region "
                    f"({', '.join(sorted(regions))}): a region-deny SCP refuses it; use the region's "
                    "registry",
                )


def _name_length(subject: Subject) -> Iterator[str]:
    field, limit, source = _NAME_LIMITS[subject.type]
    name, prefix = subject.get(field), subject.get(f"{field}Prefix")
    if isinstance(name, str) and not is_unknown(name):
        if len(name) > limit:
            yield f"{field} is {len(name)} characters; the API allows {limit} ({source})"
    elif isinstance(prefix, str) and not is_unknown(prefix):
        if len(prefix) + _PREFIX_SUFFIX > limit:
            yield f"{field}Prefix plus the provider's {_PREFIX_SUFFIX} characters exceeds {limit} ({source})"
    elif name is None and prefix is None and len(subject.name) + _AUTONAME_SUFFIX > limit:
        yield (
            f"autonamed from a {len(subject.name)}-character resource name plus {_AUTONAME_SUFFIX}: over "
            f"{limit} ({source}); set a short {field} or {field}Prefix"
        )


def _documentation_ranges(cluster: Subject) -> Iterator[str]:
    for cidr in elements(cluster.props, "vpcConfig.publicAccessCidrs"):
        if isinstance(cidr, str) and not is_unknown(cidr):
            network = ipaddress.ip_network(cidr, strict=False)
            if isinstance(network, ipaddress.IPv4Network) and any(
                network.subnet_of(d) for d in _DOCUMENTATION
            ):
                yield (
                    f"publicAccessCidrs {cidr} is an RFC 5737 documentation range no client comes from: "
                    "replace it with your runner's or office's egress range"
                )


def _api_reachable(graph: Graph) -> Iterator[Finding]:
    has_kubernetes = bool(graph.of(K8S_PROVIDER))
    for cluster in graph.of(EKS_CLUSTER):
        if cluster.get("vpcConfig.endpointPublicAccess") is not False or not has_kubernetes:
            continue
        rules = [
            r
            for r in graph.of(INGRESS_RULE, LEGACY_RULE)
            if cluster.urn in r.property_dependencies.get("securityGroupId", r.dependencies)
            and _covers(r, 443)
        ]
        if not rules:
            yield (
                cluster.urn,
                "private API endpoint and a Kubernetes provider in the same program, but no 443 ingress "
                "rule on the cluster security group: nothing outside the cluster can reach the API",
            )


def _reservation_placement(template: Subject, graph: Graph) -> Iterator[str]:
    target = template.get("capacityReservationSpecification.capacityReservationTarget")
    if isinstance(target, Mapping) and graph.linked(template, "placement", (PLACEMENT_GROUP,)):
        yield (
            "targets a capacity reservation and launches into a placement group this program creates: "
            "the reservation was not made in it (InsufficientInstanceCapacity)"
        )
    block = template.get("instanceMarketOptions.marketType") == "capacity-block"
    for group in graph.of(NODE_GROUP):
        if template.urn in group.property_dependencies.get("launchTemplate", group.dependencies):
            if block and group.get("capacityType") != "CAPACITY_BLOCK":
                yield f"capacity-block market type, but node group {group.name} is not CAPACITY_BLOCK"
            if group.get("capacityType") == "CAPACITY_BLOCK" and not block:
                yield f"node group {group.name} is CAPACITY_BLOCK, but the template's market type is not"
            if isinstance(target, Mapping):
                yield from _reserved_group(group)


def _reserved_group(group: Subject) -> Iterator[str]:
    """Review aws.md N1: an instance launches into a reservation only in its "Availability Zone" and while
    it "is in the active state" (EC2 user guide, "Launch instances into an existing Capacity
    Reservation"); a Capacity Block group is created, and updated, at desired size 0 (EKS user guide,
    "Create a managed node group with Capacity Blocks for ML")."""
    subnets = group.get("subnetIds")
    if isinstance(subnets, list) and len(subnets) != 1:
        yield (
            f"node group {group.name} launches into a capacity reservation from {len(subnets)} subnets: a "
            "reservation lives in one Availability Zone, so launches in the others fail"
        )
    if group.get("capacityType") == "CAPACITY_BLOCK":
        sizes = {key: group.get(f"scalingConfig.{key}") for key in ("minSize", "desiredSize")}
        started = {k: f"{v:g}" for k, v in sizes.items() if isinstance(v, int | float) and v > 0}
        if started:
            yield (
                f"Capacity Block node group {group.name} starts at "
                + ", ".join(f"{k} {v}" for k, v in started.items())
                + ": create it at 0 and scale inside the block's window"
            )


# The IAM condition operators that pin a claim to values: StringEquals and StringLike, also with a set
# qualifier (``ForAnyValue:``/``ForAllValues:``) or the ``IfExists`` suffix, which change how a missing or
# multi-valued key is read, not what a value must match (IAM user guide, "IAM JSON policy elements:
# Condition operators": "...IfExists"; "Set operators for multivalued context keys"). A web identity
# token always carries its ``sub`` and ``aud``, so each form pins them (review of issue 38, C4).
_PINNING = ("StringEquals", "StringLike")


def _base_operator(operator: str) -> str:
    """``ForAnyValue:StringLikeIfExists`` -> ``StringLike``."""
    return operator.split(":", 1)[-1].removesuffix("IfExists")


def _pins(condition: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(base operator, claim key, value) of every pinning condition."""
    for operator, claims in condition.items():
        base = _base_operator(str(operator))
        if base in _PINNING and isinstance(claims, Mapping):
            for key, value in claims.items():
                yield base, str(key), value


def _web_identity_trust(role: Subject) -> Iterator[str]:
    document = parse_document(role.get("assumeRolePolicy"), "assumeRolePolicy")
    for index, statement in enumerate(statements(document)):
        actions = statement.get("Action")
        actions = actions if isinstance(actions, list) else [actions]
        if statement.get("Effect") != "Allow" or "sts:AssumeRoleWithWebIdentity" not in actions:
            continue
        condition = statement.get("Condition")
        keys = {key for _, key, _ in _pins(condition if isinstance(condition, Mapping) else {})}
        missing = [claim for claim in (":sub", ":aud") if not any(k.endswith(claim) for k in keys)]
        if missing:
            yield (
                f"statement {index} lets web identities assume the role without pinning "
                f"{' and '.join(missing)}: any service account of the cluster (or any audience) could"
            )
        yield from _trust_pins(index, statement, condition if isinstance(condition, Mapping) else {})


def _trust_pins(index: int, statement: Mapping[str, Any], condition: Mapping[str, Any]) -> Iterator[str]:
    """Review aws.md (the pack): a ``:sub`` under StringLike with a wildcard namespace, or a name that is
    nothing but wildcards, pins nothing ("system:serviceaccount:*:*"; a name prefix in one namespace,
    ``kube-system:efs-csi-*``, does), and a claim key must name the Federated provider's issuer (the
    condition keys are ``<issuer>:sub`` / ``<issuer>:aud``, IAM user guide, "Available keys for AWS web
    identity federation"; EKS user guide, "Assign IAM roles to Kubernetes service accounts")."""
    principal = statement.get("Principal")
    federated = principal.get("Federated") if isinstance(principal, Mapping) else None
    issuer = (
        federated.split(":oidc-provider/", 1)[1]
        if isinstance(federated, str) and ":oidc-provider/" in federated
        else None
    )
    for operator, key, value in _pins(condition):
        if issuer is not None and key.endswith((":sub", ":aud")) and not key.startswith(f"{issuer}:"):
            yield f"statement {index} pins {key}, not a claim of its Federated provider {issuer}"
        if operator == "StringLike" and key.endswith(":sub"):
            for pattern in value if isinstance(value, list) else [value]:
                parts = str(pattern).split(":")
                namespace, name = (parts[2], parts[3]) if len(parts) == 4 else ("*", "*")
                if any(c in namespace for c in "*?") or not name.strip("*?"):
                    yield (
                        f"statement {index} pins {key} to {pattern!r}, which matches service accounts "
                        "of any namespace or name: name them (system:serviceaccount:<namespace>:<name>)"
                    )


def _repository_expires_images(repository: Subject, graph: Graph) -> Iterator[str]:
    if repository.get("imageTagMutability") != "IMMUTABLE":
        return
    for policy in graph.of(ECR_LIFECYCLE):
        if repository.urn in {r.urn for r in graph.linked(policy, "repository", (ECR_REPOSITORY,), "name")}:
            return
    yield (
        "immutable-tag repository without a lifecycle policy: every new content tag stays stored for "
        "ever; add an ecr.LifecyclePolicy that expires old images"
    )


# What a data repository association exports for the file system's contents to reach S3 and stay there
# through every change (FSx for Lustre user guide, "Exporting changes to the data repository").
_FULL_EXPORT = {"NEW", "CHANGED", "DELETED"}


def _versioned(bucket_urns: set[str], graph: Graph) -> bool:
    return any(
        versioning.get("versioningConfiguration.status") == "Enabled"
        and bucket_urns & {b.urn for b in graph.linked(versioning, "bucket", tokens.S3_BUCKETS, "bucket")}
        for versioning in graph.of(*BUCKET_VERSIONING)
    )


def _lustre_durable(lustre: Subject, graph: Graph) -> Iterator[str]:
    """A prod Lustre file system keeps a copy of its data: FSx automatic backups, which FSx takes only of
    persistent file systems linked to no data repository; or, for a linked one, an association that exports
    every change of the whole file system to a versioned bucket."""
    if not _is_prod(lustre):
        return
    associations = [
        a
        for a in graph.of(DATA_REPOSITORY_ASSOCIATION)
        if lustre.urn in {f.urn for f in graph.linked(a, "fileSystemId", (LUSTRE,))}
    ]
    retention = known(lustre.get("automaticBackupRetentionDays"), "automaticBackupRetentionDays")
    backed_up = isinstance(retention, int | float) and retention > 0
    if associations and backed_up:
        yield (
            f"automaticBackupRetentionDays {retention:g} on a file system linked to S3: FSx backs up only "
            "file systems linked to no data repository; drop it, the export is the copy"
        )
    elif not associations and not backed_up:
        yield (
            "prod Lustre without automatic backups (automaticBackupRetentionDays unset or 0: the API's "
            "default 0) and without an export to S3: set automaticBackupRetentionDays (1-90)"
        )
    elif associations and not any(
        a.get("fileSystemPath") == "/"
        and set(elements(a.props, "s3.autoExportPolicy.events")) >= _FULL_EXPORT
        and _versioned({b.urn for b in graph.linked(a, "dataRepositoryPath", tokens.S3_BUCKETS)}, graph)
        for a in associations
    ):
        yield (
            "prod Lustre linked to S3 (so FSx takes no backups of it) with no association exporting NEW, "
            "CHANGED and DELETED from / to a versioned bucket: changes made on it have no other copy"
        )


def _rds_log_groups(instance: Subject, graph: Graph) -> Iterator[str]:
    """Each log an instance exports has its group in the program, made before the instance: RDS otherwise
    creates ``/aws/rds/instance/<identifier>/<log>`` itself, with no key and no expiry."""
    exports = elements(instance.props, "enabledCloudwatchLogsExports")
    if not exports:
        return
    identifier = known(instance.get("identifier"), "identifier")
    if not isinstance(identifier, str) or not identifier:
        yield (
            f"exports {', '.join(exports)} logs with no identifier: RDS names their groups after the "
            "instance, so the program cannot make them first; set identifier and make the groups"
        )
        return
    before = [graph.find(urn) for urn in instance.dependencies]
    made = {g.get("name") for g in before if g is not None and g.type == LOG_GROUP}
    for log in exports:
        if f"/aws/rds/instance/{identifier}/{log}" not in made:
            yield (
                f"exports its {log} log with no LogGroup /aws/rds/instance/{identifier}/{log} it depends "
                "on: RDS creates that group itself, unencrypted and never expiring"
            )


def _kube_proxy_matches_cluster(addon: Subject, graph: Graph) -> Iterator[str]:
    version = addon.get("addonVersion")
    if addon.get("addonName") != "kube-proxy" or not isinstance(version, str) or is_unknown(version):
        return
    for cluster in graph.linked(addon, "clusterName", (EKS_CLUSTER,)):
        minor = cluster.get("version")
        if isinstance(minor, str) and not is_unknown(minor) and not version.startswith(f"v{minor}."):
            yield f"kube-proxy {version} on a {minor} cluster: its minor must be the cluster's (v{minor}.*)"


POLICIES = [
    stack_policy(
        "aws-fsx-after-security-group-rules",
        "An FSx for Lustre file system depends on the ingress rule admitting TCP 988 on its security group: "
        "CreateFileSystem validates the group synchronously (FSx API reference, InvalidNetworkSettings; "
        "aws/aws-parallelcluster #6181, #1198).",
        per_node((LUSTRE,), _lustre_after_rules),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aws-nat-after-internet-gateway",
        "A public NAT gateway depends on the VPC's internet gateway (EC2 API reference, NatGateway "
        "failureCode Gateway.NotAttached; pulumi-aws ec2.NatGateway docstring).",
        per_node((NAT_GATEWAY,), _nat_after_gateway),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aws-vpc-default-security-group-closed",
        "Every VPC's default security group is adopted with no rules (AWS Security Hub EC2.2; CIS AWS "
        "Foundations; pulumi-aws ec2.DefaultSecurityGroup docstring).",
        per_node((VPC,), _default_sg_closed),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aws-prod-deletion-protection",
        "Prod EKS clusters have deletionProtection or protect, prod log groups protect (pulumi-aws "
        "eks.Cluster.deletion_protection docstring; the audit trail outlives a destroy).",
        _prod_protected,
        severity=Severity.HIGH,
    ),
    resource_policy(
        "aws-eks-standard-support",
        "EKS clusters and node groups run a Kubernetes version in EKS standard support on the date of the "
        "check (EKS user guide, Kubernetes version lifecycle; table read 2026-11-26, updated by hand).",
        by_type(dict.fromkeys((EKS_CLUSTER, NODE_GROUP), _standard_support)),
        severity=Severity.MEDIUM,
    ),
    stack_policy(
        "aws-ecr-image-in-region",
        "Images from an AWS ECR registry (EKS add-on registries included) come from the stack's region "
        "(EKS user guide, View Amazon container image registries for Amazon EKS add-ons).",
        _regional_images,
        severity=Severity.HIGH,
    ),
    resource_policy(
        "aws-name-length",
        "Named AWS resources fit their API's name limit, counting the 26 characters a name prefix gets "
        "and the 8 of Pulumi's autoname (EKS, IAM, EC2, CloudWatch Logs API reference; S3 user guide).",
        by_type(dict.fromkeys(_NAME_LIMITS, _name_length)),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aws-eks-api-reachable",
        "A private-only EKS endpoint with a Kubernetes provider in the same program has a 443 ingress rule "
        "on the cluster security group (EKS user guide, Cluster API server endpoint).",
        _api_reachable,
        severity=Severity.HIGH,
    ),
    # Advisory: a shipped template carries a placeholder range the user must replace.
    resource_policy(
        "aws-eks-public-access-documentation-range",
        "publicAccessCidrs of an EKS cluster are no RFC 5737 documentation ranges (RFC 5737; EKS user "
        "guide, Cluster API server endpoint): no runner could reach the API.",
        by_type({EKS_CLUSTER: _documentation_ranges}),
        severity=Severity.MEDIUM,
        enforcement=ADVISORY,
    ),
    stack_policy(
        "aws-capacity-reservation-launch",
        "A launch template targeting a capacity reservation uses no placement group the program creates "
        "and feeds node groups in one subnet (the reservation's zone); a capacity-block market type goes "
        "with a CAPACITY_BLOCK node group created at size 0 (EC2 user guide, Launch instances into an "
        "existing Capacity Reservation; EKS user guide, Capacity Blocks for ML; terraform-aws-eks PR #3730).",
        per_node((tokens.LAUNCH_TEMPLATE,), _reservation_placement),
        severity=Severity.HIGH,
    ),
    resource_policy(
        "aws-irsa-trust-pins-sub-and-aud",
        "A role web identities may assume pins both the :sub and :aud claims with StringEquals or "
        "StringLike (with or without a set qualifier or IfExists), never to a wildcard namespace (IAM user "
        "guide, Available keys for AWS web identity federation, Condition operators; EKS user guide, "
        "Assign IAM roles to Kubernetes service accounts).",
        by_type({IAM_ROLE: _web_identity_trust}),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aws-ecr-lifecycle",
        "An immutable-tag ECR repository has a lifecycle policy: each image change pushes a new tag, so "
        "storage otherwise grows with every push (ECR user guide, Automate the cleanup of images by using "
        "lifecycle policies; AWS review N5).",
        per_node((ECR_REPOSITORY,), _repository_expires_images),
        severity=Severity.MEDIUM,
    ),
    stack_policy(
        "aws-prod-lustre-has-a-copy",
        "A prod FSx for Lustre file system has automatic backups (automaticBackupRetentionDays 1-90, "
        "persistent deployment types; FSx API reference, LustreFileSystemConfiguration) or, linked to S3, "
        "whose file systems FSx does not back up (FSx API reference, CreateBackup; FSx for Lustre user "
        "guide, Working with backups), exports NEW, CHANGED and DELETED from / to a versioned bucket "
        "(AWS review D2).",
        per_node((LUSTRE,), _lustre_durable),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "aws-rds-log-groups-made-first",
        "An RDS instance that exports logs depends on a LogGroup /aws/rds/instance/<identifier>/<log> per "
        "log, which RDS otherwise creates with no KMS key and no retention (RDS user guide, Publishing "
        "database logs to Amazon CloudWatch Logs; AWS review N4).",
        per_node((RDS_INSTANCE,), _rds_log_groups),
        severity=Severity.MEDIUM,
    ),
    stack_policy(
        "aws-kube-proxy-matches-cluster",
        "A pinned kube-proxy EKS add-on carries the cluster's Kubernetes minor (EKS user guide, Manage "
        "kube-proxy in Amazon EKS clusters: the add-on version follows the cluster version).",
        per_node((EKS_ADDON,), _kube_proxy_matches_cluster),
        severity=Severity.HIGH,
    ),
]
