"""EKS managed add-ons the platform needs and EKS does not run by itself.

- ``aws-ebs-csi-driver``: node-local volumes; its IRSA role also needs the stack's key, because every
  volume is encrypted under it (EKS user guide, "Amazon EBS CSI driver", custom KMS key policy).
- ``aws-efs-csi-driver`` (EFS stacks) with its IRSA role and the AWS-managed driver policy.
- ``aws-fsx-csi-driver`` (Lustre stacks), an EKS add-on (EKS user guide, "Deploy the FSx for Lustre
  driver"). No role: the file system is provisioned statically here, so the driver only mounts, which
  is a node-side Lustre client call, not an AWS API call.
- ``coredns``, taken over from the self-managed copy EKS installs, at a pinned version.

``vpc-cni`` and ``kube-proxy`` are in ``NetworkAddons``: nodes need them to become Ready, so they go
before the node groups (terraform-aws-eks ``before_compute``). The VPC CNI enforces NetworkPolicy only
when its ``enableNetworkPolicy`` value is ``"true"`` (EKS user guide, "Configure your cluster for
Kubernetes network policies"); without it the platform's default-deny policies are accepted and ignored.

metrics-server and the cluster autoscaler are Helm releases of the Kubernetes layer (one install each:
the metrics-server EKS add-on and the chart both create ``v1beta1.metrics.k8s.io``); the autoscaler's
role is in ``identities``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_aws import eks

from components.aws.account import AwsAccount
from components.aws.iam import (
    OidcIssuer,
    managed_policy_arn,
    policy_document,
    role_name_prefix,
    service_account_role,
)
from components.aws.service_accounts import EBS_CSI_CONTROLLER, EFS_CSI_DRIVER, VPC_CNI
from components.catalog.aws import EKS_ADDON_VERSIONS
from components.handle import SharedStorageKind

# VPC CNI configuration schema key (``aws eks describe-addon-configuration --addon-name vpc-cni``):
# network policy enforcement is off unless set, and the value is the string "true".
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
# The EBS CSI driver's role name prefix purpose (``role_name_prefix``); the node-volumes key names the role.
EBS_CSI_PURPOSE = "ebs"


def ebs_key_policy(key_arn: pulumi.Input[str], region: str) -> pulumi.Output[str]:
    """What the EBS CSI controller needs on a customer key: grants for the volumes it attaches, and
    data-key use for the volumes it creates (EKS user guide's KMS policy for the driver). The driver
    never calls KMS itself, EC2 does on its behalf (CreateVolume, AttachVolume), so both statements hold
    only through EC2 in the stack's region (AWS KMS developer guide, ``kms:ViaService``: Amazon EBS is
    ``ec2.<region>.amazonaws.com``); the one stack key that also seals S3, FSx and ECR stays out of
    reach of the role's direct calls."""
    via_ec2 = {"kms:ViaService": f"ec2.{region}.amazonaws.com"}
    return pulumi.Output.json_dumps(
        policy_document(
            [
                {
                    "Effect": "Allow",
                    "Action": ["kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"],
                    "Resource": key_arn,
                    "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}, "StringEquals": via_ec2},
                },
                {
                    "Effect": "Allow",
                    "Action": [
                        "kms:Encrypt",
                        "kms:Decrypt",
                        "kms:ReEncrypt*",
                        "kms:GenerateDataKey*",
                        "kms:DescribeKey",
                    ],
                    "Resource": key_arn,
                    "Condition": {"StringEquals": via_ec2},
                },
            ]
        )
    )


def eks_addon(
    name: str,
    addon: str,
    *,
    cluster: pulumi.Input[str],
    kubernetes_version: str,
    tags: Mapping[str, str],
    opts: pulumi.ResourceOptions,
    role_arn: pulumi.Input[str] | None = None,
    configuration: Mapping[str, str] | None = None,
) -> eks.Addon:
    """One EKS add-on; the networking and DNS ones at the version pinned for the cluster's Kubernetes
    version (catalog), so a plan says what runs and an upgrade is a reviewed change. ``OVERWRITE`` on
    create takes over the self-managed copy EKS installed with the cluster (EKS API, CreateAddon
    ``resolveConflicts``), and on update the program's configuration wins."""
    return eks.Addon(
        f"{name}-{addon}",
        cluster_name=cluster,
        addon_name=addon,
        addon_version=EKS_ADDON_VERSIONS[kubernetes_version].get(addon),
        resolve_conflicts_on_create="OVERWRITE",
        # A version bump must not stop on fields EKS finds changed (EKS API reference, UpdateAddon
        # resolveConflicts; terraform-aws-eks defaults it to OVERWRITE): the values here are the truth.
        resolve_conflicts_on_update="OVERWRITE",
        configuration_values=json.dumps(configuration) if configuration else None,
        service_account_role_arn=role_arn,
        tags=dict(tags),
        opts=opts,
    )


@dataclass(frozen=True)
class NetworkAddonsArgs:
    account: AwsAccount
    cluster_name: str
    cluster: pulumi.Input[str]
    kubernetes_version: str
    issuer: OidcIssuer
    tags: Mapping[str, str]


class NetworkAddons(pulumi.ComponentResource):
    """vpc-cni (network policy on, its ENI permissions on aws-node's own IRSA role) and kube-proxy: node
    groups depend on these."""

    def __init__(
        self, name: str, args: NetworkAddonsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:aws:NetworkAddons", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # aws-node assigns pod addresses from its first start, so the policy is on the role before the
        # add-on (and with it every node group) is created: the gated ARN (iam.IrsaRole).
        cni_role = service_account_role(
            f"{name}-vpc-cni",
            name_prefix=role_name_prefix(args.cluster_name, "cni"),
            issuer=args.issuer,
            account=VPC_CNI,
            managed_policy_arns=[managed_policy_arn(args.account, "AmazonEKS_CNI_Policy")],
            tags=args.tags,
            parent=self,
        )
        self.addons = [
            eks_addon(
                name,
                "vpc-cni",
                cluster=args.cluster,
                kubernetes_version=args.kubernetes_version,
                configuration=VPC_CNI_CONFIGURATION,
                role_arn=cni_role.arn,
                tags=args.tags,
                opts=child,
            ),
            eks_addon(
                name,
                "kube-proxy",
                cluster=args.cluster,
                kubernetes_version=args.kubernetes_version,
                tags=args.tags,
                opts=child,
            ),
        ]
        self.register_outputs({})


@dataclass(frozen=True)
class ClusterAddonsArgs:
    account: AwsAccount
    cluster_name: str
    cluster: pulumi.Input[str]
    kubernetes_version: str
    issuer: OidcIssuer
    shared_storage: SharedStorageKind
    key_arn: pulumi.Input[str]
    # Add-on controllers need somewhere to run: they wait for the system/CPU node groups only, never
    # for GPU groups that may wait for capacity for hours (or, at minSize 0, never get a node).
    node_groups: Sequence[pulumi.Resource]
    tags: Mapping[str, str]


class ClusterAddons(pulumi.ComponentResource):
    """The storage CSI drivers and CoreDNS, as EKS managed add-ons."""

    def __init__(
        self, name: str, args: ClusterAddonsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:aws:ClusterAddons", name, None, opts)
        self._name, self._args = name, args
        ebs_role = service_account_role(
            f"{name}-ebs-csi",
            name_prefix=role_name_prefix(args.cluster_name, EBS_CSI_PURPOSE),
            issuer=args.issuer,
            account=EBS_CSI_CONTROLLER,
            policy=ebs_key_policy(args.key_arn, args.account.region),
            managed_policy_arns=[managed_policy_arn(args.account, "service-role/AmazonEBSCSIDriverPolicy")],
            tags=args.tags,
            parent=self,
        )
        self._addon("aws-ebs-csi-driver", ebs_role.arn)
        # The role itself, which the node-volumes key's policy names (its policies wait for that key).
        self.ebs_csi_role_arn: pulumi.Output[str] = ebs_role.role.arn
        if args.shared_storage is SharedStorageKind.EFS:
            efs_role = service_account_role(
                f"{name}-efs-csi",
                name_prefix=role_name_prefix(args.cluster_name, "efs"),
                issuer=args.issuer,
                account=EFS_CSI_DRIVER,
                managed_policy_arns=[
                    managed_policy_arn(args.account, "service-role/AmazonEFSCSIDriverPolicy")
                ],
                tags=args.tags,
                parent=self,
            )
            self._addon("aws-efs-csi-driver", efs_role.arn)
        elif args.shared_storage is SharedStorageKind.FSX_LUSTRE:
            self._addon("aws-fsx-csi-driver")
        self._addon("coredns")
        self.register_outputs({})

    def _addon(self, addon: str, role_arn: pulumi.Input[str] | None = None) -> eks.Addon:
        args = self._args
        return eks_addon(
            self._name,
            addon,
            cluster=args.cluster,
            kubernetes_version=args.kubernetes_version,
            role_arn=role_arn,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.node_groups)),
        )
