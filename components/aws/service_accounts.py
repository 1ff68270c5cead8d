"""The Kubernetes service accounts that hold AWS roles (IRSA), named in one place on the AWS side.

An IRSA trust policy pins the exact ``system:serviceaccount:<namespace>:<name>`` subject, so the role and
the service account must agree letter for letter. The workloads' accounts are the cloud-neutral
``WORKLOAD_IDENTITIES`` of the handle contract (the Kubernetes layer creates them); the ones below are
the AWS-only additions. The handle's ``identities`` are keyed by ``IRSA_SERVICE_ACCOUNTS``.
"""

from __future__ import annotations

from components.handle import (
    IMAGE_VERIFIER,
    IMAGE_VERIFIER_KEY,
    RECORD_WRITERS,
    WORKLOAD_IDENTITIES,
    WorkloadIdentity,
)

TRAINING = WORKLOAD_IDENTITIES["training"]
INFERENCE = WORKLOAD_IDENTITIES["inference"]
REGISTRY = WORKLOAD_IDENTITIES["registry"]
# The lifecycle record's writers: the rollout's Job and the drift monitor's CronJob.
ROLLOUT = RECORD_WRITERS["rollout"]
DRIFT_MONITOR = RECORD_WRITERS["drift-monitor"]
# The Kubernetes layer's cluster-autoscaler Helm release runs as this account.
CLUSTER_AUTOSCALER = WorkloadIdentity("kube-system", "cluster-autoscaler")
# The names the EKS managed add-ons give their service accounts (EKS user guide, "Amazon EBS CSI driver":
# ebs-csi-controller-sa in kube-system). The EFS driver's controller (efs-csi-controller-sa) and node
# (efs-csi-node-sa) accounts share one role, whose trust matches ``efs-csi-*`` with StringLike (EKS user
# guide, "Amazon EFS CSI driver", the role's trust policy).
EBS_CSI_CONTROLLER = WorkloadIdentity("kube-system", "ebs-csi-controller-sa")
# The VPC CNI DaemonSet's account (EKS user guide, "Configure Amazon VPC CNI plug-in to use IRSA":
# system:serviceaccount:kube-system:aws-node).
VPC_CNI = WorkloadIdentity("kube-system", "aws-node")
EFS_CSI_DRIVER = WorkloadIdentity("kube-system", "efs-csi-*")

# handle.identities key -> the service account its annotations belong on.
IRSA_SERVICE_ACCOUNTS: dict[str, WorkloadIdentity] = {
    "training": TRAINING,
    "inference": INFERENCE,
    "registry": REGISTRY,
    "cluster-autoscaler": CLUSTER_AUTOSCALER,
    "rollout": ROLLOUT,
    "drift-monitor": DRIFT_MONITOR,
    IMAGE_VERIFIER_KEY: IMAGE_VERIFIER,
}

# The annotation that binds a service account to an IAM role (EKS user guide, "IAM roles for service
# accounts").
ROLE_ARN_ANNOTATION = "eks.amazonaws.com/role-arn"
