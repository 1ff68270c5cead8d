"""IAM roles: the node role, and the one helper every IRSA role goes through.

IRSA is the only way pods get AWS credentials here: nodes' instance metadata is out of pods' reach
(hop limit 1), so a pod without a service-account role has no AWS access at all. Every IRSA trust
policy pins both the token's subject (exact namespace and service account) and its audience: with only
``sub``, a token minted for any other audience by the same issuer would also be accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_aws import iam

from components.aws.account import AwsAccount
from components.handle import WorkloadIdentity
from components.ordering import after

STS_AUDIENCE = "sts.amazonaws.com"
# IAM role names are at most 64 characters (IAM API reference, CreateRole ``RoleName``). With a name
# prefix the AWS provider appends a 26-digit unique id (terraform-plugin-sdk ``helper/id``,
# ``UniqueIDSuffixLength``), so every prefix here fits in 38; the config bounds the stack name so that
# ``role_name_prefix`` holds for any stack it accepts.
ROLE_NAME_MAX = 64
NAME_PREFIX_SUFFIX = 26
# Longest ``purpose`` a role prefix may carry (see role_name_prefix).
ROLE_PURPOSE_MAX = 7
# The EKS cluster role's purpose (components/aws/cluster.py); the Secrets key's policy names that role.
CLUSTER_ROLE_PURPOSE = "eks"

# The node role holds only what the kubelet and the VPC CNI need, and image pulls (EKS user guide,
# "Amazon EKS node IAM role"). SSM Session Manager (AmazonSSMManagedInstanceCore) is left out: nodes
# are reached through Kubernetes, not shells.
# The VPC CNI's policy is not here but on aws-node's own IRSA role (components/aws/addons.py): on the
# node role every hostNetwork pod could manage ENIs through the instance profile (EKS best practices
# guide, "Update the aws-node daemonset to use IRSA"; EKS user guide, "Configure Amazon VPC CNI plug-in
# to use IRSA").
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")


def policy_document(statements: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def managed_policy_arn(account: AwsAccount, name: str) -> str:
    return f"arn:{account.partition}:iam::aws:policy/{name}"


def role_name_prefix(cluster_name: str, purpose: str) -> str:
    """A short explicit name prefix: autonamed roles take the (long) resource name plus 8 characters,
    which for ``aws-enterprise-production`` overflowed 64 (the autoscaler role was 67)."""
    prefix = f"{cluster_name}-{purpose}-"
    if len(purpose) > ROLE_PURPOSE_MAX or len(prefix) + NAME_PREFIX_SUFFIX > ROLE_NAME_MAX:
        raise ValueError(f"IAM role name prefix {prefix!r} leaves no room for the provider's suffix")
    return prefix


def service_trust_policy(service: str) -> str:
    """Trust for an AWS service principal (``eks.amazonaws.com``, ``ec2.amazonaws.com``)."""
    return json.dumps(
        policy_document([{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}])
    )


def irsa_trust_policy(provider_arn: str, issuer_host: str, account: WorkloadIdentity) -> dict[str, Any]:
    """Trust one service account's web-identity tokens from this cluster's OIDC issuer, nothing else.

    ``issuer_host`` is the issuer URL without ``https://`` (the form IAM condition keys use). A subject
    with ``*`` (a driver's controller and node accounts, e.g. ``efs-csi-*``) is matched with
    ``StringLike``; the audience stays an exact match.
    """
    audience = {f"{issuer_host}:aud": STS_AUDIENCE}
    subject = {f"{issuer_host}:sub": account.subject}
    condition = (
        {"StringLike": subject, "StringEquals": audience}
        if "*" in account.subject
        else {"StringEquals": {**subject, **audience}}
    )
    return policy_document(
        [
            {
                "Effect": "Allow",
                "Principal": {"Federated": provider_arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": condition,
            }
        ]
    )


@dataclass(frozen=True)
class OidcIssuer:
    """The cluster's IAM OIDC provider, as IRSA trust policies refer to it."""

    provider_arn: pulumi.Output[str]
    # Issuer URL without the scheme: oidc.eks.<region>.amazonaws.com/id/<ID>.
    host: pulumi.Output[str]


@dataclass(frozen=True)
class IrsaRole:
    role: iam.Role
    # The role's ARN once every policy of the role exists: what receives it (a service account's
    # annotation, an EKS add-on) is created after the rights, so no pod starts before it may act. IAM
    # answers a role and its policies as separate calls (iam:CreateRole, iam:PutRolePolicy,
    # iam:AttachRolePolicy), and the ARN alone is known after the first.
    arn: pulumi.Output[str]


def service_account_role(
    name: str,
    *,
    name_prefix: str,
    issuer: OidcIssuer,
    account: WorkloadIdentity,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    policy: pulumi.Input[str] | None = None,
    managed_policy_arns: Sequence[str] = (),
) -> IrsaRole:
    """An IRSA role for one service account, with an inline policy and/or AWS-managed policies."""
    child = pulumi.ResourceOptions(parent=parent)
    role = iam.Role(
        name,
        name_prefix=name_prefix,
        description=f"IRSA: {account.subject}",
        assume_role_policy=pulumi.Output.all(issuer.provider_arn, issuer.host).apply(
            lambda v: json.dumps(irsa_trust_policy(v[0], v[1], account))
        ),
        tags=dict(tags),
        opts=child,
    )
    policies: list[pulumi.Resource] = []
    if policy is not None:
        policies.append(iam.RolePolicy(name, role=role.id, policy=policy, opts=child))
    for index, arn in enumerate(managed_policy_arns):
        policies.append(
            iam.RolePolicyAttachment(f"{name}-{index}", role=role.name, policy_arn=arn, opts=child)
        )
    return IrsaRole(role, after(role.arn, policies))


@dataclass(frozen=True)
class NodeRole:
    role: iam.Role
    # Node groups depend on these: EKS needs the policies while it deletes a group's instances, ENIs
    # and security groups (pulumi-aws ``eks.NodeGroup`` docstring).
    attachments: Sequence[iam.RolePolicyAttachment]


def node_role(
    name: str, *, name_prefix: str, account: AwsAccount, tags: Mapping[str, str], parent: pulumi.Resource
) -> NodeRole:
    """The role every managed node group's instances run as (with authentication mode API, EKS creates
    the node access entry for it when a managed node group uses it)."""
    child = pulumi.ResourceOptions(parent=parent)
    role = iam.Role(
        name,
        name_prefix=name_prefix,
        description="EKS managed node groups: kubelet, image pulls",
        assume_role_policy=service_trust_policy("ec2.amazonaws.com"),
        tags=dict(tags),
        opts=child,
    )
    attachments = [
        iam.RolePolicyAttachment(
            f"{name}-{policy}", role=role.name, policy_arn=managed_policy_arn(account, policy), opts=child
        )
        for policy in NODE_POLICIES
    ]
    return NodeRole(role, attachments)
