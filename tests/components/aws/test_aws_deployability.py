"""Issue 11: rules the AWS APIs and the running cluster enforce that Pulumi's mocks accept, each checked
on the real stack templates and named with its source, so a plan that is green offline is one that
`pulumi up` can apply."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from components.aws.iam import NAME_PREFIX_SUFFIX, ROLE_NAME_MAX, ROLE_PURPOSE_MAX, role_name_prefix
from components.aws.node_pools import EFA_HUGEPAGES_2MI, NODE_TEMPLATE
from components.catalog.aws import EKS_ADDON_VERSIONS
from components.config import ConfigError, lustre_capacity_valid
from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import AWS_STACKS, parse, policy, reservation, reserved, resources
from tests.stack_variants import one, template
from workloads.fabric import fabric_profile

SG = "aws:ec2/securityGroup:SecurityGroup"
RULES = (
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
)
ADDON = "aws:eks/addon:Addon"
NG = "aws:eks/nodeGroup:NodeGroup"
ASG_TAG = "aws:autoscaling/tag:Tag"
# CreateSecurityGroup / AuthorizeSecurityGroupIngress: descriptions take only these characters
# (EC2 API reference, GroupDescription; terraform-provider-aws #18874; cfn-lint #173).
EC2_DESCRIPTION = re.compile(r"^[a-zA-Z0-9 ._\-:/()#,@\[\]+=&;{}!$*]*$")


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_security_group_and_rule_descriptions_use_the_ec2_character_set(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """Item 1: an apostrophe in a description fails CreateSecurityGroup on every AWS stack."""
    plan = cloud_plan(stack)
    described = [r for t in (SG, *RULES) for r in resources(plan, t) if "description" in r.inputs]
    assert any(r.type == SG for r in described)
    for resource in described:
        assert EC2_DESCRIPTION.match(resource.inputs["description"]), resource.name


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_exactly_one_metrics_server(planned: Callable[[str], Plan], stack: str) -> None:
    """Item 2: the EKS metrics-server add-on and the Helm chart both create v1beta1.metrics.k8s.io; the
    second install fails on existing objects. The Helm chart stays (pinned, rendered offline)."""
    plan = planned(stack)
    addons = [a for a in resources(plan, ADDON) if a.inputs["addonName"] == "metrics-server"]
    releases = [
        r
        for r in resources(plan, "kubernetes:helm.sh/v3:Release")
        if r.inputs.get("chart") == "metrics-server"
    ]
    assert (len(addons), len(releases)) == (0, 1)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_vpc_cni_enforces_network_policy_and_core_addons_are_pinned(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """Item 3: network policy is off in the VPC CNI unless ``enableNetworkPolicy: "true"`` (EKS user guide,
    "Configure your cluster for Kubernetes network policies"); EFA-only interfaces need vpc-cni >= 1.18.4
    (REFERENCE.md). Versions are those the EKS user guide lists for the cluster's Kubernetes version."""
    plan = cloud_plan(stack)
    version = parse(template(stack), stack).cluster.kubernetes_version
    by_name = {a.inputs["addonName"]: a.inputs for a in resources(plan, ADDON)}
    for name in ("vpc-cni", "kube-proxy", "coredns"):
        assert by_name[name]["addonVersion"] == EKS_ADDON_VERSIONS[version][name]
        assert by_name[name]["resolveConflictsOnCreate"] == "OVERWRITE"
    assert json.loads(by_name["vpc-cni"]["configurationValues"]) == {"enableNetworkPolicy": "true"}
    major, minor, patch = (int(p) for p in re.findall(r"\d+", by_name["vpc-cni"]["addonVersion"])[:3])
    assert (major, minor, patch) >= (1, 18, 4)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_csi_addons_are_pinned_where_a_version_for_the_minor_is_sourced(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """Review D5: an unpinned add-on's version depends on the day it is created. On 1.35 the EBS and EFS
    drivers carry the versions public 1.35 configurations pin (components/catalog/aws.py names them); the
    FSx driver, for which none was found, stays unpinned rather than guessed (CreateAddon fails on a
    version EKS does not offer for the minor). The EBS pin lies in v1.50..v1.64, the releases whose
    docs/parameters.md rows the default StorageClass was checked against (tests/components/kubernetes/
    test_storage.py)."""
    plan = cloud_plan(stack)
    assert parse(template(stack), stack).cluster.kubernetes_version == "1.35"
    by_name = {a.inputs["addonName"]: a.inputs for a in resources(plan, ADDON)}
    assert by_name["aws-ebs-csi-driver"]["addonVersion"] == "v1.56.0-eksbuild.1"
    minor = int(re.findall(r"\d+", by_name["aws-ebs-csi-driver"]["addonVersion"])[1])
    assert 50 <= minor <= 64
    if "aws-efs-csi-driver" in by_name:
        assert by_name["aws-efs-csi-driver"]["addonVersion"] == "v2.3.0-eksbuild.2"
    if "aws-fsx-csi-driver" in by_name:
        assert "addonVersion" not in by_name["aws-fsx-csi-driver"]
    assert {"aws-efs-csi-driver", "aws-fsx-csi-driver"} & set(by_name)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_efa_and_gpu_pools_advertise_what_their_pods_ask_for_on_the_asg(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """Item 5: scaling a group up from zero, cluster-autoscaler knows extended resources, labels and
    taints only from ``k8s.io/cluster-autoscaler/node-template/...`` tags on the Auto Scaling group
    (cluster-autoscaler AWS README, "Auto-Discovery Setup"); EKS does not copy node group tags to it."""
    plan = cloud_plan(stack)
    config = parse(template(stack), stack)
    groups = resources(plan, NG)
    for pool in config.node_pools:
        group = next(g for g in groups if g.name.endswith(f"-{pool.name}-ng"))
        tags = {
            t.inputs["tag"]["key"]: t.inputs["tag"]["value"]
            for t in resources(plan, ASG_TAG, f"-{pool.name}-asg-")
        }
        # The tags go on the group's own ASG (mocked as EKS names it: eks-<node group>-<uuid>).
        (asg,) = {t.inputs["autoscalingGroupName"] for t in resources(plan, ASG_TAG, f"-{pool.name}-asg-")}
        assert asg.startswith(f"eks-{group.name}")
        for key, value in group.inputs["labels"].items():
            assert tags[f"{NODE_TEMPLATE}/label/{key}"] == value
        for taint in group.inputs.get("taints", []):
            assert tags[f"{NODE_TEMPLATE}/taint/{taint['key']}"] == f"{taint['value']}:NoSchedule"
        itype = config.instance_type(pool)
        if itype.gpus:
            assert tags[f"{NODE_TEMPLATE}/resources/nvidia.com/gpu"] == str(itype.gpus)
        if pool.fabric.value == "efa":
            assert tags[f"{NODE_TEMPLATE}/resources/vpc.amazonaws.com/efa"] == str(itype.fabric_devices)
            assert tags[f"{NODE_TEMPLATE}/resources/hugepages-2Mi"] == EFA_HUGEPAGES_2MI
    assert all(not t.inputs["tag"]["propagateAtLaunch"] for t in resources(plan, ASG_TAG))


def test_node_template_hugepages_match_what_the_training_pod_requests(
    cloud_plan: Callable[[str], Plan],
) -> None:
    """Item 5: the template must offer at least what the EFA training pod asks (workloads/fabric.py)."""
    from tests.components.aws.aws_plan_support import build_platform

    platform = build_platform(parse(template("aws-enterprise-dev"), "aws-enterprise-dev"))
    profile = fabric_profile(platform.handle.pool("gpu-efa"))
    assert profile.resources["hugepages-2Mi"] == EFA_HUGEPAGES_2MI
    assert profile.resources["vpc.amazonaws.com/efa"] == "16"


def test_private_endpoint_admits_the_configured_runner_on_443(variant: Callable[..., Plan]) -> None:
    """Item 6: the cluster security group admits only itself; a runner inside the VPC reaches the
    private endpoint only through a rule for its CIDR or security group (EKS user guide, "Cluster API
    server endpoint")."""
    plan = variant(
        "aws-enterprise-prod",
        lambda body: body["cluster"].update(
            privateAccessCidrs=["10.51.200.0/24"], privateAccessSecurityGroups=["sg-0123456789abcdef0"]
        ),
    )
    rules = resources(plan, RULES[0], "-cluster-api-")
    assert [(r.inputs["fromPort"], r.inputs["toPort"], r.inputs["ipProtocol"]) for r in rules] == [
        (443, 443, "tcp")
    ] * 2
    assert {r.inputs.get("cidrIpv4") or r.inputs.get("referencedSecurityGroupId") for r in rules} == {
        "10.51.200.0/24",
        "sg-0123456789abcdef0",
    }
    # The EKS-made cluster security group (its mock id), the one the nodes and the endpoint share.
    (group,) = {r.inputs["securityGroupId"] for r in rules}
    assert group.startswith("sg-")


def test_private_access_takes_private_ranges_only() -> None:
    body = template("aws-enterprise-prod")
    body["ml-platform:platform"]["cluster"]["privateAccessCidrs"] = ["8.8.8.0/24"]
    with pytest.raises(ConfigError, match=r"cluster\.privateAccessCidrs.*not a private range"):
        parse(body, "aws-enterprise-prod")


@pytest.mark.parametrize(
    ("gib", "valid"), [(1200, True), (2400, True), (3600, False), (4800, True), (6000, False)]
)
def test_lustre_capacity_is_1200_or_a_multiple_of_2400(gib: int, valid: bool) -> None:
    """Item 7: FSx for Lustre PERSISTENT_2 SSD: 1200 GiB, 2400 GiB, then increments of 2400 GiB (FSx API
    reference, CreateFileSystem StorageCapacity)."""
    assert lustre_capacity_valid(gib) is valid
    body = template("aws-enterprise-prod")
    body["ml-platform:platform"]["storage"]["sharedCapacityGib"] = gib
    if valid:
        parse(body, "aws-enterprise-prod")
    else:
        with pytest.raises(ConfigError, match=r"storage\.sharedCapacityGib: .*2400"):
            parse(body, "aws-enterprise-prod")


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_cluster_and_node_groups_outlive_their_role_policies(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """Item 8: EKS needs its role's policies while it deletes security groups and ENIs (pulumi-aws
    eks.Cluster and eks.NodeGroup docstring examples depend on the attachments)."""
    plan = cloud_plan(stack)
    attachments = resources(plan, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    cluster = one(plan, "aws:eks/cluster:Cluster", "-cluster-eks")
    cluster_policy = next(a for a in attachments if a.name.endswith("-cluster-role"))
    assert cluster_policy.urn in cluster.dependencies
    node_policies = {a.urn for a in attachments if "-node-" in a.name}
    assert len(node_policies) == 2  # worker and registry read; the CNI's is on aws-node's role (D3)
    cni_addon = one(plan, "aws:eks/addon:Addon", "-network-addons-vpc-cni")
    for group in resources(plan, NG):
        assert node_policies <= set(group.dependencies), group.name
        assert cni_addon.urn in group.dependencies, group.name


def test_efs_csi_role_trusts_the_controller_and_node_accounts(cloud_plan: Callable[[str], Plan]) -> None:
    """Item 9: the EFS driver's controller and node service accounts share the role (EKS user guide,
    "Amazon EFS CSI driver": StringLike on system:serviceaccount:kube-system:efs-csi-*), and the token's
    audience stays an exact match."""
    role = one(cloud_plan("aws-smb-dev"), "aws:iam/role:Role", "-addons-efs-csi")
    (statement,) = policy(role.inputs["assumeRolePolicy"])["Statement"]
    (sub,) = statement["Condition"]["StringLike"].items()
    (aud,) = statement["Condition"]["StringEquals"].items()
    assert sub[0].endswith(":sub") and sub[1] == "system:serviceaccount:kube-system:efs-csi-*"
    assert aud[0].endswith(":aud") and aud[1] == "sts.amazonaws.com"


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_iam_role_name_fits_64_characters(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    """Item 10: IAM role names are at most 64 characters (IAM CreateRole); a name prefix gets the
    provider's 26-digit suffix (terraform-plugin-sdk helper/id)."""
    roles = resources(cloud_plan(stack), "aws:iam/role:Role")
    assert roles
    for role in roles:
        prefix = role.inputs["namePrefix"]
        assert len(prefix) + NAME_PREFIX_SUFFIX <= ROLE_NAME_MAX, prefix


def test_the_longest_stack_the_config_accepts_still_fits() -> None:
    """Item 10: the config bounds the stack's name, which names every role, so the longest accepted
    name with the longest purpose fits; one character more is refused as a config error naming it."""
    body = template("aws-enterprise-prod")
    longest = "team-" + "x" * 20
    config = parse(body, longest)
    prefix = role_name_prefix(f"{config.stack_name}-aws", "x" * ROLE_PURPOSE_MAX)
    assert len(prefix) + NAME_PREFIX_SUFFIX <= ROLE_NAME_MAX
    with pytest.raises(ConfigError, match=rf"Pulumi\.{longest}x\.yaml: stack name '{longest}x'"):
        parse(body, f"{longest}x")


def test_efa_launch_template_can_target_a_capacity_reservation(variant: Callable[..., Plan]) -> None:
    """Item 14: a Capacity Block or On-Demand Capacity Reservation is how p5en capacity is had; the
    launch template names it (EC2 CreateLaunchTemplate, CapacityReservationSpecification)."""

    def reserve(body: dict[str, object]) -> None:
        pools = body["nodePools"]
        assert isinstance(pools, list)
        next(p for p in pools if p["name"] == "gpu-efa")["capacityReservation"] = {
            "id": "cr-0123456789abcdef0",
            "kind": "odcr",
        }

    # The reservation as the preflight reads it: gpu-efa's type, in its zone (0, me-central-1a).
    account = reserved({"cr-0123456789abcdef0": reservation("p5en.48xlarge", "me-central-1a")})
    plan = variant("aws-enterprise-prod", reserve, existing=account)
    template_inputs = one(plan, "aws:ec2/launchTemplate:LaunchTemplate", "-gpu-efa-lt").inputs
    assert template_inputs["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}
    }


@pytest.mark.parametrize(("stack", "expected"), [("aws-enterprise-prod", True), ("aws-smb-dev", False)])
def test_enterprise_reaches_aws_apis_through_private_interface_endpoints(
    cloud_plan: Callable[[str], Plan], stack: str, expected: bool
) -> None:
    """Item 15: a private enterprise cluster's nodes reach ECR, STS, EC2, Logs, EKS, Auto Scaling and ELB
    through interface endpoints with private DNS, not the NAT path (EKS user guide, "Deploy private
    clusters with limited internet access"); the registry reads its database password from Secrets
    Manager the same way (Secrets Manager user guide, "Using an AWS Secrets Manager VPC endpoint")."""
    plan = cloud_plan(stack)
    endpoints = [
        e
        for e in resources(plan, "aws:ec2/vpcEndpoint:VpcEndpoint")
        if e.inputs["vpcEndpointType"] == "Interface"
    ]
    services = {e.inputs["serviceName"].removeprefix("com.amazonaws.me-central-1.") for e in endpoints}
    wanted = {"ecr.api", "ecr.dkr", "sts", "ec2", "logs", "eks", "autoscaling", "elasticloadbalancing"}
    wanted.add("secretsmanager")
    assert services == (wanted if expected else set())
    zones = parse(template(stack), stack).network.availability_zones
    for endpoint in endpoints:
        assert endpoint.inputs["privateDnsEnabled"] is True
        assert len(endpoint.inputs["subnetIds"]) == zones
    if expected:
        (https,) = resources(plan, RULES[0], "-network-endpoints-https")
        assert (https.inputs["fromPort"], https.inputs["cidrIpv4"]) == (443, "10.51.0.0/16")
