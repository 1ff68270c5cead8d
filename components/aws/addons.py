"""EKS managed add-ons the platform needs and EKS does not run by itself.

- ``aws-ebs-csi-driver``: node-local volumes; its IRSA role also needs the stack's key, because every
  volume is encrypted under it (EKS user guide, "Amazon EBS CSI driver", custom KMS key policy).
- ``aws-efs-csi-driver`` (EFS stacks) with its IRSA role and the AWS-managed driver policy.
- ``aws-fsx-csi-driver`` (Lustre stacks), an EKS add-on (EKS user guide, "Deploy the FSx for Lustre
  driver"). No role: the file system is provisioned statically here, so the driver only mounts, which
  is a node-side Lustre client call, not an AWS API call.
- ``metrics-server``, an EKS community add-on (EKS user guide, "Community add-ons"), which the
  horizontal pod autoscaler of the inference service reads.

The cluster autoscaler is a Helm release of the Kubernetes layer; its role is in ``identities``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_aws import eks

from components.aws.account import AwsAccount
from components.aws.iam import OidcIssuer, managed_policy_arn, policy_document, service_account_role
from components.aws.service_accounts import EBS_CSI_CONTROLLER, EFS_CSI_CONTROLLER
from components.handle import SharedStorageKind


def ebs_key_policy(key_arn: pulumi.Input[str]) -> pulumi.Output[str]:
    """What the EBS CSI controller needs on a customer key: grants for the volumes it attaches, and
    data-key use for the volumes it creates (EKS user guide's KMS policy for the driver)."""
    return pulumi.Output.json_dumps(
        policy_document(
            [
                {
                    "Effect": "Allow",
                    "Action": ["kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"],
                    "Resource": key_arn,
                    "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
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
                },
            ]
        )
    )


@dataclass(frozen=True)
class ClusterAddonsArgs:
    account: AwsAccount
    cluster: pulumi.Input[str]
    issuer: OidcIssuer
    shared_storage: SharedStorageKind
    key_arn: pulumi.Input[str]
    # Add-on controllers need somewhere to run: they wait for the node groups.
    node_groups: Sequence[pulumi.Resource]
    tags: Mapping[str, str]


class ClusterAddons(pulumi.ComponentResource):
    """The storage CSI drivers and metrics-server, as EKS managed add-ons."""

    def __init__(
        self, name: str, args: ClusterAddonsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:aws:ClusterAddons", name, None, opts)
        self._name, self._args = name, args
        ebs_role = service_account_role(
            f"{name}-ebs-csi",
            issuer=args.issuer,
            account=EBS_CSI_CONTROLLER,
            policy=ebs_key_policy(args.key_arn),
            managed_policy_arns=[managed_policy_arn(args.account, "service-role/AmazonEBSCSIDriverPolicy")],
            tags=args.tags,
            parent=self,
        )
        self._addon("aws-ebs-csi-driver", ebs_role.arn)
        if args.shared_storage is SharedStorageKind.EFS:
            efs_role = service_account_role(
                f"{name}-efs-csi",
                issuer=args.issuer,
                account=EFS_CSI_CONTROLLER,
                managed_policy_arns=[
                    managed_policy_arn(args.account, "service-role/AmazonEFSCSIDriverPolicy")
                ],
                tags=args.tags,
                parent=self,
            )
            self._addon("aws-efs-csi-driver", efs_role.arn)
        elif args.shared_storage is SharedStorageKind.FSX_LUSTRE:
            self._addon("aws-fsx-csi-driver")
        self._addon("metrics-server")
        self.register_outputs({})

    def _addon(self, addon: str, role_arn: pulumi.Input[str] | None = None) -> eks.Addon:
        """The add-on's default version for the cluster's Kubernetes version (EKS picks it)."""
        return eks.Addon(
            f"{self._name}-{addon}",
            cluster_name=self._args.cluster,
            addon_name=addon,
            service_account_role_arn=role_arn,
            tags=dict(self._args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(self._args.node_groups)),
        )
