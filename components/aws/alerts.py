"""Security alerts on the audit trail and the EKS audit log (docs/compliance.md, "Alerts and runbook").

Each alert is a CloudWatch Logs metric filter on a log group, a metric in the stack's namespace and an
alarm that publishes to the stack's security topic (SNS, encrypted under the logging key) on the first
matching event: the CIS AWS Foundations monitoring pattern (section 4, "metric filter and alarm").
Subscribe the security team's endpoint to the topic (exported as ``securityAlertsTopic``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
from pulumi_aws import cloudwatch, sns

# Where an alert's events are: the trail's CloudWatch copy or the EKS control-plane log group.
TRAIL, EKS = "trail", "eks"


@dataclass(frozen=True)
class SecurityAlert:
    source: str
    pattern: str
    # What it means, for the alarm description (the runbook is docs/compliance.md).
    description: str


# CloudWatch Logs filter pattern syntax for JSON events ("Filter pattern syntax for metric filters":
# $.field selectors, &&, ||, wildcards in string values).
SECURITY_ALERTS: dict[str, SecurityAlert] = {
    # CIS AWS Foundations, monitoring: "disabling or scheduled deletion of customer created CMKs".
    "kms-key-disabled-or-deleted": SecurityAlert(
        TRAIL,
        '{ ($.eventSource = "kms.amazonaws.com") && (($.eventName = "DisableKey") || '
        '($.eventName = "ScheduleKeyDeletion")) }',
        "a KMS key was disabled or scheduled for deletion",
    ),
    # A key custodian (or the deployer) may change a key policy or grant use (KMS developer guide, "Default
    # key policy": key administrators "can give themselves and others AWS KMS permissions not specified in
    # this policy"; review 35 A2): each such change alarms. Grants an AWS service makes on a caller's
    # behalf (``userIdentity.invokedBy``: RDS, EBS, EFS attaching the key to what they create) or a
    # service-linked role makes (EC2 Auto Scaling's, launching nodes) are routine and do not. CloudTrail
    # KMS entries: developer guide, "PutKeyPolicy" and "CreateGrant" log examples; ``NOT EXISTS`` and a
    # trailing wildcard: CloudWatch Logs, "Using filter patterns to match terms in JSON log events".
    "kms-key-policy-or-grant-changed": SecurityAlert(
        TRAIL,
        '{ ($.eventSource = "kms.amazonaws.com") && (($.eventName = "PutKeyPolicy") || '
        '(($.eventName = "CreateGrant") && ($.userIdentity.invokedBy NOT EXISTS) && '
        '($.userIdentity.sessionContext.sessionIssuer.userName != "AWSServiceRole*"))) }',
        "a KMS key policy was changed or a grant was created by a person or a role (not an AWS service)",
    ),
    # CIS AWS Foundations, monitoring: "CloudTrail configuration changes", narrowed to what silences it.
    "trail-stopped-or-changed": SecurityAlert(
        TRAIL,
        '{ ($.eventSource = "cloudtrail.amazonaws.com") && (($.eventName = "StopLogging") || '
        '($.eventName = "DeleteTrail") || ($.eventName = "UpdateTrail") || '
        '($.eventName = "PutEventSelectors")) }',
        "a CloudTrail trail was stopped, deleted or changed",
    ),
    # GuardDuty itself switched off or narrowed.
    "detection-disabled": SecurityAlert(
        TRAIL,
        '{ ($.eventSource = "guardduty.amazonaws.com") && (($.eventName = "DeleteDetector") || '
        '($.eventName = "UpdateDetector")) }',
        "a GuardDuty detector was deleted or updated",
    ),
    # Kubernetes audit events (audit.k8s.io/v1 Event: verb, objectRef.subresource): kubectl exec and
    # attach on the pods/exec and pods/attach subresources, a create over SPDY (POST) and, since kubectl
    # 1.30 streams over WebSocket, a get (kubernetes/kubectl#1761; the audit event in
    # kubernetes/kubernetes#133623 reads "verb":"get" on .../exec).
    "pod-exec-or-attach": SecurityAlert(
        EKS,
        '{ (($.verb = "create") || ($.verb = "get")) && (($.objectRef.subresource = "exec") || '
        '($.objectRef.subresource = "attach")) }',
        "someone opened a shell in (exec) or attached to a pod",
    ),
    # Secrets are read by their workloads' service accounts and the control plane (user names system:*);
    # a read by a person or an IAM role mapped through an access entry is not the owner's.
    "secret-read-by-person": SecurityAlert(
        EKS,
        '{ ($.objectRef.resource = "secrets") && (($.verb = "get") || ($.verb = "list") || '
        '($.verb = "watch")) && ($.user.username != "system:*") }',
        "a Secret was read by a principal that is not an in-cluster identity",
    ),
}


@dataclass(frozen=True)
class SecurityAlertsArgs:
    stack: str
    key_arn: pulumi.Input[str]
    # Log group names by source (TRAIL, EKS), and what must exist before a filter is put on them.
    log_groups: Mapping[str, str]
    ready: tuple[pulumi.Resource, ...]
    tags: Mapping[str, str]


class SecurityAlerts(pulumi.ComponentResource):
    """The security topic and one metric filter and alarm per ``SECURITY_ALERTS`` entry."""

    def __init__(
        self, name: str, args: SecurityAlertsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:aws:SecurityAlerts", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.topic = sns.Topic(
            f"{name}-topic",
            name=f"{args.stack}-security-alerts",
            kms_master_key_id=args.key_arn,
            tags=dict(args.tags),
            opts=child,
        )
        namespace = f"ml-platform/{args.stack}/security"
        for alert_name, alert in SECURITY_ALERTS.items():
            cloudwatch.LogMetricFilter(
                f"{name}-{alert_name}",
                name=alert_name,
                log_group_name=args.log_groups[alert.source],
                pattern=alert.pattern,
                metric_transformation={"name": alert_name, "namespace": namespace, "value": "1"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.ready)),
            )
            cloudwatch.MetricAlarm(
                f"{name}-{alert_name}",
                name=f"{args.stack}-{alert_name}",
                alarm_description=f"{alert.description} (runbook: docs/compliance.md, {alert_name})",
                namespace=namespace,
                metric_name=alert_name,
                statistic="Sum",
                period=300,
                evaluation_periods=1,
                threshold=1,
                comparison_operator="GreaterThanOrEqualToThreshold",
                treat_missing_data="notBreaching",
                alarm_actions=[self.topic.arn],
                tags=dict(args.tags),
                opts=child,
            )
        self.topic_arn: pulumi.Output[str] = self.topic.arn
        self.register_outputs({"topic": self.topic.arn})
