"""The stack configuration: tier presets plus a stack file's overrides, validated once at the edge.

A stack file (``stacks/Pulumi.<stack>.yaml``) holds the provider's region (``aws:region`` or
``azure-native:location``) and one structured key, ``ml-platform:platform``. ``parse_stack_config``
merges the tier preset under the stack's values, validates the result with pydantic, then applies the
cross-field rules (fabric vs instance type, residency, private enterprise clusters). Every problem comes
back as one line naming the file and the key, the same under ``mlplatform plan`` and ``pulumi preview``.
Code below this module trusts the typed model.
"""

from __future__ import annotations

import ast
import datetime
import difflib
import functools
import importlib.util
import ipaddress
import json
import re
import unicodedata
from collections.abc import Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from components.catalog import InstanceType, catalog
from components.catalog.aws import EKS_ADDON_VERSIONS, SOLD_IN_REGION
from components.catalog.azure import AKS_END_OF_LIFE, aks_supported
from components.driver_images import AksOsSku
from components.handle import (
    MONITOR_USER,
    REGISTRY_DIRECTORY,
    ROLLOUT_USER,
    WORKLOAD_IDENTITIES,
    Cloud,
    Fabric,
    PoolKind,
    SharedStorageKind,
)
from components.image_mirror import LockError, load_lock
from components.kubernetes.charts import per_minor_pins
from workloads.delivery.plan import MonitorPolicy, RolloutPlan
from workloads.fabric import IMAGE_TARGETS, ImageTarget
from workloads.fabric_gate import BUSBW_FLOOR_FRACTION, FABRIC_TEST, fabric_test_run_id
from workloads.training.hooks import HOOK_PATTERN, HOOK_RULE
from workloads.training.k8s import MAX_JOB_NAME

PROJECT = "ml-platform"
# A Kubernetes label value (k8s.io/apimachinery/pkg/util/validation IsValidLabelValue).
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
# The tag naming a resource's role where the policy pack's exception contract depends on it
# (policies/mlplatform_policies/settings.py): an S3 access-log bucket, a registry's creation-key vault.
ROLE_TAG = "ml-platform.io/role"
# The same tag on Azure, where ARM refuses tag names with any of ``< > % & \\ ? /``
# (learn.microsoft.com/azure/azure-resource-manager/management/tag-resources#limitations): no ``/``.
AZURE_ROLE_TAG = "ml-platform.io-role"
# AWS: the data domain(s) a KMS key serves, space-separated, and the one an encrypted store declares where
# its type does not say it (a bucket, the trail's log group): the pack's ``keys-per-domain`` and
# ``identity-per-role`` judge keys and grants by it (policies/mlplatform_policies/settings.py).
DATA_DOMAIN_TAG = "ml-platform.io/data-domain"
ARM_TAG_NAME_FORBIDDEN = re.compile(r"[<>%&\\?/]")
PLATFORM_KEY = f"{PROJECT}:platform"
REGION_KEYS: dict[Cloud, str] = {Cloud.AWS: "aws:region", Cloud.AZURE: "azure-native:location"}
# AWS tag keys and values across services: Unicode letters, digits, spaces and ``_ . : / = + - @``, a key
# of 1 to 128 characters and a value of at most 256, neither starting with ``aws:`` in any case (AWS
# Tagging API and EFS API reference, "Tag": ``^(?![aA]{1}[wW]{1}[sS]{1}:)([\p{L}\p{Z}\p{N}_.:/=+\-@]+)$``;
# AWS Batch user guide, "Tag restrictions"). Every resource carries the stack's tags (base_tags), S3, IAM
# and KMS included, so the common set applies, not EC2's wider one.
_AWS_TAG_SYMBOLS = frozenset("_.:/=+-@")
AWS_TAG_RULE = "letters, digits, spaces and _ . : / = + - @"


def aws_tag_problem(text: str, *, key: bool) -> str | None:
    """Why AWS refuses ``text`` as a tag key (``key``) or a tag value, or None."""
    odd = sorted({c for c in text if c not in _AWS_TAG_SYMBOLS and unicodedata.category(c)[0] not in "LNZ"})
    if odd:
        return f"{text!r}: AWS tags take only {AWS_TAG_RULE}, not {' '.join(odd)}"
    limit = 128 if key else 256
    if len(text) > limit or (key and not text):
        return f"{text!r}: an AWS tag {'key' if key else 'value'} is {int(key)} to {limit} characters"
    if text.lower().startswith("aws:"):
        return f"{text!r}: the aws: prefix is reserved for AWS"
    return None


class ConfigError(Exception):
    """Invalid stack configuration; ``problems`` holds one printable line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class Tier(StrEnum):
    SMB = "smb"
    ENTERPRISE = "enterprise"


class Residency(StrEnum):
    UAE = "uae"


# Regions that keep data in the country (REFERENCE.md "UAE data residency"): AWS has one UAE region
# (me-south-1 is Bahrain); Azure's uaenorth pairs with uaecentral.
RESIDENCY_REGIONS: dict[Residency, dict[Cloud, tuple[str, ...]]] = {
    Residency.UAE: {Cloud.AWS: ("me-central-1",), Cloud.AZURE: ("uaenorth", "uaecentral")},
}


class DataClassification(StrEnum):
    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    RESTRICTED = "restricted"


class EndpointAccess(StrEnum):
    PRIVATE = "private"
    PUBLIC = "public"


class PodEncryption(StrEnum):
    """Encryption of pod-to-pod traffic between nodes by the dataplane (``cluster.podEncryption``)."""

    NONE = "none"
    # AKS Advanced Container Networking Services: Cilium's WireGuard between nodes
    # (learn.microsoft.com/azure/aks/container-network-security-wireguard-encryption-concepts).
    WIREGUARD = "wireguard"


class Redundancy(StrEnum):
    """Object storage redundancy; ``geo`` is offered only where the pair stays in the residency."""

    LOCAL = "local"
    ZONE = "zone"
    GEO = "geo"


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, alias_generator=to_camel, populate_by_name=True
    )


# What each pattern below means, in words: a config error quotes the rule, never the regular expression.
_PATTERN_RULES: dict[str, str] = {}


def _matching(pattern: str, rule: str) -> Any:
    """A string field that must match ``pattern``; a value that does not is told ``rule``."""
    _PATTERN_RULES[pattern] = rule
    return Field(pattern=pattern)


_LABEL_RULE = "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"
DnsLabel = Annotated[
    str, _matching(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$", f"{_LABEL_RULE}, 32 characters at most")
]
# The Pulumi stack's name names every physical resource (EKS cluster, KMS alias, ECR repositories, IAM
# role prefixes, the Azure resource group and AKS DNS prefix), so two stacks in one account or
# subscription never collide. It is refused, not shortened, when an API would refuse a name built from
# it: a user reads a resource's name and knows its stack. The bounds, per API:
# - at most 25 characters: the longest IAM role name prefix, ``<stack>-aws-<purpose of 7>-``, must fit
#   38 (components/aws/iam.role_name_prefix: 64 less the provider's 26-digit suffix);
# - lowercase letters, digits and hyphens, starting with a letter and ending with a letter or digit:
#   ECR repository names are lowercase (ECR user guide, "Creating a private repository"), S3 bucket
#   names, autonamed from the resource name, take no uppercase or underscores (S3 user guide, "General
#   purpose bucket naming rules"), KMS aliases take no dots (KMS developer guide, "Create aliases":
#   alphanumerics, '/', '_' and '-'), and AKS cluster names start and end with a letter or digit (Azure
#   "Naming rules and restrictions for Azure resources", Microsoft.ContainerService/managedClusters).
STACK_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,23}[a-z0-9])?$")
STACK_NAME_RULE = "lowercase letters, digits and '-', starting with a letter, 25 characters at most"


def stack_name_problem(stack: str) -> str:
    """One line on a stack name that cannot name the stack's resources (STACK_NAME)."""
    return f"stack name {stack!r}: {STACK_NAME_RULE} (it names the stack's cloud resources)"


# The environment is a tag value and picks production defaults (``prod``); its 10-character bound dates
# from when it named the stack's resources and is kept so that every existing stack still validates.
ENVIRONMENT_RULE = f"{_LABEL_RULE}, 10 characters at most"
Environment = Annotated[str, _matching(r"^[a-z]([-a-z0-9]{0,8}[a-z0-9])?$", ENVIRONMENT_RULE)]
# A workload's image is built from the repository's Dockerfile and pushed to the stack's registry by
# `pulumi up` (components/images.py), unless the stack names one: then by digest, since a tag can be
# re-pointed under a running Job (checkov CKV_K8S_43), as repository@sha256:digest below the platform's
# registry (ECR / ACR), e.g. a team's image built on ours.
ImageRef = Annotated[
    str,
    _matching(
        r"^[a-z0-9][a-z0-9._/-]*@sha256:[0-9a-f]{64}$",
        "an image by digest: a lowercase repository, then @sha256: and 64 lowercase hex digits (no tag)",
    ),
]
# RDS API reference, CreateDBInstance ``DBInstanceIdentifier``: 1 to 63 letters, digits or hyphens, a
# letter first, no hyphen last and no two in a row (RDS stores it in lowercase).
RDS_IDENTIFIER_RULE = (
    "1 to 63 lowercase letters, digits and '-', starting with a letter, without '--' or a final '-'"
)
RdsIdentifier = Annotated[str, _matching(r"^[a-z](-?[a-z0-9])*$", RDS_IDENTIFIER_RULE), Field(max_length=63)]
# The templates' placeholder: a well-formed digest no registry holds.
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


# S3 user guide, "General purpose bucket naming rules": 3 to 63 characters, lowercase letters, digits,
# dots and hyphens, beginning and ending with a letter or digit.
BucketName = Annotated[
    str,
    _matching(
        r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
        "3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit",
    ),
]


class S3EndpointPolicyConfig(_Model):
    """AWS: a policy on the VPC's S3 gateway endpoint so that nothing in the private subnets reaches
    buckets other than the stack's own, ECR's image layers and the Amazon Linux repositories
    (components/aws/network.s3_endpoint_policy). Opt-in: every S3 request from those subnets passes the
    endpoint, and what the EKS AL2023 AMI and third-party registries fetch from S3 in the region is not
    documented as a closed list (docs/aws.md, "S3 endpoint policy")."""

    enabled: bool = False
    # Buckets outside the stack that callers in the VPC use through the endpoint: a runner's Pulumi state
    # bucket in the region, shared datasets.
    extra_buckets: tuple[BucketName, ...] = ()


class NetworkConfig(_Model):
    cidr: str = "10.40.0.0/16"
    availability_zones: int = Field(default=2, ge=2, le=3)
    s3_endpoint_policy: S3EndpointPolicyConfig = S3EndpointPolicyConfig()

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        network = _network(value)
        if not network.is_private or network.prefixlen > 20:
            raise ValueError("must be a private IPv4 range of /20 or larger")
        return value


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``cidr`` as a network; one with host bits set is told its network address."""
    try:
        return ipaddress.ip_network(cidr)
    except ValueError as exc:
        try:
            meant = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ValueError(f"not a CIDR block: {cidr!r}") from exc
        raise ValueError(f"{cidr!r} has host bits set; did you mean {meant}?") from exc


def _networks(cidrs: tuple[str, ...]) -> Iterator[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    for cidr in cidrs:
        yield cidr, _network(cidr)


# Ranges no caller on the internet comes from, so a public endpoint's allow-list holding one admits nobody
# (a client in such a network reaches a public endpoint through its NAT's public address): private
# networks (RFC 1918), carrier-grade NAT's shared space (RFC 6598), loopback and link-local (RFC 1122,
# RFC 3927), and IPv6's unique-local (RFC 4193), loopback and link-local (RFC 4291). Not
# ``ipaddress.is_private``: that also holds the documentation ranges (RFC 5737) the templates use as
# placeholders, which plan warns about as such (placeholder_problems).
_NOT_PUBLIC: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a private (RFC 1918) range", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")),
    ("carrier-grade NAT's shared range (RFC 6598)", ("100.64.0.0/10",)),
    ("a loopback range", ("127.0.0.0/8", "::1/128")),
    ("a link-local range", ("169.254.0.0/16", "fe80::/10")),
)


def not_public(cidr: str) -> str | None:
    """Which non-internet range (``_NOT_PUBLIC``) ``cidr`` is in or holds, in words, or None."""
    network = ipaddress.ip_network(cidr)
    for what, ranges in _NOT_PUBLIC:
        for other in map(ipaddress.ip_network, ranges):
            if network.version == other.version and network.overlaps(other):
                return f"{'is' if network.subnet_of(other) else 'holds'} {what}"  # type: ignore[arg-type]
    return None


class ClusterConfig(_Model):
    kubernetes_version: Annotated[
        str,
        _matching(
            r"^1\.(2[89]|3[0-9])$", 'a Kubernetes minor version from 1.28 to 1.39, quoted, e.g. "1.35"'
        ),
    ] = "1.35"
    endpoint: EndpointAccess = EndpointAccess.PRIVATE
    # Pod-to-pod encryption between nodes by the dataplane; ``wireguard`` is refused while AKS calls it
    # a preview and the pinned provider's typed API cannot express it (``_pod_encryption_problems``).
    pod_encryption: PodEncryption = PodEncryption.NONE
    # CIDRs allowed to reach a public API endpoint; required when the endpoint is public.
    public_access_cidrs: tuple[str, ...] = ()
    # Moved to ``access.platformAdmins`` (the people's roles); refused here with that message.
    admins: tuple[str, ...] = ()
    # AWS: who may reach the private API endpoint on 443 (the cluster security group admits nothing
    # else): the CIDRs or security groups of the runner that applies phase two from inside the VPC.
    private_access_cidrs: tuple[str, ...] = ()
    private_access_security_groups: tuple[
        Annotated[str, _matching(r"^sg-[0-9a-f]{8,17}$", "a security group id: sg- and 8 to 17 hex digits")],
        ...,
    ] = ()

    @field_validator("private_access_cidrs")
    @classmethod
    def _private_cidrs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for cidr, network in _networks(value):
            if not network.is_private:
                raise ValueError(f"{cidr} is not a private range; the endpoint is private")
        return value

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for cidr, network in _networks(value):
            if network.prefixlen == 0:
                raise ValueError(f"{cidr} opens the API server to the whole internet")
        return value


class PlacementGroupConfig(_Model):
    """Cluster placement for EFA pools. ``existing`` names a placement group made for a capacity
    reservation; ``enabled: false`` drops it where a forced group breaks reservations."""

    enabled: bool = True
    existing: str | None = None


class CapacityReservationKind(StrEnum):
    """What kind of EC2 reservation a pool launches into (EC2 user guide, "On-Demand Capacity
    Reservations" and "Capacity Blocks for ML"): they are asked for differently."""

    ODCR = "odcr"
    CAPACITY_BLOCK = "capacity-block"


class CapacityReservationConfig(_Model):
    """AWS: the reservation (``cr-…``) a pool's instances launch into, and which kind it is."""

    id: Annotated[str, _matching(r"^cr-[0-9a-f]{17}$", "a capacity reservation id: cr- and 17 hex digits")]
    kind: CapacityReservationKind


class NodePoolConfig(_Model):
    name: DnsLabel
    kind: PoolKind
    instance_type: str
    min_size: int = Field(ge=0, le=1000)
    max_size: int = Field(ge=1, le=1000)
    desired_size: int | None = Field(default=None, ge=0, le=1000)
    spot: bool = False
    fabric: Fabric = Fabric.NONE
    placement_group: PlacementGroupConfig = PlacementGroupConfig()
    # Fabric pools live in one zone (the placement group and the fabric do not span zones).
    availability_zone: int | None = Field(default=None, ge=0, le=2)
    disk_size_gib: int = Field(default=200, ge=50, le=16384)
    labels: dict[str, str] = Field(default_factory=dict)
    # AWS: an On-Demand Capacity Reservation or a Capacity Block for ML the pool launches into.
    capacity_reservation: CapacityReservationConfig | None = None
    # The share of the pool's headroom (maxSize - minSize) expected to run, averaged over a month: what
    # `mlplatform cost` prices as "expected" and the budget policy judges; the tier's default when unset
    # (DEFAULT_DUTY_CYCLE, reasons in docs/cost.md).
    duty_cycle: float | None = Field(default=None, ge=0, le=1)


class KeyDomain(StrEnum):
    """The data domains that each have a customer key of their own (docs/security.md, "Keys per data
    domain"): a key encrypts the stores of one domain only, and its policy names that domain's users."""

    SECRETS = "kubernetes-secrets"
    REGISTRY_DATABASE = "registry-database"
    TRAINING_DATA = "training-data"
    OBJECTS = "object-data"
    IMAGES = "images"
    VOLUMES = "node-volumes"
    LOGS = "logs"
    # Curated training data in object storage, read by training only: on AWS its own bucket and key
    # (components/aws/keys.py), on Azure the ``datasets`` container under an encryption scope with its own
    # key (components/azure/storage.py).
    DATASETS = "datasets"


class StorageConfig(_Model):
    shared: SharedStorageKind | None = None
    shared_capacity_gib: int = Field(default=1200, ge=100, le=1_000_000)
    redundancy: Redundancy = Redundancy.ZONE
    # Days non-current object versions are kept before they expire.
    noncurrent_version_days: int = Field(default=90, ge=1, le=3650)
    # Domains whose stores stay on the key they were made under until migrated: on AWS the stack's first
    # key (``alias/<stack>-key``, Kubernetes Secrets' key), on Azure the storage key (``storage-cmk``). A
    # stack made before the keys were split lists the stores whose key change would replace them, and
    # migrates each (docs/operations.md, "Keys per data domain"). Empty: a key per domain.
    on_stack_key: tuple[KeyDomain, ...] = ()

    @field_validator("on_stack_key")
    @classmethod
    def _not_secrets(cls, domains: tuple[KeyDomain, ...]) -> tuple[KeyDomain, ...]:
        if KeyDomain.SECRETS in domains:
            raise ValueError(f"{KeyDomain.SECRETS.value} is the stack key's own domain; list the others only")
        return domains


class Priority(StrEnum):
    """Kueue WorkloadPriorityClasses, highest first (components/kubernetes/kueue.py)."""

    PRODUCTION = "production"
    RESEARCH = "research"
    OPPORTUNISTIC = "opportunistic"


class TeamConfig(_Model):
    """A team: namespace ``team-<name>`` with its own Kueue queue, which runs on idle quota borrowed from
    the cohort, at most ``gpuBorrowingLimit`` GPUs per pool when set."""

    name: DnsLabel
    gpu_borrowing_limit: int | None = Field(default=None, ge=0, le=100_000)


def team_namespace(team: str) -> str:
    """A team's namespace (components/kubernetes/layer.py ``team_namespace``)."""
    return f"team-{team}"


class AlertReceiver(StrEnum):
    """Where Alertmanager sends alerts (prometheus-operator AlertmanagerConfig receivers)."""

    WEBHOOK = "webhook"
    SLACK = "slack"


class AlertingConfig(_Model):
    """Alerts go to one receiver whose URL (webhook URL or Slack incoming-webhook URL) is the key ``url``
    of Secret ``secret`` in the ``monitoring`` namespace, which the operator creates (docs/inference.md
    "Alerts"): the URL is a credential and stays out of the stack file."""

    receiver: AlertReceiver
    secret: DnsLabel


class KubernetesConfig(_Model):
    """The in-cluster layer. A private cluster's API server is reachable only from inside its network,
    so a first ``pulumi up`` from outside runs with ``enabled: false`` (docs/stacks.md, "From a fresh
    clone to a deployed stack, in detail")."""

    enabled: bool = True
    monitoring: bool | None = None
    # Required with monitoring: alerts nobody receives are no monitoring (cluster review D12).
    alerting: AlertingConfig | None = None
    gpu_operator: bool = True
    # Teams as names (`[vision, nlp]`) or objects (`[{name: vision, gpuBorrowingLimit: 8}]`).
    teams: tuple[TeamConfig, ...] = ()
    # Kueue GPU scheduling; on by default where the stack has GPU pools.
    kueue: bool | None = None
    # The mirror lock `mlplatform images mirror` writes (a path from the project's folder, e.g.
    # stacks/<stack>.images.json): every third-party image is then rendered from the stack's mirror by
    # digest and the operator namespaces' image binding denies (components/image_mirror.py).
    image_lock: str | None = None

    @field_validator("teams", mode="before")
    @classmethod
    def _team_names(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return tuple({"name": t} if isinstance(t, str) else t for t in value)
        return value

    @field_validator("teams")
    @classmethod
    def _unique_teams(cls, teams: tuple[TeamConfig, ...]) -> tuple[TeamConfig, ...]:
        names = [t.name for t in teams]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"team names must be unique; repeated: {', '.join(duplicates)}")
        return teams


# A CloudTrail trail's ARN (CloudTrail API reference, Trail.TrailARN: arn:<partition>:cloudtrail:<region>:
# <account>:trail/<name>; trail names are 3 to 128 letters, digits, '.', '_' and '-').
TrailArn = Annotated[
    str,
    _matching(
        r"^arn:aws[a-z-]*:cloudtrail:[a-z0-9-]+:[0-9]{12}:trail/[A-Za-z0-9._-]{3,128}$",
        "a CloudTrail trail ARN: arn:aws:cloudtrail:<region>:<12-digit account>:trail/<name>",
    ),
]


class DetectionSource(StrEnum):
    """Who runs threat detection (GuardDuty, Defender for Cloud) for the stack's account or subscription:
    the stack, or someone already (another stack in the same account, the organisation); then the
    preview checks it is on. GuardDuty takes one detector per account and region (GuardDuty API
    reference, CreateDetector), and Defender plans are one per subscription."""

    STACK = "stack"
    EXISTING = "existing"


# PCI DSS v4.0.1 Requirement 10.5.1: "Retain audit log history for at least 12 months".
MINIMUM_AUDIT_RETENTION_DAYS = 365


# A person's role names an identity the organisation owns: an IAM role on AWS (EKS access entries and KMS
# key policies name roles; EKS user guide, "Create access entries": an IAM principal ARN), an Entra group on
# Azure (AKS Azure RBAC and Key Vault RBAC assign roles to its object id). Checked per cloud
# (_access_problems), so a GUID on an AWS stack is told what AWS expects.
IAM_ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$")
IAM_ROLE_RULE = "an IAM role ARN: arn:aws:iam::<12-digit account>:role/<name>"
# IAM Identity Center's roles live under a reserved path, which their ARN (and so ``aws:PrincipalArn``, which
# the key policies and the access entries compare) carries: "arn:aws:iam::aws-account-ID:role/aws-reserved/
# sso.amazonaws.com/aws-region/AWSReservedSSO_permission-set-name_unique-suffix" (IAM Identity Center user
# guide, "Referencing permission sets in resource policies, Amazon EKS, and AWS KMS"). Named without it,
# an ArnEquals never matches the role and an ArnNotEquals never leaves it out (review 35 C3).
IDENTITY_CENTER_ROLE = re.compile(r":role/AWSReservedSSO_")
IDENTITY_CENTER_RULE = (
    "an IAM Identity Center role is named with its path: arn:aws:iam::<account>:role/aws-reserved/"
    "sso.amazonaws.com/<region>/AWSReservedSSO_<permission set>_<suffix> (aws:PrincipalArn carries it)"
)
ENTRA_OBJECT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
ENTRA_OBJECT_ID_RULE = "an Entra group object id: a lowercase GUID (8-4-4-4-12 hex digits)"


class AccessConfig(_Model):
    """People's roles (docs/security.md, "Who can do what"): who administers the platform, who holds the
    keys, who engineers each team's models and who audits, each an IAM role (AWS) or an Entra group (Azure)
    the organisation owns and staffs. The model approvers are the registry's users
    (``workloads.registry.approvers``) and, for the cloud, ``modelApprovers``. The pack's
    ``duties-separated`` refuses one identity in two roles that must stay apart."""

    # Cluster administrators: EKS AmazonEKSClusterAdminPolicy / AKS RBAC Cluster Admin.
    platform_admins: tuple[str, ...] = ()
    # Key administrators, and the only ones besides the deployer (which updates the key policies): they
    # administer the KMS keys / hold Key Vault Crypto Officer, and use no key for data.
    key_custodians: tuple[str, ...] = ()
    # Per team (``kubernetes.teams``): edit rights in the team's namespace ``team-<name>`` only.
    ml_engineers: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    # Read-only: the cluster's objects (no Secrets), the audit trail, the logs and the lifecycle record.
    auditors: tuple[str, ...] = ()
    # The cloud identities of the model approvers (``workloads.registry.approvers`` are their registry
    # users): they append approvals to the lifecycle record through the registry, reading it with their own
    # identity (AWS: the record-reader policy attached; Azure: Storage Blob Data Reader on the record's
    # account), and each key but the record's leaves them out (policies/key_users.yaml).
    model_approvers: tuple[str, ...] = ()

    def principals(self) -> Iterator[tuple[str, str]]:
        """Every named identity with its stack key (below ``access``)."""
        for field in ("platform_admins", "key_custodians", "auditors", "model_approvers"):
            for index, principal in enumerate(getattr(self, field)):
                yield f"{to_camel(field)}[{index}]", principal
        for team, principals in self.ml_engineers.items():
            for index, principal in enumerate(principals):
                yield f"mlEngineers.{team}[{index}]", principal


class AuditConfig(_Model):
    """The cloud control-plane audit trail, its tamper-evident store and threat detection
    (docs/compliance.md). On by default in enterprise stacks and in every prod stack."""

    enabled: bool | None = None
    # Days each delivered log file stays undeletable (S3 Object Lock COMPLIANCE default retention; Azure
    # Blob time-based immutability), and the trail's CloudWatch / Log Analytics retention floor. At least
    # 12 months: PCI DSS v4.0.1 Req. 10.5.1, "Retain audit log history for at least 12 months" (the pack's
    # minimumAuditRetentionDays judges the same). On Azure a locked policy can only be lengthened.
    retention_days: int = Field(default=365, ge=MINIMUM_AUDIT_RETENTION_DAYS, le=36500)
    # AWS: an organisation trail that already records this account in the region; the stack then
    # creates no trail of its own and checks that one at preview (components/aws/audit.py).
    organization_trail: TrailArn | None = None
    # Object-level (data) events on the data bucket and runtime threat monitoring on the nodes, both
    # billed per use; default on in enterprise, off in SMB (docs/compliance.md, "What an audited stack
    # builds").
    data_events: bool | None = None
    runtime_monitoring: bool | None = None
    detection: DetectionSource = DetectionSource.STACK


class KubeloginMode(StrEnum):
    """How the deployer signs in to an AKS cluster's Entra ID: the ``-l`` of ``kubelogin
    convert-kubeconfig`` (Azure/kubelogin, pkg/internal/token login methods)."""

    AZURECLI = "azurecli"
    WORKLOAD_IDENTITY = "workloadidentity"
    SPN = "spn"
    MSI = "msi"


class PrincipalType(StrEnum):
    """ARM's ``principalType`` of a role assignment; a managed identity is a ``ServicePrincipal``."""

    USER = "User"
    SERVICE_PRINCIPAL = "ServicePrincipal"


class OutboundType(StrEnum):
    """AKS ``networkProfile.outboundType``: how nodes reach the internet (AKS egress docs)."""

    LOAD_BALANCER = "loadBalancer"
    # AKS creates and owns the gateway; only with the VNet AKS itself manages (refused here, see below).
    MANAGED_NAT_GATEWAY = "managedNATGateway"
    # A NAT gateway of our own on the node subnet: the outbound type for a VNet we bring.
    USER_ASSIGNED_NAT_GATEWAY = "userAssignedNATGateway"
    USER_DEFINED_ROUTING = "userDefinedRouting"


class WeekDay(StrEnum):
    MONDAY = "Monday"
    TUESDAY = "Tuesday"
    WEDNESDAY = "Wednesday"
    THURSDAY = "Thursday"
    FRIDAY = "Friday"
    SATURDAY = "Saturday"
    SUNDAY = "Sunday"


# Azure names the zones of a zone-enabled region "1", "2" and "3" (Azure availability zones overview:
# three zones per such region; logical names per subscription).
AzureZone = Literal["1", "2", "3"]


class MaintenanceWindowConfig(_Model):
    """When AKS may upgrade the cluster and node images: weekly, outside training runs."""

    day_of_week: WeekDay = WeekDay.SATURDAY
    start_time: Annotated[
        str, _matching(r"^([01][0-9]|2[0-3]):[0-5][0-9]$", "a time of day as HH:MM, 00:00 to 23:59, quoted")
    ] = "00:00"
    # 4 to 24 hours (containerservice MaintenanceWindow.durationHours).
    duration_hours: int = Field(default=8, ge=4, le=24)
    # UAE time (Gulf Standard Time, no daylight saving).
    utc_offset: Annotated[
        str,
        _matching(r"^[+-](0[0-9]|1[0-4]):[0-5][0-9]$", "a UTC offset as +HH:MM or -HH:MM, hours 00 to 14"),
    ] = "+04:00"


class AzureConfig(_Model):
    """Azure-only settings: how the deployer signs in, how long grants take, how nodes reach out."""

    # The deployer's sign-in for the Kubernetes provider's kubeconfig (kubelogin is required).
    deployer_login: KubeloginMode = KubeloginMode.AZURECLI
    # The deployer's principal type for its role assignments; by default a user for azurecli, a
    # service principal for the non-interactive logins.
    deployer_principal_type: PrincipalType | None = None
    # How long to wait after role assignments before their principal uses them (bounded).
    rbac_propagation_seconds: int = Field(default=120, ge=0, le=1800)
    outbound_type: OutboundType | None = None
    # userDefinedRouting: the private IP of the firewall (network virtual appliance) egress goes to.
    egress_firewall_ip: str | None = None
    maintenance: MaintenanceWindowConfig = MaintenanceWindowConfig()
    # Pools spread over availability zones, by pool name: {inference: ["1", "2", "3"]}. Opt-in per pool,
    # because which sizes a region offers in which zones is known only to the subscription's Resource
    # SKUs (`az vm list-skus`), which the program reads at preview (components/azure/zones.py).
    pool_zones: dict[DnsLabel, list[AzureZone]] = Field(default_factory=dict)
    # A private stack's `pulumi up` runs inside its VNet (or a peered one resolving the stack's Private Link
    # zones): with the in-cluster layer it reaches the private API server and pushes the images it builds
    # through the registry's private endpoint, the only way in with public network access disabled.
    vnet_runner: bool = False
    # Every pool's AKS osSku; the NVIDIA drivers' image tags follow its Ubuntu (components/driver_images.py).
    os_sku: AksOsSku = AksOsSku.UBUNTU

    @field_validator("egress_firewall_ip")
    @classmethod
    def _firewall_ip(cls, value: str | None) -> str | None:
        if value is not None and not ipaddress.ip_address(value).is_private:
            raise ValueError(f"{value} is not a private IP address")
        return value

    @property
    def principal_type(self) -> PrincipalType:
        if self.deployer_principal_type is not None:
            return self.deployer_principal_type
        return (
            PrincipalType.USER
            if self.deployer_login is KubeloginMode.AZURECLI
            else PrincipalType.SERVICE_PRINCIPAL
        )


class TrainingWorkloadConfig(_Model):
    enabled: bool = True
    # Unset: built by the stack, one Dockerfile target per pool fabric.
    image: ImageRef | None = None
    # The training Dockerfile target a named ``image`` is built on; fabric pools need their fabric's.
    image_target: ImageTarget | None = None
    run_id: DnsLabel
    pool: DnsLabel
    nodes: int = Field(default=1, ge=1, le=512)
    nproc_per_node: int | None = Field(default=None, ge=1, le=64)
    epochs: int = Field(default=30, ge=1, le=10_000)
    max_restarts: int = Field(default=3, ge=0, le=100)
    model_name: DnsLabel = "digits-mlp"
    # The run's Kueue priority where the cluster queues Jobs.
    priority: Priority = Priority.PRODUCTION
    # A team's own code, packaged into `image` (docs/training.md "Your own model and dataset on the
    # cluster"): module:function hooks and the recipe.
    # Unset: the trainer's defaults (the digits dataset and MLP it ships).
    dataset: Annotated[str, _matching(HOOK_PATTERN.pattern, HOOK_RULE)] | None = None
    model: Annotated[str, _matching(HOOK_PATTERN.pattern, HOOK_RULE)] | None = None
    batch_size: int | None = Field(default=None, ge=1, le=65_536)
    lr: float | None = Field(default=None, gt=0, le=10)
    # Epochs without a better validation loss before the run stops; unset or 0: train every epoch.
    patience: int | None = Field(default=None, ge=0, le=10_000)
    # Per-pod requests; unset: derived from the pool's instance type (workloads/training/sizing.py).
    cpu: int | None = Field(default=None, ge=1)
    memory_gib: int | None = Field(default=None, ge=2)
    shm_gib: int | None = Field(default=None, ge=1)
    # Object storage the dataset hook reads (e.g. the region's S3 ranges or a private endpoint's address).
    dataset_egress_cidrs: tuple[str, ...] = ()

    @field_validator("dataset_egress_cidrs")
    @classmethod
    def _egress(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        list(_networks(value))  # raises naming the bad entry
        return value

    def trainer_args(self) -> tuple[str, ...]:
        """The recipe flags this config sets, in the trainer's own flag syntax."""
        flags: dict[str, object] = {"--dataset": self.dataset, "--model": self.model}
        flags |= {"--batch-size": self.batch_size, "--lr": self.lr, "--patience": self.patience}
        return tuple(f"{flag}={value}" for flag, value in flags.items() if value is not None)


class InferenceWorkloadConfig(_Model):
    enabled: bool = True
    # Unset: built by the stack from workloads/inference/Dockerfile.
    image: ImageRef | None = None
    pool: DnsLabel
    model_name: DnsLabel = "digits-mlp"
    # A version directory on the models volume, pinned. Unset with the registry on: the service follows
    # the registered model's ``@champion`` (docs/registry.md), no ``pulumi up`` to change or roll back.
    model_version: str | None = None
    # Serving from the registry: the emptyDir each pod downloads versions into (two versions per server
    # process while one swaps in), and how often the alias is checked.
    model_cache: str = "1Gi"
    poll_interval_seconds: int = Field(default=30, ge=1, le=3600)
    min_replicas: int = Field(default=2, ge=1, le=100)
    max_replicas: int = Field(default=6, ge=1, le=1000)
    cpu: str = "1"
    memory: str = "1Gi"
    auth: bool | None = None
    tls: bool | None = None
    drift_threshold: float = Field(default=0.2, gt=0, le=10)
    # The plan `mlplatform rollout` and the rollout Job follow (docs/delivery.md); registry only.
    rollout: RolloutPlan | None = None
    # The drift monitor (docs/lifecycle.md): a CronJob reading every server's drift window on
    # ``schedule``, recording each decision, rolling back on labelled accuracy; registry only. Unset: none
    # (a retrain costs accelerators and a review: a stack opts in and names its dataset source).
    drift_monitor: MonitorPolicy | None = None


class EntraGroup(_Model):
    """A Microsoft Entra group, by its object id and its display name (a PostgreSQL Entra administrator
    is created under both: AdministratorsMicrosoftEntra ``objectId`` and ``principalName``)."""

    object_id: Annotated[
        str,
        _matching(
            r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
            "an Entra object id: a lowercase GUID (8-4-4-4-12 hex digits)",
        ),
    ]
    # PostgreSQL role names are at most 63 bytes (PostgreSQL docs, "Identifiers": NAMEDATALEN - 1).
    name: str = Field(min_length=1, max_length=63)


class RdsLog(StrEnum):
    """The logs the registry's RDS for PostgreSQL exports to CloudWatch Logs (RDS user guide, "Publishing
    PostgreSQL logs to Amazon CloudWatch Logs": ``postgresql`` and ``upgrade``)."""

    POSTGRESQL = "postgresql"
    UPGRADE = "upgrade"


class AdoptedDatabaseConfig(_Model):
    """An RDS instance the stack made with an autonamed identifier (``<stack>-aws-registry-db-`` and 7
    characters), before it made the instance's log groups: the stack keeps the identifier, imports the
    groups that exist (``aws logs describe-log-groups --log-group-name-prefix
    /aws/rds/instance/<identifier>/`` lists them; a log RDS has not published yet may have none) and
    creates the others. The program finds a single such instance itself (components/aws/
    registry_database.py ``registry_database_identity``); this names it where the account has several."""

    identifier: RdsIdentifier
    import_log_groups: tuple[RdsLog, ...] = tuple(RdsLog)


class SecretMaker(StrEnum):
    """Who makes a Secret the stack's workloads need: the stack, or the operator by a documented step."""

    STACK = "stack"
    OPERATOR = "operator"


class RegistryWorkloadConfig(_Model):
    """The model registry (MLflow tracking server + model registry, components/kubernetes/registry.py)."""

    enabled: bool = False
    # Unset: built by the stack from workloads/registry/server/Dockerfile.
    image: ImageRef | None = None
    # Basic auth (MLflow's basic-auth app) on every request; required on enterprise.
    auth: bool = True
    # Server replicas; SQLite on the shared file system (no managed database) allows exactly one.
    replicas: int = Field(default=2, ge=1, le=10)
    cpu: str = "1"
    memory: str = "2Gi"
    # How far below the champion's test metric a challenger may fall and still be promoted
    # (`mlplatform models promote --stack`; docs/registry.md). A share of the metric (accuracy: 0 to 1).
    promote_tolerance: float = Field(default=0.01, ge=0, le=1)
    # Promotion as a change (docs/lifecycle.md): `mlplatform models promote --stack` needs an approval,
    # recorded, by one of `approvers` other than who trained or requested the version. Unset: required on
    # enterprise (a bank's change control), off elsewhere; enterprise refuses false.
    promotion_approval: bool | None = None
    # The approver role: registry user names that may approve, reject and promote with --force.
    approvers: list[str] = Field(default_factory=list)
    # With basic-auth the stack generates each caller's password; a new value generates new ones and
    # rolls the servers, whose launcher sets them (docs/registry.md, "Access").
    credentials_rotation: int = Field(default=1, ge=1)
    # HTTPS, TLS 1.3 only, with the certificate of Secret registry-tls; callers verify it against the CA
    # of Secret registry-ca in their namespace (docs/security.md). The enterprise presets turn it on.
    tls: bool = False
    # The lifetimes of the stack's registry CA and of the servers' certificate it signs, each re-issued
    # by a `pulumi up` near its end (components/kubernetes/certificates.py; docs/registry.md, "TLS").
    # At most a year for the certificate: a short life bounds how long a leaked key serves an impostor.
    tls_ca_validity_days: int = Field(default=1825, ge=1, le=3650)
    tls_certificate_validity_days: int = Field(default=90, ge=1, le=365)
    # Azure's managed database accepts Entra logins only, and its one administrator is the registry's
    # workload identity: this group's members are a second administrator, the humans' break-glass login
    # (a failed migration, a restore check, a read-only grant; docs/registry.md).
    database_admins: EntraGroup | None = None
    # AWS: a registry database made before the stack named it (docs/operations.md, "Adopt the RDS log
    # groups"). Unset: the one the stack autonamed, found in the account, or else ``<stack>-aws-registry``,
    # whose log groups the stack makes first.
    adopt_database: AdoptedDatabaseConfig | None = None
    # With basic-auth: who makes the ``ml-registry`` Secret ``registry-admin``. ``stack`` (the default):
    # ``pulumi up`` makes it with generated values. ``operator``: a stack whose operator made it by hand
    # before the stack made it (an earlier release's documented step) keeps it: the stack mounts it and
    # never creates, changes or deletes it (docs/registry.md, Access; review of issue 38, B3).
    admin_secret: SecretMaker = SecretMaker.STACK


class FabricTestConfig(_Model):
    """The fabric test (all-reduce busbw, workloads/fabric_test.py) as an acceptance gate: one Job per
    fabric pool, in the training namespace and image, that ``pulumi up`` waits for before the training
    run (docs/training.md)."""

    enabled: bool = False
    # A new run id is a new Job: the way to run the test again on an existing stack.
    run_id: DnsLabel = "run-1"
    # busbw floor as a share of the pool's sourced line rate (workloads/fabric_gate.py).
    floor_fraction: float = Field(default=BUSBW_FLOOR_FRACTION, ge=0, le=1)
    # How long `pulumi up` waits for each test, node scale-up and image pull included.
    timeout_minutes: int = Field(default=60, ge=5, le=24 * 60)


class WorkloadsConfig(_Model):
    training: TrainingWorkloadConfig | None = None
    inference: InferenceWorkloadConfig | None = None
    fabric_test: FabricTestConfig = FabricTestConfig()
    registry: RegistryWorkloadConfig = RegistryWorkloadConfig()


class Currency(StrEnum):
    # The price snapshot's currency (mlplatform/prices): a ceiling in another currency could not be judged.
    USD = "USD"


class MonthlyCeiling(_Model):
    currency: Currency
    amount: float = Field(gt=0, le=100_000_000)


class BudgetConfig(_Model):
    """A monthly spending ceiling: the policy pack fails a preview whose priced ceiling exceeds it, and the
    cloud's own budget alerts on actual spend against the same figure (docs/cost.md)."""

    monthly_ceiling: MonthlyCeiling
    # A pool the snapshot has no price for (no row in the stack's region, or spot with no spot price)
    # fails the budget ("cannot judge") unless the stack accepts that the judgement leaves it out: then
    # the pack advises, naming each such pool.
    allow_unpriced: bool = False

    def tags(self) -> dict[str, str]:
        """The tag that carries ``allowUnpriced`` to the policy pack (on the AWS Budget; on the Azure
        resource group the consumption budget is scoped to, as that resource has no tags)."""
        return {ALLOW_UNPRICED_TAG: "true"} if self.allow_unpriced else {}


# Azure tag names refuse '/', so one spelling serves both clouds.
ALLOW_UNPRICED_TAG = "ml-platform.io-budget-allow-unpriced"


# Expected share of each pool's headroom in use, by tier and pool kind (docs/cost.md, "Duty cycles"):
# SMB GPU pools scale to zero between jobs, SMB CPU pools follow office-hours traffic; enterprise GPU
# pools are kept busy by the Kueue queue, enterprise CPU pools serve around the clock.
# The tag each pool's node group (AWS) or agent pool (Azure, whose tag names refuse '/') carries its duty
# cycle in, where the cost estimator and the budget policy read it from the plan.
DUTY_CYCLE_TAG = "ml-platform.io/duty-cycle"
AZURE_DUTY_CYCLE_TAG = "ml-platform.io-duty-cycle"
DEFAULT_DUTY_CYCLE: dict[tuple[Tier, PoolKind], float] = {
    (Tier.SMB, PoolKind.CPU): 0.25,
    (Tier.SMB, PoolKind.GPU): 0.10,
    (Tier.ENTERPRISE, PoolKind.CPU): 0.35,
    (Tier.ENTERPRISE, PoolKind.GPU): 0.50,
}


class PlatformConfig(_Model):
    """The whole stack: what one ``pulumi up`` builds."""

    # The Pulumi stack's name (``pulumi.get_stack()``), from the stack file's name, never from its
    # content: every physical name derives from it (STACK_NAME).
    stack_name: str
    cloud: Cloud
    tier: Tier
    environment: Environment
    region: str
    residency: Residency = Residency.UAE
    owner: Annotated[str, Field(min_length=3, max_length=128)]
    cost_center: Annotated[
        str,
        _matching(
            r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
            "letters, digits, '_', '.' and '-', starting with a letter or digit, 64 characters at most",
        ),
    ]
    data_classification: DataClassification = DataClassification.CONFIDENTIAL
    # Protect data-bearing resources (keys, buckets, file systems) from deletion; on in production.
    protect_data: bool | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    network: NetworkConfig = NetworkConfig()
    cluster: ClusterConfig = ClusterConfig()
    node_pools: Annotated[tuple[NodePoolConfig, ...], Field(min_length=1)]
    storage: StorageConfig = StorageConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    workloads: WorkloadsConfig = WorkloadsConfig()
    azure: AzureConfig = AzureConfig()
    budget: BudgetConfig | None = None
    audit: AuditConfig = AuditConfig()
    access: AccessConfig = AccessConfig()

    @property
    def is_protected(self) -> bool:
        return self.protect_data if self.protect_data is not None else self.environment == "prod"

    @property
    def audited(self) -> bool:
        """Whether the stack keeps a control-plane audit trail and threat detection (AuditConfig)."""
        if self.audit.enabled is not None:
            return self.audit.enabled
        return self.tier is Tier.ENTERPRISE or self.environment == "prod"

    @property
    def audit_extras(self) -> bool:
        """Whether per-use audit features (data events, runtime monitoring) are on by default."""
        return self.tier is Tier.ENTERPRISE

    @property
    def shared_storage(self) -> SharedStorageKind:
        assert self.storage.shared is not None, "filled by the tier preset"
        return self.storage.shared

    @property
    def monitoring(self) -> bool:
        assert self.kubernetes.monitoring is not None, "filled by the tier preset"
        return self.kubernetes.monitoring

    def instance_type(self, pool: NodePoolConfig) -> InstanceType:
        return catalog(self.cloud)[pool.instance_type]

    def duty_cycle(self, pool: NodePoolConfig) -> float:
        """The pool's stated duty cycle, else its tier's default for its kind."""
        return pool.duty_cycle if pool.duty_cycle is not None else DEFAULT_DUTY_CYCLE[(self.tier, pool.kind)]

    def pool(self, name: str) -> NodePoolConfig:
        return next(p for p in self.node_pools if p.name == name)

    def base_tags(self) -> dict[str, str]:
        """The tags every resource carries; policies and cost reports rely on them."""
        return {
            **self.tags,
            "project": PROJECT,
            "environment": self.environment,
            "tier": self.tier.value,
            "data-classification": self.data_classification.value,
            "owner": self.owner,
            "cost-center": self.cost_center,
        }

    def labels(self) -> dict[str, str]:
        """The base tags Kubernetes accepts as label values, for the platform's objects: 63 characters at
        most, alphanumerics, '-', '_' and '.' (k8s.io/apimachinery ``IsValidLabelValue``, which
        ``ValidateLabels`` applies to every object). A tag that is not one (an owner's e-mail address) stays
        a cloud tag only: the API server would refuse the object that carried it."""
        return {key: value for key, value in self.base_tags().items() if _LABEL_VALUE.fullmatch(value)}


# Clouds whose adapter gives an enterprise registry a managed PostgreSQL
# (components/aws/registry_database.py, components/azure/registry_database.py).
MANAGED_REGISTRY_DATABASE = frozenset({Cloud.AWS, Cloud.AZURE})


def managed_registry_database(tier: Tier, cloud: Cloud) -> bool:
    """Whether the registry's metadata lives in the cloud's managed PostgreSQL (else SQLite on the shared
    file system, one server)."""
    return tier is Tier.ENTERPRISE and cloud in MANAGED_REGISTRY_DATABASE


def shared_stores(config: PlatformConfig) -> dict[str, str]:
    """The stores workloads own alone on the shared file system, namespace -> directory below its root
    (``SharedStorage.stores``): the registry's SQLite store where it has no managed database."""
    if config.workloads.registry.enabled and not managed_registry_database(config.tier, config.cloud):
        return {WORKLOAD_IDENTITIES["registry"].namespace: REGISTRY_DIRECTORY}
    return {}


def tier_preset(
    tier: Tier, cloud: Cloud, *, with_inference: bool, shared_storage: bool = True
) -> dict[str, Any]:
    """Defaults a tier gives before the stack file's own values (in stack-file key spelling).

    SMB is cost-first: public API endpoint behind an allow-list, EFS / Azure Files, no monitoring
    stack. Enterprise: private API endpoint, Lustre on AWS, monitoring, authenticated TLS inference.
    """
    enterprise = tier is Tier.ENTERPRISE
    shared = {
        (Cloud.AWS, True): SharedStorageKind.FSX_LUSTRE,
        (Cloud.AWS, False): SharedStorageKind.EFS,
        (Cloud.AZURE, True): SharedStorageKind.AZURE_FILES_NFS,
        (Cloud.AZURE, False): SharedStorageKind.AZURE_FILES_NFS,
    }[(cloud, enterprise)]
    preset: dict[str, Any] = {
        "cluster": {"endpoint": (EndpointAccess.PRIVATE if enterprise else EndpointAccess.PUBLIC).value},
        "storage": {"shared": shared.value},
        "kubernetes": {"monitoring": enterprise},
    }
    if cloud is Cloud.AZURE:
        # Enterprise nodes leave through the stack's own NAT gateway (static egress IPs for allow-lists)
        # instead of the cluster's public load balancer; userDefinedRouting sends them through a firewall.
        outbound = OutboundType.USER_ASSIGNED_NAT_GATEWAY if enterprise else OutboundType.LOAD_BALANCER
        preset["azure"] = {"outboundType": outbound.value}
    # The registry is on in both tiers: enterprise on the cloud's managed PostgreSQL, SMB on SQLite on the
    # shared file system it already pays for (one replica), so a model change needs no `pulumi up`.
    # A stack without shared storage (storage.shared: none) gets no SQLite registry unless it asks.
    managed = managed_registry_database(tier, cloud)
    registry = {"enabled": managed or shared_storage, "replicas": 2 if managed else 1, "tls": enterprise}
    preset["workloads"] = {"registry": registry}
    if with_inference:
        preset["workloads"]["inference"] = {"auth": enterprise, "tls": enterprise}
    return preset


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; lists and scalars in ``override`` replace the base's."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# The stack-config keys each namespace's reader takes. A provider's default provider reads its namespace
# through the SDK's generated config module: every ``__config__.get*("<key>")`` in
# ``pulumi_aws/config/vars.py``, ``pulumi_azure_native/config/vars.py`` and
# ``pulumi_docker_build/config/vars.py``, read from the installed SDK (not a hand list) so an upgrade moves
# the set. ``kubernetes:`` is read by nobody here (one explicit Provider, components/kubernetes/layer.py),
# and pulumi-random and pulumi-command have no config module. ``pulumi:`` keys belong to the engine.
_PROVIDER_CONFIG_MODULES = {
    "aws": "pulumi_aws",
    "azure-native": "pulumi_azure_native",
    "docker-build": "pulumi_docker_build",
}
ENGINE_NAMESPACE = "pulumi"


@functools.cache
def namespace_keys() -> dict[str, frozenset[str]]:
    """Every config key the program's readers take, by namespace (``aws`` → ``region``, …)."""
    keys = {PROJECT: frozenset({PLATFORM_KEY.split(":")[1]})}
    for namespace, package in _PROVIDER_CONFIG_MODULES.items():
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.origin is not None, f"{package} is a dependency (pyproject.toml)"
        tree = ast.parse((Path(spec.origin).parent / "config" / "vars.py").read_text())
        keys[namespace] = frozenset(
            node.args[0].value
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "__config__"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        )
    return keys


def unknown_key_problems(keys: Iterator[str] | list[str], source: str) -> list[str]:
    """One line per stack-config key no reader of this program takes, with the closest known key."""
    known = namespace_keys()
    everything = [f"{namespace}:{name}" for namespace, names in known.items() for name in sorted(names)]
    problems = []
    for key in keys:
        namespace, _, name = key.partition(":")
        if namespace == ENGINE_NAMESPACE or name in known.get(namespace, ()):
            continue
        same = [k for k in everything if k.startswith(f"{namespace}:")] or everything
        close = difflib.get_close_matches(key, same, n=1, cutoff=0.6)
        if close:
            problems.append(f"{source}: {key}: unknown key; did you mean {close[0]}?")
        elif namespace in known:
            problems.append(f"{source}: {key}: unknown key; no {namespace}: setting has that name")
        else:
            readers = ", ".join(f"{n}:" for n in known)
            problems.append(f"{source}: {key}: unknown key; this program reads only {readers} (and pulumi:)")
    return problems


def _key_path(loc: tuple[str | int, ...]) -> str:
    path = PLATFORM_KEY
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


# Keys the platform no longer takes, by where they sit, and what replaced them: told instead of "unknown".
_RETIRED_KEYS: dict[tuple[str, ...], str] = {
    ("workloads", "inference", "canary"): (
        "removed: the replica-share canary is replaced by the exact split inside every server, driven by "
        "`mlplatform rollout` (docs/delivery.md); remove the key"
    ),
}


def _describe(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        loc = tuple(str(part) for part in error["loc"])
        retired = next((why for where, why in _RETIRED_KEYS.items() if loc[-len(where) :] == where), None)
        return retired or "unknown key"
    if kind == "missing":
        return "required key is missing"
    if (
        kind == "string_type"
        and isinstance(error["input"], int | float)
        and not isinstance(error["input"], bool)
    ):
        # YAML reads an unquoted 1.30 as the number 1.3: the text the user typed is already gone.
        return f"YAML read {error['input']!r} as a number; quote the value (an unquoted 1.30 is read as 1.3)"
    if kind == "string_pattern_mismatch":
        rule = _PATTERN_RULES.get(error["ctx"]["pattern"], "in the documented form")
        return f"{error['input']!r} must be {rule}"
    message: str = error["msg"]
    return message.removeprefix("Value error, ")


def parse_stack_config(raw: Mapping[str, Any], source: str) -> PlatformConfig:
    """Validate one stack's config map (full keys, e.g. ``aws:region``) into a ``PlatformConfig``.

    ``source`` is the stack file's name, ``Pulumi.<stack>.yaml`` as Pulumi names it: it names the file in
    error lines, and the stack in it names every physical resource (a bare ``source`` is the stack's name).
    Raises ``ConfigError`` with every problem found.
    """
    unknown = unknown_key_problems(list(raw), source)
    if unknown:
        # A misspelt key explains what looks missing after it: name it alone.
        raise ConfigError(unknown)
    body = raw.get(PLATFORM_KEY)
    if not isinstance(body, Mapping):
        raise ConfigError([f"{source}: {PLATFORM_KEY}: required key is missing or not a mapping"])
    for derived, origin in (
        ("region", "the region is the provider's: aws:region or azure-native:location"),
        ("stackName", "the stack's name is the Pulumi stack's: Pulumi.<stack>.yaml"),
    ):
        if derived in body:
            raise ConfigError([f"{source}: {PLATFORM_KEY}.{derived}: unknown key ({origin})"])
    stack = source.removeprefix("Pulumi.").removesuffix(".yaml")
    named = [] if STACK_NAME.fullmatch(stack) else [f"{source}: {stack_name_problem(stack)}"]
    document = {**body, "stackName": stack}
    cloud = body.get("cloud")
    if cloud in set(Cloud):
        region_key = REGION_KEYS[Cloud(cloud)]
        region = raw.get(region_key)
        if not isinstance(region, str):
            raise ConfigError([f"{source}: {region_key}: required for a {cloud} stack"])
        document["region"] = region
        if body.get("tier") in set(Tier):
            workloads = body.get("workloads")
            with_inference = isinstance(workloads, Mapping) and isinstance(
                workloads.get("inference"), Mapping
            )
            storage = body.get("storage")
            shared = not (isinstance(storage, Mapping) and storage.get("shared") == SharedStorageKind.NONE)
            preset = tier_preset(
                Tier(body["tier"]), Cloud(cloud), with_inference=with_inference, shared_storage=shared
            )
            document = _merge(preset, document)
    else:
        # The region key and the preset depend on the cloud: report it alone, not what follows from it.
        given = "required key is missing" if cloud is None else f"{cloud!r} is not a cloud"
        raise ConfigError([f"{source}: {PLATFORM_KEY}.cloud: {given}; one of: {', '.join(Cloud)}"])
    try:
        # JSON mode: strict types as they arrive from YAML/Pulumi config, enums from their strings.
        config = PlatformConfig.model_validate_json(json.dumps(document))
    except ValidationError as exc:
        raise ConfigError(
            named + [f"{source}: {_key_path(tuple(e['loc']))}: {_describe(e)}" for e in exc.errors()]
        ) from None
    problems = named + [f"{source}: {key}: {message}" for key, message in _rule_problems(config)]
    if problems:
        raise ConfigError(problems)
    return config


def load_stack_config() -> PlatformConfig:
    """Read and validate this stack's config inside a running Pulumi program (preview, up or mocks)."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    # Every key the stack has (values unread), so a misspelt one can be named.
    raw: dict[str, Any] = dict.fromkeys({**runtime_config.get_config_env(), **runtime_config.CONFIG.get()})
    raw[PLATFORM_KEY] = pulumi.Config(PROJECT).get_object("platform")
    for key in REGION_KEYS.values():
        namespace, name = key.split(":")
        raw[key] = pulumi.Config(namespace).get(name)
    return parse_stack_config(raw, f"Pulumi.{pulumi.get_stack()}.yaml")


def _rule_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    """Cross-field rules, as (key, message)."""
    allowed = RESIDENCY_REGIONS[config.residency][config.cloud]
    if config.region not in allowed:
        yield (
            REGION_KEYS[config.cloud],
            f"{config.region!r} is outside the {config.residency.value} residency; allowed: "
            + ", ".join(allowed),
        )
    yield from _cluster_problems(config)
    yield from _network_problems(config)
    if config.kubernetes.enabled and config.monitoring and config.kubernetes.alerting is None:
        yield (
            f"{PLATFORM_KEY}.kubernetes.alerting",
            "monitoring is on but its alerts reach nobody; set {receiver: webhook|slack, secret: NAME}"
            " (a Secret in monitoring with key url), or monitoring: false",
        )
    yield from _pool_problems(config)
    yield from _storage_problems(config)
    yield from _workload_problems(config)
    if config.kubernetes.image_lock is not None:
        try:
            load_lock(config.kubernetes.image_lock)
        except LockError as error:
            yield f"{PLATFORM_KEY}.kubernetes.imageLock", str(error)
    yield from _azure_problems(config)
    yield from _pod_encryption_problems(config)
    yield from _audit_problems(config)
    yield from _access_problems(config)


def _access_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    """Each named identity is the cloud's kind, each team a team of the stack; ``cluster.admins`` moved."""
    key, access = f"{PLATFORM_KEY}.access", config.access
    if config.cluster.admins:
        yield (
            f"{PLATFORM_KEY}.cluster.admins",
            "moved to access.platformAdmins (the people's roles, docs/security.md): move the list there",
        )
    aws = config.cloud is Cloud.AWS
    pattern, rule = (IAM_ROLE_ARN, IAM_ROLE_RULE) if aws else (ENTRA_OBJECT_ID, ENTRA_OBJECT_ID_RULE)
    for where, principal in access.principals():
        if not pattern.match(principal):
            yield f"{key}.{where}", f"{principal!r} is not {rule}"
        elif aws and IDENTITY_CENTER_ROLE.search(principal):
            yield f"{key}.{where}", f"{principal!r} has no path: {IDENTITY_CENTER_RULE}"
    teams = {team.name for team in config.kubernetes.teams}
    for team in access.ml_engineers:
        if team not in teams:
            yield (
                f"{key}.mlEngineers.{team}",
                f"no team is named {team} (kubernetes.teams: {', '.join(sorted(teams)) or 'none'})",
            )


def _audit_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    audit, key = config.audit, f"{PLATFORM_KEY}.audit"
    if audit.organization_trail is None:
        return
    if config.cloud is not Cloud.AWS:
        yield f"{key}.organizationTrail", f"an AWS setting (CloudTrail); this stack's cloud is {config.cloud}"
    elif not config.audited:
        yield f"{key}.organizationTrail", "only meaningful with the audit trail on (audit.enabled)"


def _network_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    endpoint = config.network.s3_endpoint_policy
    key = f"{PLATFORM_KEY}.network.s3EndpointPolicy"
    if config.cloud is not Cloud.AWS and endpoint != S3EndpointPolicyConfig():
        yield key, f"an AWS setting (the VPC's S3 gateway endpoint); this stack's cloud is {config.cloud}"
    elif endpoint.extra_buckets and not endpoint.enabled:
        yield f"{key}.extraBuckets", "only meaningful with enabled: true"


def _cluster_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    cluster = config.cluster
    key = f"{PLATFORM_KEY}.cluster"
    if config.tier is Tier.ENTERPRISE and cluster.endpoint is EndpointAccess.PUBLIC:
        yield f"{key}.endpoint", "enterprise clusters are private; use endpoint: private"
    if cluster.endpoint is EndpointAccess.PUBLIC and not cluster.public_access_cidrs:
        yield f"{key}.publicAccessCidrs", "a public endpoint needs an allow-list of CIDRs"
    if cluster.endpoint is EndpointAccess.PRIVATE and cluster.public_access_cidrs:
        yield f"{key}.publicAccessCidrs", "only meaningful with endpoint: public"
    for cidr in cluster.public_access_cidrs:
        what = not_public(cidr)
        if what is not None:
            # A public allow-list admits public addresses only: the EKS public endpoint and the AKS
            # authorized IP ranges see a caller's public (NAT) address; on Azure the list also feeds the
            # storage account's firewall, whose IP network rules refuse RFC 1918 ranges outright
            # (learn.microsoft.com/azure/storage/common/storage-network-security, IP network rules).
            yield (
                f"{key}.publicAccessCidrs",
                f"{cidr} {what}; a public endpoint sees callers' public addresses: list your NAT's or "
                "office's public range",
            )
    yield from _version_problems(config)
    if config.cloud is Cloud.AWS:
        yield from _aws_tag_problems(config)
    if config.cloud is not Cloud.AWS:
        if cluster.private_access_cidrs or cluster.private_access_security_groups:
            yield f"{key}.privateAccessCidrs", "an AWS setting (the EKS cluster security group)"
    elif (
        cluster.endpoint is EndpointAccess.PRIVATE
        and config.kubernetes.enabled
        and not (cluster.private_access_cidrs or cluster.private_access_security_groups)
    ):
        # The cluster security group admits only itself (EKS user guide, "Cluster API server
        # endpoint"): the Kubernetes layer could not reach the API from anywhere.
        yield (
            f"{key}.privateAccessCidrs",
            "a private endpoint with kubernetes.enabled needs privateAccessCidrs or "
            "privateAccessSecurityGroups for the runner of phase two "
            '(docs/stacks.md, "From a fresh clone to a deployed stack, in detail"), '
            "or kubernetes: {enabled: false} for phase one",
        )


def _aws_tag_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    """The stack's tags, and the given values that become tags (base_tags), as AWS takes tags."""
    for name, value in config.tags.items():
        for problem in (aws_tag_problem(name, key=True), aws_tag_problem(value, key=False)):
            if problem is not None:
                yield f"{PLATFORM_KEY}.tags.{name}", problem
    owner = aws_tag_problem(config.owner, key=False)
    if owner is not None:
        yield f"{PLATFORM_KEY}.owner", f"{owner} (it tags every resource)"


def version_pins(cloud: Cloud) -> dict[str, frozenset[str]]:
    """Where a Kubernetes version must be pinned for a ``cloud`` stack, and the minors pinned there."""
    pins = {
        f"the {chart} chart (components/kubernetes/charts.py)": minors
        for chart, minors in per_minor_pins().items()
    }
    if cloud is Cloud.AWS:
        pins["the EKS add-ons (components/catalog/aws.py)"] = frozenset(EKS_ADDON_VERSIONS)
    return pins


def _version_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    """A version some pin lacks would fail mid-program (a chart lookup, an add-on version); refuse it
    here, with the versions every pin has."""
    version = config.cluster.kubernetes_version
    pins = version_pins(config.cloud)
    missing = [where for where, minors in pins.items() if version not in minors]
    if missing:
        everywhere = sorted(frozenset.intersection(*pins.values()))
        yield (
            f"{PLATFORM_KEY}.cluster.kubernetesVersion",
            f"{version} is not pinned in {', '.join(missing)}; pinned everywhere: {', '.join(everywhere)}",
        )


def _pool_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    known = catalog(config.cloud)
    seen: set[str] = set()
    for index, pool in enumerate(config.node_pools):
        key = f"{PLATFORM_KEY}.nodePools[{index}]"
        if pool.name in seen:
            yield f"{key}.name", f"duplicate pool name {pool.name!r}"
        seen.add(pool.name)
        if pool.max_size < pool.min_size:
            yield f"{key}.maxSize", f"must be ≥ minSize ({pool.min_size})"
        if pool.desired_size is not None and not pool.min_size <= pool.desired_size <= pool.max_size:
            yield (
                f"{key}.desiredSize",
                f"must be between minSize and maxSize ({pool.min_size}..{pool.max_size})",
            )
        itype = known.get(pool.instance_type)
        if itype is None:
            yield (
                f"{key}.instanceType",
                f"unknown {config.cloud} {pool.kind} type {pool.instance_type!r}; known: "
                + ", ".join(n for n, t in known.items() if t.kind is pool.kind),
            )
            continue
        if itype.kind is not pool.kind:
            yield f"{key}.kind", f"{pool.instance_type} is a {itype.kind} type, not {pool.kind}"
        yield from _region_problems(config, key, pool)
        yield from _fabric_problems(config, key, pool, itype)


def _region_problems(config: PlatformConfig, key: str, pool: NodePoolConfig) -> Iterator[tuple[str, str]]:
    """A type the region does not sell fails an hour into ``pulumi up``; say so now, with the ones it
    sells (components/catalog/aws.py: AWS pricing data as packaged in cfn-lint)."""
    if config.cloud is not Cloud.AWS:
        if pool.capacity_reservation is not None:
            yield f"{key}.capacityReservation", "an AWS setting (EC2 capacity reservations)"
        return
    yield from _reservation_problems(key, pool)
    sold = SOLD_IN_REGION.get(config.region)
    if sold is not None and pool.instance_type not in sold:
        same_kind = sorted(n for n in sold if catalog(config.cloud)[n].kind is pool.kind)
        yield (
            f"{key}.instanceType",
            f"{pool.instance_type} is not sold in {config.region}; {pool.kind} types sold there: "
            + ", ".join(same_kind),
        )


def _reservation_problems(key: str, pool: NodePoolConfig) -> Iterator[tuple[str, str]]:
    """A reservation is used only by launches that match it: a placement group it was not made in
    gets InsufficientInstanceCapacity (terraform-aws-eks PR #3730; eksctl #7949 / PR #8220), and it
    is never spot capacity."""
    if pool.capacity_reservation is None:
        return
    placement = pool.placement_group
    if "enabled" in placement.model_fields_set and placement.enabled and placement.existing is None:
        yield (
            f"{key}.placementGroup",
            "a new placement group cannot hold a capacity reservation made outside it: name the "
            "reservation's group with placementGroup.existing, or drop placementGroup",
        )
    if pool.spot:
        yield f"{key}.spot", "a pool with a capacityReservation launches reserved capacity, not spot"
    # An instance launches into a reservation only with its attributes, "instance type, platform,
    # Availability Zone, and tenancy", and while it "is in the active state" (EC2 user guide, "Launch
    # instances into an existing Capacity Reservation"); a reservation lives in one zone (aws.md N1).
    if pool.availability_zone is None:
        yield (
            f"{key}.availabilityZone",
            "a capacity reservation lives in one Availability Zone: set availabilityZone to the index of "
            "the reservation's zone (aws ec2 describe-capacity-reservations --capacity-reservation-ids "
            f"{pool.capacity_reservation.id} --query 'CapacityReservations[].AvailabilityZone')",
        )
    # "If you create ... prior to the capacity reservation becoming active, then set the desired capacity
    # to 0", and for updates "set the desired size of the node group to 0" (EKS user guide, Capacity Blocks
    # for ML, self-managed and managed node groups): the pool starts empty and is scaled inside the window.
    if pool.capacity_reservation.kind is CapacityReservationKind.CAPACITY_BLOCK and (
        pool.min_size or pool.desired_size
    ):
        yield (
            f"{key}.minSize",
            "a Capacity Block pool starts at 0 nodes (minSize 0, no desiredSize): its instances launch only "
            "while the block is active; scale it inside the window (docs/operations.md, Capacity Blocks)",
        )


def _fabric_problems(
    config: PlatformConfig, key: str, pool: NodePoolConfig, itype: InstanceType
) -> Iterator[tuple[str, str]]:
    if pool.fabric is Fabric.NONE:
        if pool.availability_zone is None or config.cloud is not Cloud.AWS:
            return
        if pool.capacity_reservation is None:
            yield f"{key}.availabilityZone", "only fabric pools and reserved pools are pinned to one zone"
        elif pool.availability_zone >= config.network.availability_zones:
            yield (
                f"{key}.availabilityZone",
                f"must be below network.availabilityZones ({config.network.availability_zones})",
            )
        return
    if pool.fabric is not itype.fabric:
        sold = SOLD_IN_REGION.get(config.region) if config.cloud is Cloud.AWS else None
        supported = [
            n
            for n, t in catalog(config.cloud).items()
            if t.fabric is pool.fabric and (sold is None or n in sold)
        ]
        where = ", ".join(supported) if supported else f"no {config.cloud} instance type"
        yield f"{key}.fabric", f"{pool.instance_type} has no {pool.fabric} fabric; supported: {where}"
        return
    if pool.max_size < 2:
        yield f"{key}.maxSize", "a fabric pool needs room for at least 2 nodes (maxSize ≥ 2)"
    if pool.spot:
        yield f"{key}.spot", "fabric pools cannot be spot: a reclaimed node breaks the whole job"
    if pool.availability_zone is not None and pool.availability_zone >= config.network.availability_zones:
        yield (
            f"{key}.availabilityZone",
            f"must be below network.availabilityZones ({config.network.availability_zones})",
        )


def _storage_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    shared = config.shared_storage
    by_cloud = {
        Cloud.AWS: {SharedStorageKind.EFS, SharedStorageKind.FSX_LUSTRE, SharedStorageKind.NONE},
        Cloud.AZURE: {SharedStorageKind.AZURE_FILES_NFS, SharedStorageKind.NONE},
    }
    if shared not in by_cloud[config.cloud]:
        yield f"{PLATFORM_KEY}.storage.shared", f"{shared} is not available on {config.cloud}"
    # On Azure the stores of these domains were made under the storage key (``storage-cmk``): only they
    # can be kept there (components/azure/keys.py, DOMAIN_KEYS).
    azure_kept = {KeyDomain.TRAINING_DATA, KeyDomain.REGISTRY_DATABASE, KeyDomain.LOGS, KeyDomain.DATASETS}
    if config.cloud is Cloud.AZURE and (other := set(config.storage.on_stack_key) - azure_kept):
        yield (
            f"{PLATFORM_KEY}.storage.onStackKey",
            f"{', '.join(sorted(d.value for d in other))} never shared the storage key on Azure; list only "
            f"{', '.join(sorted(d.value for d in azure_kept))}",
        )
    # On AWS a stack made before the datasets bucket keeps its datasets in the data bucket without being
    # told (components/aws/keys.py ``made_before_datasets_bucket``): the datasets never move key there.
    if config.cloud is Cloud.AWS and KeyDomain.DATASETS in config.storage.on_stack_key:
        yield (
            f"{PLATFORM_KEY}.storage.onStackKey",
            "datasets get their own bucket and key on AWS only where the stack is new; a stack made before "
            "keeps them in the data bucket without this entry: remove it",
        )
    if shared is SharedStorageKind.FSX_LUSTRE and not lustre_capacity_valid(
        config.storage.shared_capacity_gib
    ):
        yield (
            f"{PLATFORM_KEY}.storage.sharedCapacityGib",
            "FSx for Lustre PERSISTENT_2 SSD capacity is 1200 or a multiple of 2400 GiB",
        )
    if config.storage.redundancy is Redundancy.GEO and config.cloud is Cloud.AWS:
        yield (
            f"{PLATFORM_KEY}.storage.redundancy",
            "geo redundancy copies data to another region; me-central-1 is the only UAE region",
        )


def lustre_capacity_valid(gib: int) -> bool:
    """FSx for Lustre PERSISTENT_2 SSD: 1200 GiB, 2400 GiB, then increments of 2400 GiB (FSx API
    reference, CreateFileSystem ``StorageCapacity``); 3600 passes a "multiple of 1200" check and fails
    at the API."""
    return gib == 1200 or gib % 2400 == 0


def _workload_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    pools = {p.name: p for p in config.node_pools}
    training, inference = config.workloads.training, config.workloads.inference
    key = f"{PLATFORM_KEY}.workloads"
    if training is not None:
        if training.pool not in pools:
            yield f"{key}.training.pool", f"no node pool named {training.pool!r}"
        elif training.nodes > pools[training.pool].max_size:
            yield (
                f"{key}.training.nodes",
                f"pool {training.pool!r} has at most {pools[training.pool].max_size} nodes",
            )
        if training.enabled and config.shared_storage is SharedStorageKind.NONE:
            yield f"{key}.training", "training needs shared storage for checkpoints (storage.shared)"
    if config.workloads.fabric_test.enabled:
        if training is None or not training.enabled:
            yield f"{key}.fabricTest", "the fabric test runs in the training image: enable workloads.training"
        if all(p.fabric is Fabric.NONE for p in config.node_pools):
            yield f"{key}.fabricTest", "no node pool has a fabric (efa or infiniband) to test"
        run_id = config.workloads.fabric_test.run_id
        for tested in config.node_pools:
            job = f"{FABRIC_TEST}-{fabric_test_run_id(tested.name, run_id)}"
            if tested.fabric is not Fabric.NONE and len(job) > MAX_JOB_NAME:
                yield f"{key}.fabricTest.runId", f"Job name {job!r} is longer than {MAX_JOB_NAME} characters"
    yield from _image_problems(config)
    yield from _registry_problems(config)
    if inference is not None:
        pool = pools.get(inference.pool)
        if pool is None:
            yield f"{key}.inference.pool", f"no node pool named {inference.pool!r}"
        elif pool.kind is not PoolKind.CPU:
            yield (
                f"{key}.inference.pool",
                f"{inference.pool!r} is a {pool.kind} pool; the service runs on CPU",
            )
        yield from _model_source_problems(config, inference, f"{key}.inference")
        if inference.max_replicas < inference.min_replicas:
            yield f"{key}.inference.maxReplicas", f"must be ≥ minReplicas ({inference.min_replicas})"
        if not re.fullmatch(r"[0-9]+(m)?", inference.cpu):
            yield f"{key}.inference.cpu", "a Kubernetes CPU quantity such as 1 or 500m"
        if not re.fullmatch(r"[0-9]+(Mi|Gi)", inference.memory):
            yield f"{key}.inference.memory", "a Kubernetes memory quantity such as 512Mi or 2Gi"
        if not re.fullmatch(r"[0-9]+(Mi|Gi)", inference.model_cache):
            yield f"{key}.inference.modelCache", "a Kubernetes quantity such as 512Mi or 2Gi"


# Where the rollout Job finds a labelled set: a file the registry serves (workloads/delivery/plan.py).
REGISTRY_ARTIFACTS_SCHEME = "mlflow-artifacts:"


def follows_registry(config: PlatformConfig) -> bool:
    """Whether the inference service serves the registry's ``@champion`` (registry on, no pinned
    ``modelVersion``) rather than a version directory on the models volume."""
    inference = config.workloads.inference
    return config.workloads.registry.enabled and inference is not None and inference.model_version is None


def _model_source_problems(
    config: PlatformConfig, inference: InferenceWorkloadConfig, key: str
) -> Iterator[tuple[str, str]]:
    if follows_registry(config):
        for name, labelled in (
            ("rollout", inference.rollout.labelled_set if inference.rollout is not None else None),
            ("driftMonitor", inference.drift_monitor.labelled_set if inference.drift_monitor else None),
        ):
            if labelled is not None and not labelled.startswith(REGISTRY_ARTIFACTS_SCHEME):
                yield (
                    f"{key}.{name}.labelledSet",
                    f"the {name} Job reads the labelled set from the registry: an "
                    f"{REGISTRY_ARTIFACTS_SCHEME}/... URI, not a path on this machine",
                )
        if inference.drift_monitor is not None and config.shared_storage is SharedStorageKind.NONE:
            yield f"{key}.driftMonitor", "the monitor keeps its record on shared storage (storage.shared)"
        if inference.drift_monitor is not None and not retrains_can_pass(rollout_plan(config)):
            yield (
                f"{key}.rollout.gates.maxAccuracyDrop",
                "the driftMonitor's retrains must be judged beside the champion on labelled rows: set "
                "labelledSet with gates.maxAccuracyDrop (shadow agreement stops every useful retrain, a "
                "minAccuracy floor or no gate passes a worse one; docs/lifecycle.md)",
            )
        return
    if inference.drift_monitor is not None:
        yield (
            f"{key}.driftMonitor",
            "the monitor reads the registry's @champion: it needs workloads.registry.enabled and no "
            "pinned modelVersion",
        )
    if inference.rollout is not None:
        yield (
            f"{key}.rollout",
            "the rollout moves the registry's @champion/@challenger: it needs workloads.registry.enabled "
            "and no pinned modelVersion",
        )
    if inference.model_version is None:
        yield (
            f"{key}.modelVersion",
            "required without the registry (workloads.registry.enabled): the version on the models volume",
        )
    if inference.enabled and config.shared_storage is SharedStorageKind.NONE:
        yield key, "the service reads models from shared storage (storage.shared)"


def approval_required(config: PlatformConfig) -> bool:
    """Whether a promotion needs a second person's recorded approval (``promotionApproval``; unset: the
    tier's, required on enterprise)."""
    approval = config.workloads.registry.promotion_approval
    return config.tier is Tier.ENTERPRISE if approval is None else approval


def retrains_can_pass(plan: RolloutPlan) -> bool:
    """Whether ``plan`` judges a drift monitor's retrain on its merits, beside the champion on labelled
    rows (``RolloutPlan.judges_beside_champion``; reviews rev40b A3, rev40c A3 and C1): shadow agreement
    with the champion drift made stale stops every useful retrain; a ``minAccuracy`` floor, or no gate at
    all, lets a worse one through (where ``promote: true``) or leaves it to ``--force``."""
    return plan.judges_beside_champion


def rollout_plan(config: PlatformConfig) -> RolloutPlan:
    """The plan the stack's rollout follows: ``workloads.inference.rollout``, else the defaults. Its
    ``promote`` unset is false where a promotion needs an approval (``approval_required``): there the
    rollout's gates are a pre-approved path only when the stack declares ``promote: true`` (issue 40: "a
    pre-approved automatic path ... declared in the stack"), never by default."""
    inference = config.workloads.inference
    plan = inference.rollout if inference is not None and inference.rollout is not None else RolloutPlan()
    if "promote" not in plan.model_fields_set and approval_required(config):
        return plan.model_copy(update={"promote": False})
    return plan


def _registry_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    """The registry's tier rules: no anonymous access on enterprise, one replica on SQLite, somewhere to
    keep its metadata."""
    registry, key = config.workloads.registry, f"{PLATFORM_KEY}.workloads.registry"
    if not registry.enabled:
        return
    if config.tier is Tier.ENTERPRISE and not registry.auth:
        yield f"{key}.auth", "an enterprise registry authenticates every caller: remove the key or set true"
    if registry.admin_secret is SecretMaker.OPERATOR and not registry.auth:
        yield f"{key}.adminSecret", "the admin's Secret exists only with basic-auth (auth: true): remove it"
    rds = config.cloud is Cloud.AWS and managed_registry_database(config.tier, config.cloud)
    if registry.adopt_database is not None and not rds:
        yield (
            f"{key}.adoptDatabase",
            "adopts the registry's RDS instance, which only enterprise AWS stacks have: remove the key",
        )
    if rds and registry.adopt_database is None and "--" in config.stack_name:
        yield (
            f"{key}.enabled",
            f"the registry's RDS instance is named {config.stack_name}-{config.cloud}-registry, and RDS "
            "refuses '--' in an identifier: rename the stack",
        )
    if registry.database_admins is not None and not (
        config.cloud is Cloud.AZURE and managed_registry_database(config.tier, config.cloud)
    ):
        yield (
            f"{key}.databaseAdmins",
            "an Entra group administers the registry's Azure PostgreSQL, which only enterprise Azure stacks "
            "have: remove the key",
        )
    if config.tier is Tier.ENTERPRISE and registry.promotion_approval is False:
        yield f"{key}.promotionApproval", "an enterprise promotion is a change a second person approves"
    # The approvers move @champion (components/kubernetes/workloads.py ``promoters``): a workload's own
    # user among them would let training or a team promote what it built (the control review, S1), the
    # drift monitor promote the retrains it launches (review 35 A4), the rollout approve its own gates.
    workloads = {WORKLOAD_IDENTITIES[w].namespace for w in ("training", "inference")}
    workloads |= {ROLLOUT_USER, MONITOR_USER, *(f"team-{team.name}" for team in config.kubernetes.teams)}
    for name in sorted(set(registry.approvers) & workloads):
        yield f"{key}.approvers", f"{name} is a workload's own registry user, not a person who may approve"
    if config.tier is Tier.ENTERPRISE and not registry.tls:
        yield (
            f"{key}.tls",
            "an enterprise registry serves TLS 1.3 only (docs/security.md): remove the key or set true",
        )
    if registry.tls_ca_validity_days <= 2 * registry.tls_certificate_validity_days:
        yield (
            f"{key}.tlsCaValidityDays",
            "the CA is re-issued one certificate lifetime before its end: it must outlive two "
            f"certificates (more than {2 * registry.tls_certificate_validity_days} days)",
        )
    if not managed_registry_database(config.tier, config.cloud):
        if config.shared_storage is SharedStorageKind.NONE:
            yield key, "without a managed database the registry keeps SQLite on the shared file system"
        elif registry.replicas != 1:
            yield f"{key}.replicas", "SQLite on the shared file system allows one server: set 1"
    if registry.image is not None and registry.image.endswith(PLACEHOLDER_DIGEST):
        yield f"{key}.image", "an all-zero placeholder digest is never deployed: name the real digest"
    if not re.fullmatch(r"[0-9]+(m)?", registry.cpu):
        yield f"{key}.cpu", "a Kubernetes CPU quantity such as 1 or 500m"
    if not re.fullmatch(r"[0-9]+(Mi|Gi)", registry.memory):
        yield f"{key}.memory", "a Kubernetes memory quantity such as 512Mi or 2Gi"


def _image_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    """A placeholder digest is never deployed, and a fabric pool runs its fabric's training target
    (without that userspace NCCL falls back to TCP sockets with no error: cluster review A5)."""
    key = f"{PLATFORM_KEY}.workloads"
    training, inference = config.workloads.training, config.workloads.inference
    for name, workload in (("training", training), ("inference", inference)):
        if (
            workload is not None
            and workload.image is not None
            and workload.image.endswith(PLACEHOLDER_DIGEST)
        ):
            yield (
                f"{key}.{name}.image",
                "an all-zero placeholder digest is never deployed: name the image's real digest, or remove "
                "the key and `pulumi up` builds and pushes the image",
            )
    if training is None or (training.image is None and training.image_target is None):
        return
    target = training.image_target or ImageTarget.CPU
    pools = {p.name: p for p in config.node_pools}
    runs_on = [pools[training.pool]] if training.pool in pools else []
    if config.workloads.fabric_test.enabled:
        runs_on += [p for p in config.node_pools if p.fabric is not Fabric.NONE]
    for pool in {p.name: p for p in runs_on}.values():
        needed = IMAGE_TARGETS[pool.fabric]
        if pool.fabric is not Fabric.NONE and target is not needed:
            yield (
                f"{key}.training.imageTarget",
                f"pool {pool.name!r} has fabric {pool.fabric}: it runs the {needed} target, not {target}",
            )


# Why ``wireguard`` is refused (review rev35d A3): AKS documents ACNS WireGuard encryption as a preview,
# "not meant for production use" (learn.microsoft.com/azure/aks/
# container-network-security-wireguard-encryption-concepts, "Important"), and a regulated platform runs
# no preview feature. Beside it, the API fact: the ManagedCluster API version the pinned
# pulumi-azure-native (3.29.0) sends, 2025-09-01, has in ``networkProfile.advancedNetworking.security``
# only ``enabled`` and ``advancedNetworkPolicies``; WireGuard is ``security.transitEncryption.type:
# WireGuard`` in later API versions (Azure .NET SDK ``AdvancedNetworkingSecurityTransitEncryption``:
# "can be enabled only on Cilium-based clusters"), which the same provider reaches only through a local
# SDK generated by the Pulumi CLI (managed_cluster.py: "Other available API versions ... `pulumi package
# add azure-native containerservice [ApiVersion]`"). A provider whose typed SDK adds the property makes
# tests/components/test_pod_encryption.py fail: then revisit both reasons.
AKS_API_VERSION = "2025-09-01"


def _pod_encryption_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    if config.cluster.pod_encryption is PodEncryption.NONE:
        return
    key = f"{PLATFORM_KEY}.cluster.podEncryption"
    if config.cloud is not Cloud.AZURE:
        yield key, "wireguard is AKS Advanced Container Networking Services; this stack's cloud is aws"
        return
    yield (
        key,
        "wireguard is refused: AKS documents ACNS WireGuard encryption as a preview, not meant for "
        "production use (learn.microsoft.com/azure/aks/container-network-security-wireguard-encryption-"
        "concepts), and the pinned pulumi-azure-native's ManagedCluster API "
        f"{AKS_API_VERSION} has no advancedNetworking.security.transitEncryption; set none "
        "(docs/security.md)",
    )


def _azure_problems(config: PlatformConfig) -> Iterator[tuple[str, str]]:
    key = f"{PLATFORM_KEY}.azure"
    if config.cloud is not Cloud.AZURE:
        if "azure" in config.model_fields_set:
            yield key, f"only for azure stacks; this stack's cloud is {config.cloud}"
        return
    version = config.cluster.kubernetes_version
    today = datetime.datetime.now(datetime.UTC).date()
    if not aks_supported(version, (today.year, today.month)):
        offered = [v for v in AKS_END_OF_LIFE if aks_supported(v, (today.year, today.month))]
        yield (
            f"{PLATFORM_KEY}.cluster.kubernetesVersion",
            f"AKS does not support {version} after {today:%Y-%m} (AKS release calendar); supported: "
            + ", ".join(offered),
        )
    for name in config.tags:
        if ARM_TAG_NAME_FORBIDDEN.search(name):
            yield f"{PLATFORM_KEY}.tags.{name}", "Azure tag names cannot contain < > % & \\ ? /"
    if config.azure.outbound_type is OutboundType.MANAGED_NAT_GATEWAY:
        # "Managed NAT gateway is incompatible with custom virtual networks" (learn.microsoft.com/azure/aks/
        # nat-gateway); AKS answers ManagedNATGatewayWithCustomVNetNotAllowed, and every pool here is on
        # the stack's own subnet (network.py).
        yield (
            f"{key}.outboundType",
            "managedNATGateway needs an AKS-managed VNet; this platform brings its own subnet: use "
            "userAssignedNATGateway (the stack's NAT gateway) or userDefinedRouting",
        )
    udr = config.azure.outbound_type is OutboundType.USER_DEFINED_ROUTING
    if udr and config.azure.egress_firewall_ip is None:
        yield f"{key}.egressFirewallIp", "outboundType userDefinedRouting needs the firewall's private IP"
    if not udr and config.azure.egress_firewall_ip is not None:
        yield f"{key}.egressFirewallIp", "only meaningful with outboundType: userDefinedRouting"
    private = config.cluster.endpoint is EndpointAccess.PRIVATE
    if private and config.kubernetes.enabled and not config.azure.vnet_runner:
        # The registry disables public network access on a private stack (registry.py): the images `pulumi
        # up` builds are pushed through its private endpoint (ACR "Connect privately to a registry using
        # Azure Private Link"), as the private API server is reached (AKS private clusters).
        yield (
            f"{key}.vnetRunner",
            "with kubernetes.enabled a private stack's `pulumi up` pushes images and reaches the API server "
            "only from inside its VNet: run it there and set azure.vnetRunner: true, or set "
            "kubernetes.enabled: false for the cloud-only first phase",
        )
    pools = {pool.name: pool for pool in config.node_pools}
    for index, node_pool in enumerate(config.node_pools):
        if node_pool.fabric is Fabric.INFINIBAND and node_pool.min_size == 0:
            # The AKS autoscaler builds a scale-from-zero node from the scale set: extended resources only
            # from tags k8s.io_cluster-autoscaler_node-template_resources_<name> with every "_" read as
            # "/" (kubernetes/autoscaler cloudprovider/azure/azure_template.go), so rdma/shared_ib cannot
            # be declared; with one node up, the autoscaler copies that node instead
            # (processors/nodeinfosprovider/mixed_nodeinfos_processor.go).
            yield (
                f"{PLATFORM_KEY}.nodePools[{index}].minSize",
                "an InfiniBand pool cannot scale up from 0 on AKS (rdma/shared_ib cannot be declared to the "
                "autoscaler); set minSize: 1 or more",
            )
    for name, zones in config.azure.pool_zones.items():
        where = f"{key}.poolZones.{name}"
        pool = pools.get(name)
        if pool is None:
            yield where, f"no node pool is named {name}; pools: {', '.join(pools)}"
        elif pool.fabric is not Fabric.NONE:
            yield where, "an InfiniBand pool stays in one zone (one fabric); pin it with availabilityZone"
        elif pool.availability_zone is not None:
            yield where, "the pool is pinned to one zone by availabilityZone; set one or the other"
        elif len(set(zones)) < 2 or len(set(zones)) != len(zones):
            yield where, 'list two or more distinct zones ("1", "2", "3")'


# Values the shipped templates hold until a user replaces them, each refused by the cloud or useless in
# it: networks reserved for documentation (RFC 5737, and RFC 3849 for IPv6) that no runner or office
# comes from, and mail domains under "example" (RFC 2606 reserves example.com, .net, .org and the
# .example TLD; the templates use example.ae in that sense). An all-zero image digest is no placeholder
# but a config error (_workload_problems): the stack builds its images unless it names a real one.
_DOCUMENTATION_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)
_EXAMPLE_ADDRESS = re.compile(r"@(?:[a-z0-9-]+\.)*(?:example\.[a-z]{2,}|example)$", re.IGNORECASE)
# The people's roles the enterprise templates show (commented out): an IAM role of account 111122223333,
# the account AWS's documentation writes its examples in, and the nil GUID (RFC 9562), no Entra object's.
_EXAMPLE_ROLE = re.compile(r"^arn:aws[a-z-]*:iam::111122223333:role/")
_NIL_GUID = "00000000-0000-0000-0000-000000000000"


def placeholder_problems(config: PlatformConfig) -> list[str]:
    """One line per key of the stack that still holds a template placeholder. ``pulumi preview`` and
    ``mlplatform plan`` warn with them; ``pulumi up`` refuses the stack with them (__main__.py)."""
    document = config.model_dump(mode="json", by_alias=True, exclude={"stack_name", "region"})
    source = f"Pulumi.{config.stack_name}.yaml"
    return [f"{source}: {_key_path(loc)}: {why}" for loc, why in _placeholders(document, ())]


def _placeholders(value: Any, loc: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _placeholders(item, (*loc, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _placeholders(item, (*loc, index))
    elif isinstance(value, str):
        why = _placeholder(value)
        if why:
            yield loc, why


def _placeholder(value: str) -> str | None:
    if _EXAMPLE_ADDRESS.search(value):
        return f"{value} is a template placeholder address (an example domain): name a real one"
    if _EXAMPLE_ROLE.match(value) or value == _NIL_GUID:
        return f"{value} is a template placeholder identity: name your organisation's role or group"
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        return None
    documentation = (doc for doc in _DOCUMENTATION_NETWORKS if doc.version == network.version)
    if any(network.subnet_of(doc) for doc in documentation):  # type: ignore[arg-type]
        return f"{value} is a documentation range (RFC 5737/3849), a template placeholder: name your own"
    return None
