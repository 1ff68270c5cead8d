"""People's roles on AWS (config ``access``; docs/security.md, "Who can do what"): EKS access entries with
access policies per role, and the auditors' read-only IAM policy.

EKS access policies are fixed sets of Kubernetes permissions AWS maintains, like Kubernetes' user-facing
cluster roles, each associated with an access entry at cluster or namespace scope (EKS user guide,
"Review access policy permissions", https://docs.aws.amazon.com/eks/latest/userguide/access-policy-
permissions.html): platform admins get AmazonEKSClusterAdminPolicy on the cluster, a team's ML engineers
AmazonEKSEditPolicy in their team's namespace only, auditors AmazonEKSViewPolicy on the cluster (no
Secrets, as Kubernetes' ``view``). One access entry per IAM role (EKS allows one per principal), tagged
with the roles it holds so that the pack's ``duties-separated`` can tell a merge of duties.

The key custodians administer the KMS keys through the key policies (components/aws/keys.py
``administered_by_account``) and get no cluster access here.

The auditors' IAM rights are a managed policy the stack owns, attached to each auditor's role: the stack
knows the buckets, log groups and keys to name and the organisation does not, and the grant goes with the
stack. The role stays the organisation's (its trust, its other policies); the stack only attaches its
policy, and a role of another account cannot take it (IAM attaches only within an account), which the
preview refuses in one line. The policy is exported (``auditorPolicy``) for a permission set too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pulumi
from pulumi_aws import eks, iam

from components.aws.account import AwsAccount
from components.aws.iam import policy_document
from components.config import PLATFORM_KEY, AccessConfig, team_namespace

# The tag on an access entry that names the people's roles its principal holds (space-separated), read
# by the pack (policies/mlplatform_policies/duties.py).
ACCESS_ROLES_TAG = "ml-platform.io/access-roles"
# The tag on a people's policy that is one team's (the ML engineers' datasets policy), read by the pack.
TEAM_TAG = "ml-platform.io/team"
_ACCESS_POLICY = "arn:{partition}:eks::aws:cluster-access-policy/{name}"


class PeopleRole(StrEnum):
    PLATFORM_ADMIN = "platform-admin"
    ML_ENGINEER = "ml-engineer"
    AUDITOR = "auditor"
    # No cluster access: the record-reader policy (components/aws/identities.py) and the object-data key.
    MODEL_APPROVER = "model-approver"


# Each role's EKS access policy (namespaced roles are scoped to their namespaces).
ROLE_ACCESS_POLICIES: dict[PeopleRole, str] = {
    PeopleRole.PLATFORM_ADMIN: "AmazonEKSClusterAdminPolicy",
    PeopleRole.ML_ENGINEER: "AmazonEKSEditPolicy",
    PeopleRole.AUDITOR: "AmazonEKSViewPolicy",
}


def access_policy_arn(partition: str, role: PeopleRole) -> str:
    return _ACCESS_POLICY.format(partition=partition, name=ROLE_ACCESS_POLICIES[role])


@dataclass(frozen=True)
class Grant:
    """One principal's roles: cluster-wide ones, and the namespaces of its namespaced role."""

    principal: str
    roles: tuple[PeopleRole, ...]
    namespaces: tuple[str, ...] = ()


def grants(access: AccessConfig) -> list[Grant]:
    """One grant per principal, its roles gathered from every key that names it, in first-named order."""
    roles: dict[str, list[PeopleRole]] = {}
    namespaces: dict[str, list[str]] = {}
    for principal in access.platform_admins:
        roles.setdefault(principal, []).append(PeopleRole.PLATFORM_ADMIN)
    for team, principals in access.ml_engineers.items():
        for principal in principals:
            held = roles.setdefault(principal, [])
            if PeopleRole.ML_ENGINEER not in held:
                held.append(PeopleRole.ML_ENGINEER)
            namespaces.setdefault(principal, []).append(team_namespace(team))
    for principal in access.auditors:
        roles.setdefault(principal, []).append(PeopleRole.AUDITOR)
    return [Grant(p, tuple(r), tuple(namespaces.get(p, ()))) for p, r in roles.items()]


def former_admin_alias(cluster_component: pulumi.Resource, index: int) -> pulumi.Alias:
    """Where ``access.platformAdmins[index]``'s entry and association were made when the list was
    ``cluster.admins``: ``<cluster component>-admin-<index>``, children of the cluster component. EKS keeps
    one access entry per principal (CreateAccessEntry fails with ResourceInUseException for a principal
    that has one), so the moved list must adopt those resources, not create new ones beside them."""
    return pulumi.Alias(
        name=f"{cluster_component.pulumi_resource_name}-admin-{index}", parent=cluster_component
    )


def role_name(arn: str) -> str:
    """The role's name: the last segment of its ARN's resource (``role/<path>/<name>``)."""
    return arn.rsplit("/", 1)[1]


def account_of(arn: str) -> str:
    return arn.split(":")[4]


# Reading the trail's events and configuration: none of these actions takes a resource (LookupEvents) or
# the trail's ARN suffices (CloudTrail API reference; Service Authorization Reference, "AWS CloudTrail").
_TRAIL_READS = [
    "cloudtrail:LookupEvents",
    "cloudtrail:DescribeTrails",
    "cloudtrail:GetTrail",
    "cloudtrail:GetTrailStatus",
    "cloudtrail:GetEventSelectors",
]
_LOG_READS = [
    "logs:DescribeLogStreams",
    "logs:GetLogEvents",
    "logs:FilterLogEvents",
    "logs:StartQuery",
    "logs:GetQueryResults",
    "logs:StopQuery",
]
# What the cluster and its access model look like; `aws eks update-kubeconfig` needs DescribeCluster.
_CLUSTER_READS = [
    "eks:DescribeCluster",
    "eks:ListAccessEntries",
    "eks:DescribeAccessEntry",
    "eks:ListAssociatedAccessPolicies",
]
# Each key's configuration (rotation, policy): the key policies delegate these reads to IAM.
_KEY_READS = ["kms:DescribeKey", "kms:GetKeyPolicy", "kms:GetKeyRotationStatus", "kms:ListResourceTags"]


@dataclass(frozen=True)
class AuditedStores:
    """What the auditors read: the trail's bucket and key where the stack has its own trail, the lifecycle
    record's bucket (prefix) and key, the stack's log groups, its cluster and keys."""

    cluster_arn: pulumi.Input[str]
    log_groups: Sequence[str]
    key_arns: Sequence[pulumi.Input[str]]
    # (bucket ARN, object prefix or "" for the whole bucket, the key its objects are under)
    buckets: Sequence[tuple[pulumi.Input[str], str, pulumi.Input[str]]]


def auditor_policy(account: AwsAccount, stores: AuditedStores) -> dict[str, Any]:
    """Read-only: the trail's events, the stack's log groups, the audit and record buckets (objects,
    versions, retention and the Object Lock rule), the cluster's description and each key's configuration;
    decrypt only through S3, only the buckets' keys. No write, delete, retention or policy action."""
    groups = [account.arn("logs", f"log-group:{group}:*") for group in stores.log_groups]
    statements: list[dict[str, Any]] = [
        {"Sid": "ReadTrail", "Effect": "Allow", "Action": _TRAIL_READS, "Resource": "*"},
        {"Sid": "ListLogGroups", "Effect": "Allow", "Action": "logs:DescribeLogGroups", "Resource": "*"},
        {"Sid": "ReadStackLogs", "Effect": "Allow", "Action": _LOG_READS, "Resource": groups},
        {"Sid": "ReadCluster", "Effect": "Allow", "Action": _CLUSTER_READS, "Resource": stores.cluster_arn},
        {"Sid": "ReadKeys", "Effect": "Allow", "Action": _KEY_READS, "Resource": list(stores.key_arns)},
    ]
    if stores.buckets:
        statements += [
            {
                "Sid": "ListAuditedBuckets",
                "Effect": "Allow",
                "Action": ["s3:ListBucket", "s3:ListBucketVersions", "s3:GetBucketObjectLockConfiguration"],
                "Resource": [bucket for bucket, _, _ in stores.buckets],
            },
            {
                "Sid": "ReadAuditedObjects",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectRetention"],
                "Resource": [pulumi.Output.concat(b, "/", prefix, "*") for b, prefix, _ in stores.buckets],
            },
            {
                "Sid": "DecryptThroughS3",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": list(dict.fromkeys(key for _, _, key in stores.buckets)),
                "Condition": {"StringEquals": {"kms:ViaService": f"s3.{account.dns_suffix}"}},
            },
        ]
    return policy_document(statements)


@dataclass(frozen=True)
class PeopleAccessArgs:
    account: AwsAccount
    cluster_name: str
    # The cluster's name as an output, so that entries wait for the cluster.
    cluster: pulumi.Input[str]
    access: AccessConfig
    audited: AuditedStores
    tags: Mapping[str, str]
    # The EKS cluster component, which made ``cluster.admins``' entries before ``access.platformAdmins``.
    cluster_component: pulumi.Resource


class PeopleAccess(pulumi.ComponentResource):
    """An access entry per named principal with its roles' access policies; the auditors' policy."""

    def __init__(self, name: str, args: PeopleAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:aws:PeopleAccess", name, None, opts)
        self._name, self._args = name, args
        attached = {"auditors": args.access.auditors, "modelApprovers": args.access.model_approvers}
        for key, roles in attached.items():
            foreign = [a for a in roles if account_of(a) != args.account.account_id]
            if foreign:
                raise pulumi.RunError(
                    f"{PLATFORM_KEY}.access.{key}: {foreign[0]} is a role of another account, to which this "
                    f"stack cannot attach its policy: name a role of account {args.account.account_id}"
                )
        for grant in grants(args.access):
            self._entry(grant)
        self.auditor_policy_arn: pulumi.Output[str] | None = self._auditors()
        self.register_outputs({"auditorPolicy": self.auditor_policy_arn})

    def _entry(self, grant: Grant) -> None:
        args = self._args
        slug = f"{account_of(grant.principal)}-{role_name(grant.principal)}"
        admins = args.access.platform_admins
        former = (
            [former_admin_alias(args.cluster_component, admins.index(grant.principal))]
            if grant.principal in admins
            else []
        )
        entry = eks.AccessEntry(
            f"{self._name}-{slug}",
            cluster_name=args.cluster,
            principal_arn=grant.principal,
            type="STANDARD",
            tags={**args.tags, ACCESS_ROLES_TAG: " ".join(grant.roles)},
            opts=pulumi.ResourceOptions(parent=self, aliases=former),
        )
        for role in grant.roles:
            scope: dict[str, Any] = (
                {"type": "namespace", "namespaces": list(grant.namespaces)}
                if role is PeopleRole.ML_ENGINEER
                else {"type": "cluster"}
            )
            eks.AccessPolicyAssociation(
                f"{self._name}-{slug}-{role}",
                cluster_name=args.cluster,
                principal_arn=grant.principal,
                policy_arn=access_policy_arn(args.account.partition, role),
                access_scope=scope,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[entry],
                    aliases=former if role is PeopleRole.PLATFORM_ADMIN else [],
                ),
            )

    def _auditors(self) -> pulumi.Output[str] | None:
        args = self._args
        if not args.access.auditors:
            return None
        return people_policy(
            self,
            self._name,
            "auditors",
            args.cluster_name,
            "Auditors: read the trail, the stack's logs, the audit and record buckets; no write",
            auditor_policy(args.account, args.audited),
            {**args.tags, ACCESS_ROLES_TAG: PeopleRole.AUDITOR.value},
            args.access.auditors,
        )


def people_policy(
    parent: pulumi.ComponentResource,
    base: str,
    what: str,
    cluster_name: str,
    description: str,
    document: Any,
    tags: Mapping[str, str],
    roles: Sequence[str],
) -> pulumi.Output[str]:
    """A people's managed policy, ``<base>-<what>`` (``base``: the name ``parent`` was made with; ``tags``
    say whose: the pack reads them), attached to each of ``roles``, as a child of ``parent``; its ARN."""
    policy = iam.Policy(
        f"{base}-{what}",
        name_prefix=f"{cluster_name}-{what}-",
        description=description,
        policy=pulumi.Output.json_dumps(document),
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    for role in roles:
        iam.RolePolicyAttachment(
            f"{base}-{what}-{role_name(role)}",
            role=role_name(role),
            policy_arn=policy.arn,
            opts=pulumi.ResourceOptions(parent=parent),
        )
    arn: pulumi.Output[str] = policy.arn
    return arn
