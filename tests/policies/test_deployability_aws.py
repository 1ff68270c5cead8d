"""The AWS deployability policies (issue 11): each catches a small violating program through the real
pack, and a compliant twin of the same program raises none of them."""

from __future__ import annotations

import textwrap

import pytest

from mlplatform.analyzer import PolicyPackSession

from .conftest import AWS, Judge, found
from .test_violations import Case, case

_GROUP_WITH_EFA_TEMPLATE = """
import pulumi_aws.autoscaling as autoscaling
import pulumi_aws.ec2 as ec2
import pulumi_aws.eks as eks

template = ec2.LaunchTemplate(
    "efa-lt",
    block_device_mappings=ENCRYPTED_DISK,
    metadata_options=IMDS,
    network_interfaces=[{"network_card_index": 0, "device_index": 0, "interface_type": "efa"}],
)
group = eks.NodeGroup(
    "efa",
    cluster_name="c",
    node_role_arn="arn:aws:iam::123456789012:role/n",
    subnet_ids=["subnet-1"],
    instance_types=["p5en.48xlarge"],
    ami_type="AL2023_x86_64_NVIDIA",
    taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
    scaling_config={"min_size": 0, "max_size": 2, "desired_size": 0},
    launch_template={"id": template.id, "version": "1"},
)
"""
_EFA_TAG = """
autoscaling.Tag(
    "efa-template",
    autoscaling_group_name=group.resources.apply(lambda r: r[0].autoscaling_groups[0].name),
    tag={
        "key": "k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa",
        "value": "16",
        "propagate_at_launch": False,
    },
)
"""

DEPLOYABILITY_CASES = [
    case(
        "ec2-description-apostrophe",
        AWS,
        """
        import pulumi_aws.ec2 as ec2
        import pulumi_aws.vpc as vpc

        group = ec2.SecurityGroup("sg", vpc_id="vpc-1", description="the cluster's nodes", tags=TAGS)
        vpc.SecurityGroupIngressRule(
            "rule", security_group_id=group.id, ip_protocol="-1", cidr_ipv4="10.0.0.0/16",
            description="nodes' traffic", tags=TAGS,
        )
        """,
        ("aws-ec2-description-charset", "sg"),
        ("aws-ec2-description-charset", "rule"),
    ),
    case(
        "lustre-capacity-3600",
        AWS,
        """
        import pulumi_aws.fsx as fsx

        fsx.LustreFileSystem(
            "lustre", deployment_type="PERSISTENT_2", storage_capacity=3600, per_unit_storage_throughput=250,
            subnet_ids="subnet-1", kms_key_id=KEY_ARN, tags=TAGS,
        )
        """,
        ("aws-fsx-lustre-capacity", "lustre"),
    ),
    case(
        "iam-role-names-too-long",
        AWS,
        """
        import pulumi_aws.iam as iam

        trust = json.dumps({"Version": "2012-10-17", "Statement": []})
        common = {"assume_role_policy": trust, "tags": TAGS}
        iam.Role("aws-enterprise-production-aws-identities-cluster-autoscaler", **common)
        iam.Role("prefixed", name_prefix="aws-enterprise-production-aws-autoscaler-", **common)
        iam.Role("named", name="r" * 65, **common)
        """,
        ("aws-iam-role-name-length", "aws-enterprise-production-aws-identities-cluster-autoscaler"),
        ("aws-iam-role-name-length", "prefixed"),
        ("aws-iam-role-name-length", "named"),
    ),
    case(
        "gpu-type-not-sold-in-me-central-1",
        AWS,
        """
        import pulumi_aws.eks as eks

        eks.NodeGroup(
            "p5", cluster_name="c", node_role_arn="arn:aws:iam::123456789012:role/n", subnet_ids=["subnet-1"],
            instance_types=["p5.48xlarge"], ami_type="AL2023_x86_64_NVIDIA",
            taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
            scaling_config={"min_size": 1, "max_size": 2, "desired_size": 1},
        )
        """,
        ("aws-instance-type-sold-in-region", "p5"),
    ),
    case(
        "efa-group-without-node-template", AWS, _GROUP_WITH_EFA_TEMPLATE, ("aws-efa-scale-from-zero", "efa")
    ),
]
_DEPLOYABILITY = {policy for c in DEPLOYABILITY_CASES for policy, _ in c.expected}


@pytest.mark.parametrize("case", DEPLOYABILITY_CASES, ids=lambda c: c.id)
def test_violating_program_is_caught(case: Case, judge: Judge) -> None:
    violations = judge(case.body, case.config)
    assert case.expected <= found(violations), [(v.policy, v.name, v.message) for v in violations]


def test_compliant_twins_raise_no_deployability_finding(judge: Judge) -> None:
    """The same shapes, deployable: EC2-safe descriptions, 4800 GiB, short names, p5en, and the EFA tag."""
    body = """
    import pulumi_aws.ec2 as ec2
    import pulumi_aws.fsx as fsx
    import pulumi_aws.iam as iam

    ec2.SecurityGroup("sg", vpc_id="vpc-1", description="the cluster nodes", tags=TAGS)
    fsx.LustreFileSystem(
        "lustre", deployment_type="PERSISTENT_2", storage_capacity=4800, per_unit_storage_throughput=250,
        subnet_ids="subnet-1", kms_key_id=KEY_ARN, tags=TAGS,
    )
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    iam.Role("ca", name_prefix="aws-enterprise-production-aws-ca-", assume_role_policy=trust, tags=TAGS)
    """
    violations = judge(textwrap.dedent(body) + _GROUP_WITH_EFA_TEMPLATE + _EFA_TAG, AWS)
    assert not {v for v in found(violations) if v[0] in _DEPLOYABILITY}, [
        (v.policy, v.name) for v in violations
    ]


def test_each_is_mandatory_and_cites_its_source(pack: PolicyPackSession) -> None:
    policies = {p.name: p for p in pack.info.policies if p.name in _DEPLOYABILITY}
    assert set(policies) == _DEPLOYABILITY
    for policy in policies.values():
        assert policy.enforcement == "mandatory", policy.name
        assert any(s in policy.description for s in ("API reference", "README", "cfn-lint")), policy.name


def test_sse_s3_is_allowed_only_on_a_bucket_whose_role_is_access_logs(judge: Judge) -> None:
    """S3 server access logs cannot go to an SSE-KMS default-encrypted target (S3 user guide, server
    access logging): the pack allows SSE-S3 by the bucket's ``ml-platform.io/role`` tag, not its name."""
    body = """
    import pulumi_aws.s3 as s3

    AES = [{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}]
    for name, tags in (
        ("access-logs", {**TAGS, "ml-platform.io/role": "access-logs"}),
        ("logs", TAGS),
        ("data", {**TAGS, "ml-platform.io/role": "datasets"}),
    ):
        bucket = s3.Bucket(name, tags=tags)
        s3.BucketServerSideEncryptionConfiguration(f"{name}-sse", bucket=bucket.id, rules=AES)
    """
    flagged = {name for policy, name in found(judge(body, AWS)) if policy == "s3-default-encryption-kms"}
    assert {"logs-sse", "data-sse"} <= flagged
    assert "access-logs-sse" not in flagged
