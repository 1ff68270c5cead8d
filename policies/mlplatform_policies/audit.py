"""Audit trail and threat detection, judged on the whole stack (issue 34, review ``compliance.md`` L1/D1).

A stack is audited when its cluster (EKS or AKS) is tagged ``tier: enterprise`` or ``environment:
prod``, as the platform's ``audit`` config defaults. Then:

- ``audit-trail``: AWS, a CloudTrail trail that is logging every region's management events with
  log-file validation, under a customer key, into a bucket of the stack in an allowed region with S3
  Object Lock in COMPLIANCE mode (CIS AWS Foundations Benchmark: "Ensure CloudTrail is enabled in all
  regions", "Ensure CloudTrail log file validation is enabled", "Ensure CloudTrail logs are encrypted at
  rest using KMS CMKs"; numbering differs between versions; S3 user guide "Object Lock retention
  modes"); or a declared organisation trail (the cluster's ``ml-platform.io/audit-trail`` tag naming
  it, checked at preview by the program). Azure,
  the subscription's Activity Log (Administrative and Security at least) exported to a storage account
  of the stack in an allowed location with time-based immutability on.
- ``audit-archive-locked`` (advisory): that Azure immutability policy is locked; Azure creates it
  unlocked, and the program locks it on the next ``pulumi up``. (The lifecycle record's lock is
  ``lifecycle-record-locked``'s, mandatory.)
- ``threat-detection``: AWS, an enabled GuardDuty detector with EKS audit-log monitoring (and runtime
  monitoring in enterprise); Azure, the Defender plan of every protected resource type the stack has.
- ``data-store-audit-logs``: every data store and control plane records who accessed it: every EKS
  control-plane log type (``audit`` and ``authenticator`` among them, CIS EKS 2.1.1), AKS ``kube-audit``
  or ``kube-audit-admin`` (CIS AKS 2.1.1), the RDS PostgreSQL log export with pgAudit loaded and
  logging statements (its parameter group), and on Azure a diagnostic setting with the audit categories
  on every Key Vault, storage account, container registry, PostgreSQL server and AKS cluster.
- ``lifecycle-record-locked``: AWS, the model lifecycle record (every alias move, approval, rollout step;
  docs/lifecycle.md) lives in a bucket of the stack (tagged ``ml-platform.io/role: lifecycle-record``)
  created with Object Lock and a COMPLIANCE default retention, so the identities that write it cannot
  rewrite or delete it (issue 40; S3 user guide "Object Lock retention modes"), only the registry's
  role may put on it, and no IAM role, user or group of the stack may delete on it (a delete marker hides
  an event from a reader of current objects) or change its bucket policy, ACLs, Object Lock or lifecycle
  rules (``_aws_record_appenders``: every principal type's inline, managed and attached policies judged
  by one path (``IAM_PRINCIPALS``), the bucket policy, ``Action`` wildcards and
  ``NotAction``, statement by statement; AWS-managed policies not known to grant no S3 action and
  customer-managed policies the plan does not define are refused as unjudgeable); Azure, in a storage
  account of the stack (tagged ``ml-platform.io-role: lifecycle-record``) with version-level immutability
  under a **locked** time-based policy of at least a day (Azure Storage, "Time-based retention policies
  for immutable blob data": an unlocked one can be shortened or deleted by whoever may write the
  account's settings), on which no role assignment (at the account, a container or a scope above it,
  by dependency or by a literal resource ID in any case: ``_within``, ``above``) grants a data action
  that can replace or delete a
  blob (``blobs/write``, ``blobs/delete``, ``deleteBlobVersion``, ``permanentDelete``, the immutability
  super-user action; a built-in role that carries them: Storage Blob Data Contributor or Owner, Azure
  built-in roles reference), or a control-plane action that writes the account's settings, lists its
  keys or assigns roles (``ACCOUNT_CONTROL_ACTIONS``: Owner, Contributor, Storage Account Contributor,
  User Access Administrator). Azure creates a policy only Unlocked (azure-native
  ``AccountImmutabilityPolicyProperties.state``), so the plan locks it in the same ``pulumi up``: either
  the account declares it Locked, or a local command runs ``az storage account update --resource-group
  GROUP --name ACCOUNT --immutability-state Locked --immutability-period DAYS`` after the account, with the
  account's own resource group (and subscription, where ``--subscription`` is given; azure-cli names an
  account by ``--name`` and ``--resource-group``) (components/azure/record.py),
  as the last ``az`` call of its ``create`` and of its ``update`` where it has one, in the line shape the
  platform builds (shell.py ``az_chain``; any other shape is refused, not read).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pulumi_policy import Severity

from . import tokens
from .azure_rbac import ROLE_ASSIGNERS, role_grants
from .factory import ADVISORY, Finding, stack_policy
from .residency import aws_region_problem, azure_location_problem
from .separation import FEDERATION, IAM_PRINCIPALS, IDENTITY, ROLE, strings, trusted_subjects
from .settings import (
    AUDIT_TRAIL_TAG,
    AZURE_ROLE_TAG,
    AZURE_THREAT_DETECTION_TAG,
    EXISTING_DETECTION,
    LIFECYCLE_RECORD_ROLE,
    ROLE_TAG,
    THREAT_DETECTION_TAG,
)
from .shell import az_chain, option
from .subject import Graph, Subject, names
from .values import elements, is_unknown, parse_document, statements

EKS_CLUSTER = "aws:eks/cluster:Cluster"
TRAIL = "aws:cloudtrail/trail:Trail"
OBJECT_LOCK = (
    "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration",
    "aws:s3/bucketObjectLockConfigurationV2:BucketObjectLockConfigurationV2",
)
KMS_KEY = "aws:kms/key:Key"
CLOUDTRAIL = "cloudtrail.amazonaws.com"
# What CloudTrail itself must be allowed on the trail's key (CloudTrail user guide, "Configure AWS KMS key
# policies for CloudTrail", required elements for trails: encrypt, decrypt ("If you use an existing S3
# bucket with an S3 Bucket Key, kms:Decrypt permission is required to create or update a trail with
# SSE-KMS encryption enabled"), describe) and on the bucket ("Amazon S3 bucket policy for CloudTrail":
# GetBucketAcl and PutObject); without them CreateTrail fails with InsufficientEncryptionPolicyException
# or InsufficientS3BucketPolicyException, or delivery stops.
TRAIL_KEY_ACTIONS = ("kms:GenerateDataKey*", "kms:Decrypt", "kms:DescribeKey")
TRAIL_BUCKET_ACTIONS = ("s3:GetBucketAcl", "s3:PutObject")
DETECTOR = "aws:guardduty/detector:Detector"
DETECTOR_FEATURE = "aws:guardduty/detectorFeature:DetectorFeature"
RDS_INSTANCE = "aws:rds/instance:Instance"
RDS_PARAMETER_GROUP = "aws:rds/parameterGroup:ParameterGroup"
DIAGNOSTIC_SETTING = "azure-native:monitor:DiagnosticSetting"
PRICING = "azure-native:security:Pricing"
KEY_VAULT = "azure-native:keyvault:Vault"
REGISTRY = "azure-native:containerregistry:Registry"
POSTGRES = "azure-native:dbforpostgresql:Server"

_TRAIL_ARN = re.compile(r"^arn:aws[a-z-]*:cloudtrail:[a-z0-9-]+:[0-9]{12}:trail/[A-Za-z0-9._-]+$")
_SUBSCRIPTION = re.compile(r"^/subscriptions/[0-9a-fA-F-]+$")
# Activity Log categories an audit export must carry (Azure Monitor "Activity log event schema":
# Administrative holds every write and delete on resources, Security Defender's alerts).
ACTIVITY_LOG_NEEDED = ("Administrative", "Security")
# The EKS control-plane log types CIS Amazon EKS Benchmark v1.5.0 2.1.1 "Enable audit Logs" has on
# (kube-bench cfg/eks-1.5.0/controlplane.yaml): the API server's requests, the audit trail of who did what,
# the IAM authenticator's mapping of IAM principals to users, the controller manager and the scheduler.
EKS_CONTROL_PLANE_LOGS = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# Category groups that contain a resource's audit categories (Azure Monitor "Diagnostic settings",
# category groups: audit, allLogs).
_AUDIT_GROUPS = frozenset({"audit", "allLogs"})
# Per type, the categories that record access where a setting names categories rather than a group
# (Azure Monitor supported-logs reference per resource type).
AZURE_AUDIT_CATEGORIES: dict[str, frozenset[str]] = {
    tokens.AKS_CLUSTER: frozenset({"kube-audit", "kube-audit-admin"}),
    KEY_VAULT: frozenset({"AuditEvent"}),
    REGISTRY: frozenset({"ContainerRegistryLoginEvents", "ContainerRegistryRepositoryEvents"}),
    POSTGRES: frozenset({"PostgreSQLLogs"}),
    tokens.STORAGE_ACCOUNT: frozenset({"StorageRead", "StorageWrite", "StorageDelete"}),
}
# The Defender for Cloud plan (Pricings pricing name) that protects each resource type.
DEFENDER_PLAN_FOR = {
    tokens.AKS_CLUSTER: "Containers",
    KEY_VAULT: "KeyVaults",
    tokens.STORAGE_ACCOUNT: "StorageAccounts",
    POSTGRES: "OpenSourceRelationalDatabases",
}


def audited(cluster: Subject) -> bool:
    tags = cluster.tags()
    return tags.get("tier") == "enterprise" or tags.get("environment") == "prod"


def _audited_clusters(graph: Graph, cluster_type: str) -> list[Subject]:
    return [cluster for cluster in graph.of(cluster_type) if audited(cluster)]


# --- AWS trail -------------------------------------------------------------------------------------


def _records_management_events(trail: Subject) -> bool:
    advanced = elements(trail.props, "advancedEventSelectors")
    if advanced:
        return any(
            selector.get("field") == "eventCategory" and "Management" in (selector.get("equals") or [])
            for rule in advanced
            for selector in elements(rule, "fieldSelectors")
        )
    basic = elements(trail.props, "eventSelectors")
    return not basic or any(rule.get("includeManagementEvents", True) is not False for rule in basic)


def minimum_retention(subject: Subject) -> int:
    """The pack's ``minimumAuditRetentionDays`` (PCI DSS v4.0.1 Req. 10.5.1: 12 months by default)."""
    return int(subject.setting("minimumAuditRetentionDays"))


def _locked_in_compliance(bucket: Subject, graph: Graph) -> bool:
    for config in graph.of(*OBJECT_LOCK):
        if bucket not in graph.linked(config, "bucket", tokens.S3_BUCKETS, identity="bucket"):
            continue
        retention = config.get("rule.defaultRetention") or {}
        days = (retention.get("days") or 0) + 365 * (retention.get("years") or 0)
        if retention.get("mode") == "COMPLIANCE" and days >= minimum_retention(config):
            return True
    return False


def _granted_to_cloudtrail(document: Any, path: str) -> set[str] | None:
    """The actions a policy document allows CloudTrail's service principal; None while unknown."""
    if is_unknown(document):
        return None
    granted: set[str] = set()
    for statement in statements(parse_document(document, path)):
        principal = statement.get("Principal")
        services = principal.get("Service") if isinstance(principal, Mapping) else None
        services = [services] if isinstance(services, str) else services or []
        if statement.get("Effect") != "Allow" or CLOUDTRAIL not in services:
            continue
        actions = statement.get("Action")
        granted.update([actions] if isinstance(actions, str) else actions or [])
    return granted


def _missing(granted: set[str] | None, needed: tuple[str, ...]) -> list[str]:
    if granted is None or "*" in granted or "kms:*" in granted or "s3:*" in granted:
        return []
    return [action for action in needed if action not in granted]


def delivery_problems(trail: Subject, buckets: list[Subject], graph: Graph) -> Iterator[str]:
    """What keeps CloudTrail from writing the trail (its key's and bucket's policies) or from feeding the
    CloudWatch alarms (the log group and the role CloudTrail assumes to write to it)."""
    for key in graph.linked(trail, "kmsKeyId", (KMS_KEY,), identity="arn"):
        missing = _missing(_granted_to_cloudtrail(key.get("policy"), "policy"), TRAIL_KEY_ACTIONS)
        if missing:
            yield f"key {key.name}'s policy does not allow {CLOUDTRAIL} {', '.join(missing)}"
    for bucket in buckets:
        granted: set[str] | None = set()
        for bucket_policy in graph.of(tokens.S3_POLICY):
            if bucket not in graph.linked(bucket_policy, "bucket", tokens.S3_BUCKETS, identity="bucket"):
                continue
            found = _granted_to_cloudtrail(bucket_policy.get("policy"), "policy")
            granted = None if found is None or granted is None else granted | found
        missing = _missing(granted, TRAIL_BUCKET_ACTIONS)
        if missing:
            yield f"bucket {bucket.name}'s policy does not allow {CLOUDTRAIL} {', '.join(missing)}"
    if not trail.get("cloudWatchLogsGroupArn") or not trail.get("cloudWatchLogsRoleArn"):
        yield (
            "no cloudWatchLogsGroupArn and cloudWatchLogsRoleArn: the trail feeds no log group, so no "
            "security alarm fires"
        )


def trail_problems(trail: Subject, graph: Graph) -> Iterator[str]:
    """What keeps a trail from being the stack's tamper-evident record."""
    if trail.get("enableLogging") is False:
        yield "enableLogging is false: the trail records nothing"
    if trail.get("isMultiRegionTrail") is not True:
        yield "isMultiRegionTrail is not true: calls in other regions go unrecorded"
    if trail.get("enableLogFileValidation") is not True:
        yield "enableLogFileValidation is not true: edits to delivered files go unnoticed"
    if not trail.get("kmsKeyId"):
        yield "no kmsKeyId: encrypt the trail under a customer key"
    if not _records_management_events(trail):
        yield "no event selector records management events"
    buckets = graph.linked(trail, "s3BucketName", tokens.S3_BUCKETS, identity="bucket")
    if not buckets:
        yield "s3BucketName names no bucket of this stack: its lock and region cannot be judged"
    for bucket in buckets:
        problem = aws_region_problem(bucket.aws_region(), bucket, f"bucket {bucket.name} region")
        if problem:
            yield problem
        if not _locked_in_compliance(bucket, graph):
            yield (
                f"bucket {bucket.name} has no Object Lock default retention in COMPLIANCE mode of at least "
                f"{minimum_retention(bucket)} days (minimumAuditRetentionDays): delivered files can be "
                "deleted"
            )
    yield from delivery_problems(trail, buckets, graph)


def _organization_trail(cluster: Subject) -> bool:
    declared = cluster.tags().get(AUDIT_TRAIL_TAG)
    return isinstance(declared, str) and bool(_TRAIL_ARN.fullmatch(declared))


def _aws_trail(graph: Graph) -> Iterator[Finding]:
    clusters = [c for c in _audited_clusters(graph, EKS_CLUSTER) if not _organization_trail(c)]
    if not clusters:
        return
    trails = graph.of(TRAIL)
    judged = {trail.urn: list(trail_problems(trail, graph)) for trail in trails}
    if any(not problems for problems in judged.values()):
        return
    for trail in trails:
        yield from ((trail.urn, problem) for problem in judged[trail.urn])
    if not trails:
        for cluster in clusters:
            yield (
                cluster.urn,
                "no CloudTrail trail records this audited stack: add one (multi-region, validated, "
                f"KMS-encrypted, into an Object-Locked bucket), or tag the cluster {AUDIT_TRAIL_TAG} with "
                "the organisation trail's ARN",
            )


# --- the model lifecycle record ----------------------------------------------------------------------


# The registry's service account (components/handle.py WORKLOAD_IDENTITIES): the record's only writer.
REGISTRY_SUBJECT = "system:serviceaccount:ml-registry:registry"
IAM_POLICY = "aws:iam/policy:Policy"


BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
POLICY_ATTACHMENT = "aws:iam/policyAttachment:PolicyAttachment"
_AWS_MANAGED = re.compile(r"arn:aws[a-z-]*:iam::aws:policy/(.+)")
# AWS-managed policies that grant no S3 action (AWS Managed Policy Reference Guide,
# docs.aws.amazon.com/aws-managed-policy/latest/reference/<name>.html: each one's JSON names EC2, EKS,
# ECR, EFS, Auto Scaling, ELB, KMS grant and IAM service-linked-role actions, no S3 action). Any other
# AWS-managed policy on a role of an audited stack may write or delete on the record (AmazonS3FullAccess:
# ``s3:*`` on ``*``; AdministratorAccess; PowerUserAccess: ``NotAction`` IAM and Organizations), and AWS may
# widen one at any time, so it is refused rather than judged (review rev40d A5).
AWS_MANAGED_WITHOUT_S3_WRITE = frozenset(
    {
        "AmazonEKSClusterPolicy",
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryReadOnly",
        "service-role/AmazonEBSCSIDriverPolicy",
        "service-role/AmazonEFSCSIDriverPolicy",
    }
)


# What a role other than the registry's may not be allowed on the record (review rev35f A7, A8). A put
# appends an event in any user's name (review rev40c A1; the registry's role alone appends). A simple DELETE
# in a versioned bucket adds a delete marker that "makes Amazon S3 behave as if the object is deleted" (S3
# user guide, "Working with delete markers"), and Object Lock keeps versions, not a key's latest state (S3
# user guide, "How S3 Object Lock works"): a reader of current objects no longer sees the event. And the
# bucket's configuration: a bucket policy or ACL that grants a put or a delete (IAM user guide, "Policy
# evaluation logic": within an account, an Allow in the resource-based policy grants the request), its
# Object Lock rule, and a lifecycle rule whose Expiration adds a delete marker to every current object (S3
# user guide, "Expiring objects"). Nobody appends by these but the registry, and nobody holds the others:
# the deployer's rights to create the bucket stand outside the stack.
RECORD_PUTS = ("s3:PutObject",)
RECORD_DELETES = ("s3:DeleteObject", "s3:DeleteObjectVersion")
RECORD_CONFIGURATION = (
    "s3:PutBucketPolicy",
    "s3:DeleteBucketPolicy",
    "s3:PutBucketAcl",
    "s3:PutObjectAcl",
    "s3:PutBucketObjectLockConfiguration",
    "s3:PutLifecycleConfiguration",
)
_RECORD_ACTIONS = (*RECORD_PUTS, *RECORD_DELETES, *RECORD_CONFIGURATION)


def allowed_actions(statement: Mapping[str, Any], actions: Iterable[str]) -> list[str]:
    """Which of ``actions`` an IAM statement allows: an ``Action`` pattern covers it, or a ``NotAction``
    leaves it out (IAM JSON policy reference, "IAM JSON policy elements: NotAction"; actions are case
    insensitive)."""
    if statement.get("Effect") != "Allow":
        return []
    negated = "NotAction" in statement
    patterns = [a.lower() for a in strings(statement.get("NotAction" if negated else "Action"))]
    return [a for a in actions if any(fnmatch.fnmatchcase(a.lower(), p) for p in patterns) != negated]


def _s3_bucket_part(resource: str) -> str | None:
    """The bucket part of an S3 ARN (``arn:aws:s3:::BUCKET/KEY``), or None for another ARN."""
    if not (resource.startswith("arn:") and resource.split(":")[2:3] == ["s3"]):
        return None
    return resource.split(":", 5)[-1].split("/", 1)[0]


def _bucket_names(graph: Graph, documents: Iterable[tuple[Subject, str]]) -> dict[str, set[str]]:
    """The plan's buckets by the names its IAM documents call them: every S3 ARN of a document that refers to
    one bucket of the plan and no other names that bucket (the provider gives the physical name, which the
    plan's bucket inputs do not hold)."""
    found: dict[str, set[str]] = {}
    for subject, prop in documents:
        buckets = graph.linked(subject, prop, tokens.S3_BUCKETS)
        if len(buckets) != 1:
            continue
        for statement in statements(parse_document(subject.get(prop), prop)):
            for resource in strings(statement.get("Resource")):
                bucket = _s3_bucket_part(resource)
                if bucket and "*" not in bucket and "?" not in bucket:
                    found.setdefault(bucket, set()).add(buckets[0].urn)
    return found


def _reaches(
    statement: Mapping[str, Any], records: set[str], known: Mapping[str, set[str]], unknown: bool
) -> bool:
    """Whether a statement's resources may name a record (``records``: their URNs): ``*``, ``NotResource``,
    an S3 ARN whose bucket pattern matches a record's name (``known``: names to buckets) or, where no
    record's name is known, has a wildcard, or one matching no bucket the plan names where ``unknown`` (the
    document refers to a record, or to no bucket)."""
    if "NotResource" in statement:
        return True
    named = any(urns & records for urns in known.values())
    for resource in strings(statement.get("Resource")):
        bucket = "*" if resource == "*" else _s3_bucket_part(resource)
        if bucket is None:
            continue
        if bucket in ("", "*") or (not named and ("*" in bucket or "?" in bucket)):
            return True
        hits = {urn for name, urns in known.items() if fnmatch.fnmatchcase(name, bucket) for urn in urns}
        if hits & records or (not hits and unknown):
            return True
    return False


def _registry_only(holders: Iterable[Subject]) -> bool:
    """Whether the principals holding a policy are the registry's role and no other (an IAM user or group
    is never the registry's)."""
    found = list(holders)
    return bool(found) and all(r.type == ROLE and REGISTRY_SUBJECT in trusted_subjects(r) for r in found)


_PRINCIPAL_TYPES = tuple(kind.type for kind in IAM_PRINCIPALS)


def _attached_policies(graph: Graph) -> Iterator[tuple[Subject, str, bool]]:
    """Each managed policy attached to an IAM principal of the stack (``IAM_PRINCIPALS``: role, user or
    group): the subject that attaches it, its ARN, and whether the plan defines it (an attachment whose
    ``policyArn`` refers to a ``Policy`` of the plan; in a principal's ``managedPolicyArns``, which only
    roles have, as many of its customer-managed ARNs as the plan's policies it refers to; pulumi_aws
    iam/role.py)."""
    policies = graph.of(IAM_POLICY)
    for attachment in graph.of(*(kind.attachment for kind in IAM_PRINCIPALS), POLICY_ATTACHMENT):
        arn = str(attachment.get("policyArn"))
        yield attachment, arn, bool(graph.linked(attachment, "policyArn", [IAM_POLICY], identity="name"))
    for principal in graph.of(*_PRINCIPAL_TYPES):
        arns = [a for a in strings(principal.get("managedPolicyArns")) if not is_unknown(a)]
        tied = len(graph.linked(principal, "managedPolicyArns", [IAM_POLICY]))
        for arn in arns:
            named = _AWS_MANAGED.fullmatch(arn) or any(names(arn, p.get("name")) for p in policies)
            if not named:
                tied -= 1
            yield principal, arn, bool(named) or tied >= 0


def _unjudged_writers(graph: Graph) -> Iterator[Finding]:
    """Managed policies attached to an IAM role, user or group of the stack whose grants the pack cannot
    read: AWS-managed ones not known to grant no S3 action (review rev40d A5, rev40e A5), and
    customer-managed ones the plan does not define (review rev35f A8): either may write, delete or
    reconfigure the lifecycle record."""
    for subject, arn, defined in _attached_policies(graph):
        managed = _AWS_MANAGED.fullmatch(arn)
        if managed and managed.group(1) not in AWS_MANAGED_WITHOUT_S3_WRITE:
            yield (
                subject.urn,
                f"attaches the AWS-managed {arn}, which may allow s3:PutObject or s3:DeleteObject on the "
                "lifecycle record (its grants are AWS's to change): only the registry's role appends; write "
                "the grants the principal needs inline",
            )
        elif not managed and not defined:
            yield (
                subject.urn,
                f"attaches {arn}, a customer-managed policy the plan does not define, so the pack cannot "
                "judge whether it writes, deletes or reconfigures the lifecycle record: define the policy in "
                "the stack (aws.iam.Policy) or write its grants inline",
            )


def _aws_record_appenders(records: list[Subject], graph: Graph) -> Iterator[Finding]:
    """Every second writer of a record bucket (review rev40c A1, rev40d A5, rev35f A7-A8, rev40e A5): an
    identity-based IAM document of any principal type (``IAM_PRINCIPALS``: a role's, user's or group's
    inline policy, a managed ``Policy`` of the plan, a role's ``inlinePolicies``: pulumi_aws iam/role.py;
    by ``Action`` or ``NotAction``) with a statement on a record, or on any bucket, that allows
    s3:PutObject and is not held by the registry's role alone, or that allows a delete or a change of the
    bucket's configuration (``RECORD_DELETES``, ``RECORD_CONFIGURATION``) to anyone; the same in the
    record's bucket policy (IAM user guide, "Policy evaluation logic": within an account, an Allow in the
    resource-based policy grants the request; the registry's grants are its role's own); and managed
    policies the pack cannot read (``_unjudged_writers``)."""
    record_urns = {b.urn for b in records}
    inline = {kind.inline: kind for kind in IAM_PRINCIPALS}
    documents = [(p, "policy") for p in graph.of(*inline, IAM_POLICY, BUCKET_POLICY)]
    known = _bucket_names(graph, documents)
    put_problem = (
        "allows s3:PutObject on the lifecycle record: only the registry's role appends (it names the user it "
        "authenticated); give the others s3:GetObject and s3:ListBucket only"
    )

    def names_record(subject: Subject, prop: str) -> bool:
        """Whether ``prop`` refers to a record bucket, or to no bucket of the plan at all: an S3 ARN the plan
        does not tie to a bucket may be the record's (its physical name is the provider's)."""
        linked = {b.urn for b in graph.linked(subject, prop, tokens.S3_BUCKETS)}
        return not linked or bool(linked & record_urns)

    def problems(document: Any, unknown: bool, registry: bool) -> Iterator[str]:
        granted = [
            action
            for statement in statements(parse_document(document, "policy"))
            if _reaches(statement, record_urns, known, unknown)
            for action in allowed_actions(statement, _RECORD_ACTIONS)
        ]
        if any(a in RECORD_PUTS for a in granted) and not registry:
            yield put_problem
        deletes = sorted({a for a in granted if a in RECORD_DELETES})
        if deletes:
            yield (
                f"allows {', '.join(deletes)} on the lifecycle record: a delete adds a delete marker that "
                "hides an event from a reader of current objects (Object Lock keeps only the versions); no "
                "identity of the stack deletes on the record, the registry's included"
            )
        configuration = sorted({a for a in granted if a in RECORD_CONFIGURATION})
        if configuration:
            yield (
                f"allows {', '.join(configuration)} on the lifecycle record: a bucket policy or ACL can "
                "grant a second writer, and a lifecycle rule's expiration deletes every event from view; no "
                "identity of the stack reconfigures the record (the deployer's rights stand outside it)"
            )

    for policy in graph.of(*inline, IAM_POLICY):
        kind = inline.get(policy.type)
        holders = graph.linked(policy, kind.prop, [kind.type], identity="name") if kind else []
        unknown = names_record(policy, "policy")
        for problem in problems(policy.get("policy"), unknown, _registry_only(holders)):
            yield policy.urn, problem
    for principal in graph.of(*_PRINCIPAL_TYPES):
        entries = principal.get("inlinePolicies")
        unknown = names_record(principal, "inlinePolicies")
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, Mapping):
                for problem in problems(entry.get("policy"), unknown, _registry_only([principal])):
                    yield principal.urn, f"inlinePolicies {problem}"
    for bucket_policy in graph.of(BUCKET_POLICY):
        if names_record(bucket_policy, "bucket"):
            for problem in problems(bucket_policy.get("policy"), True, False):
                yield bucket_policy.urn, f"the record's bucket policy {problem}"
    if records:
        yield from _unjudged_writers(graph)


def _lifecycle_record(graph: Graph) -> Iterator[Finding]:
    clusters = _audited_clusters(graph, EKS_CLUSTER)
    if not clusters:
        return
    records = [b for b in graph.of(*tokens.S3_BUCKETS) if b.tags().get(ROLE_TAG) == LIFECYCLE_RECORD_ROLE]
    yield from _aws_record_appenders(records, graph)
    for bucket in records:
        if bucket.get("objectLockEnabled") is not True:
            yield (
                bucket.urn,
                "objectLockEnabled is not true: the record's events can be deleted or overwritten",
            )
        elif not _locked_in_compliance(bucket, graph):
            yield (
                bucket.urn,
                "no Object Lock default retention in COMPLIANCE mode of at least a day: whoever writes the "
                "record can delete or shorten its events",
            )
    if not records:
        for cluster in clusters:
            yield (
                cluster.urn,
                "no lifecycle record store: an audited stack keeps its model lifecycle record in a bucket "
                f"tagged {ROLE_TAG}: {LIFECYCLE_RECORD_ROLE} with Object Lock in COMPLIANCE mode",
            )


ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
BLOB_CONTAINER = "azure-native:storage:BlobContainer"
_BLOBS = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
# Data actions that replace or delete a blob, or lift its immutability (Azure Storage, "Actions and
# attributes for Azure role assignment conditions for Azure Blob Storage").
REWRITING_DATA_ACTIONS = (
    f"{_BLOBS}/write",
    f"{_BLOBS}/delete",
    f"{_BLOBS}/deleteBlobVersion/action",
    f"{_BLOBS}/permanentDelete/action",
    f"{_BLOBS}/immutableStorage/runAsSuperUser/action",
)
# Built-in roles whose data actions include them, by id, the same in every tenant (Azure built-in roles
# reference: Storage Blob Data Contributor and Owner grant ``blobs/*``-level write and delete).
REWRITING_BUILT_IN_ROLES = {
    "ba92f5b4-2d11-453d-a403-e96b0029c9fe": "Storage Blob Data Contributor",
    "b7e6dc6d-f1e8-4753-8033-0f276bb0955b": "Storage Blob Data Owner",
}


# Control-plane actions over the record's account that make a second writer (review rev35f A8): writing the
# account's settings turns Shared Key authorization (``allowSharedKeyAccess``, false in the plan) back on,
# and the account keys authorize any blob operation in anyone's name, bypassing RBAC (Azure Storage,
# "Prevent Shared Key authorization for an Azure Storage account"; Azure built-in roles, "Storage Account
# Contributor": "access to the account key, which can be used to access data via Shared Key
# authorization"); writing role assignments gives the holder a data role (Azure RBAC, "Assign Azure
# roles": Microsoft.Authorization/roleAssignments/write).
ACCOUNT_CONTROL_ACTIONS = (
    "Microsoft.Storage/storageAccounts/write",
    "Microsoft.Storage/storageAccounts/listKeys/action",
    "Microsoft.Authorization/roleAssignments/write",
)
# Built-in roles that carry them, by id (Azure built-in roles reference: Owner and Contributor ``*``, less
# Microsoft.Authorization writes for Contributor; Storage Account Contributor
# ``Microsoft.Storage/storageAccounts/*``; the role assigners, ``ROLE_ASSIGNERS``).
ACCOUNT_CONTROL_BUILT_IN_ROLES = {
    "8e3af657-a8ff-443c-a75c-2fe8c4bcb635": "Owner",
    "b24988ac-6180-42a0-ab88-20f7382dd24c": "Contributor",
    "17d1049b-9a84-46fb-8f53-869881c3d3ab": "Storage Account Contributor",
    **ROLE_ASSIGNERS,
}


def _account_subscriptions(account: Subject, graph: Graph) -> set[str]:
    """The subscriptions ``account`` may be in, as the plan shows them (lower case): its provider's
    ``subscriptionId`` where set, else those of the plan's literal Azure resource IDs in the account's
    resource group (the deployer's, as the program writes them); empty when the plan shows none."""
    own = account.provider.get("subscriptionId")
    if isinstance(own, str) and own and not is_unknown(own):
        return {own.lower()}
    group = account.get("resourceGroupName")
    if not isinstance(group, str) or not group or is_unknown(group):
        return set()
    in_group = re.compile(rf"/subscriptions/([0-9a-f-]+)/resourceGroups/{re.escape(group)}(?:/|\"|$)", re.I)
    return {
        found.lower()
        for subject in graph.subjects
        if subject.type.startswith("azure-native:")
        for found in in_group.findall(json.dumps(subject.props, default=str))
    }


def _locked_period(line: Any, account: Subject, subscriptions: set[str]) -> int | None:
    """The days the shell ``line`` locks ``account``'s policy for: a line of the platform's shape
    (``az_chain``) whose outcome, its last ``az`` call, is ``az storage account update --subscription SUB
    --resource-group GROUP --name ACCOUNT --immutability-state Locked --immutability-period DAYS``
    (azure-cli storage account update: the account is named by ``--name`` and ``--resource-group``
    together, in ``--subscription`` or else the caller's default one) with the account's own resource group
    and a subscription the plan shows the account in (``subscriptions``): a default subscription is none
    the plan can show to be the account's, and a plan that shows none proves no lock (review rev40b C3)."""
    chain = az_chain(line) if isinstance(line, str) and not is_unknown(line) else None
    if not chain:
        return None
    words = chain[-1]
    period = option(words, "--immutability-period", "--immutability-period-in-days")
    subscription = option(words, "--subscription")
    if (
        words[:4] == ["az", "storage", "account", "update"]
        and option(words, "--name", "-n") == account.get("accountName")
        and option(words, "--resource-group", "-g") == account.get("resourceGroupName")
        and subscription is not None
        and subscription.lower() in subscriptions
        and option(words, "--immutability-state") == "Locked"
        and period is not None
        and period.isdigit()
    ):
        return int(period)
    return None


def _lock_days(account: Subject, graph: Graph) -> list[int]:
    """The days of each locked time-based policy the plan gives ``account``: its own, declared Locked, and
    each local command after it whose ``create`` locks it (``_locked_period``), and whose ``update``, where
    it has one, locks it too. pulumi-command's ``local.Command`` runs ``create`` when the resource is
    created and ``update`` (or ``create`` again when there is none) when its inputs change: a lock only in
    ``update`` never runs on a new stack, and an ``update`` without it lets a changed retention run
    something else (pulumi-command 1.2.1, ``local.Command`` ``create``/``update``)."""
    policy = _immutability(account).get("immutabilityPolicy") or {}
    days = policy.get("immutabilityPeriodSinceCreationInDays")
    # The plan carries Pulumi's numbers as JSON floats (365.0): a whole number of days either way.
    found: list[int] = []
    if isinstance(days, int | float) and not isinstance(days, bool) and float(days).is_integer():
        found += [int(days)] if policy.get("state") == "Locked" else []
    commands = [c for c in graph.of(tokens.LOCAL_COMMAND) if account.urn in c.dependencies]
    subscriptions = _account_subscriptions(account, graph) if commands else set()
    for command in commands:
        phases = ("create", "update") if command.get("update") not in (None, "") else ("create",)
        periods = [_locked_period(command.get(phase), account, subscriptions) for phase in phases]
        locked = [period for period in periods if period is not None]
        if len(locked) == len(phases):
            found.append(min(locked))
    return found


def _azure_record_problems(account: Subject, graph: Graph) -> Iterator[str]:
    if _immutability(account).get("enabled") is not True:
        yield (
            "immutableStorageWithVersioning is not enabled: the record's events can be deleted or "
            "overwritten (only the account's creation can enable it)"
        )
        return
    days = _lock_days(account, graph)
    if not days:
        yield (
            "no locked time-based immutability policy in the plan (declared Locked, or a command after the "
            "account whose create, and update where it has one, ends in az storage account update "
            "--subscription SUBSCRIPTION --resource-group GROUP --name ACCOUNT --immutability-state "
            "Locked, the account's own subscription and group): an unlocked policy can be shortened or "
            "removed, and then the record's events deleted. The lock is read only in the platform's "
            "shape, az calls joined by && (NAME=$(az ...) and { [ ... ] || az ...; } steps allowed); a "
            "line with exit, || or ; between steps, functions, conditionals or redirections is refused"
        )
    elif max(days) < 1:
        yield "the immutability period is under a day: whoever writes the record can delete its events"
    if account.get("allowSharedKeyAccess") is not False:
        # Review rev40f A3: with Shared Key on, whoever lists the account keys appends in anyone's name,
        # around the registry and RBAC (Azure Storage, "Prevent Shared Key authorization for an Azure
        # Storage account": unset means allowed).
        yield (
            "allowSharedKeyAccess is not false: the account keys would authorize any write to the record "
            "in anyone's name, around the registry, which must be its only writer"
        )


def granted_data_actions(
    assignment: Subject,
    graph: Graph,
    actions: Iterable[str],
    built_in: Mapping[str, str],
    kind: str = "dataActions",
) -> list[str]:
    """Which of ``actions`` (data actions, or control-plane ``actions`` where ``kind`` says so)
    ``assignment``'s role grants: a built-in role of ``built_in`` (definition id -> its name, named whole),
    or a custom role of the plan whose ``dataActions`` (``actions``) cover the action and whose
    ``notDataActions`` (``notActions``) do not (Azure RBAC, "Understand Azure role definitions";
    operations are case insensitive)."""
    definition = str(assignment.get("roleDefinitionId") or "")
    named = built_in.get(definition.rsplit("/", 1)[-1].lower())
    if named:
        return [named]
    found: list[str] = []
    for role in graph.linked(assignment, "roleDefinitionId", [ROLE_DEFINITION]):
        for permission in elements(role.props, "permissions"):
            if not isinstance(permission, Mapping):
                continue
            granted = [str(a).lower() for a in permission.get(kind) or []]
            denied = [str(a).lower() for a in permission.get(f"not{kind[0].upper()}{kind[1:]}") or []]
            found += [
                action
                for action in actions
                if any(fnmatch.fnmatchcase(action.lower(), g) for g in granted)
                and not any(fnmatch.fnmatchcase(action.lower(), d) for d in denied)
                and action not in found
            ]
    return found


def _rewriting_actions(assignment: Subject, graph: Graph) -> list[str]:
    """The data actions of ``assignment``'s role that can replace or delete a blob."""
    return granted_data_actions(assignment, graph, REWRITING_DATA_ACTIONS, REWRITING_BUILT_IN_ROLES)


RESOURCE_GROUP = "azure-native:resources:ResourceGroup"
_MANAGEMENT_GROUPS = "/providers/microsoft.management/managementgroups/"


def _within(assignment: Subject, account: Subject, graph: Graph) -> bool:
    """Whether ``assignment``'s scope, written as a literal resource ID, is ``account`` or a resource in it
    (a container): ``/subscriptions/SUB/resourceGroups/GROUP/providers/Microsoft.Storage/storageAccounts/
    NAME[/...]`` with the account's group and name, in a subscription the account may be in (Azure RBAC,
    "Understand scope for Azure RBAC": a scope is a resource ID; Azure Resource Manager, "Resource naming
    and case sensitivity": resource IDs compare case insensitively; review rev35f A9)."""
    scope = assignment.get("scope")
    if not isinstance(scope, str) or is_unknown(scope):
        return False
    parts = scope.lower().strip("/").split("/")
    name = str(account.get("accountName") or "").lower()
    group = str(account.get("resourceGroupName") or "").lower()
    if len(parts) < 8 or not name or not group:
        return False
    subscriptions = _account_subscriptions(account, graph)
    return (
        parts[0] == "subscriptions"
        and (not subscriptions or parts[1] in subscriptions)
        and parts[2:8] == ["resourcegroups", group, "providers", "microsoft.storage", "storageaccounts", name]
    )


def above(assignment: Subject, account: Subject, graph: Graph) -> bool:
    """Whether ``assignment``'s scope holds ``account`` (Azure RBAC, "Understand scope for Azure RBAC":
    lower levels inherit role permissions from higher levels): the tenant root, a management group, a
    subscription the account may be in (any, where the plan shows none of the account's), or the account's
    resource group, named by ID or as the plan's ``ResourceGroup``."""
    group = str(account.get("resourceGroupName") or "").lower()
    if any(
        str(g.get("resourceGroupName") or "").lower() == group
        for g in graph.linked(assignment, "scope", [RESOURCE_GROUP])
    ):
        return True
    scope = assignment.get("scope")
    if not isinstance(scope, str) or is_unknown(scope):
        return False
    parts = scope.lower().strip("/").split("/")
    if scope.strip("/") == "" or scope.lower().startswith(_MANAGEMENT_GROUPS):
        return True
    if parts[0] != "subscriptions" or len(parts) not in (2, 4):
        return False
    subscriptions = _account_subscriptions(account, graph)
    in_subscription = not subscriptions or parts[1] in subscriptions
    return in_subscription and (len(parts) == 2 or (parts[2] == "resourcegroups" and parts[3] == group))


def _record_writers(account: Subject, graph: Graph) -> Iterator[Finding]:
    """Role assignments on the record's account, one of its containers or a scope above the account
    (``above``) that can rewrite it, or that let anyone but the registry's identity append to it (review
    rev40d A6)."""
    registry = {
        identity.urn
        for federation in graph.of(FEDERATION)
        if REGISTRY_SUBJECT in strings(federation.get("subject"))
        for identity in graph.linked(federation, "resourceName", [IDENTITY])
    }
    containers = {
        c.urn
        for c in graph.of(BLOB_CONTAINER)
        if account.urn
        in {a.urn for a in graph.linked(c, "accountName", [tokens.STORAGE_ACCOUNT], identity="accountName")}
    }
    for assignment in role_grants(graph):
        scopes = {s.urn for s in graph.linked(assignment, "scope", [tokens.STORAGE_ACCOUNT, BLOB_CONTAINER])}
        if (
            account.urn not in scopes
            and not scopes & containers
            and not _within(assignment, account, graph)
            and not above(assignment, account, graph)
        ):
            continue
        control = granted_data_actions(
            assignment, graph, ACCOUNT_CONTROL_ACTIONS, ACCOUNT_CONTROL_BUILT_IN_ROLES, kind="actions"
        )
        if control:
            yield (
                assignment.urn,
                f"a role on the lifecycle record {account.name} grants {', '.join(control)}: whoever holds "
                "it can turn Shared Key authorization back on and write with the account keys in anyone's "
                "name, or give itself a data role; no identity of the stack manages the record's account "
                "(the deployer's rights stand outside it)",
            )
        rewriting = _rewriting_actions(assignment, graph)
        if rewriting:
            yield (
                assignment.urn,
                f"a role on the lifecycle record {account.name} grants {', '.join(rewriting)}: whoever holds "
                "it can replace or delete events; give writers only blobs/add/action and blobs/read",
            )
        elif granted_data_actions(assignment, graph, (f"{_BLOBS}/add/action",), {}) and not (
            {i.urn for i in graph.linked(assignment, "principalId", [IDENTITY])} & registry
        ):
            yield (
                assignment.urn,
                f"a role on the lifecycle record {account.name} lets {assignment.get('principalId')} add "
                "blobs: only the registry's identity appends (it names the user it authenticated, review "
                "rev40c A1); give the others Storage Blob Data Reader",
            )


def _azure_lifecycle_record(graph: Graph) -> Iterator[Finding]:
    clusters = _audited_clusters(graph, tokens.AKS_CLUSTER)
    if not clusters:
        return
    records = [
        a for a in graph.of(tokens.STORAGE_ACCOUNT) if a.tags().get(AZURE_ROLE_TAG) == LIFECYCLE_RECORD_ROLE
    ]
    for account in records:
        yield from ((account.urn, problem) for problem in _azure_record_problems(account, graph))
        yield from _record_writers(account, graph)
    if not records:
        for cluster in clusters:
            yield (
                cluster.urn,
                "no lifecycle record store: an audited stack keeps its model lifecycle record in a storage "
                f"account tagged {AZURE_ROLE_TAG}: {LIFECYCLE_RECORD_ROLE} with version-level immutability "
                "under a locked time-based policy",
            )


def _lifecycle_records(graph: Graph) -> Iterator[Finding]:
    yield from _lifecycle_record(graph)
    yield from _azure_lifecycle_record(graph)


# --- Azure trail -----------------------------------------------------------------------------------


def _categories(setting: Subject) -> tuple[set[str], set[str]]:
    """The enabled log categories and category groups of a diagnostic setting."""
    categories: set[str] = set()
    groups: set[str] = set()
    for log in elements(setting.props, "logs"):
        if log.get("enabled") is False:
            continue
        if isinstance(log.get("category"), str):
            categories.add(log["category"])
        if isinstance(log.get("categoryGroup"), str):
            groups.add(log["categoryGroup"])
    return categories, groups


def _immutability(account: Subject) -> Mapping[str, Any]:
    found = account.get("immutableStorageWithVersioning")
    return found if isinstance(found, Mapping) else {}


def archive_problems(account: Subject) -> Iterator[str]:
    immutable = _immutability(account)
    policy = immutable.get("immutabilityPolicy") or {}
    if immutable.get("enabled") is not True or policy.get("state") not in ("Locked", "Unlocked"):
        yield f"storage account {account.name} has no time-based immutability: archived logs can be deleted"
    elif not (policy.get("immutabilityPeriodSinceCreationInDays") or 0) >= minimum_retention(account):
        yield (
            f"storage account {account.name}: immutability period under {minimum_retention(account)} days "
            "(minimumAuditRetentionDays)"
        )
    elif policy.get("allowProtectedAppendWrites") is not True:
        yield (
            f"storage account {account.name}: allowProtectedAppendWrites off, so diagnostic settings "
            "cannot append to their blobs"
        )
    problem = azure_location_problem(account.azure_location(), account, f"storage account {account.name}")
    if problem:
        yield problem


def activity_log_problems(setting: Subject, graph: Graph) -> Iterator[str]:
    categories, groups = _categories(setting)
    missing = [c for c in ACTIVITY_LOG_NEEDED if c not in categories]
    if missing and not groups & _AUDIT_GROUPS:
        yield f"the Activity Log export leaves out {', '.join(missing)}"
    accounts = graph.linked(setting, "storageAccountId", (tokens.STORAGE_ACCOUNT,), identity="accountName")
    if not accounts:
        yield "the Activity Log export goes to no storage account of this stack: nothing keeps it immutable"
    for account in accounts:
        yield from archive_problems(account)


def _activity_log_exports(graph: Graph) -> list[Subject]:
    return [
        s
        for s in graph.of(DIAGNOSTIC_SETTING)
        if isinstance(uri := s.get("resourceUri"), str) and not is_unknown(uri) and _SUBSCRIPTION.match(uri)
    ]


def _azure_trail(graph: Graph) -> Iterator[Finding]:
    clusters = _audited_clusters(graph, tokens.AKS_CLUSTER)
    if not clusters:
        return
    exports = _activity_log_exports(graph)
    judged = {export.urn: list(activity_log_problems(export, graph)) for export in exports}
    if any(not problems for problems in judged.values()):
        return
    for export in exports:
        yield from ((export.urn, problem) for problem in judged[export.urn])
    if not exports:
        for cluster in clusters:
            yield (
                cluster.urn,
                "the subscription's Activity Log is exported nowhere: add a diagnostic setting on "
                "/subscriptions/<id> into an immutable storage account of this stack",
            )


def _trail(graph: Graph) -> Iterator[Finding]:
    yield from _aws_trail(graph)
    yield from _azure_trail(graph)


def _unlocked_archive(graph: Graph) -> Iterator[Finding]:
    accounts = {
        account.urn: account
        for export in _activity_log_exports(graph)
        for account in graph.linked(export, "storageAccountId", (tokens.STORAGE_ACCOUNT,), "accountName")
    }
    for account in accounts.values():
        if (_immutability(account).get("immutabilityPolicy") or {}).get("state") == "Unlocked":
            yield (
                account.urn,
                "the immutability policy is unlocked: an owner can still shorten it; the next `pulumi "
                "up` locks it",
            )


# --- detection -------------------------------------------------------------------------------------


def _enabled_features(detector: Subject, graph: Graph) -> set[str]:
    return {
        str(feature.get("name"))
        for feature in graph.of(DETECTOR_FEATURE)
        if feature.get("status") == "ENABLED" and detector in graph.linked(feature, "detectorId", (DETECTOR,))
    }


def _aws_detection(graph: Graph) -> Iterator[Finding]:
    clusters = [
        cluster
        for cluster in _audited_clusters(graph, EKS_CLUSTER)
        if cluster.tags().get(THREAT_DETECTION_TAG) != EXISTING_DETECTION
    ]
    if not clusters:
        return
    enterprise = any(cluster.tier() == "enterprise" for cluster in clusters)
    needed = {"EKS_AUDIT_LOGS"} | ({"RUNTIME_MONITORING"} if enterprise else set())
    best: list[str] | None = None
    for detector in graph.of(DETECTOR):
        features = _enabled_features(detector, graph)
        if "EKS_RUNTIME_MONITORING" in features:
            features.add("RUNTIME_MONITORING")
        missing = sorted(needed - features)
        problems = (
            ["the detector is suspended (enable: false)"] if detector.get("enable") is False else []
        ) + [f"GuardDuty feature {name} is not ENABLED" for name in missing]
        if not problems:
            return
        best = problems if best is None or len(problems) < len(best) else best
    for cluster in clusters:
        for problem in best or ["no GuardDuty detector watches this audited stack"]:
            yield cluster.urn, problem


def _azure_detection(graph: Graph) -> Iterator[Finding]:
    clusters = _audited_clusters(graph, tokens.AKS_CLUSTER)
    declared = any(
        account.tags().get(AZURE_THREAT_DETECTION_TAG) == EXISTING_DETECTION
        for account in graph.of(tokens.STORAGE_ACCOUNT)
    )
    if not clusters or declared:
        return
    on = {
        p.get("pricingName")
        for p in graph.of(PRICING)
        if p.get("pricingTier") == "Standard" and isinstance(p.get("scopeId"), str)
    }
    for resource_type, plan in DEFENDER_PLAN_FOR.items():
        if plan in on:
            continue
        for resource in graph.of(resource_type)[:1]:
            yield resource.urn, f"Defender plan {plan} is not on (Standard) for this stack's subscription"


def _detection(graph: Graph) -> Iterator[Finding]:
    yield from _aws_detection(graph)
    yield from _azure_detection(graph)


# --- data-store audit logs -------------------------------------------------------------------------


def _azure_audit_logged(resource: Subject, graph: Graph, archived: bool = False) -> bool:
    """A diagnostic setting sends ``resource``'s audit categories somewhere; with ``archived``, into a
    storage account of the stack with time-based immutability (the tamper-evident store issue 34 asks
    the cluster's audit log to reach, not only the queryable workspace)."""
    wanted = AZURE_AUDIT_CATEGORIES[resource.type]
    for setting in graph.of(DIAGNOSTIC_SETTING):
        if resource not in graph.linked(setting, "resourceUri", (resource.type,)):
            continue
        categories, groups = _categories(setting)
        if not (categories & wanted or groups & _AUDIT_GROUPS):
            continue
        accounts = graph.linked(setting, "storageAccountId", (tokens.STORAGE_ACCOUNT,), "accountName")
        if not archived or any(not list(archive_problems(account)) for account in accounts):
            return True
    return False


def _pgaudit_problem(database: Subject, graph: Graph) -> str | None:
    """Why the database's statements are not audited by pgAudit (RDS user guide, "Setting up the pgAudit
    extension": pgaudit in the parameter group's shared_preload_libraries, classes in pgaudit.log)."""
    groups = graph.linked(database, "parameterGroupName", (RDS_PARAMETER_GROUP,), identity="name")
    values = {
        str(parameter.get("name")): str(parameter.get("value", ""))
        for group in groups
        for parameter in elements(group.props, "parameters")
    }
    preloaded = [v.strip() for v in values.get("shared_preload_libraries", "").split(",")]
    classes = {c.strip().lower() for c in values.get("pgaudit.log", "").split(",")} - {"", "none"}
    if "pgaudit" not in preloaded or not classes:
        return (
            "statements are not audited: its parameter group must preload pgaudit "
            "(shared_preload_libraries) and name the classes to log (pgaudit.log, such as ddl,role,write)"
        )
    return None


def _data_store_logs(graph: Graph) -> Iterator[Finding]:
    eks = _audited_clusters(graph, EKS_CLUSTER)
    for cluster in eks:
        off = [t for t in EKS_CONTROL_PLANE_LOGS if t not in (cluster.get("enabledClusterLogTypes") or [])]
        if off:
            yield (
                cluster.urn,
                f"control-plane log types off: {', '.join(off)}; CIS EKS 2.1.1 wants all of "
                f"{', '.join(EKS_CONTROL_PLANE_LOGS)} in enabledClusterLogTypes",
            )
    if eks:
        for database in graph.of(RDS_INSTANCE):
            if database.get("engine") != "postgres":
                continue
            if "postgresql" not in (database.get("enabledCloudwatchLogsExports") or []):
                yield (
                    database.urn,
                    "the PostgreSQL log is not exported: add postgresql to enabledCloudwatchLogsExports",
                )
            problem = _pgaudit_problem(database, graph)
            if problem:
                yield database.urn, problem
    if _audited_clusters(graph, tokens.AKS_CLUSTER):
        for resource_type, categories in AZURE_AUDIT_CATEGORIES.items():
            for resource in graph.of(resource_type):
                if not _azure_audit_logged(resource, graph):
                    yield (
                        resource.urn,
                        "no diagnostic setting sends its audit logs anywhere (category group audit, or "
                        f"{', '.join(sorted(categories))})",
                    )
                elif resource_type == tokens.AKS_CLUSTER and not _azure_audit_logged(resource, graph, True):
                    yield (
                        resource.urn,
                        "kube-audit / kube-audit-admin reach no immutable storage account: add them to a "
                        "diagnostic setting into the audit archive",
                    )


POLICIES = [
    stack_policy(
        "audit-trail",
        "An audited stack (enterprise or prod) keeps a tamper-evident control-plane trail in the "
        "residency: CloudTrail multi-region, validated, KMS-encrypted, into an Object-Locked (COMPLIANCE) "
        "bucket, or a declared organisation trail; on Azure the Activity Log exported into an immutable "
        "storage account (ISO/IEC 27001:2022 A.8.15; CIS AWS Foundations CloudTrail recommendations).",
        _trail,
        severity=Severity.HIGH,
        settings=("allowedAwsRegions", "allowedAzureLocations", "minimumAuditRetentionDays"),
    ),
    stack_policy(
        "audit-archive-locked",
        "The Azure audit archive's immutability policy is locked (Azure creates it unlocked; the next "
        "`pulumi up` locks it).",
        _unlocked_archive,
        severity=Severity.MEDIUM,
        enforcement=ADVISORY,
    ),
    stack_policy(
        "threat-detection",
        "An audited stack runs threat detection: GuardDuty with EKS audit-log monitoring (runtime "
        "monitoring in enterprise), or the Defender for Cloud plan of each protected Azure resource type "
        "(ISO/IEC 27001:2022 A.8.16).",
        _detection,
        severity=Severity.HIGH,
    ),
    stack_policy(
        "data-store-audit-logs",
        "In an audited stack every control plane and data store records access: every EKS control-plane "
        "log type (CIS EKS 2.1.1), the RDS PostgreSQL log export with pgAudit statement logging, and "
        "audit categories from every AKS cluster (kube-audit or kube-audit-admin, CIS AKS 2.1.1), Key "
        "Vault, storage account, container registry and PostgreSQL server (ISO/IEC 27001:2022 A.8.15).",
        _data_store_logs,
        severity=Severity.HIGH,
        settings=("allowedAzureLocations", "minimumAuditRetentionDays"),
    ),
    stack_policy(
        "lifecycle-record-locked",
        "An audited stack keeps its model lifecycle record (alias moves, approvals, rollout steps) where "
        "no identity of the stack can rewrite or delete it: an S3 bucket with Object Lock in COMPLIANCE "
        "mode that only the registry's role appends to and no IAM role, user or group deletes on or "
        "reconfigures, or an Azure "
        "storage account with version-level immutability under a locked time-based policy and no role on "
        "it that can replace or delete a blob or manage the account (issue 40; ISO/IEC 27001:2022 A.8.15; "
        "S3 user guide, Object Lock retention modes; Azure Storage, time-based retention policies).",
        _lifecycle_records,
        severity=Severity.HIGH,
    ),
]
