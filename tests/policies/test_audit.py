"""The audit policies (issue 34), both ways, through the real pack over gRPC on the shipped stacks' plans.

The shipped enterprise stacks and SMB prod pass; a plan with one piece planted out (the trail, the
Object Lock rule, log-file validation, a GuardDuty feature, the Activity Log export, a Defender plan,
the registry database's log) fails with the policy that names it. Sources: CloudTrail user guide
("Validating CloudTrail log file integrity", "Creating a trail for all Regions"); S3 user guide
("Object Lock retention modes": COMPLIANCE); GuardDuty API reference (DetectorFeatureConfiguration);
Azure Storage "Configure immutability policies for blob versions"; Azure Monitor supported-logs
reference per resource type.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from components.azure.record import lock_command
from mlplatform.analyzer import PolicyPackSession, Violation
from mlplatform.analyzer_config import PolicySettings
from mlplatform.plan import Plan

from .conftest import PACK_DIR, found

AUDIT_POLICIES = {
    "audit-trail",
    "audit-archive-locked",
    "threat-detection",
    "data-store-audit-logs",
    "lifecycle-record-locked",
}
PlanDict = dict[str, Any]
LOCAL_COMMAND = "command:local:Command"
Pick = Callable[[dict[str, Any]], bool]


def of_type(token: str, name_suffix: str = "") -> Pick:
    return lambda r: r["type"] == token and r["name"].endswith(name_suffix)


def without(plan: PlanDict, pick: Pick) -> PlanDict:
    """The plan with the resources ``pick`` selects removed, and every reference to them."""
    edited = copy.deepcopy(plan)
    gone = {r["urn"] for r in edited["resources"] if pick(r)}
    assert gone, "the planted removal matched nothing"
    edited["resources"] = [r for r in edited["resources"] if r["urn"] not in gone]
    for resource in edited["resources"]:
        resource["dependencies"] = [u for u in resource.get("dependencies", []) if u not in gone]
        resource["propertyDependencies"] = {
            key: [u for u in urns if u not in gone]
            for key, urns in resource.get("propertyDependencies", {}).items()
        }
    return edited


def without_statements(keep: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], None]:
    """An edit of a resource's JSON ``policy`` keeping only the statements ``keep`` accepts."""

    def edit(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs["policy"])
        kept = [s for s in document["Statement"] if keep(s)]
        assert len(kept) < len(document["Statement"]), "the planted edit removed no statement"
        inputs["policy"] = json.dumps({**document, "Statement": kept})

    return edit


def _to_cloudtrail(statement: dict[str, Any]) -> bool:
    return statement.get("Principal") == {"Service": "cloudtrail.amazonaws.com"}


def with_inputs(plan: PlanDict, pick: Pick, edit: Callable[[dict[str, Any]], None]) -> PlanDict:
    edited = copy.deepcopy(plan)
    picked = [r for r in edited["resources"] if pick(r)]
    assert picked, "the planted edit matched nothing"
    for resource in picked:
        edit(resource["inputs"])
    return edited


def _set(**phases: str) -> Callable[[dict[str, Any]], None]:
    """An edit of a local command setting ``phases`` (``create``, ``update``) to the lines given."""
    return lambda inputs: inputs.update(phases)


def _each_phase(rewrite: Callable[[str], str]) -> Callable[[dict[str, Any]], None]:
    """An edit of a local command rewriting its ``create`` and ``update`` lines."""

    def edit(inputs: dict[str, Any]) -> None:
        for phase in ("create", "update"):
            changed = rewrite(inputs[phase])
            assert changed != inputs[phase], f"the planted edit left {phase} as it was"
            inputs[phase] = changed

    return edit


def _in_the_lock(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    """An edit of the lock command replacing ``old`` by ``new`` in the last ``az`` call (the lock) of its
    ``create`` and ``update`` lines, the calls before it left as they are."""

    def rewrite(line: str) -> str:
        head, _, lock = line.rpartition(" && ")
        return f"{head} && {lock.replace(old, new)}"

    return _each_phase(rewrite)


@pytest.fixture(scope="module")
def audit_findings(
    pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> Callable[[PlanDict], set[tuple[str, str]]]:
    def judge(plan: PlanDict) -> set[tuple[str, str]]:
        violations: list[Violation] = pack.judge(plan, defaults)
        return {(policy, name) for policy, name in found(violations) if policy in AUDIT_POLICIES}

    return judge


@pytest.mark.parametrize(
    "stack", ["aws-enterprise-prod", "aws-smb-prod", "azure-enterprise-prod", "azure-smb-prod"]
)
def test_shipped_audited_stacks_pass(
    stack: str, cloud_plan: Callable[[str], Plan], audit_findings: Callable[[PlanDict], set[tuple[str, str]]]
) -> None:
    assert audit_findings(cloud_plan(stack).to_dict()) == set()


def test_an_unaudited_stack_needs_no_trail(
    cloud_plan: Callable[[str], Plan], audit_findings: Callable[[PlanDict], set[tuple[str, str]]]
) -> None:
    """SMB dev keeps no trail (audit defaults: enterprise or prod), and no audit policy asks for one."""
    plan = cloud_plan("aws-smb-dev").to_dict()
    assert not [r for r in plan["resources"] if r["type"] == "aws:cloudtrail/trail:Trail"]
    assert audit_findings(plan) == set()


AWS_CLUSTER = "aws-enterprise-prod-aws-cluster-eks"
RECORD_BUCKET = "aws-enterprise-prod-aws-storage-record"
AWS_TRAIL = "aws-enterprise-prod-aws-audit-trail"
S3_FULL_ACCESS = "arn:aws:iam::aws:policy/AmazonS3FullAccess"
# A put on an S3 ARN the plan ties to no bucket (a name typed in): it may be the record's.
_PUT_ON_A_BUCKET_NOT_TIED = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "s3:PutObject",
                "Resource": "arn:aws:s3:::records-123/lifecycle-record/*",
            }
        ],
    }
)
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ROLLOUT_ROLE = "aws-enterprise-prod-aws-identities-rollout"
ROLLOUT_POLICY = of_type("aws:iam/rolePolicy:RolePolicy", "-identities-rollout")
OUT_OF_PLAN_POLICY = "arn:aws:iam::123456789012:policy/record-writer-out-of-plan"
# An IAM user and group outside the plan (a person's, an operations team's), named by name.
OPS, ENGINEERS = "ops-person", "ml-engineers"
USER_POLICY = "aws:iam/userPolicy:UserPolicy"
GROUP_POLICY = "aws:iam/groupPolicy:GroupPolicy"
USER_POLICY_ATTACHMENT = "aws:iam/userPolicyAttachment:UserPolicyAttachment"
GROUP_POLICY_ATTACHMENT = "aws:iam/groupPolicyAttachment:GroupPolicyAttachment"
POLICY_ATTACHMENT = "aws:iam/policyAttachment:PolicyAttachment"
AWS_CASES: list[tuple[str, Callable[[PlanDict], PlanDict], tuple[str, str]]] = [
    (
        # CloudTrail user guide, "Configure AWS KMS key policies for CloudTrail": kms:Decrypt is required
        # when the bucket uses an S3 Bucket Key (the audit bucket does).
        "key-policy-without-decrypt",
        lambda p: with_inputs(
            p,
            of_type("aws:kms/key:Key", "audit-key"),
            without_statements(lambda s: not (_to_cloudtrail(s) and s["Action"] == "kms:Decrypt")),
        ),
        ("audit-trail", AWS_TRAIL),
    ),
    (
        "key-policy-without-cloudtrail",
        lambda p: with_inputs(
            p, of_type("aws:kms/key:Key", "audit-key"), without_statements(lambda s: not _to_cloudtrail(s))
        ),
        ("audit-trail", AWS_TRAIL),
    ),
    (
        # CloudTrail user guide, "Amazon S3 bucket policy for CloudTrail".
        "bucket-policy-without-cloudtrail",
        lambda p: with_inputs(
            p,
            of_type("aws:s3/bucketPolicy:BucketPolicy", "storage-audit"),
            without_statements(lambda s: not _to_cloudtrail(s)),
        ),
        ("audit-trail", AWS_TRAIL),
    ),
    (
        "no-cloudwatch-delivery",
        lambda p: with_inputs(
            p,
            of_type("aws:cloudtrail/trail:Trail"),
            lambda i: i.update(cloudWatchLogsGroupArn=None, cloudWatchLogsRoleArn=None),
        ),
        ("audit-trail", AWS_TRAIL),
    ),
    (
        "trail-removed",
        lambda p: without(p, of_type("aws:cloudtrail/trail:Trail")),
        ("audit-trail", AWS_CLUSTER),
    ),
    (
        "log-validation-off",
        lambda p: with_inputs(
            p, of_type("aws:cloudtrail/trail:Trail"), lambda i: i.update(enableLogFileValidation=False)
        ),
        ("audit-trail", "aws-enterprise-prod-aws-audit-trail"),
    ),
    (
        "single-region",
        lambda p: with_inputs(
            p, of_type("aws:cloudtrail/trail:Trail"), lambda i: i.update(isMultiRegionTrail=False)
        ),
        ("audit-trail", "aws-enterprise-prod-aws-audit-trail"),
    ),
    (
        "object-lock-removed",
        lambda p: without(p, of_type("aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration")),
        ("audit-trail", "aws-enterprise-prod-aws-audit-trail"),
    ),
    (
        "governance-mode",
        lambda p: with_inputs(
            p,
            of_type("aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration"),
            lambda i: i["rule"]["defaultRetention"].update(mode="GOVERNANCE"),
        ),
        ("audit-trail", "aws-enterprise-prod-aws-audit-trail"),
    ),
    (
        # PCI DSS v4.0.1 Req. 10.5.1: 12 months (the pack's minimumAuditRetentionDays default).
        "object-lock-retention-below-the-minimum",
        lambda p: with_inputs(
            p,
            of_type("aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration"),
            lambda i: i["rule"]["defaultRetention"].update(days=30),
        ),
        ("audit-trail", AWS_TRAIL),
    ),
    (
        "detector-removed",
        lambda p: without(p, lambda r: r["type"].startswith("aws:guardduty/")),
        ("threat-detection", AWS_CLUSTER),
    ),
    (
        "runtime-monitoring-removed",
        lambda p: without(p, of_type("aws:guardduty/detectorFeature:DetectorFeature", "runtime-monitoring")),
        ("threat-detection", AWS_CLUSTER),
    ),
    (
        "eks-audit-log-off",
        lambda p: with_inputs(
            p,
            of_type("aws:eks/cluster:Cluster"),
            lambda i: i.update(enabledClusterLogTypes=["api", "authenticator"]),
        ),
        ("data-store-audit-logs", AWS_CLUSTER),
    ),
    (
        "registry-database-pgaudit-not-preloaded",
        lambda p: with_inputs(
            p,
            of_type("aws:rds/parameterGroup:ParameterGroup", "registry-params"),
            lambda i: i.update(
                parameters=[x for x in i["parameters"] if x["name"] != "shared_preload_libraries"]
            ),
        ),
        ("data-store-audit-logs", "aws-enterprise-prod-aws-registry-db"),
    ),
    (
        "eks-authenticator-log-off",
        lambda p: with_inputs(
            p,
            of_type("aws:eks/cluster:Cluster"),
            lambda i: i.update(enabledClusterLogTypes=["api", "audit", "controllerManager", "scheduler"]),
        ),
        ("data-store-audit-logs", AWS_CLUSTER),
    ),
    (
        "registry-database-log-off",
        lambda p: with_inputs(
            p, of_type("aws:rds/instance:Instance"), lambda i: i.update(enabledCloudwatchLogsExports=[])
        ),
        ("data-store-audit-logs", "aws-enterprise-prod-aws-registry-db"),
    ),
    # Issue 40, "An append-only record": the lifecycle record's bucket (components/aws/storage.py).
    (
        "record-object-lock-removed",
        lambda p: without(
            p, of_type("aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration", "-record")
        ),
        ("lifecycle-record-locked", RECORD_BUCKET),
    ),
    (
        "record-governance-mode",
        lambda p: with_inputs(
            p,
            of_type("aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration", "-record"),
            lambda i: i["rule"]["defaultRetention"].update(mode="GOVERNANCE"),
        ),
        ("lifecycle-record-locked", RECORD_BUCKET),
    ),
    (
        "record-bucket-without-object-lock",
        lambda p: with_inputs(
            p, of_type("aws:s3/bucket:Bucket", "-record"), lambda i: i.pop("objectLockEnabled")
        ),
        ("lifecycle-record-locked", RECORD_BUCKET),
    ),
    (
        "record-bucket-removed",
        lambda p: without(p, of_type("aws:s3/bucket:Bucket", "-record")),
        ("lifecycle-record-locked", AWS_CLUSTER),
    ),
    # Review rev40c A1: only the registry's role appends; PutObject on the record for the rollout (or the
    # people's policy) lets it append events in any user's name.
    (
        "record-put-granted-to-the-rollout",
        lambda p: with_inputs(
            p, of_type("aws:iam/rolePolicy:RolePolicy", "-identities-rollout"), _also_puts_on_the_record
        ),
        ("lifecycle-record-locked", "aws-enterprise-prod-aws-identities-rollout"),
    ),
    # Review rev40d A5: each other form of a second writer. NotAction (IAM JSON policy elements: NotAction
    # allows every action it does not list); the record's bucket policy (IAM user guide, "Policy evaluation
    # logic": an Allow in the resource-based policy grants the request); an AWS-managed policy that writes
    # S3 (AmazonS3FullAccess: s3:* on *), attached or in managedPolicyArns; a role's inlinePolicies.
    (
        "record-put-by-not-action",
        lambda p: with_inputs(
            p, of_type("aws:iam/rolePolicy:RolePolicy", "-identities-rollout"), _reads_by_not_action
        ),
        ("lifecycle-record-locked", "aws-enterprise-prod-aws-identities-rollout"),
    ),
    (
        "record-put-in-the-bucket-policy",
        lambda p: with_inputs(
            p, of_type("aws:s3/bucketPolicy:BucketPolicy", "-record"), _bucket_policy_allows("s3:PutObject")
        ),
        ("lifecycle-record-locked", RECORD_BUCKET),
    ),
    (
        "record-put-by-aws-managed-s3-full-access-attached",
        lambda p: _with_attached(p, S3_FULL_ACCESS),
        ("lifecycle-record-locked", "aws-enterprise-prod-aws-identities-rollout-s3-full"),
    ),
    (
        "record-put-by-aws-managed-s3-full-access-in-managed-policy-arns",
        lambda p: with_inputs(
            p,
            of_type("aws:iam/role:Role", "-identities-rollout"),
            lambda i: i.update(managedPolicyArns=[S3_FULL_ACCESS]),
        ),
        ("lifecycle-record-locked", "aws-enterprise-prod-aws-identities-rollout"),
    ),
    (
        "record-put-in-a-role-inline-policy",
        lambda p: with_inputs(
            p,
            of_type("aws:iam/role:Role", "-identities-rollout"),
            lambda i: i.update(inlinePolicies=[{"name": "events", "policy": _PUT_ON_A_BUCKET_NOT_TIED}]),
        ),
        ("lifecycle-record-locked", "aws-enterprise-prod-aws-identities-rollout"),
    ),
    # Review rev35f A7 (plant r1): a simple DELETE in a versioned bucket adds a delete marker that "makes
    # Amazon S3 behave as if the object is deleted" (S3 user guide, "Working with delete markers"); Object
    # Lock keeps the versions only, so a reader of current objects loses the event. Refused for every role,
    # the registry's included, and by a wildcard.
    (
        "record-delete-granted-to-the-rollout",
        lambda p: with_inputs(p, ROLLOUT_POLICY, _grants_on_the_record("s3:DeleteObject")),
        ("lifecycle-record-locked", ROLLOUT_ROLE),
    ),
    (
        "record-delete-by-a-wildcard",
        lambda p: with_inputs(p, ROLLOUT_POLICY, _grants_on_the_record("s3:Delete*")),
        ("lifecycle-record-locked", ROLLOUT_ROLE),
    ),
    (
        "record-delete-on-every-storage-bucket-by-a-pattern",
        lambda p: with_inputs(p, ROLLOUT_POLICY, _grants_on_the_record("s3:DeleteObject", pattern=True)),
        ("lifecycle-record-locked", ROLLOUT_ROLE),
    ),
    (
        "record-version-delete-granted-to-the-registry",
        lambda p: with_inputs(
            p,
            of_type("aws:iam/rolePolicy:RolePolicy", "-identities-registry"),
            _grants_on_the_record("s3:DeleteObjectVersion"),
        ),
        ("lifecycle-record-locked", "aws-enterprise-prod-aws-identities-registry"),
    ),
    (
        "record-delete-in-the-bucket-policy",
        lambda p: with_inputs(
            p,
            of_type("aws:s3/bucketPolicy:BucketPolicy", "-record"),
            _bucket_policy_allows("s3:DeleteObject"),
        ),
        ("lifecycle-record-locked", RECORD_BUCKET),
    ),
    # Review rev35f A8 (plants r2-r4): the record's configuration is a route to a second writer. A bucket
    # policy or ACL grants a put (IAM user guide, "Policy evaluation logic"); a lifecycle rule's Expiration
    # adds a delete marker to each current object (S3 user guide, "Expiring objects"). A customer-managed
    # policy the plan does not define cannot be judged at all.
    (
        "record-bucket-policy-written-by-the-rollout",
        lambda p: with_inputs(p, ROLLOUT_POLICY, _grants_on_the_record("s3:PutBucketPolicy", bucket=True)),
        ("lifecycle-record-locked", ROLLOUT_ROLE),
    ),
    (
        "record-lifecycle-rule-written-by-the-rollout",
        lambda p: with_inputs(
            p, ROLLOUT_POLICY, _grants_on_the_record("s3:PutLifecycleConfiguration", bucket=True)
        ),
        ("lifecycle-record-locked", ROLLOUT_ROLE),
    ),
    (
        "record-object-acl-written-by-the-rollout",
        lambda p: with_inputs(p, ROLLOUT_POLICY, _grants_on_the_record("s3:PutObjectAcl")),
        ("lifecycle-record-locked", ROLLOUT_ROLE),
    ),
    (
        "customer-managed-policy-out-of-the-plan-attached",
        lambda p: _with_attached(p, OUT_OF_PLAN_POLICY, suffix="out-of-plan"),
        ("lifecycle-record-locked", f"{ROLLOUT_ROLE}-out-of-plan"),
    ),
    (
        "customer-managed-policy-out-of-the-plan-in-managed-policy-arns",
        lambda p: with_inputs(
            p,
            of_type("aws:iam/role:Role", "-identities-rollout"),
            lambda i: i.update(managedPolicyArns=[OUT_OF_PLAN_POLICY]),
        ),
        ("lifecycle-record-locked", ROLLOUT_ROLE),
    ),
    # Review rev40e A5: IAM users and groups are principals like roles (IAM user guide, "Policy evaluation
    # logic": a user's identity-based policies, its groups' included, grant as a role's do), so their inline
    # policies and attachments (pulumi_aws iam/user_policy.py, group_policy.py, *_policy_attachment.py,
    # policy_attachment.py ``users``/``groups``) are second writers the same way.
    (
        "record-put-in-a-user-policy",
        lambda p: _held_by(p, USER_POLICY, {"user": OPS, "policy": _record_grant(p, "s3:PutObject")}),
        ("lifecycle-record-locked", "plant-user-policy"),
    ),
    (
        "record-put-in-a-group-policy",
        lambda p: _held_by(p, GROUP_POLICY, {"group": ENGINEERS, "policy": _record_grant(p, "s3:PutObject")}),
        ("lifecycle-record-locked", "plant-group-policy"),
    ),
    (
        "record-delete-in-a-group-policy",
        lambda p: _held_by(
            p, GROUP_POLICY, {"group": ENGINEERS, "policy": _record_grant(p, "s3:DeleteObject")}
        ),
        ("lifecycle-record-locked", "plant-group-policy"),
    ),
    (
        "record-bucket-policy-written-by-a-user",
        lambda p: _held_by(
            p, USER_POLICY, {"user": OPS, "policy": _record_grant(p, "s3:PutBucketPolicy", bucket=True)}
        ),
        ("lifecycle-record-locked", "plant-user-policy"),
    ),
    (
        "record-put-by-aws-managed-s3-full-access-attached-to-a-user",
        lambda p: _held_by(p, USER_POLICY_ATTACHMENT, {"user": OPS, "policyArn": S3_FULL_ACCESS}),
        ("lifecycle-record-locked", "plant-user-policy-attachment"),
    ),
    (
        "record-put-by-aws-managed-s3-full-access-attached-to-a-group",
        lambda p: _held_by(p, GROUP_POLICY_ATTACHMENT, {"group": ENGINEERS, "policyArn": S3_FULL_ACCESS}),
        ("lifecycle-record-locked", "plant-group-policy-attachment"),
    ),
    (
        "record-put-by-aws-managed-s3-full-access-attached-to-users-and-groups",
        lambda p: _held_by(
            p,
            POLICY_ATTACHMENT,
            {"name": "plant", "users": [OPS], "groups": [ENGINEERS], "policyArn": S3_FULL_ACCESS},
        ),
        ("lifecycle-record-locked", "plant-policy-attachment"),
    ),
    (
        "record-bucket-policy-written-by-a-plan-policy-attached-to-a-group",
        lambda p: _held_by(
            _held_by(
                p,
                "aws:iam/policy:Policy",
                {"name": "plant", "policy": _record_grant(p, "s3:PutBucketPolicy", bucket=True)},
            ),
            GROUP_POLICY_ATTACHMENT,
            {"group": ENGINEERS, "policyArn": "arn:aws:iam::123456789012:policy/plant"},
        ),
        ("lifecycle-record-locked", "plant-policy"),
    ),
    (
        "customer-managed-policy-out-of-the-plan-attached-to-a-group",
        lambda p: _held_by(p, GROUP_POLICY_ATTACHMENT, {"group": ENGINEERS, "policyArn": OUT_OF_PLAN_POLICY}),
        ("lifecycle-record-locked", "plant-group-policy-attachment"),
    ),
]


def _record_grant(plan: PlanDict, action: str, bucket: bool = False) -> str:
    """A policy document allowing ``action`` on the record's objects (its bucket where ``bucket``), the
    resources the rollout's record statements name."""
    [rollout] = [r for r in plan["resources"] if ROLLOUT_POLICY(r)]
    inputs = copy.deepcopy(rollout["inputs"])
    _grants_on_the_record(action, bucket=bucket)(inputs)
    planted = json.loads(inputs["policy"])["Statement"][-1]
    return json.dumps({"Version": "2012-10-17", "Statement": [planted]})


def _held_by(plan: PlanDict, token: str, inputs: dict[str, Any]) -> PlanDict:
    """The plan with one more IAM resource of type ``token`` and ``inputs``, named ``plant-<its kind>``
    (``plant-user-policy`` for a ``UserPolicy``), tied to nothing of the plan: the user or group it names
    is outside the plan, as a person's is."""
    edited = copy.deepcopy(plan)
    [model] = [r for r in edited["resources"] if ROLLOUT_POLICY(r)]
    name = "plant-" + re.sub(r"(?<!^)([A-Z])", r"-\1", token.rsplit(":", 1)[-1]).lower()
    edited["resources"].append(
        {
            **copy.deepcopy(model),
            "type": token,
            "name": name,
            "urn": model["urn"].rsplit("$", 1)[0] + f"${token}::{name}",
            "inputs": inputs,
            "dependencies": [],
            "propertyDependencies": {},
        }
    )
    return edited


def _also_puts_on_the_record(inputs: dict[str, Any]) -> None:
    """The rollout's record statement given s3:PutObject as well."""
    document = json.loads(inputs["policy"])
    [reads] = [s for s in document["Statement"] if s["Sid"] == "ReadEvents"]
    reads["Action"] = ["s3:GetObject", "s3:PutObject"]
    inputs["policy"] = json.dumps(document)


def _reads_by_not_action(inputs: dict[str, Any]) -> None:
    """The rollout's record statement written as every action but the deletes."""
    document = json.loads(inputs["policy"])
    [reads] = [s for s in document["Statement"] if s["Sid"] == "ReadEvents"]
    reads["NotAction"] = ["s3:DeleteObject", "s3:DeleteObjectVersion"]
    del reads["Action"]
    inputs["policy"] = json.dumps(document)


def _with_attached(
    plan: PlanDict, policy_arn: str, suffix: str = "s3-full", defined_by: str | None = None
) -> PlanDict:
    """``policy_arn`` attached to the rollout's role (as the output of the plan's policy ``defined_by``,
    where given)."""
    edited = copy.deepcopy(plan)
    [role] = [r for r in edited["resources"] if of_type("aws:iam/role:Role", "-identities-rollout")(r)]
    [model] = [r for r in edited["resources"] if r["type"] == ROLE_POLICY_ATTACHMENT][:1]
    policy = [r["urn"] for r in edited["resources"] if r["name"] == defined_by]
    name = f"{role['name']}-{suffix}"
    edited["resources"].append(
        {
            **copy.deepcopy(model),
            "name": name,
            "urn": model["urn"].rsplit("::", 1)[0] + f"::{name}",
            "inputs": {"role": f"{role['name']}-id", "policyArn": policy_arn},
            "dependencies": [role["urn"], *policy],
            "propertyDependencies": {"role": [role["urn"]], "policyArn": policy},
        }
    )
    return edited


def _grants_on_the_record(
    action: str, bucket: bool = False, pattern: bool = False
) -> Callable[[dict[str, Any]], None]:
    """An edit of a role policy adding an Allow of ``action`` on the record's objects (its bucket where
    ``bucket``), the resources the rollout's record statements name; where ``pattern``, on every bucket of
    the stack's storage by a wildcard in the bucket's name."""

    def edit(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs["policy"])
        reads = [s for s in document["Statement"] if s["Sid"].endswith("ReadEvents")]
        lists = [s for s in document["Statement"] if s["Sid"].endswith("ListRecord")]
        [resource] = {str(s["Resource"]) for s in (lists if bucket else reads)}
        if pattern:
            resource = re.sub(r"-storage-record-[0-9a-f]+/", "-storage-*/", resource)
            assert "-storage-*/" in resource, "the planted pattern matched no record bucket name"
        document["Statement"].append({"Effect": "Allow", "Action": action, "Resource": resource})
        inputs["policy"] = json.dumps(document)

    return edit


def _bucket_policy_allows(action: str) -> Callable[[dict[str, Any]], None]:
    """An edit of the record's bucket policy adding an Allow of ``action`` to another role, on the record's
    objects."""

    def edit(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs["policy"])
        [objects] = [s["Resource"] for s in document["Statement"] if isinstance(s["Resource"], str)]
        document["Statement"].append(
            {
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::123456789012:role/rollout"},
                "Action": action,
                "Resource": objects,
            }
        )
        inputs["policy"] = json.dumps(document)

    return edit


REGISTRY_WRITER = "azure-enterprise-prod-azure-registry-identity-record-writer"


def _second_writer(
    plan: PlanDict, workload: str, scope: str | None = None, role: str | None = None, suffix: str = ""
) -> PlanDict:
    """The registry's record writer assignment copied onto ``workload``'s identity; at ``scope`` (an Azure
    resource ID, or ``RESOURCE_GROUP`` for the plan's resource group) and with the role ``role`` (a built-in
    role's definition ID) where given."""
    edited = copy.deepcopy(plan)
    [registry] = [r for r in edited["resources"] if r["name"] == REGISTRY_WRITER]
    [identity] = [r for r in edited["resources"] if r["name"].endswith(f"-{workload}-identity-uai")]
    planted = copy.deepcopy(registry)
    planted["name"] = REGISTRY_WRITER.replace("-registry-", f"-{workload}-") + suffix
    planted["urn"] = registry["urn"].replace(REGISTRY_WRITER, planted["name"])
    planted["inputs"]["principalId"] = f"principal-of-{workload}"
    replaced = {"principalId": [identity["urn"]]}
    if scope == RESOURCE_GROUP:
        [group] = [r for r in edited["resources"] if r["type"] == RESOURCE_GROUP]
        planted["inputs"]["scope"] = f"{SUBSCRIPTION}/resourceGroups/{group['inputs']['resourceGroupName']}"
        replaced["scope"] = [group["urn"]]
    elif scope is not None:
        planted["inputs"]["scope"] = scope
        replaced["scope"] = []
    if role is not None:
        planted["inputs"]["roleDefinitionId"] = role
        replaced["roleDefinitionId"] = []
    old = {u for key in replaced for u in registry["propertyDependencies"].get(key, [])}
    planted["propertyDependencies"] = {**planted["propertyDependencies"], **replaced}
    planted["dependencies"] = [u for u in planted["dependencies"] if u not in old] + [
        u for urns in replaced.values() for u in urns
    ]
    edited["resources"].append(planted)
    return edited


SUBSCRIPTION = "/subscriptions/00000000-0000-0000-0000-000000000000"
RESOURCE_GROUP = "azure-native:resources:ResourceGroup"
_DEFINITIONS = f"{SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions"
# Built-in role IDs (Azure built-in roles reference).
BLOB_DATA_CONTRIBUTOR = f"{_DEFINITIONS}/ba92f5b4-2d11-453d-a403-e96b0029c9fe"
STORAGE_ACCOUNT_CONTRIBUTOR = f"{_DEFINITIONS}/17d1049b-9a84-46fb-8f53-869881c3d3ab"
CONTRIBUTOR = f"{_DEFINITIONS}/b24988ac-6180-42a0-ab88-20f7382dd24c"
OWNER = f"{_DEFINITIONS}/8e3af657-a8ff-443c-a75c-2fe8c4bcb635"
# Azure built-in roles, "Privileged": Role Based Access Control Administrator (review rev35h A7).
RBAC_ADMINISTRATOR = f"{_DEFINITIONS}/f58310d9-a9f6-439a-9e8d-f62e7b41a168"


def _account_id(plan: PlanDict, name_suffix: str) -> str:
    """The Azure resource ID of the plan's storage account whose name ends in ``name_suffix``, written out."""
    [account] = [
        r for r in plan["resources"] if of_type("azure-native:storage:StorageAccount", name_suffix)(r)
    ]
    inputs = account["inputs"]
    return (
        f"{SUBSCRIPTION}/resourceGroups/{inputs['resourceGroupName']}/providers/Microsoft.Storage/"
        f"storageAccounts/{inputs['accountName']}"
    )


def _record_id(plan: PlanDict) -> str:
    return _account_id(plan, "-record-account")


def test_a_declared_organisation_trail_stands_in_for_the_stacks_own(
    variant: Callable[[str, Callable[[dict[str, Any]], None]], Plan],
    audit_findings: Callable[[PlanDict], set[tuple[str, str]]],
) -> None:
    """``audit.organizationTrail``: no trail, bucket or logging key in the stack, the cluster names the
    organisation's (checked at preview), and the pack accepts it; the same plan without the tag fails.
    The lifecycle record's locked bucket stays (docs/lifecycle.md: the record is the stack's own)."""
    trail = "arn:aws:cloudtrail:me-central-1:111122223333:trail/org-trail"
    plan = variant("aws-enterprise-prod", lambda body: body.update(audit={"organizationTrail": trail}))
    document = plan.to_dict()
    types = {r["type"] for r in document["resources"]}
    assert "aws:cloudtrail/trail:Trail" not in types
    locks = [
        r["name"]
        for r in document["resources"]
        if r["type"] == "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration"
    ]
    assert locks == [RECORD_BUCKET]
    [cluster] = [r for r in document["resources"] if r["type"] == "aws:eks/cluster:Cluster"]
    assert cluster["inputs"]["tags"]["ml-platform.io/audit-trail"] == trail
    assert audit_findings(document) == set()
    untagged = with_inputs(
        document, of_type("aws:eks/cluster:Cluster"), lambda i: i["tags"].pop("ml-platform.io/audit-trail")
    )
    assert ("audit-trail", AWS_CLUSTER) in audit_findings(untagged)


AZURE_RECORD = "azure-enterprise-prod-azure-record-account"
AZURE_CASES: list[tuple[str, Callable[[PlanDict], PlanDict], tuple[str, str]]] = [
    (
        "activity-log-export-removed",
        lambda p: without(p, of_type("azure-native:monitor:DiagnosticSetting", "activity-log")),
        ("audit-trail", "azure-enterprise-prod-azure-cluster-aks"),
    ),
    (
        "immutability-off",
        lambda p: with_inputs(
            p,
            of_type("azure-native:storage:StorageAccount", "audit-account"),
            lambda i: i.pop("immutableStorageWithVersioning"),
        ),
        ("audit-trail", "azure-enterprise-prod-azure-audit-activity-log"),
    ),
    (
        "immutability-period-below-the-minimum",
        lambda p: with_inputs(
            p,
            of_type("azure-native:storage:StorageAccount", "audit-account"),
            lambda i: i["immutableStorageWithVersioning"]["immutabilityPolicy"].update(
                immutabilityPeriodSinceCreationInDays=30
            ),
        ),
        ("audit-trail", "azure-enterprise-prod-azure-audit-activity-log"),
    ),
    (
        "defender-for-containers-off",
        lambda p: with_inputs(
            p,
            of_type("azure-native:security:Pricing", "defender-containers"),
            lambda i: i.update(pricingTier="Free"),
        ),
        ("threat-detection", "azure-enterprise-prod-azure-cluster-aks"),
    ),
    (
        "registry-database-log-removed",
        lambda p: without(p, of_type("azure-native:monitor:DiagnosticSetting", "registry-pg-audit")),
        ("data-store-audit-logs", "azure-enterprise-prod-azure-registry-pg"),
    ),
    (
        "aks-audit-categories-removed",
        lambda p: with_inputs(
            p,
            lambda r: r["type"] == "azure-native:monitor:DiagnosticSetting" and "-cluster-" in r["name"],
            lambda i: i.update(
                logs=[log for log in i["logs"] if log["category"] not in {"kube-audit", "kube-audit-admin"}]
            ),
        ),
        ("data-store-audit-logs", "azure-enterprise-prod-azure-cluster-aks"),
    ),
    (
        "aks-audit-categories-kept-out-of-the-immutable-archive",
        lambda p: with_inputs(
            p,
            of_type("azure-native:monitor:DiagnosticSetting", "cluster-archive"),
            lambda i: i.update(
                logs=[log for log in i["logs"] if log["category"] not in {"kube-audit", "kube-audit-admin"}]
            ),
        ),
        ("data-store-audit-logs", "azure-enterprise-prod-azure-cluster-aks"),
    ),
    (
        "defender-for-databases-off",
        lambda p: without(p, of_type("azure-native:security:Pricing", "opensourcerelationaldatabases")),
        ("threat-detection", "azure-enterprise-prod-azure-registry-pg"),
    ),
    (
        "container-registry-audit-removed",
        lambda p: without(p, of_type("azure-native:monitor:DiagnosticSetting", "registry-audit")),
        ("data-store-audit-logs", "azure-enterprise-prod-azure-registry-acr"),
    ),
    (
        "object-store-audit-removed",
        lambda p: without(p, of_type("azure-native:monitor:DiagnosticSetting", "objects-blob-audit")),
        ("data-store-audit-logs", "azure-enterprise-prod-azure-objects-account"),
    ),
    # Issue 40, "An append-only record", on Azure (components/azure/record.py): the record's account keeps
    # every version immutable under a policy the plan locks, and no role on it can replace or delete a
    # blob.
    (
        "record-immutability-off",
        lambda p: with_inputs(
            p,
            of_type("azure-native:storage:StorageAccount", "record-account"),
            lambda i: i.pop("immutableStorageWithVersioning"),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-lock-removed",
        lambda p: without(p, of_type(LOCAL_COMMAND, "record-immutability-lock")),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-left-unlocked",
        lambda p: with_inputs(
            p,
            of_type(LOCAL_COMMAND, "record-immutability-lock"),
            lambda i: i.update(
                {k: i[k].replace("--immutability-state Locked", "--immutability-state Unlocked") for k in i}
            ),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-locked-for-no-day",
        lambda p: with_inputs(
            p,
            of_type(LOCAL_COMMAND, "record-immutability-lock"),
            lambda i: i.update(
                {k: re.sub(r"--immutability-period \d+", "--immutability-period 0", i[k]) for k in i}
            ),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    # Review of issue 40, A1 (/work/rev-40-out plants az-lock-on-update-only): pulumi-command runs
    # ``create`` on a new stack and ``update`` only when the inputs change, so a lock only in ``update``
    # never runs; and an ``update`` without it lets a changed retention run something else.
    (
        "record-locked-only-on-update",
        lambda p: with_inputs(p, of_type(LOCAL_COMMAND, "record-immutability-lock"), _set(create="true")),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-update-does-not-lock",
        lambda p: with_inputs(p, of_type(LOCAL_COMMAND, "record-immutability-lock"), _set(update="true")),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    # A2 (plants az-lock-after-exit, az-lock-or-branch): the lock is in the line but the shell never
    # reaches it (POSIX Shell Command Language, 2.9.3 Lists).
    (
        "record-lock-after-exit",
        lambda p: with_inputs(
            p, of_type(LOCAL_COMMAND, "record-immutability-lock"), _each_phase(lambda line: f"exit 0; {line}")
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-lock-in-an-or-branch",
        lambda p: with_inputs(
            p,
            of_type(LOCAL_COMMAND, "record-immutability-lock"),
            _each_phase(lambda line: line.replace("; } && az storage", "; } && true || az storage")),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    # Review of issue 40, C2 (plant az-lock-other-rg): azure-cli names the account by --name and
    # --resource-group (``storage account update``), so a lock aimed at another group's (or another
    # subscription's) account of the same name locks nothing of the stack's.
    (
        "record-locked-in-another-resource-group",
        lambda p: with_inputs(
            p,
            of_type(LOCAL_COMMAND, "record-immutability-lock"),
            _in_the_lock("--resource-group ml-platform-azure-enterprise-prod", "--resource-group other-rg"),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-locked-without-its-resource-group",
        lambda p: with_inputs(
            p,
            of_type(LOCAL_COMMAND, "record-immutability-lock"),
            _in_the_lock("--resource-group ml-platform-azure-enterprise-prod ", ""),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-locked-in-another-subscription",
        lambda p: with_inputs(
            p,
            of_type(LOCAL_COMMAND, "record-immutability-lock"),
            _in_the_lock(
                "--subscription 00000000-0000-0000-0000-000000000000",
                "--subscription 11111111-1111-1111-1111-111111111111",
            ),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    # Review rev40b C3: without --subscription the CLI's default subscription is locked, which the plan
    # cannot show to be the account's.
    (
        "record-locked-without-its-subscription",
        lambda p: with_inputs(
            p,
            of_type(LOCAL_COMMAND, "record-immutability-lock"),
            _in_the_lock("--subscription 00000000-0000-0000-0000-000000000000 ", ""),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-declared-unlocked-without-lock",
        lambda p: with_inputs(
            without(p, of_type(LOCAL_COMMAND, "record-immutability-lock")),
            of_type("azure-native:storage:StorageAccount", "record-account"),
            lambda i: i["immutableStorageWithVersioning"].update(
                immutabilityPolicy={"immutabilityPeriodSinceCreationInDays": 365, "state": "Unlocked"}
            ),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    # Review rev40f A3: Shared Key on lets whoever lists the account keys append in anyone's name (Azure
    # Storage, "Prevent Shared Key authorization for an Azure Storage account").
    (
        "record-account-with-shared-key",
        lambda p: with_inputs(
            p,
            of_type("azure-native:storage:StorageAccount", "record-account"),
            lambda i: i.update(allowSharedKeyAccess=True),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-account-shared-key-unset",
        lambda p: with_inputs(
            p,
            of_type("azure-native:storage:StorageAccount", "record-account"),
            lambda i: i.pop("allowSharedKeyAccess"),
        ),
        ("lifecycle-record-locked", AZURE_RECORD),
    ),
    (
        "record-account-removed",
        lambda p: without(p, of_type("azure-native:storage:StorageAccount", "record-account")),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-cluster-aks"),
    ),
    (
        "record-writer-role-with-delete",
        lambda p: with_inputs(
            p,
            of_type("azure-native:authorization:RoleDefinition", "record-writer"),
            lambda i: i["permissions"][0]["dataActions"].append(
                "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/delete"
            ),
        ),
        ("lifecycle-record-locked", REGISTRY_WRITER),
    ),
    (
        "record-writer-role-with-every-blob-action",
        lambda p: with_inputs(
            p,
            of_type("azure-native:authorization:RoleDefinition", "record-writer"),
            lambda i: i["permissions"][0].update(
                dataActions=["Microsoft.Storage/storageAccounts/blobServices/containers/blobs/*"]
            ),
        ),
        ("lifecycle-record-locked", REGISTRY_WRITER),
    ),
    (
        "record-writer-given-storage-blob-data-contributor",
        lambda p: with_inputs(
            p,
            of_type("azure-native:authorization:RoleAssignment", "registry-identity-record-writer"),
            lambda i: i.update(
                roleDefinitionId="/subscriptions/00000000-0000-0000-0000-000000000000/providers/"
                "Microsoft.Authorization/roleDefinitions/ba92f5b4-2d11-453d-a403-e96b0029c9fe"
            ),
        ),
        ("lifecycle-record-locked", REGISTRY_WRITER),
    ),
    # Review rev40c A1: only the registry's identity appends; the record writer role given to the rollout
    # (an approver, an engineer alike) lets it append events in any user's name.
    (
        "record-writer-role-given-to-the-rollout",
        lambda p: _second_writer(p, "rollout"),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer"),
    ),
    # Review rev40d A6: a role assignment above the account reaches it (Azure RBAC, "Understand scope for
    # Azure RBAC": lower levels inherit role permissions from higher levels).
    (
        "record-writer-role-given-to-the-rollout-at-the-resource-group",
        lambda p: _second_writer(p, "rollout", scope=RESOURCE_GROUP, suffix="-rg"),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-rg"),
    ),
    (
        "record-writer-role-given-to-the-rollout-at-the-subscription",
        lambda p: _second_writer(p, "rollout", scope=SUBSCRIPTION, suffix="-sub"),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-sub"),
    ),
    (
        "storage-blob-data-contributor-at-the-resource-group",
        lambda p: _second_writer(p, "rollout", scope=RESOURCE_GROUP, role=BLOB_DATA_CONTRIBUTOR, suffix="-c"),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-c"),
    ),
    (
        "storage-blob-data-contributor-at-a-management-group",
        lambda p: _second_writer(
            p,
            "rollout",
            scope="/providers/Microsoft.Management/managementGroups/platform",
            role=BLOB_DATA_CONTRIBUTOR,
            suffix="-mg",
        ),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-mg"),
    ),
    # Review rev35f A8 (plants z1, z2): a control-plane role over the record's account turns Shared Key
    # authorization back on and writes with the account keys in anyone's name (Azure built-in roles,
    # "Storage Account Contributor": "access to the account key"; Azure Storage, "Prevent Shared Key
    # authorization"), or assigns itself a data role (Owner, User Access Administrator).
    (
        "storage-account-contributor-on-the-record",
        lambda p: _second_writer(p, "rollout", role=STORAGE_ACCOUNT_CONTRIBUTOR, suffix="-sac"),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-sac"),
    ),
    (
        "contributor-at-the-resource-group",
        lambda p: _second_writer(p, "rollout", scope=RESOURCE_GROUP, role=CONTRIBUTOR, suffix="-contrib"),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-contrib"),
    ),
    (
        "owner-at-the-subscription",
        lambda p: _second_writer(p, "rollout", scope=SUBSCRIPTION, role=OWNER, suffix="-owner"),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-owner"),
    ),
    (
        "rbac-administrator-on-the-record",
        lambda p: _second_writer(p, "rollout", role=RBAC_ADMINISTRATOR, suffix="-rbac"),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-rbac"),
    ),
    (
        "record-writer-role-that-lists-the-account-keys",
        lambda p: with_inputs(
            p,
            of_type("azure-native:authorization:RoleDefinition", "record-writer"),
            lambda i: i["permissions"][0]["actions"].append(
                "Microsoft.Storage/storageAccounts/listKeys/action"
            ),
        ),
        ("lifecycle-record-locked", REGISTRY_WRITER),
    ),
    # Review rev35f A9 (plant z3): a scope is a resource ID (Azure RBAC, "Understand scope for Azure RBAC"),
    # compared case insensitively; written literally, with no dependency on the account, it is the record's.
    (
        "storage-blob-data-contributor-at-the-records-literal-id",
        lambda p: _second_writer(
            p, "rollout", scope=_record_id(p), role=BLOB_DATA_CONTRIBUTOR, suffix="-literal"
        ),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-literal"),
    ),
    (
        "record-writer-role-at-the-records-container-id-in-upper-case",
        lambda p: _second_writer(
            p,
            "rollout",
            scope=f"{_record_id(p)}/blobServices/default/containers/lifecycle-record".upper(),
            suffix="-upper",
        ),
        ("lifecycle-record-locked", "azure-enterprise-prod-azure-rollout-identity-record-writer-upper"),
    ),
    (
        "vault-audit-removed",
        lambda p: without(p, of_type("azure-native:monitor:DiagnosticSetting", "keys-vault-audit")),
        ("data-store-audit-logs", "azure-enterprise-prod-azure-keys-vault"),
    ),
]


PLANTED = [("aws-enterprise-prod", *case) for case in AWS_CASES] + [
    ("azure-enterprise-prod", *case) for case in AZURE_CASES
]


@pytest.mark.parametrize(("stack", "case", "plant", "expected"), PLANTED, ids=[c[1] for c in PLANTED])
def test_a_planted_gap_fails(
    stack: str,
    case: str,
    plant: Callable[[PlanDict], PlanDict],
    expected: tuple[str, str],
    cloud_plan: Callable[[str], Plan],
    audit_findings: Callable[[PlanDict], set[tuple[str, str]]],
) -> None:
    assert expected in audit_findings(plant(cloud_plan(stack).to_dict()))


def test_a_writer_in_another_resource_group_is_not_the_records(
    cloud_plan: Callable[[str], Plan], audit_findings: Callable[[PlanDict], set[tuple[str, str]]]
) -> None:
    """Scopes inherit downwards only (Azure RBAC, "Understand scope for Azure RBAC"): Storage Blob Data
    Contributor in a resource group other than the record account's does not reach the record."""
    plan = _second_writer(
        cloud_plan("azure-enterprise-prod").to_dict(),
        "rollout",
        scope=f"{SUBSCRIPTION}/resourceGroups/another-group",
        role=BLOB_DATA_CONTRIBUTOR,
    )
    assert audit_findings(plan) == set()


def test_a_writer_named_by_another_accounts_literal_id_is_not_the_records(
    cloud_plan: Callable[[str], Plan], audit_findings: Callable[[PlanDict], set[tuple[str, str]]]
) -> None:
    """A literal scope ties to the account it names, not to every account (review rev35f A9, both ways):
    Storage Blob Data Contributor on the objects account's ID is not on the record."""
    plan = cloud_plan("azure-enterprise-prod").to_dict()
    planted = _second_writer(
        plan, "rollout", scope=_account_id(plan, "-objects-account"), role=BLOB_DATA_CONTRIBUTOR
    )
    assert audit_findings(planted) == set()


def test_a_customer_managed_policy_the_plan_defines_is_judged_not_refused(
    cloud_plan: Callable[[str], Plan], audit_findings: Callable[[PlanDict], set[tuple[str, str]]]
) -> None:
    """Review rev35f A8, both ways: an attached customer-managed policy is refused only where the plan does
    not define it; the plan's read-only record-reader policy attached to the rollout passes."""
    plan = _with_attached(
        cloud_plan("aws-enterprise-prod").to_dict(),
        "arn:aws:iam::123456789012:policy/aws-enterprise-prod-aws-record-reader-0000",
        suffix="reader",
        defined_by="aws-enterprise-prod-aws-identities-record-reader",
    )
    assert audit_findings(plan) == set()


def test_a_users_and_a_groups_reads_of_the_record_pass(
    cloud_plan: Callable[[str], Plan], audit_findings: Callable[[PlanDict], set[tuple[str, str]]]
) -> None:
    """Review rev40e A5, both ways: users and groups are judged by their grants, not refused as such; a
    group's inline s3:GetObject on the record and the plan's read-only record-reader policy attached to a
    user pass."""
    plan = cloud_plan("aws-enterprise-prod").to_dict()
    reader = _held_by(plan, GROUP_POLICY, {"group": ENGINEERS, "policy": _record_grant(plan, "s3:GetObject")})
    attached = _held_by(
        reader,
        USER_POLICY_ATTACHMENT,
        {
            "user": OPS,
            "policyArn": "arn:aws:iam::123456789012:policy/aws-enterprise-prod-aws-record-reader-0000",
        },
    )
    [policy] = [r["urn"] for r in attached["resources"] if r["name"].endswith("-identities-record-reader")]
    attached["resources"][-1]["propertyDependencies"] = {"policyArn": [policy]}
    assert audit_findings(attached) == set()


def test_an_unlocked_azure_archive_is_advised_about(
    pack: PolicyPackSession,
    defaults: dict[str, PolicySettings],
    cloud_plan: Callable[[str], Plan],
    audit_findings: Callable[[PlanDict], set[tuple[str, str]]],
) -> None:
    """The first ``pulumi up`` creates the audit archive unlocked (Azure creates it no other way):
    advisory until the next one locks it, and not a mandatory failure, which would stop that first
    ``up``; the plan of an existing account (the mocks' answer) is locked. (The lifecycle record is locked
    by its first ``up``, and an unlocked one is mandatory: the planted cases above.)"""
    account = "audit-account"
    plan = cloud_plan("azure-enterprise-prod").to_dict()
    picked = of_type("azure-native:storage:StorageAccount", account)
    locked = found(pack.judge(plan, defaults), "advisory")
    assert not {finding for finding in locked if finding[0] == "audit-archive-locked"}

    def unlock(inputs: dict[str, Any]) -> None:
        inputs["immutableStorageWithVersioning"]["immutabilityPolicy"]["state"] = "Unlocked"

    edited = with_inputs(plan, picked, unlock)
    unlocked = found(pack.judge(edited, defaults), "advisory")
    assert ("audit-archive-locked", f"azure-enterprise-prod-azure-{account}") in unlocked
    assert audit_findings(edited) == set()


_LOCK = lock_command("sub", "rg", "acct", 365)
_LAST = " && az storage account update --subscription sub --resource-group rg --name acct --output none"
# Lines the pack's shell reading (policies/mlplatform_policies/shell.py ``az_chain``) refuses, each with a
# way the shell skips the lock and still exits 0 (POSIX Shell Command Language, 2.9.3 Lists; 2.9.5
# Function Definition Command; 2.9.4 Compound Commands).
SKIPPED_LOCKS = {
    "exit-first": f"exit 0; {_LOCK}",
    "exit-in-a-step": f"{{ exit 0; }} && {_LOCK}",
    "or-branch": _LOCK.replace(_LAST, f" && true ||{_LAST[3:]}"),
    "after-a-newline": f"true\n{_LOCK}",
    "az-redefined": f"az() {{ :; }} && {_LOCK}",
    "conditional": f"if false; then {_LOCK}; fi",
    "commented-out": f"# {_LOCK}",
    "in-the-background": f"{_LOCK} &",
    "a-step-after-the-lock": f"{_LOCK}; true",
    "piped": f"{_LOCK} | true",
    "escaped-operator": f"true \\&\\& exit 0 && {_LOCK}",
}


def test_the_pack_reads_the_platforms_lock_line_and_refuses_other_shapes() -> None:
    """Review of issue 40, A2: the lock counts only in the line shape the program builds
    (components/azure/record.py ``lock_command``), whose last ``az`` call is the line's outcome; judged
    in the pack's own environment, where the policy module imports."""
    script = (
        "import json, sys; from mlplatform_policies.shell import az_chain; "
        "print(json.dumps({k: az_chain(v) for k, v in json.load(sys.stdin).items()}))"
    )
    lines = {"platform": _LOCK, **SKIPPED_LOCKS}
    result = subprocess.run(
        [str(PACK_DIR / ".venv" / "bin" / "python"), "-c", script],
        input=json.dumps(lines),
        check=True,
        cwd=PACK_DIR,
        capture_output=True,
        text=True,
    )
    read = json.loads(result.stdout)
    assert [words[:4] + words[-2:] for words in read.pop("platform")] == [
        [
            "az",
            "storage",
            "account",
            "show",
            "--query",
            "immutableStorageWithVersioning.immutabilityPolicy.state",
        ],
        ["az", "storage", "account", "update", "--allow-protected-append-writes", "false"],
        ["az", "storage", "account", "update", "--immutability-state", "Locked"],
    ]
    assert read == dict.fromkeys(SKIPPED_LOCKS)
