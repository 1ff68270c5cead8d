"""Storage as planned: the data bucket's controls, its log bucket, no replication anywhere; EFS only in
SMB stacks, FSx for Lustre only in enterprise stacks, each reachable from the nodes alone."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from components.aws.registry import KEPT_IMAGES, image_repository, repositories
from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import AWS_STACKS, policy, resources
from tests.stack_variants import one

BUCKET = "aws:s3/bucket:Bucket"
EFS = "aws:efs/fileSystem:FileSystem"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"


@pytest.mark.parametrize("stack", ["aws-smb-dev", "aws-enterprise-prod"])
def test_data_bucket_is_kms_encrypted_versioned_private_and_tls_only(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    plan = cloud_plan(stack)
    (rule,) = one(
        plan,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "-storage-data",
    ).inputs["rules"]
    assert rule["applyServerSideEncryptionByDefault"] == {
        "sseAlgorithm": "aws:kms",
        "kmsMasterKeyId": plan.outputs["kmsKeys"]["object-data"],
    }
    assert rule["bucketKeyEnabled"] is True
    versioning = one(plan, "aws:s3/bucketVersioning:BucketVersioning", "-storage-data").inputs
    assert versioning["versioningConfiguration"] == {"status": "Enabled"}
    (lifecycle,) = one(
        plan, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "-storage-data"
    ).inputs["rules"]
    assert lifecycle["noncurrentVersionExpiration"] == {"noncurrentDays": 90}
    assert lifecycle["status"] == "Enabled"
    block = one(plan, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "-storage-data").inputs
    assert all(
        block[flag] is True
        for flag in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    ownership = one(plan, "aws:s3/bucketOwnershipControls:BucketOwnershipControls", "-storage-data").inputs
    assert ownership["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    statements = policy(one(plan, "aws:s3/bucketPolicy:BucketPolicy", "-storage-data").inputs["policy"])[
        "Statement"
    ]
    (deny,) = statements
    assert deny["Effect"] == "Deny" and deny["Action"] == "s3:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert deny["Resource"][1] == deny["Resource"][0] + "/*"


def test_access_logs_go_to_a_separate_hardened_bucket(cloud_plan: Callable[[str], Plan]) -> None:
    """Issue 11 item 12: S3 server access logs cannot be delivered to an SSE-KMS default-encrypted target
    (S3 user guide, "Enabling Amazon S3 server access logging"), so the log bucket uses SSE-S3 and
    declares its role, the tag the policy pack's exception reads (the data bucket stays SSE-KMS)."""
    plan = cloud_plan("aws-enterprise-prod")
    logging = one(plan, "aws:s3/bucketLogging:BucketLogging", "-storage-data").inputs
    log_bucket = one(plan, BUCKET, "-storage-logs")
    assert logging["targetBucket"].startswith(log_bucket.name)
    assert logging["bucket"].startswith(one(plan, BUCKET, "-storage-data").name)
    (rule,) = one(
        plan,
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "-storage-logs",
    ).inputs["rules"]
    assert rule == {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}
    assert log_bucket.inputs["tags"]["ml-platform.io/role"] == "access-logs"
    assert "ml-platform.io/role" not in one(plan, BUCKET, "-storage-data").inputs["tags"]
    block = one(plan, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "-storage-logs").inputs
    assert block["blockPublicPolicy"] is True and block["restrictPublicBuckets"] is True
    deny, delivery = policy(one(plan, "aws:s3/bucketPolicy:BucketPolicy", "-storage-logs").inputs["policy"])[
        "Statement"
    ]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert delivery["Principal"] == {"Service": "logging.s3.amazonaws.com"}
    assert delivery["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    assert delivery["Resource"].endswith("/s3-access/*")
    key_statements = policy(one(plan, "aws:kms/key:Key", "-key-key").inputs["policy"])["Statement"]
    assert not [s for s in key_statements if s["Principal"] == {"Service": "logging.s3.amazonaws.com"}]


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_nothing_replicates_out_of_the_region(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    plan = cloud_plan(stack)
    assert resources(plan, "aws:s3/bucketReplicationConfig:BucketReplicationConfig") == []
    assert resources(plan, "aws:ecr/replicationConfiguration:ReplicationConfiguration") == []
    for bucket in resources(plan, BUCKET):
        assert "replicationConfiguration" not in bucket.inputs
        assert bucket.inputs.get("forceDestroy") is False
    assert one(plan, "aws:kms/key:Key", "-key-key").inputs["multiRegion"] is False


@pytest.mark.parametrize("stack", ["aws-smb-dev", "aws-smb-prod"])
def test_smb_shares_efs_and_no_lustre(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    plan = cloud_plan(stack)
    assert resources(plan, LUSTRE) == []
    efs = one(plan, EFS, "-shared-efs").inputs
    assert efs["encrypted"] is True
    assert efs["kmsKeyId"] == plan.outputs["kmsKeys"]["training-data"]
    mounts = resources(plan, "aws:efs/mountTarget:MountTarget")
    assert len(mounts) == len(resources(plan, "aws:ec2/subnet:Subnet", "-network-private-")) >= 2
    assert all("-network-private-" in m.inputs["subnetId"] for m in mounts)
    (nfs,) = resources(plan, INGRESS, "-shared-")
    assert (nfs.inputs["ipProtocol"], nfs.inputs["fromPort"], nfs.inputs["toPort"]) == ("tcp", 2049, 2049)
    assert nfs.inputs["referencedSecurityGroupId"].startswith("sg-")  # the nodes' (cluster) group
    assert "cidrIpv4" not in nfs.inputs


@pytest.mark.parametrize("stack", ["aws-enterprise-dev", "aws-enterprise-prod"])
def test_enterprise_shares_lustre_and_no_efs(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    plan = cloud_plan(stack)
    assert resources(plan, EFS) == []
    lustre = one(plan, LUSTRE, "-shared-lustre").inputs
    assert lustre["deploymentType"] == "PERSISTENT_2"
    assert lustre["kmsKeyId"] == plan.outputs["kmsKeys"]["training-data"]
    assert lustre["perUnitStorageThroughput"] == 250
    assert lustre["subnetIds"].startswith(f"{stack}-aws-network-private-0-")  # the EFA pool's zone
    capacity = {"aws-enterprise-dev": 1200, "aws-enterprise-prod": 4800}[stack]
    assert lustre["storageCapacity"] == capacity
    association = one(
        plan, "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation", "-shared-dra"
    ).inputs
    assert association["dataRepositoryPath"] == plan.outputs["bucket"] + "/"
    assert association["fileSystemPath"] == "/"
    # Review aws.md D2: FSx backs up no file system linked to S3 (FSx API reference, CreateBackup), so
    # backups are off by value, not by an API default, and the copy is the export: every new, changed
    # and deleted file to the data bucket, which keeps noncurrent versions.
    assert lustre["automaticBackupRetentionDays"] == 0
    assert set(association["s3"]["autoExportPolicy"]["events"]) == {"NEW", "CHANGED", "DELETED"}
    (versioning,) = [
        v
        for v in resources(plan, "aws:s3/bucketVersioning:BucketVersioning", "-storage-data")
        if v.name.endswith("-storage-data")
    ]
    assert versioning.inputs["versioningConfiguration"]["status"] == "Enabled"
    rules = resources(plan, INGRESS, "-shared-lustre-")
    assert {(r.inputs["fromPort"], r.inputs["toPort"]) for r in rules} == {(988, 988), (1018, 1023)}
    assert all("cidrIpv4" not in r.inputs and r.inputs["ipProtocol"] == "tcp" for r in rules)
    grant = one(plan, "aws:kms/grant:Grant", "-shared-s3-key").inputs
    assert "AWSServiceRoleForFSxS3Access_" in grant["granteePrincipal"]
    assert list(grant["constraints"][0]["encryptionContextSubset"]) == ["aws:s3:arn"]


def test_registry_repositories_are_immutable_scanned_and_kms_encrypted(
    cloud_plan: Callable[[str], Plan],
) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    repos = resources(plan, "aws:ecr/repository:Repository")
    assert sorted(r.inputs["name"] for r in repos) == [
        "aws-enterprise-prod-aws/ml-platform/inference",
        "aws-enterprise-prod-aws/ml-platform/registry",
        "aws-enterprise-prod-aws/ml-platform/trainer",
    ]
    for repo in repos:
        assert repo.inputs["imageTagMutability"] == "IMMUTABLE"
        assert repo.inputs["imageScanningConfiguration"] == {"scanOnPush": True}
        assert repo.inputs["encryptionConfigurations"] == [
            {"encryptionType": "KMS", "kmsKey": plan.outputs["kmsKeys"]["images"]}
        ]
    assert (
        plan.outputs["registry"] == "123456789012.dkr.ecr.me-central-1.amazonaws.com/aws-enterprise-prod-aws"
    )


@pytest.mark.parametrize(("stack", "protected"), [("aws-enterprise-prod", True), ("aws-smb-dev", False)])
def test_each_repository_expires_old_images_and_a_dev_repository_goes_with_a_destroy(
    stack: str, protected: bool, cloud_plan: Callable[[str], Plan]
) -> None:
    """AWS review N5: every image change pushes a new immutable tag (the trainer's several GB), so a
    repository keeps the newest KEPT_IMAGES; a dev stack's destroy no longer stops at
    RepositoryNotEmptyException (ECR API, DeleteRepository ``force``)."""
    plan = cloud_plan(stack)
    repos = resources(plan, "aws:ecr/repository:Repository")
    policies = resources(plan, "aws:ecr/lifecyclePolicy:LifecyclePolicy")
    assert sorted(u for p in policies for u in p.property_dependencies["repository"]) == sorted(
        r.urn for r in repos
    )
    for lifecycle in policies:
        (rule,) = json.loads(lifecycle.inputs["policy"])["rules"]
        assert rule["selection"] == {
            "tagStatus": "any",
            "countType": "imageCountMoreThan",
            "countNumber": KEPT_IMAGES,
        }
        assert rule["action"] == {"type": "expire"}
    assert {r.inputs["forceDelete"] for r in repos} == {not protected}


def test_two_stacks_in_one_account_get_distinct_repositories(
    cloud_plan: Callable[[str], Plan], planned: Callable[[str], Plan]
) -> None:
    """Issue 11 item 11: ECR repository names are unique per account and region (ECR API,
    CreateRepository: RepositoryAlreadyExistsException), so two stacks must not name the same one,
    and each stack's workloads pull from the stack's own namespace."""
    names = [
        {r.inputs["name"] for r in resources(cloud_plan(stack), "aws:ecr/repository:Repository")}
        for stack in ("aws-enterprise-dev", "aws-enterprise-prod")
    ]
    assert names[0] and names[1] and not names[0] & names[1]
    plan = planned("aws-enterprise-dev")
    trainer = next(
        r
        for r in plan.resources
        if r.type == "kubernetes:batch/v1:Job" and r.inputs["metadata"]["namespace"] == "ml-training"
    )
    image = trainer.inputs["spec"]["template"]["spec"]["containers"][0]["image"]
    # The pushed tag with its digest (components/images.py, pulumi-docker-build Image.ref).
    assert image.startswith(plan.outputs["registry"] + "/ml-platform/trainer:") and "@sha256:" in image


def test_repository_names_come_from_image_references() -> None:
    digest = "ml-platform/trainer@sha256:" + "0" * 64
    assert image_repository("ml-platform/trainer:0.1.0") == "ml-platform/trainer"
    assert image_repository(digest) == "ml-platform/trainer"
    assert repositories(["a/x:1", "a/x:2", "a/y:1"]) == ["a/x", "a/y"]


STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"


@pytest.mark.parametrize("stack", ["aws-smb-dev", "aws-enterprise-prod"])
def test_claims_without_a_class_get_disks_the_ebs_driver_may_encrypt(
    planned: Callable[[str], Plan], stack: str
) -> None:
    """Review D6: exactly one default class on every AWS cluster (EKS >= 1.30 has none: EKS user guide,
    Kubernetes 1.30 release notes), its disks under the stack's key, and that key is one the EBS CSI
    controller's role may use through EC2 in the region (EKS user guide "Amazon EBS CSI driver", custom
    KMS key; KMS developer guide, kms:ViaService): else CreateVolume of an encrypted gp3 disk fails."""
    plan = planned(stack)
    defaults = [
        r.inputs
        for r in plan.by_type(STORAGE_CLASS)
        if r.inputs["metadata"].get("annotations", {}).get("storageclass.kubernetes.io/is-default-class")
        == "true"
    ]
    (storage_class,) = defaults
    key = plan.outputs["kmsKeys"]["node-volumes"]
    assert storage_class["provisioner"] == "ebs.csi.aws.com"
    assert storage_class["parameters"]["kmsKeyId"] == key
    assert storage_class["parameters"]["encrypted"] == "true"
    grants, use = policy(one(plan, "aws:iam/rolePolicy:RolePolicy", "-addons-ebs-csi").inputs["policy"])[
        "Statement"
    ]
    for statement in (grants, use):
        assert statement["Resource"] == key
        assert statement["Condition"]["StringEquals"] == {"kms:ViaService": "ec2.me-central-1.amazonaws.com"}
    assert {"kms:CreateGrant"} <= set(grants["Action"])
    assert grants["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
    assert {"kms:GenerateDataKey*", "kms:Decrypt"} <= set(use["Action"])
