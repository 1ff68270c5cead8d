"""Issue 23: what a real ``pulumi up`` on AWS would still refuse or leave open (review
``shared/reviews/aws.md``), each rule checked on the shipped stack templates and named with its source."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import AWS_STACKS, resources

NAT = "aws:ec2/natGateway:NatGateway"
IGW = "aws:ec2/internetGateway:InternetGateway"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
VPC = "aws:ec2/vpc:Vpc"
DEFAULT_SG = "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"
EKS = "aws:eks/cluster:Cluster"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
PROD = ("aws-smb-prod", "aws-enterprise-prod")


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_public_nat_gateways_wait_for_the_internet_gateway(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """A3: a public NAT gateway in a VPC with no internet gateway attached fails with
    ``Gateway.NotAttached`` (EC2 API reference, NatGateway.failureCode); the pulumi-aws ``ec2.NatGateway``
    docstring's public example depends on the gateway. Nothing else orders them."""
    plan = cloud_plan(stack)
    gateways = {r.urn for r in resources(plan, IGW)}
    nats = resources(plan, NAT)
    assert nats and gateways
    for nat in nats:
        assert nat.inputs.get("connectivityType", "public") == "public"
        assert gateways & set(nat.dependencies), nat.name


@pytest.mark.parametrize("stack", ("aws-enterprise-dev", "aws-enterprise-prod"))
def test_lustre_waits_for_the_port_988_rules_it_validates(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """A2: CreateFileSystem checks the security group at once and fails with InvalidNetworkSettings
    ("security groups do not permit Lustre LNET network traffic on port 988") when the rule is created
    a second late (aws/aws-parallelcluster #6181; fixed there by depending on the rule, #1198)."""
    plan = cloud_plan(stack)
    (lustre,) = resources(plan, LUSTRE)
    groups = {r.urn: r for r in resources(plan, "aws:ec2/securityGroup:SecurityGroup")}
    own = [u for u in lustre.property_dependencies.get("securityGroupIds", []) if u in groups]
    assert own
    covering = [
        r
        for r in resources(plan, INGRESS)
        if r.inputs.get("fromPort", 0) <= 988 <= r.inputs.get("toPort", -1)
        and set(r.property_dependencies.get("securityGroupId", [])) & set(own)
    ]
    assert covering
    assert all(r.urn in lustre.dependencies for r in covering)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_vpc_default_security_group_is_managed_and_empty(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """C2: AWS Security Hub [EC2.2] / CIS AWS Foundations: the default security group of every VPC
    restricts all traffic. ``ec2.DefaultSecurityGroup`` with no rules removes AWS's "all from itself,
    all egress" (pulumi-aws docstring)."""
    plan = cloud_plan(stack)
    vpcs = {r.urn for r in resources(plan, VPC)}
    defaults = resources(plan, DEFAULT_SG)
    assert {u for d in defaults for u in d.property_dependencies.get("vpcId", [])} == vpcs
    for group in defaults:
        assert not group.inputs.get("ingress") and not group.inputs.get("egress")


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_prod_cluster_and_audit_logs_are_protected_from_deletion(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """C1: pulumi-aws ``eks.Cluster.deletion_protection``: "the cluster cannot be deleted unless deletion
    protection is first disabled"; the control-plane and flow-log groups hold the 365-day audit trail."""
    plan = cloud_plan(stack)
    prod = stack in PROD
    (cluster,) = resources(plan, EKS)
    assert cluster.inputs.get("deletionProtection", False) is prod
    assert cluster.protect is prod
    groups = resources(plan, LOG_GROUP)
    assert len(groups) == 2
    assert all(g.protect is prod for g in groups)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_cluster_support_policy_is_chosen_not_defaulted(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """D1: extended support is the default and billed at a higher rate (EKS user guide, "Kubernetes
    version lifecycle"); the cluster states STANDARD (EKS API reference, UpgradePolicyRequest)."""
    (cluster,) = resources(cloud_plan(stack), EKS)
    assert cluster.inputs["upgradePolicy"] == {"supportType": "STANDARD"}
