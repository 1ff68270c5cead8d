"""The object stores: the data bucket (models, checkpoints, the registry's artifacts), the datasets bucket
(review B5: one data domain per bucket, each under its domain's key; a stack made before it keeps its
datasets in the data bucket), and the bucket their access logs go to.

Both buckets get the same baseline (REFERENCE.md, "S3"): all four public-access-block flags, bucket-owner
object ownership (no ACLs), versioning with non-current versions expiring, and a policy that refuses
plain HTTP. There is no replication configuration: me-central-1 is the only UAE region, so any
cross-region copy would take the data out of the country.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_aws import s3

from components.aws.account import AwsAccount
from components.aws.iam import policy_document
from components.aws.keys import DATASETS_DOMAIN
from components.config import DATA_DOMAIN_TAG, ROLE_TAG, KeyDomain

# Object key prefixes, shared by the IRSA policies: training reads datasets and writes models and
# checkpoints; inference reads models (model artifact contract, DESIGN.md).
DATASETS_PREFIX = "datasets/"
MODELS_PREFIX = "models/"
CHECKPOINTS_PREFIX = "checkpoints/"
# The model registry's artifacts: only its role may touch them (the server proxies every transfer).
REGISTRY_PREFIX = "registry/"
ACCESS_LOG_PREFIX = "s3-access/"
# The policy pack's exception contract (policies/mlplatform_policies/settings.py): a bucket with this
# role (ROLE_TAG) may use SSE-S3 instead of SSE-KMS.
ACCESS_LOGS_ROLE = "access-logs"
# The lifecycle record's bucket, by its role (ROLE_TAG): the pack's ``lifecycle-record-locked`` finds it so
# (policies/mlplatform_policies/settings.py), and the record's objects sit under RECORD_PREFIX
# (workloads/registry/record.py, docs/lifecycle.md).
LIFECYCLE_RECORD_ROLE = "lifecycle-record"
RECORD_PREFIX = "lifecycle-record/"


def deny_insecure_transport(bucket_arn: pulumi.Input[str]) -> dict[str, Any]:
    """Refuse any request not made over TLS (S3 user guide, "Enforce encryption in transit")."""
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [bucket_arn, pulumi.Output.concat(bucket_arn, "/*")],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def sse_kms_under(key_arn: pulumi.Input[str]) -> dict[str, Any]:
    """Default encryption under ``key_arn``; the bucket key cuts KMS requests (and their cost) by reusing a
    data key per bucket."""
    return {
        "apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms", "kms_master_key_id": key_arn},
        "bucket_key_enabled": True,
    }


@dataclass(frozen=True)
class AuditStoreArgs:
    """The CloudTrail bucket: encrypted under the logging key, written only by the stack's trail, and
    every delivered file locked for ``retention_days`` in COMPLIANCE mode, which nobody, the account
    root included, can shorten or lift (S3 user guide, "Object Lock retention modes")."""

    key_arn: pulumi.Input[str]
    trail_arn: str
    retention_days: int
    # The audit domain (components/aws/audit.AUDIT_DOMAIN), which the logging key serves.
    domain: str


@dataclass(frozen=True)
class ObjectStoreArgs:
    account: AwsAccount
    key_arn: pulumi.Input[str]
    noncurrent_version_days: int
    # Production protects both buckets and keeps them if the stack is destroyed.
    protect: bool
    tags: Mapping[str, str]
    audit: AuditStoreArgs | None = None
    # The lifecycle record's bucket and how long each event is locked; None: no record bucket.
    record_retention_days: int | None = None
    # The datasets bucket's key; None: no datasets bucket, the datasets stay in the data bucket (a stack
    # made before it, components/aws/keys.py ``made_before_datasets_bucket``).
    datasets_key_arn: pulumi.Input[str] | None = None


class ObjectStore(pulumi.ComponentResource):
    """The data bucket (SSE-KMS under the object-data key, with a bucket key) and the datasets bucket (under
    the datasets key), logging to a log bucket."""

    def __init__(self, name: str, args: ObjectStoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:aws:ObjectStore", name, None, opts)
        self._name, self._args = name, args
        sse_kms = sse_kms_under(args.key_arn)
        self.bucket = self._hardened_bucket("data", sse_kms, domain=KeyDomain.OBJECTS.value)
        self.datasets_bucket = (
            self._hardened_bucket("datasets", sse_kms_under(args.datasets_key_arn), domain=DATASETS_DOMAIN)
            if args.datasets_key_arn is not None
            else None
        )
        # S3 server access logging to a target whose default encryption is SSE-KMS is documented as
        # unsupported (S3 user guide, "Enabling Amazon S3 server access logging": the target may use
        # SSE-S3 only), so the log bucket alone uses SSE-S3 and says why by its role tag, which is what
        # the policy pack's exception looks at.
        # The trail's bucket first: the log bucket's policy names it as a source of access logs.
        self.audit_bucket = self._audit_bucket(args.audit) if args.audit is not None else None
        self.record_bucket = (
            self._record_bucket(sse_kms, args.record_retention_days)
            if args.record_retention_days is not None
            else None
        )
        sse_s3 = {"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}
        self.log_bucket = self._hardened_bucket("logs", sse_s3, self._log_delivery, role=ACCESS_LOGS_ROLE)
        logged = {"data": (self.bucket, ACCESS_LOG_PREFIX)}
        if self.datasets_bucket is not None:
            logged["datasets"] = (self.datasets_bucket, f"{ACCESS_LOG_PREFIX}datasets/")
        if self.audit_bucket is not None:
            logged["audit"] = (self.audit_bucket, f"{ACCESS_LOG_PREFIX}audit/")
        if self.record_bucket is not None:
            logged["record"] = (self.record_bucket, f"{ACCESS_LOG_PREFIX}record/")
        for suffix, (source, prefix) in logged.items():
            s3.BucketLogging(
                f"{name}-{suffix}",
                bucket=source.id,
                target_bucket=self.log_bucket.id,
                target_prefix=prefix,
                opts=pulumi.ResourceOptions(parent=self),
            )
        # Every bucket of the stack, for the S3 endpoint's policy (network.s3_endpoint_policy).
        self.buckets: tuple[s3.Bucket, ...] = (
            self.bucket,
            *((self.datasets_bucket,) if self.datasets_bucket is not None else ()),
            self.log_bucket,
            *((self.audit_bucket,) if self.audit_bucket is not None else ()),
            *((self.record_bucket,) if self.record_bucket is not None else ()),
        )
        # Where the lifecycle record is written and read (``--record``, ``$MLPLATFORM_RECORD``).
        self.record_uri: pulumi.Output[str] | None = (
            pulumi.Output.concat("s3://", self.record_bucket.bucket, "/", RECORD_PREFIX.rstrip("/"))
            if self.record_bucket is not None
            else None
        )
        self.bucket_name: pulumi.Output[str] = self.bucket.bucket
        self.bucket_arn: pulumi.Output[str] = self.bucket.arn
        self.uri: pulumi.Output[str] = pulumi.Output.concat("s3://", self.bucket.bucket)
        # Where training reads datasets: the datasets bucket, or the data bucket where there is none.
        self.datasets_uri: pulumi.Output[str] = pulumi.Output.concat(
            "s3://", (self.datasets_bucket or self.bucket).bucket, "/", DATASETS_PREFIX.rstrip("/")
        )
        self.register_outputs(
            {
                "bucket": self.bucket_name,
                "logBucket": self.log_bucket.bucket,
                "uri": self.uri,
                "datasetsUri": self.datasets_uri,
                **({"recordUri": self.record_uri} if self.record_uri is not None else {}),
            }
        )

    def _log_delivery(self, log_bucket_arn: pulumi.Output[str]) -> list[dict[str, Any]]:
        """Let the S3 logging service write this stack's data-bucket logs, and nothing else (S3 user
        guide, "Permissions for log delivery": SourceArn and SourceAccount against confused deputies)."""
        return [
            {
                "Sid": "S3ServerAccessLogDelivery",
                "Effect": "Allow",
                "Principal": {"Service": "logging.s3.amazonaws.com"},
                "Action": "s3:PutObject",
                "Resource": pulumi.Output.concat(log_bucket_arn, f"/{ACCESS_LOG_PREFIX}*"),
                "Condition": {
                    "ArnLike": {"aws:SourceArn": self._logged_arns()},
                    "StringEquals": {"aws:SourceAccount": self._args.account.account_id},
                },
            }
        ]

    def _logged_arns(self) -> pulumi.Output[str] | list[pulumi.Output[str]]:
        """The buckets whose access logs the log bucket takes."""
        data_arn: pulumi.Output[str] = self.bucket.arn
        others = [b for b in (self.datasets_bucket, self.audit_bucket, self.record_bucket) if b is not None]
        if not others:
            return data_arn
        return [data_arn, *(b.arn for b in others)]

    def _audit_bucket(self, audit: AuditStoreArgs) -> s3.Bucket:
        """The trail's bucket (AuditStoreArgs), with CloudTrail's delivery grants (CloudTrail user guide,
        "Amazon S3 bucket policy for CloudTrail": GetBucketAcl and PutObject under AWSLogs/<account>/,
        each limited to this trail by aws:SourceArn)."""
        account = self._args.account.account_id

        def trail_delivery(arn: pulumi.Output[str]) -> list[dict[str, Any]]:
            only_this_trail = {"StringEquals": {"aws:SourceArn": audit.trail_arn}}
            service = {"Service": "cloudtrail.amazonaws.com"}
            return [
                {
                    "Sid": "CloudTrailAclCheck",
                    "Effect": "Allow",
                    "Principal": service,
                    "Action": "s3:GetBucketAcl",
                    "Resource": arn,
                    "Condition": only_this_trail,
                },
                {
                    "Sid": "CloudTrailWrite",
                    "Effect": "Allow",
                    "Principal": service,
                    "Action": "s3:PutObject",
                    "Resource": pulumi.Output.concat(arn, f"/AWSLogs/{account}/*"),
                    "Condition": {
                        "StringEquals": {
                            "aws:SourceArn": audit.trail_arn,
                            "s3:x-amz-acl": "bucket-owner-full-control",
                        }
                    },
                },
            ]

        return self._locked_bucket(
            "audit", sse_kms_under(audit.key_arn), trail_delivery, audit.retention_days, domain=audit.domain
        )

    def _record_bucket(self, sse_kms: Mapping[str, Any], retention_days: int) -> s3.Bucket:
        """The lifecycle record (workloads/registry/record.py): under the stack's key, every event locked
        in COMPLIANCE mode for ``retention_days``, and every write to it create-only: a PutObject without
        ``If-None-Match`` is refused whoever sends it (S3 user guide, "Enforce conditional writes on Amazon
        S3 buckets"), so no key is ever given a second version. Its own bucket, not the trail's: the
        writers (the rollout, the approvers) get no grant on CloudTrail's bucket and logging key, and the
        record exists where an organisation trail stands in for the stack's own."""

        def create_only(arn: pulumi.Output[str]) -> list[dict[str, Any]]:
            return [
                {
                    "Sid": "DenyWritesThatCouldReplace",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:PutObject",
                    "Resource": pulumi.Output.concat(arn, "/*"),
                    "Condition": {"Null": {"s3:if-none-match": "true"}},
                }
            ]

        return self._locked_bucket(
            "record",
            sse_kms,
            create_only,
            retention_days,
            role=LIFECYCLE_RECORD_ROLE,
            domain=KeyDomain.OBJECTS.value,
        )

    def _locked_bucket(
        self,
        suffix: str,
        encryption: Mapping[str, Any],
        grants: Callable[[pulumi.Output[str]], Sequence[Mapping[str, Any]]],
        retention_days: int,
        role: str | None = None,
        domain: str | None = None,
    ) -> s3.Bucket:
        """A hardened bucket whose every object is locked for ``retention_days`` in COMPLIANCE mode, which
        nobody, the account root included, can shorten or lift. Object Lock is turned on at creation only
        for a bucket made with it (S3 user guide, "Configuring S3 Object Lock"); versioning comes with it."""
        bucket = self._hardened_bucket(suffix, encryption, grants, role, object_lock=True, domain=domain)
        s3.BucketObjectLockConfiguration(
            f"{self._name}-{suffix}",
            bucket=bucket.id,
            object_lock_enabled="Enabled",
            rule={"default_retention": {"mode": "COMPLIANCE", "days": retention_days}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        return bucket

    def _hardened_bucket(
        self,
        suffix: str,
        encryption: Mapping[str, Any],
        grants: Callable[[pulumi.Output[str]], Sequence[Mapping[str, Any]]] | None = None,
        role: str | None = None,
        *,
        object_lock: bool = False,
        domain: str | None = None,
    ) -> s3.Bucket:
        """A private, versioned, TLS-only bucket; ``grants`` adds policy statements given its ARN. A bucket
        under a customer key names its data ``domain`` (``DATA_DOMAIN_TAG``), which its key must serve."""
        name, args = f"{self._name}-{suffix}", self._args
        child = pulumi.ResourceOptions(parent=self)
        bucket = s3.Bucket(
            name,
            force_destroy=False,
            object_lock_enabled=True if object_lock else None,
            tags={
                **args.tags,
                **({ROLE_TAG: role} if role else {}),
                **({DATA_DOMAIN_TAG: domain} if domain else {}),
            },
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect),
        )
        block = s3.BucketPublicAccessBlock(
            name,
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        s3.BucketOwnershipControls(
            name, bucket=bucket.id, rule={"object_ownership": "BucketOwnerEnforced"}, opts=child
        )
        s3.BucketServerSideEncryptionConfiguration(
            name, bucket=bucket.id, rules=[dict(encryption)], opts=child
        )
        s3.BucketVersioning(
            name, bucket=bucket.id, versioning_configuration={"status": "Enabled"}, opts=child
        )
        s3.BucketLifecycleConfiguration(
            name,
            bucket=bucket.id,
            rules=[
                {
                    "id": "expire-noncurrent-versions",
                    "status": "Enabled",
                    "filter": {"prefix": ""},
                    "noncurrent_version_expiration": {"noncurrent_days": args.noncurrent_version_days},
                }
            ],
            opts=child,
        )
        s3.BucketPolicy(
            name,
            bucket=bucket.id,
            policy=pulumi.Output.json_dumps(
                policy_document(
                    [deny_insecure_transport(bucket.arn), *(grants(bucket.arn) if grants else [])]
                )
            ),
            # The block must be in place first, so the policy is never briefly evaluated without it.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[block]),
        )
        return bucket
