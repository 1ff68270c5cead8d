"""The stack's customer-managed KMS keys: one per data domain (``KeyDomain``), each used only by the
stores of its domain, its policy naming only that domain's services beside the account root.

A key per domain keeps revocation and the CloudTrail record of each decrypt per domain: disabling the
datasets' key does not take Kubernetes Secrets with it, and whoever may use one domain's key reads no
other domain. The keys are single-region on purpose: a multi-Region key would replicate key material out
of the only UAE region (REFERENCE.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_aws import kms

from components.aws.account import AwsAccount
from components.config import KeyDomain

# KMS waits this many days before deleting a scheduled key; 30 is the maximum the API allows
# (AWS KMS developer guide, "Deleting AWS KMS keys": 7-30 days), the longest window to notice a mistake.
DELETION_WINDOW_DAYS = 30

# Key actions a service needs to use the key for data, not to manage it.
_USE_KEY = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]


def use_key(principal: Mapping[str, Any], sid: str, condition: Mapping[str, Any]) -> dict[str, Any]:
    """A statement letting a service principal use the key for data, under ``condition``."""
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Principal": dict(principal),
        "Action": _USE_KEY,
        "Resource": "*",
        "Condition": dict(condition),
    }


def administered_by_account(account: AwsAccount) -> dict[str, Any]:
    """The account root delegates the key's administration and use to IAM policies."""
    return {
        "Sid": "AccountAdministersKeyThroughIam",
        "Effect": "Allow",
        "Principal": {"AWS": account.root_arn},
        "Action": "kms:*",
        "Resource": "*",
    }


def logs_use_key(account: AwsAccount) -> dict[str, Any]:
    """CloudWatch Logs encrypts this account's log groups (CloudWatch Logs user guide, "Encrypt log data
    in CloudWatch Logs using AWS KMS")."""
    return use_key(
        {"Service": f"logs.{account.dns_suffix}"},
        "CloudWatchLogsEncryptsThisAccountsLogGroups",
        {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": account.arn("logs", "log-group:*")}},
    )


def _autoscaling_uses_key(account: AwsAccount) -> list[dict[str, Any]]:
    """The EC2 Auto Scaling service-linked role launches managed node group instances; without the key
    it cannot create their encrypted root volumes (EC2 Auto Scaling user guide, "Required AWS KMS key
    policy for use with encrypted volumes")."""
    autoscaling_role = account.arn(
        "iam", "role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling", regional=False
    )
    return [
        {
            "Sid": "AutoScalingUsesKeyForNodeVolumes",
            "Effect": "Allow",
            "Principal": {"AWS": autoscaling_role},
            "Action": _USE_KEY,
            "Resource": "*",
        },
        {
            "Sid": "AutoScalingGrantsKeyToEc2ForAttachedVolumes",
            "Effect": "Allow",
            "Principal": {"AWS": autoscaling_role},
            "Action": "kms:CreateGrant",
            "Resource": "*",
            "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
        },
    ]


# What each domain's key is for (its description) and where its stores live.
DOMAIN_STORES: dict[KeyDomain, str] = {
    KeyDomain.SECRETS: "Kubernetes Secrets (EKS envelope encryption)",
    KeyDomain.REGISTRY_DATABASE: "the registry's RDS database and its managed password",
    KeyDomain.TRAINING_DATA: "the shared file system (EFS or FSx for Lustre)",
    KeyDomain.OBJECTS: "the data bucket: datasets, models, the registry's artifacts",
    KeyDomain.IMAGES: "the ECR repositories",
    KeyDomain.VOLUMES: "node root volumes and EBS persistent volumes",
    KeyDomain.LOGS: "the VPC flow-log and EKS control-plane log groups",
}


def key_policy(account: AwsAccount, domains: Iterable[KeyDomain]) -> dict[str, Any]:
    """The policy of the key of ``domains`` (one, unless the stack keeps stores on its first key until
    they migrate): every principal is named, none is a wildcard, and only the services of those domains
    appear beside the account root.

    - The account root delegates to IAM, so role policies (IRSA roles, the EKS cluster role) grant use:
      each names the key of its own domain only.
    - CloudWatch Logs (logs) encrypts the flow-log and control-plane log groups; it has no IAM role to
      delegate to, so it is named, limited to this account's log groups.
    - The EC2 Auto Scaling service-linked role (node volumes) creates the nodes' encrypted root volumes.
    """
    statements: list[dict[str, Any]] = [administered_by_account(account)]
    chosen = set(domains)
    if KeyDomain.LOGS in chosen:
        statements.append(logs_use_key(account))
    if KeyDomain.VOLUMES in chosen:
        statements += _autoscaling_uses_key(account)
    return {"Version": "2012-10-17", "Statement": statements}


@dataclass(frozen=True)
class EncryptionKeyArgs:
    account: AwsAccount
    tags: Mapping[str, str]
    # Production stacks protect the key: deleting it makes every encrypted byte unreadable.
    protect: bool
    # What the key is for, and its policy.
    description: str
    policy: Mapping[str, Any]


class EncryptionKey(pulumi.ComponentResource):
    """A rotating customer-managed key with an alias, under a policy with named principals only."""

    def __init__(
        self, name: str, args: EncryptionKeyArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:aws:EncryptionKey", name, None, opts)
        self.key = kms.Key(
            f"{name}-key",
            description=f"{name}: {args.description}",
            enable_key_rotation=True,
            deletion_window_in_days=DELETION_WINDOW_DAYS,
            multi_region=False,
            policy=json.dumps(args.policy),
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect),
        )
        self.alias = kms.Alias(
            f"{name}-alias",
            name=f"alias/{name}",
            target_key_id=self.key.key_id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.arn: pulumi.Output[str] = self.key.arn
        self.register_outputs({"arn": self.arn, "alias": self.alias.name})
