"""The AWS whole-program deployability policies (issue 23, review aws.md): each catches a small violating
program through the real pack, and its deployable twin raises none of them. That the shipped stacks
pass them is ``mlplatform check`` on the templates (tests/policies/test_compliant.py, check --all)."""

from __future__ import annotations

import json
import subprocess

import pytest

from components.catalog.aws import EKS_STANDARD_SUPPORT_END as CATALOG_SUPPORT_END
from mlplatform.analyzer import PolicyPackSession

from .conftest import AWS, PACK_DIR, Judge, found
from .test_violations import Case, case

_NETWORK = """
import pulumi_aws.ec2 as ec2

vpc_ = ec2.Vpc("vpc", cidr_block="10.0.0.0/16", tags=TAGS)
subnet = ec2.Subnet("public", vpc_id=vpc_.id, cidr_block="10.0.0.0/24", tags=TAGS)
gateway = ec2.InternetGateway("igw", vpc_id=vpc_.id, tags=TAGS)
eip = ec2.Eip("nat", domain="vpc", tags=TAGS)
"""
_NAT = 'ec2.NatGateway("nat", allocation_id=eip.id, subnet_id=subnet.id, tags=TAGS{opts})\n'
_ECR = """
import pulumi_aws.ecr as ecr

repo = ecr.Repository(
    "trainer", name="c/ml-platform/trainer", image_tag_mutability="IMMUTABLE", force_delete=False,
    encryption_configurations=[{"encryption_type": "KMS", "kms_key": KEY_ARN}], tags=TAGS,
)
"""
_ECR_LIFECYCLE = """
ecr.LifecyclePolicy("trainer-lifecycle", repository=repo.name, policy=json.dumps({"rules": [{
    "rulePriority": 1, "action": {"type": "expire"},
    "selection": {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": 10}}]}))
"""
_CLOSED_DEFAULT = 'ec2.DefaultSecurityGroup("default", vpc_id=vpc_.id, tags=TAGS)\n'

_LUSTRE = """
import pulumi_aws.ec2 as ec2
import pulumi_aws.fsx as fsx
import pulumi_aws.vpc as vpc

group = ec2.SecurityGroup("lustre-sg", vpc_id="vpc-1", description="lustre", tags=TAGS)
rule = vpc.SecurityGroupIngressRule(
    "lnet", security_group_id=group.id, referenced_security_group_id=group.id, ip_protocol="tcp",
    from_port=988, to_port=988, tags=TAGS,
)
fsx.LustreFileSystem(
    "lustre", deployment_type="PERSISTENT_2", storage_capacity=1200, per_unit_storage_throughput=250,
    subnet_ids="subnet-1", security_group_ids=[group.id], kms_key_id=KEY_ARN, tags=TAGS{opts}
)
"""

_CLUSTER = """
import pulumi_aws.cloudwatch as cloudwatch
import pulumi_aws.eks as eks

PROD = {{**TAGS, "environment": "prod"}}
PRIVATE = {{"subnet_ids": ["subnet-1"], "endpoint_private_access": True, "endpoint_public_access": False}}
eks.Cluster(
    "prod", role_arn="arn:aws:iam::123456789012:role/eks", version="{version}", vpc_config=PRIVATE,
    encryption_config={{"provider": {{"key_arn": KEY_ARN}}, "resources": ["secrets"]}},
    tags=PROD{cluster_opts}
)
cloudwatch.LogGroup("audit", kms_key_id=KEY_ARN, retention_in_days=365, tags=PROD{log_opts})
"""
_PROTECTED = ", deletion_protection=True", ", opts=pulumi.ResourceOptions(protect=True)"

_PRIVATE_API = """
import pulumi_aws.eks as eks
import pulumi_aws.vpc as vpc
import pulumi_kubernetes as k8s

cluster = eks.Cluster(
    "private", role_arn="arn:aws:iam::123456789012:role/eks", version="1.35",
    vpc_config={"subnet_ids": ["subnet-1"], "endpoint_private_access": True, "endpoint_public_access": False},
    encryption_config={"provider": {"key_arn": KEY_ARN}, "resources": ["secrets"]}, tags=TAGS,
)
k8s.Provider("k8s", kubeconfig=cluster.endpoint)
"""
_API_RULE = """
vpc.SecurityGroupIngressRule(
    "api", security_group_id=cluster.vpc_config.cluster_security_group_id, cidr_ipv4="10.0.0.0/16",
    ip_protocol="tcp", from_port=443, to_port=443, tags=TAGS,
)
"""

_NODE_GROUP = """
import pulumi_aws.eks as eks

eks.NodeGroup(
    "{name}", cluster_name="c", node_role_arn="arn:aws:iam::123456789012:role/n", subnet_ids=["subnet-1"],
    instance_types=["c7i.xlarge"], ami_type="AL2023_x86_64_STANDARD", version="1.35",
    scaling_config={{"min_size": 1, "max_size": 2, "desired_size": 1}}{prefix}
)
"""

_RESERVED = """
import pulumi_aws.ec2 as ec2
import pulumi_aws.eks as eks

placement = ec2.PlacementGroup("pg", strategy="cluster", tags=TAGS)
template = ec2.LaunchTemplate(
    "reserved", block_device_mappings=ENCRYPTED_DISK, metadata_options=IMDS, tags=TAGS,
    capacity_reservation_specification={
        "capacity_reservation_target": {"capacity_reservation_id": "cr-0123456789abcdef0"}
    },
    instance_market_options={"market_type": "capacity-block"},
    {placement}
)
eks.NodeGroup(
    "reserved", cluster_name="c", node_role_arn="arn:aws:iam::123456789012:role/n", subnet_ids={subnets},
    instance_types=["p5en.48xlarge"], ami_type="AL2023_x86_64_NVIDIA", version="1.35",
    taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
    scaling_config={"min_size": 0, "max_size": 2, "desired_size": {desired}}, capacity_type="{capacity}",
    launch_template={"id": template.id, "version": "1"},
)
"""


def _reserved(
    placement: str = "", capacity: str = "CAPACITY_BLOCK", subnets: int = 1, desired: int = 0
) -> str:
    ids = [f"subnet-{i}" for i in range(subnets)]
    return (
        _RESERVED.replace("{placement}", placement)
        .replace("{capacity}", capacity)
        .replace("{subnets}", repr(ids))
        .replace("{desired}", str(desired))
    )


_IMAGE = """
import pulumi_aws.ec2 as ec2
from pulumi_kubernetes.apps.v1 import DaemonSet

ec2.Eip("eip", domain="vpc", tags=TAGS)
DaemonSet(
    "efa",
    metadata={"name": "efa", "namespace": "kube-system"},
    spec={
        "selector": {"matchLabels": {"app": "efa"}},
        "template": {
            "metadata": {"labels": {"app": "efa"}},
            "spec": {"containers": [{"name": "efa", "image": "%s.dkr.ecr.%s.amazonaws.com/eks/efa:v0.5.20"}]},
        },
    },
)
"""

_DOC_RANGE = """
import pulumi_aws.eks as eks

eks.Cluster(
    "public", role_arn="arn:aws:iam::123456789012:role/eks", version="1.35",
    vpc_config={"subnet_ids": ["subnet-1"], "endpoint_public_access": True, "public_access_cidrs": ["%s"]},
    encryption_config={"provider": {"key_arn": KEY_ARN}, "resources": ["secrets"]}, tags=SMB_TAGS,
)
"""

_IRSA = """
import pulumi_aws.iam as iam

ISSUER = "oidc.eks.me-central-1.amazonaws.com/id/ABC"
OPERATOR = "StringEquals"
CONDITION = %s
iam.Role(
    "irsa", tags=TAGS,
    assume_role_policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": "sts:AssumeRoleWithWebIdentity",
        "Principal": {"Federated": f"arn:aws:iam::123456789012:oidc-provider/{ISSUER}"},
        "Condition": {OPERATOR: CONDITION},
    }]}),
)
"""
_PINNED = '{f"{ISSUER}:sub": "system:serviceaccount:ml:trainer", f"{ISSUER}:aud": "sts.amazonaws.com"}'
# A StringLike with a set qualifier or IfExists matches values as StringLike does (IAM user guide,
# "Condition operators", "Set operators for multivalued context keys").
WILDCARD_OPERATORS = ("ForAnyValue:StringLike", "StringLikeIfExists", "ForAllValues:StringLikeIfExists")

_KUBE_PROXY = """
import pulumi_aws.eks as eks

cluster = eks.Cluster(
    "c", role_arn="arn:aws:iam::123456789012:role/eks", version="1.35",
    vpc_config={
        "subnet_ids": ["subnet-1"], "endpoint_public_access": True, "public_access_cidrs": ["100.24.0.0/16"]
    },
    encryption_config={"provider": {"key_arn": KEY_ARN}, "resources": ["secrets"]}, tags=SMB_TAGS,
)
eks.Addon("kube-proxy", cluster_name=cluster.name, addon_name="kube-proxy", addon_version="%s", tags=TAGS)
"""

_RDS = """
import pulumi_aws.cloudwatch as cloudwatch
import pulumi_aws.rds as rds

groups = [
    cloudwatch.LogGroup(
        f"db-{log}", name=f"/aws/rds/instance/registry/{log}", kms_key_id=KEY_ARN, retention_in_days=365,
        tags=TAGS,
    )
    for log in %s
]
rds.Instance(
    "db", engine="postgres", instance_class="db.t4g.medium", allocated_storage=20, storage_encrypted=True,
    kms_key_id=KEY_ARN, manage_master_user_password=True, username="mlflow", skip_final_snapshot=True,
    enabled_cloudwatch_logs_exports=["postgresql", "upgrade"], tags=TAGS, %s
)
"""
_RDS_FIRST = 'identifier="registry", opts=pulumi.ResourceOptions(depends_on=groups)'

# A prod PERSISTENT_2 file system; %s: its backup retention, then what links it to a bucket.
_PROD_LUSTRE = """
import pulumi_aws.fsx as fsx
import pulumi_aws.s3 as s3

PROD = {**TAGS, "environment": "prod"}
lustre = fsx.LustreFileSystem(
    "lustre", deployment_type="PERSISTENT_2", storage_capacity=1200, per_unit_storage_throughput=250,
    subnet_ids="subnet-1", kms_key_id=KEY_ARN, tags=PROD, %s
)
bucket = s3.Bucket("data", tags=PROD)
"""
_VERSIONED = 's3.BucketVersioning("data", bucket=bucket.id, versioning_configuration={"status": "Enabled"})\n'
_LINK = """
fsx.DataRepositoryAssociation(
    "dra", file_system_id=lustre.id, file_system_path="/",
    data_repository_path=pulumi.Output.concat("s3://", bucket.bucket, "/"),
    s3={"auto_export_policy": {"events": %s}}, tags=PROD,
)
"""
_EVERY_CHANGE = '["NEW", "CHANGED", "DELETED"]'

VIOLATIONS = [
    case(
        "lustre-races-its-988-rule",
        AWS,
        _LUSTRE.format(opts=""),
        ("aws-fsx-after-security-group-rules", "lustre"),
    ),
    case(
        "nat-races-the-internet-gateway",
        AWS,
        _NETWORK + _NAT.format(opts=""),
        ("aws-nat-after-internet-gateway", "nat"),
        ("aws-vpc-default-security-group-closed", "vpc"),
    ),
    case(
        "prod-cluster-and-logs-unprotected",
        AWS,
        _CLUSTER.format(version="1.35", cluster_opts="", log_opts=""),
        ("aws-prod-deletion-protection", "prod"),
        ("aws-prod-deletion-protection", "audit"),
    ),
    case(
        "eks-1-33-out-of-standard-support",
        AWS,
        _CLUSTER.format(version="1.33", cluster_opts=_PROTECTED[0], log_opts=_PROTECTED[1]),
        ("aws-eks-standard-support", "prod"),
    ),
    case(
        "private-api-unreachable",
        AWS,
        _PRIVATE_API,
        ("aws-eks-api-reachable", "private"),
    ),
    case(
        "node-group-autoname-over-63",
        AWS,
        _NODE_GROUP.format(name="aws-enterprise-production-aws-a-pool-named-with-32-chars-ng", prefix=""),
        ("aws-name-length", "aws-enterprise-production-aws-a-pool-named-with-32-chars-ng"),
    ),
    case(
        "capacity-block-in-a-new-placement-group-as-on-demand",
        AWS,
        _reserved('placement={"group_name": placement.name},', "ON_DEMAND"),
        ("aws-capacity-reservation-launch", "reserved"),
    ),
    # Review aws.md N1: the reservation's one zone, and the block's window.
    case(
        "reservation-across-three-zones",
        AWS,
        _reserved(subnets=3),
        ("aws-capacity-reservation-launch", "reserved"),
    ),
    case(
        "capacity-block-created-at-2",
        AWS,
        _reserved(desired=2),
        ("aws-capacity-reservation-launch", "reserved"),
    ),
    case(
        "efa-plugin-from-us-west-2",
        AWS,
        _IMAGE % ("602401143452", "us-west-2"),
        ("aws-ecr-image-in-region", "efa"),
    ),
    case(
        "irsa-trust-without-sub",
        AWS,
        _IRSA % '{f"{ISSUER}:aud": "sts.amazonaws.com"}',
        ("aws-irsa-trust-pins-sub-and-aud", "irsa"),
    ),
    # Review aws.md (the pack): a wildcard subject, and a claim of another issuer.
    case(
        "irsa-trust-any-service-account",
        AWS,
        (
            _IRSA % '{f"{ISSUER}:sub": "system:serviceaccount:*:*", f"{ISSUER}:aud": "sts.amazonaws.com"}'
        ).replace('OPERATOR = "StringEquals"', 'OPERATOR = "StringLike"'),
        ("aws-irsa-trust-pins-sub-and-aud", "irsa"),
    ),
    # Review of issue 38, C4: the wildcard under a qualified or IfExists StringLike.
    *(
        case(
            f"irsa-trust-any-service-account-{operator.replace(':', '-').lower()}",
            AWS,
            (
                _IRSA % '{f"{ISSUER}:sub": "system:serviceaccount:*:*", f"{ISSUER}:aud": "sts.amazonaws.com"}'
            ).replace('OPERATOR = "StringEquals"', f'OPERATOR = "{operator}"'),
            ("aws-irsa-trust-pins-sub-and-aud", "irsa"),
        )
        for operator in WILDCARD_OPERATORS
    ),
    case(
        "irsa-trust-other-issuers-claims",
        AWS,
        _IRSA % '{"oidc.eks.me-central-1.amazonaws.com/id/OTHER:sub": "system:serviceaccount:ml:trainer", '
        '"oidc.eks.me-central-1.amazonaws.com/id/OTHER:aud": "sts.amazonaws.com"}',
        ("aws-irsa-trust-pins-sub-and-aud", "irsa"),
    ),
    # Review aws.md N5: immutable tags pushed on every image change, kept for ever.
    case("ecr-without-lifecycle", AWS, _ECR, ("aws-ecr-lifecycle", "trainer")),
    case(
        "kube-proxy-of-another-minor",
        AWS,
        _KUBE_PROXY % "v1.33.5-eksbuild.2",
        ("aws-kube-proxy-matches-cluster", "kube-proxy"),
    ),
    # Review aws.md N4: RDS makes the groups of an autonamed instance's logs, unencrypted, for ever.
    case(
        "rds-logs-of-an-autonamed-instance", AWS, _RDS % ("[]", ""), ("aws-rds-log-groups-made-first", "db")
    ),
    case(
        "rds-upgrade-log-group-missing",
        AWS,
        _RDS % ('["postgresql"]', _RDS_FIRST),
        ("aws-rds-log-groups-made-first", "db"),
    ),
    # Review aws.md D2 (carry-over): prod Lustre with no copy, or backups FSx does not take.
    case(
        "prod-lustre-without-backups-or-export",
        AWS,
        _PROD_LUSTRE % "",
        ("aws-prod-lustre-has-a-copy", "lustre"),
    ),
    case(
        "prod-lustre-backups-while-linked",
        AWS,
        _PROD_LUSTRE % "automatic_backup_retention_days=14" + _VERSIONED + _LINK % _EVERY_CHANGE,
        ("aws-prod-lustre-has-a-copy", "lustre"),
    ),
    case(
        "prod-lustre-exports-new-files-only",
        AWS,
        _PROD_LUSTRE % "" + _VERSIONED + _LINK % '["NEW"]',
        ("aws-prod-lustre-has-a-copy", "lustre"),
    ),
    case(
        "prod-lustre-exports-to-an-unversioned-bucket",
        AWS,
        _PROD_LUSTRE % "" + _LINK % _EVERY_CHANGE,
        ("aws-prod-lustre-has-a-copy", "lustre"),
    ),
    case(
        "public-access-from-test-net-3",
        AWS,
        _DOC_RANGE % "203.0.113.0/24",
        ("aws-eks-public-access-documentation-range", "public"),
        enforcement="advisory",
    ),
]
TWINS = [
    case("lustre-waits", AWS, _LUSTRE.format(opts=", opts=pulumi.ResourceOptions(depends_on=[rule])")),
    case(
        "nat-waits-default-closed",
        AWS,
        _NETWORK + _NAT.format(opts=", opts=pulumi.ResourceOptions(depends_on=[gateway])") + _CLOSED_DEFAULT,
    ),
    case(
        "prod-protected-on-1-35",
        AWS,
        _CLUSTER.format(version="1.35", cluster_opts=_PROTECTED[0], log_opts=_PROTECTED[1]),
    ),
    case("private-api-with-rule", AWS, _PRIVATE_API + _API_RULE),
    case(
        "node-group-prefix", AWS, _NODE_GROUP.format(name="cpu-ng", prefix=', node_group_name_prefix="cpu-"')
    ),
    case("capacity-block", AWS, _reserved()),
    case("efa-plugin-in-region", AWS, _IMAGE % ("759879836304", "me-central-1")),
    case("public-access-real-range", AWS, _DOC_RANGE % "100.24.0.0/16"),
    case("irsa-trust-pinned", AWS, _IRSA % _PINNED),
    *(
        case(
            f"irsa-trust-pinned-{operator.replace(':', '-').lower()}",
            AWS,
            (_IRSA % _PINNED).replace('OPERATOR = "StringEquals"', f'OPERATOR = "{operator}"'),
        )
        for operator in WILDCARD_OPERATORS
    ),
    case("kube-proxy-of-the-clusters-minor", AWS, _KUBE_PROXY % "v1.35.0-eksbuild.2"),
    case("ecr-with-lifecycle", AWS, "import json\n" + _ECR + _ECR_LIFECYCLE),
    case("rds-log-groups-made-first", AWS, _RDS % ('["postgresql", "upgrade"]', _RDS_FIRST)),
    case("prod-lustre-backed-up", AWS, _PROD_LUSTRE % "automatic_backup_retention_days=14"),
    case("prod-lustre-exported", AWS, _PROD_LUSTRE % "" + _VERSIONED + _LINK % _EVERY_CHANGE),
]
_POLICIES = {policy for c in VIOLATIONS for policy, _ in c.expected}


@pytest.mark.parametrize("case", VIOLATIONS, ids=lambda c: c.id)
def test_violating_program_is_caught(case: Case, judge: Judge) -> None:
    violations = judge(case.body, case.config)
    assert case.expected <= found(violations, case.enforcement), [
        (v.policy, v.name, v.message) for v in violations
    ]


@pytest.mark.parametrize("case", TWINS, ids=lambda c: c.id)
def test_deployable_twin_passes(case: Case, judge: Judge) -> None:
    violations = judge(case.body, case.config)
    assert not {v.policy for v in violations if v.policy in _POLICIES}, [
        (v.policy, v.name, v.message) for v in violations if v.policy in _POLICIES
    ]


def test_each_cites_its_source(pack: PolicyPackSession) -> None:
    policies = {p.name: p for p in pack.info.policies if p.name in _POLICIES}
    assert set(policies) == _POLICIES
    for policy in policies.values():
        assert any(s in policy.description for s in ("API reference", "user guide", "docstring", "RFC"))


def test_the_packs_eks_support_dates_are_the_catalogs() -> None:
    """Review aws.md (the pack): ``aws-eks-standard-support`` keeps its own table, since the pack imports
    nothing from the program; every minor the catalog dates, the pack dates the same."""
    script = (
        "import json; from mlplatform_policies.bringup_aws import EKS_STANDARD_SUPPORT_END as E; "
        "print(json.dumps({k: v.isoformat() for k, v in E.items()}))"
    )
    python = PACK_DIR / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", script], check=False, cwd=PACK_DIR, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    pack = json.loads(done.stdout)
    assert {minor: pack.get(minor) for minor in CATALOG_SUPPORT_END} == CATALOG_SUPPORT_END


@pytest.mark.parametrize("operator", WILDCARD_OPERATORS)
def test_a_wildcard_subject_under_any_stringlike_form_is_named_as_such(judge: Judge, operator: str) -> None:
    """Review of issue 38, C4: the finding names the wildcard, not a missing claim."""
    body = (
        _IRSA % '{f"{ISSUER}:sub": "system:serviceaccount:*:*", f"{ISSUER}:aud": "sts.amazonaws.com"}'
    ).replace('OPERATOR = "StringEquals"', f'OPERATOR = "{operator}"')
    [message] = [v.message for v in judge(body, AWS) if v.policy == "aws-irsa-trust-pins-sub-and-aud"]
    assert "to 'system:serviceaccount:*:*', which matches service accounts of any namespace" in message
    assert "without pinning" not in message
