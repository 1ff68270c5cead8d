"""IAM as planned: IRSA trust pinned to subject AND audience (exactly), policies scoped to prefixes and
the key, the autoscaler limited to this cluster's groups, a least-privilege node role, a key policy
without wildcard principals."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

import pytest

from components.aws.service_accounts import IRSA_SERVICE_ACCOUNTS, ROLE_ARN_ANNOTATION
from components.handle import WORKLOAD_IDENTITIES
from components.image_mirror import MIRROR_PATH
from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import AWS_STACKS, policy, resources
from tests.stack_variants import one

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ISSUER_PREFIX = "oidc.eks.me-central-1.amazonaws.com/id/"


def _trust(plan: Plan, suffix: str) -> dict[str, Any]:
    (statement,) = policy(one(plan, ROLE, suffix).inputs["assumeRolePolicy"])["Statement"]
    assert isinstance(statement, dict)
    return statement


@pytest.mark.parametrize("stack", ["aws-smb-dev", "aws-enterprise-prod"])
@pytest.mark.parametrize(
    ("role", "subject"),
    [
        ("-identities-training", "system:serviceaccount:ml-training:trainer"),
        ("-identities-inference", "system:serviceaccount:ml-inference:inference"),
        ("-identities-cluster-autoscaler", "system:serviceaccount:kube-system:cluster-autoscaler"),
        ("-addons-ebs-csi", "system:serviceaccount:kube-system:ebs-csi-controller-sa"),
        ("-network-addons-vpc-cni", "system:serviceaccount:kube-system:aws-node"),
        ("-identities-image-verifier", "system:serviceaccount:cosign-system:policy-controller-webhook"),
    ],
)
def test_irsa_trust_pins_subject_and_audience_exactly(
    cloud_plan: Callable[[str], Plan], stack: str, role: str, subject: str
) -> None:
    """A trust policy with ``sub`` alone, or with StringLike, lets other tokens from the same issuer in."""
    plan = cloud_plan(stack)
    statement = _trust(plan, role)
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    provider = one(plan, "aws:iam/openIdConnectProvider:OpenIdConnectProvider", "-cluster-oidc")
    assert statement["Principal"]["Federated"].startswith(
        f"arn:aws:iam:me-central-1:123456789012:{provider.name}-"
    )
    assert list(statement["Condition"]) == ["StringEquals"]
    conditions = statement["Condition"]["StringEquals"]
    (issuer,) = {key.rsplit(":", 1)[0] for key in conditions}
    assert issuer.startswith(ISSUER_PREFIX) and not issuer.startswith("https://")
    assert conditions == {f"{issuer}:sub": subject, f"{issuer}:aud": "sts.amazonaws.com"}


def test_workload_service_accounts_come_from_the_handle_contract() -> None:
    assert IRSA_SERVICE_ACCOUNTS["training"] == WORKLOAD_IDENTITIES["training"]
    assert IRSA_SERVICE_ACCOUNTS["inference"] == WORKLOAD_IDENTITIES["inference"]
    assert ROLE_ARN_ANNOTATION == "eks.amazonaws.com/role-arn"


def _inline(plan: Plan, suffix: str) -> list[dict[str, Any]]:
    statements: list[dict[str, Any]] = policy(one(plan, ROLE_POLICY, suffix).inputs["policy"])["Statement"]
    return statements


def test_training_reads_datasets_and_writes_models_and_checkpoints_only(
    cloud_plan: Callable[[str], Plan],
) -> None:
    """Review B5 (one data domain per bucket): training reads ``datasets/`` in the datasets bucket with the
    datasets key, and reads and writes ``models/`` and ``checkpoints/`` in the data bucket with the
    object-data key; nothing else, each key only through S3."""
    plan = cloud_plan("aws-enterprise-prod")
    statements = _inline(plan, "-identities-training")
    listing, read, key, models_listing, models_read, write, models_key = statements
    # The mocks' ARN ends in the bucket's logical name and a hash (mlplatform/mocks.py).
    datasets_arn, bucket_arn = listing["Resource"], models_listing["Resource"]
    assert datasets_arn.rsplit("-", 1)[0].endswith(":aws-enterprise-prod-aws-storage-datasets")
    assert bucket_arn.rsplit("-", 1)[0].endswith(":aws-enterprise-prod-aws-storage-data")
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["datasets/*"]}}
    assert read["Resource"] == [f"{datasets_arn}/datasets/*"]
    assert key["Resource"] == plan.outputs["kmsKeys"]["datasets"]
    assert key["Action"] == ["kms:Decrypt"]
    assert models_listing["Condition"] == {"StringLike": {"s3:prefix": ["models/*", "checkpoints/*"]}}
    assert models_read["Resource"] == [f"{bucket_arn}/models/*", f"{bucket_arn}/checkpoints/*"]
    assert write["Resource"] == [f"{bucket_arn}/models/*", f"{bucket_arn}/checkpoints/*"]
    assert "s3:PutObject" in write["Action"]
    assert models_key["Resource"] == plan.outputs["kmsKeys"]["object-data"]
    assert models_key["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"]
    for each in (key, models_key):
        assert each["Condition"] == {"StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}}


def test_inference_only_reads_models(cloud_plan: Callable[[str], Plan]) -> None:
    statements = _inline(cloud_plan("aws-enterprise-prod"), "-identities-inference")
    actions = {
        a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert actions == {"s3:ListBucket", "s3:GetObject", "s3:GetObjectVersion", "kms:Decrypt"}
    assert statements[0]["Condition"] == {"StringLike": {"s3:prefix": ["models/*"]}}


@pytest.mark.parametrize("stack", ["aws-smb-dev", "aws-enterprise-prod"])
def test_the_image_verifier_reads_the_signing_key_and_pulls_the_stacks_repositories_only(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """policy-controller v0.13.1 reads signatures with its pod's own identity (pkg/webhook/registryauth/
    registryauth.go: amazon-ecr-credential-helper on the AWS SDK's default credentials, this IRSA role).
    An ECR login is ecr:GetAuthorizationToken, which has no resource type ("*"); a pull, ecr:BatchGetImage
    and ecr:GetDownloadUrlForLayer on the repository (AWS Service Authorization Reference, Amazon ECR).
    The stack's repositories, its mirror's among them; no other stack's, nothing to push or list."""
    plan = cloud_plan(stack)
    key, login, pull = _inline(plan, "-identities-image-verifier")
    assert key["Action"] == ["kms:GetPublicKey", "kms:DescribeKey"]
    assert key["Resource"] == plan.outputs["imageSigningKey"].removeprefix("awskms:///")
    assert (login["Action"], login["Resource"]) == ("ecr:GetAuthorizationToken", "*")
    assert pull["Action"] == ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    namespace = str(plan.outputs["registry"]).split("/")[1]
    assert pull["Resource"] == f"arn:aws:ecr:me-central-1:123456789012:repository/{namespace}/*"
    # Every repository the stack makes, and the mirror's (mlplatform/mirror.py), match; another's not.
    repositories = [r.inputs["name"] for r in plan.by_type("aws:ecr/repository:Repository")]
    mirror = f"{namespace}/{MIRROR_PATH}/quay.io/prometheus/prometheus"
    for name in [*repositories, mirror]:
        assert fnmatch.fnmatchcase(
            f"arn:aws:ecr:me-central-1:123456789012:repository/{name}", pull["Resource"]
        )
    assert repositories and not fnmatch.fnmatchcase(
        "arn:aws:ecr:me-central-1:123456789012:repository/other-stack/ml-platform/trainer", pull["Resource"]
    )


def test_autoscaler_resizes_only_this_clusters_tagged_groups(cloud_plan: Callable[[str], Plan]) -> None:
    discover, describe, resize = _inline(cloud_plan("aws-smb-dev"), "-identities-cluster-autoscaler")
    assert all(not a.startswith("autoscaling:Set") for a in discover["Action"])
    assert describe["Resource"] == "arn:aws:eks:me-central-1:123456789012:nodegroup/aws-smb-dev-aws/*"
    assert resize["Action"] == [
        "autoscaling:SetDesiredCapacity",
        "autoscaling:TerminateInstanceInAutoScalingGroup",
    ]
    assert resize["Condition"] == {
        "StringEquals": {
            "aws:ResourceTag/k8s.io/cluster-autoscaler/enabled": "true",
            "aws:ResourceTag/k8s.io/cluster-autoscaler/aws-smb-dev-aws": "owned",
        }
    }


def test_node_role_has_only_worker_and_registry_read(cloud_plan: Callable[[str], Plan]) -> None:
    """Review D3 (shared/reviews/aws.md): AmazonEKS_CNI_Policy on the node role lets every hostNetwork
    pod manage ENIs through the instance profile; it belongs on aws-node's IRSA role (EKS best practices
    guide, "Update the aws-node daemonset to use IRSA")."""
    plan = cloud_plan("aws-smb-dev")
    node = one(plan, ROLE, "-aws-node")
    assert _trust(plan, "-aws-node")["Principal"] == {"Service": "ec2.amazonaws.com"}
    attached = sorted(
        r.inputs["policyArn"]
        for r in resources(plan, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "-aws-node-")
    )
    assert attached == [
        "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
        "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    ]
    assert resources(plan, ROLE_POLICY, node.name) == []


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_vpc_cni_runs_on_its_own_irsa_role(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    """Review D3: EKS user guide, "Configure Amazon VPC CNI plug-in to use IRSA": the vpc-cni add-on's
    serviceAccountRoleArn is a role trusted by kube-system:aws-node carrying AmazonEKS_CNI_Policy, in
    place before the add-on (node groups wait for the add-on)."""
    plan = cloud_plan(stack)
    role = one(plan, ROLE, "-network-addons-vpc-cni")
    addon = one(plan, "aws:eks/addon:Addon", "-network-addons-vpc-cni")
    assert addon.inputs["serviceAccountRoleArn"].startswith("arn:aws:iam::")
    attachment = one(plan, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "-network-addons-vpc-cni-0")
    assert attachment.inputs["policyArn"] == "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"
    # The role's ARN reaches the add-on only once the policy is attached (components/ordering.py).
    assert set(addon.property_dependencies["serviceAccountRoleArn"]) == {role.urn, attachment.urn}
    assert attachment.urn in addon.dependencies


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_ebs_driver_uses_the_key_only_through_ec2(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    """Review D3: the EBS CSI role may use the stack key (which also seals S3, FSx and ECR) only through
    EC2 in the stack's region (AWS KMS developer guide, kms:ViaService; EBS is ec2.<region>)."""
    for statement in _inline(cloud_plan(stack), "-addons-ebs-csi"):
        assert statement["Condition"]["StringEquals"] == {"kms:ViaService": "ec2.me-central-1.amazonaws.com"}


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_cluster_waits_for_its_roles_key_policy(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    """Review D3: secrets envelope encryption runs on the cluster role's KMS policy from the first write,
    so the cluster depends on it as on the managed-policy attachment."""
    plan = cloud_plan(stack)
    kms = one(plan, ROLE_POLICY, "-cluster-role-kms")
    assert kms.urn in one(plan, "aws:eks/cluster:Cluster", "-cluster-eks").dependencies


def _principals(statement: dict[str, Any]) -> list[str]:
    principal = statement["Principal"]
    if isinstance(principal, str):
        return [principal]
    return [p for values in principal.values() for p in ([values] if isinstance(values, str) else values)]


ROOT = "arn:aws:iam::123456789012:root"
AUTOSCALING = (
    "arn:aws:iam::123456789012:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
)
# Beside the account root, only the services of a key's own domain (components/aws/keys.py): CloudWatch
# Logs for the log groups' key, the EC2 Auto Scaling service-linked role for the node volumes' key.
DOMAIN_PRINCIPALS = {"logs": {"logs.me-central-1.amazonaws.com"}, "node-volumes": {AUTOSCALING}}


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_each_domain_key_names_only_its_principals(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    """Issue 35 item 3: each data domain's key policy names the account root (AWS KMS "Default key
    policy") and that domain's services only, never a wildcard; rotation on."""
    plan = cloud_plan(stack)
    for domain, arn in plan.outputs["kmsKeys"].items():
        # The mocks' ARN ends in the key's logical name and a hash (mlplatform/mocks.py).
        (key,) = [r.inputs for r in plan.by_type("aws:kms/key:Key") if arn.endswith(f":{r.name}-{arn[-7:]}")]
        assert key["enableKeyRotation"] is True
        statements = policy(key["policy"])["Statement"]
        assert all(s["Effect"] == "Allow" for s in statements)
        principals = {p for s in statements for p in _principals(s)}
        assert principals == {ROOT, *DOMAIN_PRINCIPALS.get(domain, set())}, domain


# The services through which each domain's users use its key (components/aws/keys.py DOMAIN_USERS,
# kms:ViaService); the Secrets' user, the EKS cluster role, calls KMS itself. The images and logs keys have
# no use statement: ECR uses its grants, CloudWatch Logs is named by its service principal.
DOMAIN_USE = {
    "kubernetes-secrets": [],
    "registry-database": ["rds.{region}", "secretsmanager.{region}"],
    "training-data": ["elasticfilesystem.{region}", "fsx.{region}"],
    "object-data": ["s3.{region}"],
    "datasets": ["s3.{region}"],
    "node-volumes": ["ec2.{region}"],
}
USE = {"kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*"}


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_account_root_administers_keys_and_uses_them_only_as_their_domains_users(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """Review B2 (AWS KMS developer guide, "Default key policy"): the default's ``kms:*`` to the account root
    lets any IAM policy grant a key. The root takes the key administrators' actions (no cryptographic one,
    no unconditioned grant), grants only for AWS resources or to service-linked roles, and use only under
    the condition naming its domain's users, each by exact ARN."""
    plan = cloud_plan(stack)
    region = "me-central-1.amazonaws.com"
    for domain, arn in plan.outputs["kmsKeys"].items():
        (key,) = [r.inputs for r in plan.by_type("aws:kms/key:Key") if arn.endswith(f":{r.name}-{arn[-7:]}")]
        statements = policy(key["policy"])["Statement"]
        root = {s["Sid"]: s for s in statements if ROOT in _principals(s)}
        assert set(root["AccountAdministersKeyThroughIam"]["Action"]).isdisjoint(
            USE | {"kms:*", "kms:Create*"}
        )
        assert root["ServicesAttachKeyToResourcesTheyCreate"]["Condition"] == {
            "Bool": {"kms:GrantIsForAWSResource": "true"}
        }
        assert root["GrantsOnlyToServiceLinkedRoles"]["Condition"] == {
            "ArnLike": {"kms:GranteePrincipal": "arn:aws:iam::123456789012:role/aws-service-role/*"}
        }
        uses = [s for s in root.values() if USE & set(s["Action"] if isinstance(s["Action"], list) else [])]
        if domain not in DOMAIN_USE:  # the logs: CloudWatch Logs alone, by its service principal
            assert uses == [], domain
            continue
        # Each use names its users by exact ARN (issue 35 item 3; review 35 A1, C4), through the services.
        via = [v.format(region=region) for v in DOMAIN_USE[domain]]
        assert uses, domain
        for use in uses:
            condition = dict(use["Condition"])
            users = condition.pop("ArnEquals")["aws:PrincipalArn"]
            assert users and not any("*" in u for u in users), domain
            assert condition == ({"StringEquals": {"kms:ViaService": via}} if via else {}), domain
        assert key["tags"]["ml-platform.io/data-domain"] == domain


def test_eks_and_efs_controllers_get_managed_driver_policies(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-smb-dev")
    ebs = one(plan, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "-addons-ebs-csi-0").inputs
    assert ebs["policyArn"] == "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
    efs = one(plan, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "-addons-efs-csi-0").inputs
    assert efs["policyArn"] == "arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy"
    grants, use = _inline(plan, "-addons-ebs-csi")
    assert grants["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
    assert use["Resource"] == plan.outputs["kmsKeys"]["node-volumes"]
