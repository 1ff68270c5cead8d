"""The account's audit trail and threat detection for one stack (docs/compliance.md).

- A CloudTrail trail recording every region's management events (KMS and IAM included) and, where
  ``audit.dataEvents`` is on, object-level events on the data bucket (datasets, models, registry
  artifacts), delivered to the stack's audit bucket in the stack's region (storage.py: Object Lock in
  COMPLIANCE mode, SSE-KMS under a logging key of its own), with log-file integrity validation and a
  copy in CloudWatch Logs for alerting (alerts.py).
- GuardDuty with EKS audit-log monitoring and, where ``audit.runtimeMonitoring`` is on, EKS runtime
  monitoring with GuardDuty managing its agent add-on (GuardDuty user guide, "EKS Protection" and
  "Runtime Monitoring").
- Where the account is already recorded by an organisation trail (``audit.organizationTrail``), no trail
  is created: the preview reads that trail and refuses the stack unless it is logging, multi-region and
  validated (``check_organization_trail``).

Names are fixed from the stack's name (the trail, its log group), so a second ``pulumi up`` finds the
same resources and the key policy can name the trail before it exists.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_aws import cloudcontrol, cloudtrail, cloudwatch, guardduty, iam

from components.aws.account import AwsAccount
from components.aws.iam import policy_document, role_name_prefix, service_trust_policy
from components.aws.keys import KeyUsers, administered_by_account, domain_use, logs_use_key
from components.aws.network import LOG_RETENTION_DAYS

CLOUDTRAIL = "cloudtrail.amazonaws.com"
# The audit domain: the trail, its bucket and log group, the security alerts, under the logging key and
# apart from the logs domain's key (separation of duties, docs/compliance.md).
AUDIT_DOMAIN = "audit"
# The tag on the EKS cluster that tells the policy pack the account's trail is an organisation's
# (policies/mlplatform_policies/audit.py), with the trail's ARN as its value.
AUDIT_TRAIL_TAG = "ml-platform.io/audit-trail"
# GuardDuty detector features (GuardDuty API reference, DetectorFeatureConfiguration.Name): only one of
# EKS_RUNTIME_MONITORING and RUNTIME_MONITORING may be set; RUNTIME_MONITORING is the current one.
EKS_AUDIT_LOGS = "EKS_AUDIT_LOGS"
RUNTIME_MONITORING = "RUNTIME_MONITORING"
EKS_ADDON_MANAGEMENT = "EKS_ADDON_MANAGEMENT"
# How often GuardDuty re-publishes a finding that keeps occurring (FIFTEEN_MINUTES is the shortest).
FINDING_FREQUENCY = "FIFTEEN_MINUTES"


def trail_name(stack: str) -> str:
    return f"{stack}-audit"


def trail_log_group(stack: str) -> str:
    return f"/aws/cloudtrail/{trail_name(stack)}"


def trail_arn(account: AwsAccount, stack: str) -> str:
    return account.arn("cloudtrail", f"trail/{trail_name(stack)}")


def logging_key_policy(
    account: AwsAccount, trail: str, readers: KeyUsers, administrators: Sequence[str] = ()
) -> dict[str, Any]:
    """The logging key's policy (CloudTrail user guide, "Configure AWS KMS key policies for CloudTrail"):
    CloudTrail may generate data keys for this account's trails, decrypt (the audit bucket uses an S3
    Bucket Key under this key, and the guide: "If you use an existing S3 bucket with an S3 Bucket Key,
    kms:Decrypt permission is required to create or update a trail with SSE-KMS encryption enabled") and
    describe the key, each only for ``trail`` (aws:SourceArn, as the guide recommends); CloudWatch Logs
    encrypts the trail's log group.
    Its ``readers`` (the auditors the role-to-key table gives the audit domain) decrypt through S3 only
    (``domain_use``), each named: reading the trail takes an IAM grant on the bucket and this key and a
    place on this list; the root itself administers the key and reads nothing."""
    source = {"aws:SourceArn": trail}
    return policy_document(
        [
            *administered_by_account(account, administrators),
            *domain_use(account, "Audit", readers, services=("s3",)),
            {
                "Sid": "CloudTrailEncryptsThisTrailsLogs",
                "Effect": "Allow",
                "Principal": {"Service": CLOUDTRAIL},
                "Action": "kms:GenerateDataKey*",
                "Resource": "*",
                "Condition": {
                    "StringEquals": source,
                    "StringLike": {
                        "kms:EncryptionContext:aws:cloudtrail:arn": account.arn("cloudtrail", "trail/*")
                    },
                },
            },
            {
                "Sid": "CloudTrailDecryptsThroughBucketKey",
                "Effect": "Allow",
                "Principal": {"Service": CLOUDTRAIL},
                "Action": "kms:Decrypt",
                "Resource": "*",
                "Condition": {"StringEquals": source},
            },
            {
                "Sid": "CloudTrailDescribesKey",
                "Effect": "Allow",
                "Principal": {"Service": CLOUDTRAIL},
                "Action": "kms:DescribeKey",
                "Resource": "*",
                "Condition": {"StringEquals": source},
            },
            logs_use_key(account),
            {
                # CloudWatch alarms publish to the security topic encrypted under this key (SNS developer
                # guide, "Configure AWS KMS permissions for AWS services": CloudWatch).
                "Sid": "CloudWatchAlarmsPublishToSecurityTopic",
                "Effect": "Allow",
                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:SourceAccount": account.account_id}},
            },
        ]
    )


def event_selectors(data_bucket_arns: Sequence[pulumi.Input[str]]) -> list[dict[str, Any]]:
    """Management events (reads and writes; KMS and IAM calls among them), then object-level events on
    the data buckets, if any (CloudTrail user guide, "Logging data events": advanced event selectors)."""
    selectors: list[dict[str, Any]] = [
        {
            "name": "Management events",
            "field_selectors": [{"field": "eventCategory", "equals": ["Management"]}],
        }
    ]
    if data_bucket_arns:
        selectors.append(
            {
                "name": "Data bucket object events",
                "field_selectors": [
                    {"field": "eventCategory", "equals": ["Data"]},
                    {"field": "resources.type", "equals": ["AWS::S3::Object"]},
                    {
                        "field": "resources.ARN",
                        "starts_withs": [pulumi.Output.concat(arn, "/") for arn in data_bucket_arns],
                    },
                ],
            }
        )
    return selectors


@dataclass(frozen=True)
class AuditTrailArgs:
    account: AwsAccount
    stack: str
    key_arn: pulumi.Input[str]
    bucket_name: pulumi.Input[str]
    # Object events on these buckets; none: management events only.
    data_bucket_arns: Sequence[pulumi.Input[str]]
    protect: bool
    tags: Mapping[str, str]
    # What must exist before CloudTrail's first delivery: the bucket's policy and Object Lock rule.
    delivery_ready: pulumi.Resource


class AuditTrail(pulumi.ComponentResource):
    """The trail with its CloudWatch Logs copy."""

    def __init__(self, name: str, args: AuditTrailArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:aws:AuditTrail", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.log_group = cloudwatch.LogGroup(
            f"{name}-trail",
            name=trail_log_group(args.stack),
            retention_in_days=LOG_RETENTION_DAYS,
            kms_key_id=args.key_arn,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect),
        )
        # CloudTrail's role for CloudWatch Logs: create streams and put events in this group only
        # (CloudTrail user guide, "Role policy document for CloudTrail to use CloudWatch Logs").
        role = iam.Role(
            f"{name}-trail-logs",
            name_prefix=role_name_prefix(args.stack, "trail"),
            description="CloudTrail: deliver the stack's trail to its CloudWatch log group",
            assume_role_policy=service_trust_policy(CLOUDTRAIL),
            tags=dict(args.tags),
            opts=child,
        )
        role_policy = iam.RolePolicy(
            f"{name}-trail-logs",
            role=role.id,
            policy=self.log_group.arn.apply(
                lambda arn: json.dumps(
                    policy_document(
                        [
                            {
                                "Effect": "Allow",
                                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                                "Resource": f"{arn}:log-stream:*",
                            }
                        ]
                    )
                )
            ),
            opts=child,
        )
        self.trail = cloudtrail.Trail(
            f"{name}-trail",
            name=trail_name(args.stack),
            s3_bucket_name=args.bucket_name,
            kms_key_id=args.key_arn,
            enable_log_file_validation=True,
            enable_logging=True,
            is_multi_region_trail=True,
            include_global_service_events=True,
            advanced_event_selectors=event_selectors(args.data_bucket_arns),
            cloud_watch_logs_group_arn=pulumi.Output.concat(self.log_group.arn, ":*"),
            cloud_watch_logs_role_arn=role.arn,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.delivery_ready, role_policy]),
        )
        self.register_outputs({"trail": self.trail.arn, "logGroup": self.log_group.name})


def threat_detection(
    name: str, runtime_monitoring: bool, tags: Mapping[str, str], parent: pulumi.Resource
) -> guardduty.Detector:
    """GuardDuty in the stack's region with EKS audit-log monitoring, and runtime monitoring of the
    nodes with GuardDuty managing its security agent add-on when asked (the feature objects replace the
    detector's deprecated ``datasources``: GuardDuty "feature object API changes, March 2023")."""
    child = pulumi.ResourceOptions(parent=parent)
    detector = guardduty.Detector(
        f"{name}-detector",
        enable=True,
        finding_publishing_frequency=FINDING_FREQUENCY,
        tags=dict(tags),
        opts=child,
    )
    # GuardDuty deploys and updates its security agent as an EKS add-on (Runtime Monitoring, "Managing
    # the security agent automatically").
    addon = [{"name": EKS_ADDON_MANAGEMENT, "status": "ENABLED"}]
    for feature in detection_features(runtime_monitoring):
        guardduty.DetectorFeature(
            f"{name}-{feature.lower().replace('_', '-')}",
            detector_id=detector.id,
            name=feature,
            status="ENABLED",
            additional_configurations=addon if feature == RUNTIME_MONITORING else None,
            opts=child,
        )
    return detector


# The tag on the EKS cluster that tells the policy pack detection is the account's existing detector
# (``audit.detection: existing``), checked at preview (``check_existing_detection``).
THREAT_DETECTION_TAG = "ml-platform.io/threat-detection"


def detection_features(runtime_monitoring: bool) -> tuple[str, ...]:
    return (EKS_AUDIT_LOGS, RUNTIME_MONITORING) if runtime_monitoring else (EKS_AUDIT_LOGS,)


def check_existing_detection(runtime_monitoring: bool, region: str, parent: pulumi.Resource) -> None:
    """Raise a ``RunError`` unless the account's GuardDuty detector in the region is enabled with the
    features the stack would have turned on (GetDetector: status and features)."""
    where = f"audit.detection existing: the GuardDuty detector of {region}"
    try:
        detector = guardduty.get_detector(opts=pulumi.InvokeOptions(parent=parent))
    except Exception as exc:  # the invoke's error carries GuardDuty's message
        raise pulumi.RunError(
            f"{where} cannot be read ({exc}); check with: aws guardduty list-detectors --region {region}"
        ) from exc
    enabled = {f.name for f in detector.features if f.status == "ENABLED"}
    problems = [] if detector.status == "ENABLED" else [f"it is {detector.status}"]
    problems += [
        f"{name} is not ENABLED" for name in detection_features(runtime_monitoring) if name not in enabled
    ]
    if problems:
        raise pulumi.RunError(f"{where}: " + "; ".join(problems))


# What an organisation trail must be for the stack to rely on it, by AWS::CloudTrail::Trail property
# (CloudFormation resource reference, AWS::CloudTrail::Trail), and what it means when it is not.
ORGANIZATION_TRAIL_NEEDS = {
    "IsLogging": "it is not logging (aws cloudtrail start-logging)",
    "IsMultiRegionTrail": "it records one region only",
    "EnableLogFileValidation": "log file validation is off",
}


def check_organization_trail(arn: str, region: str, parent: pulumi.Resource) -> None:
    """Raise a ``RunError`` unless the trail ``arn`` exists and is logging every region with validated
    log files: the stack creates no trail of its own and must not run unrecorded. Read through Cloud
    Control (GetResource on AWS::CloudTrail::Trail), which takes the trail's ARN as its identifier."""
    try:
        found = cloudcontrol.get_resource(
            type_name="AWS::CloudTrail::Trail", identifier=arn, opts=pulumi.InvokeOptions(parent=parent)
        )
    except Exception as exc:  # the invoke's error carries Cloud Control's message
        raise pulumi.RunError(
            f"audit.organizationTrail: cannot read {arn} from {region} ({exc}); check with: "
            f"aws cloudtrail get-trail-status --name {arn} --region {region}"
        ) from exc
    properties = json.loads(found.properties)
    problems = [why for key, why in ORGANIZATION_TRAIL_NEEDS.items() if properties.get(key) is not True]
    if problems:
        raise pulumi.RunError(f"audit.organizationTrail: {arn}: " + "; ".join(problems))
