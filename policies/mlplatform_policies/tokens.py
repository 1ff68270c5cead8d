"""Type tokens that more than one rule needs, named once (pulumi-aws v7 keeps v6 names as aliases)."""

from __future__ import annotations

S3_BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
S3_ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
S3_PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
S3_ACCOUNT_PUBLIC_ACCESS_BLOCK = "aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock"
S3_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
S3_ACLS = ("aws:s3/bucketAcl:BucketAcl", "aws:s3/bucketAclV2:BucketAclV2")
S3_REPLICATION = "aws:s3/bucketReplicationConfig:BucketReplicationConfig"

STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
FILE_SHARE = "azure-native:storage:FileShare"
# An ARM template deployment to a resource group: what sets an API version the typed SDK lacks.
TEMPLATE_DEPLOYMENT = "azure-native:resources:Deployment"
# pulumi-command's command run on the deployer's machine (the Azure CLI's steps ARM has no resource for).
LOCAL_COMMAND = "command:local:Command"
OBJECT_REPLICATION = "azure-native:storage:ObjectReplicationPolicy"
AKS_CLUSTER = "azure-native:containerservice:ManagedCluster"
AKS_POOL = "azure-native:containerservice:AgentPool"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
EC2_INSTANCE = "aws:ec2/instance:Instance"

NAMESPACE = "kubernetes:core/v1:Namespace"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
# Where each workload kind keeps its pod spec.
POD_SPEC_PATHS = {
    "kubernetes:core/v1:Pod": "spec",
    "kubernetes:apps/v1:Deployment": "spec.template.spec",
    "kubernetes:apps/v1:StatefulSet": "spec.template.spec",
    "kubernetes:apps/v1:DaemonSet": "spec.template.spec",
    "kubernetes:apps/v1:ReplicaSet": "spec.template.spec",
    "kubernetes:batch/v1:Job": "spec.template.spec",
    "kubernetes:batch/v1:CronJob": "spec.jobTemplate.spec.template.spec",
}
WORKLOADS = tuple(POD_SPEC_PATHS)
