"""Hardened programs pass: no false positives on real, secure resources.

These follow REFERENCE.md's baselines the way the cloud adapters and the Kubernetes layer build them:
a bucket secured by separate public-access-block, encryption and policy resources (linked through the
graph), same-region replication, a private EKS cluster with an encrypted, IMDSv2-only GPU pool, a
private AKS cluster with a customer-keyed disk encryption set and geo-redundant storage inside the UAE
pair, and Kubernetes workloads with the documented exceptions written down.
"""

from __future__ import annotations

from .conftest import AWS, AZURE, KUBERNETES, Judge, found

AWS_PLATFORM = """
import pulumi
import pulumi_aws.autoscaling as autoscaling
import pulumi_aws.cloudtrail as cloudtrail
import pulumi_aws.ec2 as ec2
import pulumi_aws.ecr as ecr
import pulumi_aws.efs as efs
import pulumi_aws.eks as eks
import pulumi_aws.fsx as fsx
import pulumi_aws.guardduty as guardduty
import pulumi_aws.kms as kms
import pulumi_aws.provider as aws
import pulumi_aws.s3 as s3

# One key per data domain (keys-per-domain); the logging key lets CloudTrail write and read its files
# (CloudTrail user guide, "Configure AWS KMS key policies for CloudTrail": Decrypt with an S3 Bucket Key).
key = kms.Key("platform", enable_key_rotation=True, description="ml-platform object data")
secrets_key = kms.Key("secrets", enable_key_rotation=True, description="Kubernetes Secrets")
volumes_key = kms.Key("volumes", enable_key_rotation=True, description="node volumes")
training_key = kms.Key("training", enable_key_rotation=True, description="training data")
images_key = kms.Key("images", enable_key_rotation=True, description="images")
TO_CLOUDTRAIL = {"Service": "cloudtrail.amazonaws.com"}
logging_key = kms.Key(
    "logging",
    enable_key_rotation=True,
    description="audit trail",
    policy=json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    # The account administers the key through IAM, uses it for nothing (key-duties-separated).
                    "Sid": "Account",
                    "Effect": "Allow",
                    "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                    "Action": ["kms:Describe*", "kms:Enable*", "kms:List*", "kms:Put*", "kms:Update*",
                               "kms:Disable*", "kms:Get*", "kms:Delete*", "kms:ScheduleKeyDeletion",
                               "kms:CancelKeyDeletion"],
                    "Resource": "*",
                },
                {
                    "Sid": "CloudTrail",
                    "Effect": "Allow",
                    "Principal": TO_CLOUDTRAIL,
                    "Action": ["kms:GenerateDataKey*", "kms:Decrypt", "kms:DescribeKey"],
                    "Resource": "*",
                },
            ],
        }
    ),
)


def tls_only(arn, more=()):
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "TlsOnly",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [arn, f"{arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                },
                *more,
            ],
        }
    )


# The statements CloudTrail needs on its bucket (CloudTrail user guide, "Amazon S3 bucket policy for
# CloudTrail").
def to_cloudtrail(arn):
    return tls_only(
        arn,
        [
            {"Effect": "Allow", "Principal": TO_CLOUDTRAIL, "Action": "s3:GetBucketAcl", "Resource": arn},
            {"Effect": "Allow", "Principal": TO_CLOUDTRAIL, "Action": "s3:PutObject", "Resource": f"{arn}/*"},
        ],
    )


# Each bucket under a customer key declares its data domain, which its key serves (keys-per-domain).
def secure_bucket(name, policy=tls_only, bucket_key=None, domain="object-data", tags=None, **extra):
    bucket = s3.Bucket(name, tags={**(tags or {}), "ml-platform.io/data-domain": domain}, **extra)
    s3.BucketPublicAccessBlock(
        name,
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
    )
    s3.BucketServerSideEncryptionConfiguration(
        name,
        bucket=bucket.id,
        rules=[
            {
                "bucket_key_enabled": True,
                "apply_server_side_encryption_by_default": {
                    "sse_algorithm": "aws:kms",
                    "kms_master_key_id": (bucket_key or key).arn,
                },
            }
        ],
    )
    s3.BucketPolicy(name, bucket=bucket.id, policy=bucket.arn.apply(policy))
    return bucket


artifacts, replica = secure_bucket("artifacts"), secure_bucket("artifacts-replica")
s3.BucketReplicationConfig(
    "same-region",
    bucket=artifacts.id,
    role="arn:aws:iam::123456789012:role/replication",
    rules=[{"id": "all", "status": "Enabled", "destination": {"bucket": replica.arn}}],
)

cluster = eks.Cluster(
    "eks",
    role_arn="arn:aws:iam::123456789012:role/eks",
    vpc_config={
        "subnet_ids": ["subnet-a", "subnet-b"],
        "endpoint_public_access": False,
        "endpoint_private_access": True,
    },
    encryption_config={"provider": {"key_arn": secrets_key.arn}, "resources": ["secrets"]},
    enabled_cluster_log_types=["api", "audit", "authenticator", "controllerManager", "scheduler"],
)
# The audit trail: every region, validated, under a key, into an Object-Locked bucket (audit policies).
trail_bucket = secure_bucket(
    "trail", policy=to_cloudtrail, bucket_key=logging_key, domain="audit", object_lock_enabled=True
)
s3.BucketObjectLockConfiguration(
    "trail",
    bucket=trail_bucket.id,
    rule={"default_retention": {"mode": "COMPLIANCE", "days": 365}},
)
# The model lifecycle record (lifecycle-record-locked): its own bucket, Object-Locked in COMPLIANCE.
record_bucket = secure_bucket(
    "record", object_lock_enabled=True, tags={"ml-platform.io/role": "lifecycle-record"}
)
s3.BucketObjectLockConfiguration(
    "record",
    bucket=record_bucket.id,
    rule={"default_retention": {"mode": "COMPLIANCE", "days": 365}},
)
cloudtrail.Trail(
    "audit",
    s3_bucket_name=trail_bucket.bucket,
    kms_key_id=logging_key.arn,
    # CloudWatch delivery, which the alarms read (audit-trail).
    cloud_watch_logs_group_arn="arn:aws:logs:me-central-1:123456789012:log-group:/aws/cloudtrail/audit:*",
    cloud_watch_logs_role_arn="arn:aws:iam::123456789012:role/cloudtrail-to-logs",
    is_multi_region_trail=True,
    enable_log_file_validation=True,
)
detector = guardduty.Detector("detector", enable=True)
for feature in ("EKS_AUDIT_LOGS", "RUNTIME_MONITORING"):
    guardduty.DetectorFeature(feature.lower(), detector_id=detector.id, name=feature, status="ENABLED")
template = ec2.LaunchTemplate(
    "gpu",
    block_device_mappings=[
        {
            "device_name": "/dev/xvda",
            "ebs": {
                "encrypted": "true",
                "kms_key_id": volumes_key.arn,
                "volume_size": 200,
                "delete_on_termination": "true",
            },
        }
    ],
    metadata_options={
        "http_endpoint": "enabled",
        "http_tokens": "required",
        "http_put_response_hop_limit": 1,
    },
    network_interfaces=[{"device_index": 0, "interface_type": "efa", "associate_public_ip_address": "false"}],
)
gpu = eks.NodeGroup(
    "gpu",
    cluster_name=cluster.name,
    node_role_arn="arn:aws:iam::123456789012:role/nodes",
    subnet_ids=["subnet-a"],
    scaling_config={"desired_size": 2, "max_size": 4, "min_size": 0},
    # The EFA GPU type me-central-1 sells (aws-instance-type-sold-in-region).
    instance_types=["p5en.48xlarge"],
    ami_type="AL2023_x86_64_NVIDIA",
    launch_template={"id": template.id, "version": "$Latest"},
    taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
    # The cluster autoscaler moves the desired size (day2-cloud-moved-properties-ignored).
    opts=pulumi.ResourceOptions(ignore_changes=["scalingConfig.desiredSize"]),
)
# Scales from zero: the autoscaler learns the EFA devices from the ASG (aws-efa-scale-from-zero).
autoscaling.Tag(
    "gpu-efa-template",
    autoscaling_group_name=gpu.resources.apply(lambda r: r[0].autoscaling_groups[0].name),
    tag={
        "key": "k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa",
        "value": "16",
        "propagate_at_launch": False,
    },
)
ec2.SecurityGroup(
    "nodes",
    vpc_id="vpc-1",
    ingress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}],
    egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}],
)
fsx.LustreFileSystem(
    "scratch",
    subnet_ids="subnet-a",
    storage_capacity=1200,
    deployment_type="PERSISTENT_2",
    per_unit_storage_throughput=125,
    kms_key_id=training_key.arn,
)
efs.FileSystem("checkpoints", encrypted=True, kms_key_id=training_key.arn)

# An explicit provider: its defaultTags reach policies as a JSON string, as the SDK sends them.
uae = aws.Provider("uae", region="me-central-1", default_tags={"tags": TAGS})
images = ecr.Repository(
    "images",
    image_tag_mutability="IMMUTABLE",
    encryption_configurations=[{"encryption_type": "KMS", "kms_key": images_key.arn}],
    opts=pulumi.ResourceOptions(provider=uae),
)
ecr.LifecyclePolicy(
    "images-lifecycle",
    repository=images.name,
    policy=json.dumps({"rules": [{"rulePriority": 1, "action": {"type": "expire"}, "selection": {
        "tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": 10}}]}),
    opts=pulumi.ResourceOptions(provider=uae),
)
"""

AZURE_PLATFORM = """
import pulumi_azure_native.compute as compute
import pulumi_azure_native.containerregistry as containerregistry
import pulumi_azure_native.containerservice as containerservice
import pulumi_azure_native.keyvault as keyvault
import pulumi_azure_native.monitor as monitor
import pulumi_azure_native.privatedns as privatedns
import pulumi_azure_native.resources as resources
import pulumi_azure_native.security as security
import pulumi_azure_native.storage as storage

rg = resources.ResourceGroup("rg", location="uaenorth", tags=TAGS)
vault = keyvault.Vault(
    "kv",
    resource_group_name=rg.name,
    tags=TAGS,
    properties={
        "tenant_id": "t",
        "sku": {"family": "A", "name": "premium"},
        "enable_purge_protection": True,
        "enable_soft_delete": True,
        "enable_rbac_authorization": True,
        "public_network_access": "Disabled",
    },
)
des = compute.DiskEncryptionSet(
    "des",
    resource_group_name=rg.name,
    identity={"type": "SystemAssigned"},
    active_key={"key_url": "https://kv.vault.azure.net/keys/disks/0123456789abcdef0123456789abcdef"},
    encryption_type="EncryptionAtRestWithCustomerKey",
    tags=TAGS,
)
account = storage.StorageAccount(
    "data",
    resource_group_name=rg.name,
    kind="StorageV2",
    sku={"name": "Standard_GRS"},
    enable_https_traffic_only=True,
    minimum_tls_version="TLS1_2",
    allow_blob_public_access=False,
    network_rule_set={"default_action": "Deny"},
    tags=TAGS,
    encryption={
        "key_source": "Microsoft.Keyvault",
        "key_vault_properties": {"key_name": "data", "key_vault_uri": "https://kv.vault.azure.net/"},
    },
)
storage.BlobContainer("models", account_name=account.name, resource_group_name=rg.name, public_access="None")
# An NFS account requires secure transfer like every other (Microsoft Learn, "Encryption in transit for NFS
# Azure file shares", "Enforce encryption in transit") and is private-endpoint-only.
nfs = storage.StorageAccount(
    "nfs",
    resource_group_name=rg.name,
    kind="FileStorage",
    sku={"name": "Premium_ZRS"},
    enable_https_traffic_only=True,
    minimum_tls_version="TLS1_2",
    allow_blob_public_access=False,
    public_network_access="Disabled",
    network_rule_set={"default_action": "Deny"},
    tags=TAGS,
    encryption={
        "key_source": "Microsoft.Keyvault",
        "key_vault_properties": {"key_name": "training-data", "key_vault_uri": "https://kv.vault.azure.net/"},
    },
)
privatedns.PrivateZone(
    "blob-dns",
    resource_group_name=rg.name,
    location="Global",
    private_zone_name="privatelink.blob.core.windows.net",
    tags=TAGS,
)
aks = containerservice.ManagedCluster(
    "aks",
    resource_group_name=rg.name,
    dns_prefix="aks",
    disk_encryption_set_id=des.id,
    api_server_access_profile={"enable_private_cluster": True},
    tags=TAGS,
    agent_pool_profiles=[
        {
            "name": "system",
            "mode": "System",
            "vm_size": "Standard_D8s_v5",
            "count": 3,
            "enable_node_public_ip": False,
        }
    ],
    # AKS refreshes the inline profiles to every pool; the cluster takes them at creation only.
    opts=pulumi.ResourceOptions(ignore_changes=["agentPoolProfiles"]),
)
containerservice.AgentPool(
    "gpuib",
    resource_group_name=rg.name,
    resource_name_=aks.name,
    agent_pool_name="gpuib",
    mode="User",
    vm_size="Standard_ND96isr_H100_v5",
    count=2,
    enable_node_public_ip=False,
    node_taints=["nvidia.com/gpu=present:NoSchedule"],
    tags=TAGS,
)
registry = containerregistry.Registry(
    "acr",
    resource_group_name=rg.name,
    sku={"name": "Premium"},
    admin_user_enabled=False,
    public_network_access="Disabled",
    tags=TAGS,
)
# Audit logs of the vault, the blob and file services and the registry (Key Vault logging, Azure Storage
# and ACR monitoring references).
# The audit archive: immutable (time-based, append writes for diagnostic settings), in the region.
archive = storage.StorageAccount(
    "audit",
    resource_group_name=rg.name,
    kind="StorageV2",
    sku={"name": "Standard_ZRS"},
    enable_https_traffic_only=True,
    minimum_tls_version="TLS1_2",
    allow_blob_public_access=False,
    network_rule_set={"default_action": "Deny", "bypass": "AzureServices"},
    immutable_storage_with_versioning={
        "enabled": True,
        "immutability_policy": {
            "immutability_period_since_creation_in_days": 365,
            "state": "Locked",
            "allow_protected_append_writes": True,
        },
    },
    tags=TAGS,
    encryption={
        "key_source": "Microsoft.Keyvault",
        "key_vault_properties": {"key_name": "logs", "key_vault_uri": "https://kv.vault.azure.net/"},
    },
)
# The model lifecycle record: its own immutable account (time-based, no append writes) on the
# object-data key (lifecycle-record-locked, keys-per-domain); Shared Key off, so only the registry's
# identity writes it.
record = storage.StorageAccount(
    "record",
    resource_group_name=rg.name,
    kind="StorageV2",
    sku={"name": "Standard_ZRS"},
    allow_shared_key_access=False,
    enable_https_traffic_only=True,
    minimum_tls_version="TLS1_2",
    allow_blob_public_access=False,
    network_rule_set={"default_action": "Deny", "bypass": "AzureServices"},
    immutable_storage_with_versioning={
        "enabled": True,
        "immutability_policy": {
            "immutability_period_since_creation_in_days": 365,
            "state": "Locked",
            "allow_protected_append_writes": False,
        },
    },
    tags={**TAGS, "ml-platform.io-role": "lifecycle-record"},
    encryption={
        "key_source": "Microsoft.Keyvault",
        "key_vault_properties": {"key_name": "data", "key_vault_uri": "https://kv.vault.azure.net/"},
    },
)
for name, audited in (
    ("kv", vault.id),
    ("data", account.id.apply(lambda i: f"{i}/blobServices/default")),
    ("nfs", nfs.id.apply(lambda i: f"{i}/fileServices/default")),
    ("audit", archive.id.apply(lambda i: f"{i}/blobServices/default")),
    ("record", record.id.apply(lambda i: f"{i}/blobServices/default")),
    ("acr", registry.id),
):
    monitor.DiagnosticSetting(
        f"{name}-audit",
        resource_uri=audited,
        workspace_id="/subscriptions/s/resourceGroups/rg/providers/Microsoft.OperationalInsights/workspaces/w",
        logs=[{"category_group": "audit", "enabled": True}],
    )
monitor.DiagnosticSetting(
    "aks-audit",
    resource_uri=aks.id,
    storage_account_id=archive.id,
    logs=[{"category": "kube-audit-admin", "enabled": True}],
)
# The subscription's Activity Log into the archive, and Defender for each protected resource type.
monitor.DiagnosticSetting(
    "activity-log",
    resource_uri="/subscriptions/00000000-0000-0000-0000-000000000000",
    storage_account_id=archive.id,
    logs=[{"category": c, "enabled": True} for c in ("Administrative", "Security", "Policy")],
)
for plan in ("Containers", "KeyVaults", "StorageAccounts"):
    security.Pricing(
        plan.lower(),
        scope_id="/subscriptions/00000000-0000-0000-0000-000000000000",
        pricing_name=plan,
        pricing_tier="Standard",
    )
"""

KUBERNETES_PLATFORM = """
from pulumi_kubernetes.admissionregistration.v1 import (
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)
from pulumi_kubernetes.apps.v1 import Deployment
from pulumi_kubernetes.batch.v1 import Job
from pulumi_kubernetes.core.v1 import Namespace
from pulumi_kubernetes.helm.v3 import Release
from pulumi_kubernetes.networking.v1 import NetworkPolicy

from components.kubernetes.tenancy import (
    IPC_LOCK_EXCEPTION,
    POD_SECURITY_EXCEPTION_LABEL,
    ipc_lock_exception_policy,
)

# The privileged InfiniBand namespace is guarded as the program guards it: Pod Security "restricted" but for
# IPC_LOCK, by a ValidatingAdmissionPolicy bound with Deny in the namespaces with the exception label.
guard, binding = ipc_lock_exception_policy()
ValidatingAdmissionPolicy("ipc-lock-exception", metadata=guard["metadata"], spec=guard["spec"])
ValidatingAdmissionPolicyBinding("ipc-lock-exception", metadata=binding["metadata"], spec=binding["spec"])
PRIVILEGED = {"pod-security.kubernetes.io/enforce": "privileged"}
IPC_LOCK_ONLY = {**PRIVILEGED, POD_SECURITY_EXCEPTION_LABEL: IPC_LOCK_EXCEPTION}
NAMESPACE_NAME = "kubernetes.io/metadata.name"


def namespace(name, labels, reason=None):
    annotations = {"policy.ml-platform.io/privileged-reason": reason} if reason else {}
    ns = Namespace(name, metadata={"name": name, "labels": labels, "annotations": annotations})
    NetworkPolicy(
        f"{name}-default-deny",
        metadata={"name": "default-deny", "namespace": ns.metadata.name},
        spec={"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    )
    NetworkPolicy(
        f"{name}-allow-dns",
        metadata={"name": "allow-dns", "namespace": ns.metadata.name},
        spec={
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME: "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
                }
            ],
        },
    )
    return ns


def container(name, image, add=()):
    return {
        "name": name,
        "image": image,
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": list(add)},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


inference = namespace("inference", {"pod-security.kubernetes.io/enforce": "restricted"})
serving = container("server", "registry.example.ae/ml-platform/inference:0.1.0")
serving["livenessProbe"] = serving["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}}
Deployment(
    "inference",
    metadata={"name": "inference", "namespace": inference.metadata.name},
    spec={
        "replicas": 2,
        "selector": {"matchLabels": {"app": "inference"}},
        "template": {
            "metadata": {"labels": {"app": "inference"}},
            "spec": {"automountServiceAccountToken": False, "containers": [serving]},
        },
    },
)

training = namespace(
    "training-ib", IPC_LOCK_ONLY, reason="InfiniBand RDMA needs IPC_LOCK, beyond Pod Security baseline"
)
Job(
    "trainer",
    metadata={
        "name": "trainer",
        "namespace": training.metadata.name,
        "annotations": {
            "pulumi.com/skipAwait": "true",
            "policy.ml-platform.io/capabilities-reason": "NCCL over InfiniBand pins memory for RDMA",
        },
    },
    spec={
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        **container(
                            "trainer",
                            "registry.example.ae/ml-platform/trainer@sha256:" + "0" * 64,
                            add=["IPC_LOCK"],
                        ),
                        # IPC_LOCK reaches a root process only (kubernetes/kubernetes#56374).
                        "securityContext": {
                            "runAsNonRoot": False,
                            "runAsUser": 0,
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                    }
                ],
            }
        }
    },
)

operators = namespace(
    "gpu-operator", PRIVILEGED, reason="the NVIDIA GPU operator installs drivers on the host"
)
Release(
    "gpu-operator",
    chart="gpu-operator",
    version="v25.3.0",
    namespace=operators.metadata.name,
    repository_opts={"repo": "https://helm.ngc.nvidia.com/nvidia"},
)
"""


def test_hardened_aws_platform_passes(judge: Judge) -> None:
    violations = judge(AWS_PLATFORM, AWS)
    assert not violations, [(v.policy, v.name, v.message) for v in violations]


def test_hardened_azure_platform_passes(judge: Judge) -> None:
    violations = judge(AZURE_PLATFORM, AZURE)
    assert not violations, [(v.policy, v.name, v.message) for v in violations]


def test_hardened_kubernetes_layer_passes_with_its_exceptions(judge: Judge) -> None:
    violations = judge(KUBERNETES_PLATFORM, KUBERNETES)
    assert found(violations) == set(), [(v.policy, v.name, v.message) for v in violations]
    assert found(violations, "advisory") == {("k8s-unrendered-content", "gpu-operator")}
