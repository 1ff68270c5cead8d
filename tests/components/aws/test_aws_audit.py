"""The AWS audit trail, detection and alerts as planned (components/aws/audit.py, alerts.py).

Sources: CloudTrail user guide ("Configure AWS KMS key policies for CloudTrail": aws:SourceArn names the
trail; "Amazon S3 bucket policy for CloudTrail"); S3 user guide ("Object Lock retention modes");
GuardDuty API reference (DetectorFeatureConfiguration); CIS AWS Foundations section 4 (metric filter and
alarm per monitored event).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from components.aws import alerts
from components.aws.alerts import SECURITY_ALERTS
from components.config import ConfigError, parse_stack_config
from mlplatform.plan import Plan
from tests.stack_variants import template

TRAIL = "aws:cloudtrail/trail:Trail"


def test_the_trail_is_validated_multi_region_and_keyed_by_a_key_that_names_it(
    cloud_plan: Callable[[str], Plan],
) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    (trail,) = plan.by_type(TRAIL)
    assert trail.inputs["name"] == "aws-enterprise-prod-audit"
    assert trail.inputs["enableLogFileValidation"] is True and trail.inputs["isMultiRegionTrail"] is True
    (key,) = [k for k in plan.by_type("aws:kms/key:Key") if k.name.endswith("-audit-key")]
    assert trail.property_dependencies["kmsKeyId"] == [key.urn]
    statements = json.loads(key.inputs["policy"])["Statement"]
    [encrypt] = [s for s in statements if s.get("Sid") == "CloudTrailEncryptsThisTrailsLogs"]
    assert encrypt["Condition"]["StringEquals"]["aws:SourceArn"] == (
        "arn:aws:cloudtrail:me-central-1:123456789012:trail/aws-enterprise-prod-audit"
    )


@pytest.mark.parametrize(("stack", "extras"), [("aws-enterprise-prod", True), ("aws-smb-prod", False)])
def test_smb_prod_keeps_the_trail_without_the_per_use_features(
    cloud_plan: Callable[[str], Plan], stack: str, extras: bool
) -> None:
    """Data events and runtime monitoring are billed per use: on in enterprise, off in SMB prod."""
    plan = cloud_plan(stack)
    (trail,) = plan.by_type(TRAIL)
    selectors = [s["name"] for s in trail.inputs["advancedEventSelectors"]]
    assert ("Data bucket object events" in selectors) is extras
    features = {f.inputs["name"] for f in plan.by_type("aws:guardduty/detectorFeature:DetectorFeature")}
    assert features == ({"EKS_AUDIT_LOGS", "RUNTIME_MONITORING"} if extras else {"EKS_AUDIT_LOGS"})


def test_retention_follows_the_stack_key(
    variant: Callable[[str, Callable[[dict[str, object]], None]], Plan],
) -> None:
    plan = variant("aws-smb-prod", lambda body: body.update(audit={"retentionDays": 730}))
    # The trail's bucket and the model lifecycle record's (docs/lifecycle.md, "The record") both keep it.
    locks = plan.by_type("aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration")
    assert len(locks) == 2
    retention = {"mode": "COMPLIANCE", "days": 730}
    assert all(lock.inputs["rule"]["defaultRetention"] == retention for lock in locks)


def test_every_alert_alarms_the_encrypted_security_topic_from_a_planned_log_group(
    cloud_plan: Callable[[str], Plan],
) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    (topic,) = plan.by_type("aws:sns/topic:Topic")
    (key,) = [k for k in plan.by_type("aws:kms/key:Key") if k.name.endswith("-audit-key")]
    assert topic.property_dependencies["kmsMasterKeyId"] == [key.urn]
    groups = {g.inputs["name"] for g in plan.by_type("aws:cloudwatch/logGroup:LogGroup")}
    filters = {f.inputs["name"]: f for f in plan.by_type("aws:cloudwatch/logMetricFilter:LogMetricFilter")}
    alarms = {a.inputs["metricName"]: a for a in plan.by_type("aws:cloudwatch/metricAlarm:MetricAlarm")}
    assert set(filters) == set(alarms) == set(SECURITY_ALERTS)
    for name, metric_filter in filters.items():
        assert metric_filter.inputs["logGroupName"] in groups, name
        assert alarms[name].property_dependencies["alarmActions"] == [topic.urn]


def test_pod_exec_alert_matches_websocket_exec() -> None:
    """kubectl 1.30+ exec streams over WebSocket, a get on pods/exec (kubernetes/kubectl#1761; the audit
    event in kubernetes/kubernetes#133623 reads "verb":"get"); older SPDY exec is a create."""
    pattern = SECURITY_ALERTS["pod-exec-or-attach"].pattern
    assert '($.verb = "get")' in pattern and '($.verb = "create")' in pattern


def test_a_key_policy_change_or_a_persons_grant_alarms_and_a_services_grant_does_not() -> None:
    """A key custodian can grant itself use by PutKeyPolicy or CreateGrant (KMS developer guide, "Default
    key policy"; review 35 A2): both alarm, besides DisableKey and ScheduleKeyDeletion; a grant an AWS
    service makes for its caller (``invokedBy``) or a service-linked role makes is routine."""
    kms = SECURITY_ALERTS["kms-key-policy-or-grant-changed"]
    assert kms.source == alerts.TRAIL
    assert '($.eventName = "PutKeyPolicy")' in kms.pattern
    assert '(($.eventName = "CreateGrant") && ($.userIdentity.invokedBy NOT EXISTS)' in kms.pattern
    deleted = SECURITY_ALERTS["kms-key-disabled-or-deleted"].pattern
    assert '($.eventName = "ScheduleKeyDeletion")' in deleted and '($.eventName = "DisableKey")' in deleted


def test_an_organisation_trail_is_an_aws_trail_named_by_its_arn() -> None:
    config = template("aws-enterprise-prod")
    config["ml-platform:platform"]["audit"] = {"organizationTrail": "trail/org"}
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(config, "Pulumi.aws-enterprise-prod.yaml")
    assert raised.value.problems == [
        "Pulumi.aws-enterprise-prod.yaml: ml-platform:platform.audit.organizationTrail: 'trail/org' must be "
        "a CloudTrail trail ARN: arn:aws:cloudtrail:<region>:<12-digit account>:trail/<name>"
    ]
    azure = template("azure-enterprise-prod")
    azure["ml-platform:platform"]["audit"] = {
        "organizationTrail": "arn:aws:cloudtrail:me-central-1:111122223333:trail/org"
    }
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(azure, "Pulumi.azure-enterprise-prod.yaml")
    assert raised.value.problems == [
        "Pulumi.azure-enterprise-prod.yaml: ml-platform:platform.audit.organizationTrail: an AWS setting "
        "(CloudTrail); "
        "this stack's cloud is azure"
    ]
