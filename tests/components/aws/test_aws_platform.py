"""The AWS adapter end to end: every shipped AWS template plans (with the in-cluster layer too), the
handle it returns, protection of production data, tags and region on everything, the network, add-ons,
and the instance-offering preflight."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pulumi
import pytest
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.aws.platform import AwsPlatform
from components.aws.preflight import ensure_offered
from components.handle import POOL_LABEL, Cloud, Fabric, Peer, SharedStorageKind
from mlplatform.mocks import PlanMocks
from mlplatform.plan import Plan, PlannedResource, isolated
from tests.components.aws.aws_plan_support import (
    AWS_STACKS,
    UNKNOWN,
    build_platform,
    parse,
    policy,
    resources,
)
from tests.stack_variants import one, template

# Resource types the AWS API gives no tags; every other AWS resource must carry the base tags.
UNTAGGABLE = {
    # One tag on a managed node group's Auto Scaling group (node_pools._node_template_tags).
    "aws:autoscaling/tag:Tag",
    "aws:kms/alias:Alias",
    "aws:kms/grant:Grant",
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:efs/mountTarget:MountTarget",
    "aws:efs/fileSystemPolicy:FileSystemPolicy",
    "aws:efs/backupPolicy:BackupPolicy",
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:s3/bucketPolicy:BucketPolicy",
    "aws:s3/bucketLogging:BucketLogging",
    "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration",
    "aws:guardduty/detectorFeature:DetectorFeature",
    "aws:cloudwatch/logMetricFilter:LogMetricFilter",
    "aws:ec2/vpcEndpointPolicy:VpcEndpointPolicy",
    "aws:ecr/lifecyclePolicy:LifecyclePolicy",
}


def test_every_aws_template_plans_in_full(planned: Callable[[str], Plan]) -> None:
    """The shipped templates as `mlplatform plan` runs them, in-cluster layer included, a few seconds each."""
    for stack in AWS_STACKS:
        started = time.perf_counter()
        plan = planned(stack)
        assert time.perf_counter() - started < 20
        assert plan.outputs["clusterName"] == f"{stack}-aws"
        assert one(plan, "ml-platform:aws:Platform", f"{stack}-aws").parent is not None


def _walk(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)
    else:
        yield value


def _aws(plan: Plan) -> list[PlannedResource]:
    return [r for r in plan.resources if r.type.startswith("aws:")]


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_input_is_known_and_no_resource_picks_its_own_region(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    plan = cloud_plan(stack)
    for resource in _aws(plan):
        values = list(_walk(resource.inputs))
        assert None not in values, resource.name
        assert UNKNOWN not in values, resource.name
        assert "region" not in resource.inputs, resource.name
    (provider,) = [r for r in plan.resources if r.type == "pulumi:providers:aws"]
    assert provider.inputs["region"] == "me-central-1"
    # Every AWS resource on that one provider (the random provider, for generated names, has no region).
    aws = [ref for ref, p in plan.providers().items() if p.type == "pulumi:providers:aws"]
    assert {r.provider for r in _aws(plan)} == set(aws)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_taggable_resource_carries_the_base_tags(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    plan = cloud_plan(stack)
    base = parse(template(stack), stack).base_tags()
    for resource in _aws(plan):
        if resource.type in UNTAGGABLE:
            assert "tags" not in resource.inputs, resource.type
            continue
        tags = resource.inputs.get("tags")
        assert tags is not None, f"{resource.type} {resource.name} has no tags"
        assert tags.items() >= base.items(), resource.name


def test_components_nest_under_the_adapter(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    adapter = one(plan, "ml-platform:aws:Platform", "-aws")
    children = {r.type for r in plan.resources if r.parent == adapter.urn and not r.custom}
    assert children == {
        "ml-platform:aws:EncryptionKey",
        "ml-platform:aws:Network",
        "ml-platform:aws:EksCluster",
        "ml-platform:aws:NetworkAddons",
        "ml-platform:aws:NodePool",
        "ml-platform:aws:ObjectStore",
        "ml-platform:aws:SharedFileSystem",
        "ml-platform:aws:Registry",
        # The model registry's PostgreSQL (enterprise).
        "ml-platform:aws:RegistryDatabase",
        "ml-platform:aws:WorkloadIdentities",
        "ml-platform:aws:ClusterAddons",
        # The audit trail and its alerts (enterprise): components/aws/audit.py, alerts.py.
        "ml-platform:aws:AuditTrail",
        "ml-platform:aws:SecurityAlerts",
        # People's roles (`access`): components/aws/access.py, its access entries and auditors' policy.
        "ml-platform:aws:PeopleAccess",
    }
    assert all(r.name.startswith(adapter.name) for r in _aws(plan))


@pytest.mark.parametrize(
    ("stack", "nats"), [("aws-smb-dev", 1), ("aws-smb-prod", 3), ("aws-enterprise-prod", 3)]
)
def test_nat_per_zone_in_prod_one_shared_in_dev(
    cloud_plan: Callable[[str], Plan], stack: str, nats: int
) -> None:
    plan = cloud_plan(stack)
    assert len(resources(plan, "aws:ec2/natGateway:NatGateway")) == nats
    private_routes = [
        r.inputs["routes"][0] for r in resources(plan, "aws:ec2/routeTable:RouteTable", "-private-")
    ]
    assert len({r["natGatewayId"] for r in private_routes}) == nats
    assert all(r["cidrBlock"] == "0.0.0.0/0" for r in private_routes)


def test_subnets_are_tagged_for_load_balancers_and_never_map_public_ips(
    cloud_plan: Callable[[str], Plan],
) -> None:
    plan = cloud_plan("aws-smb-dev")
    subnets = resources(plan, "aws:ec2/subnet:Subnet")
    assert len(subnets) == 4
    for subnet in subnets:
        tags = subnet.inputs["tags"]
        assert tags["kubernetes.io/cluster/aws-smb-dev-aws"] == "shared"
        role = "kubernetes.io/role/elb" if "-public-" in subnet.name else "kubernetes.io/role/internal-elb"
        assert tags[role] == "1"
        assert subnet.inputs["mapPublicIpOnLaunch"] is False
    zones = sorted(s.inputs["availabilityZone"] for s in subnets if "-private-" in s.name)
    assert zones == ["me-central-1a", "me-central-1b"]
    cidrs = sorted(s.inputs["cidrBlock"] for s in subnets)
    assert cidrs == ["10.40.0.0/18", "10.40.192.0/20", "10.40.208.0/20", "10.40.64.0/18"]


def test_flow_logs_capture_all_traffic_to_an_encrypted_group(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    flow = one(plan, "aws:ec2/flowLog:FlowLog", "-network-flow-logs").inputs
    assert flow["trafficType"] == "ALL"
    assert flow["logDestinationType"] == "cloud-watch-logs"
    group = one(plan, "aws:cloudwatch/logGroup:LogGroup", "-network-flow-logs").inputs
    assert group["kmsKeyId"] == plan.outputs["kmsKeys"]["logs"]
    (trust,) = policy(one(plan, "aws:iam/role:Role", "-network-flow-logs").inputs["assumeRolePolicy"])[
        "Statement"
    ]
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}


NETWORK_ADDONS = {"vpc-cni", "kube-proxy"}


@pytest.mark.parametrize(
    ("stack", "addons"),
    [
        ("aws-smb-dev", {"aws-ebs-csi-driver", "aws-efs-csi-driver", "coredns"}),
        ("aws-enterprise-prod", {"aws-ebs-csi-driver", "aws-fsx-csi-driver", "coredns"}),
    ],
)
def test_managed_addons_wait_for_cpu_pools_only(
    cloud_plan: Callable[[str], Plan], stack: str, addons: set[str]
) -> None:
    """Issue 11 item 14: add-on controllers wait for the CPU pools, never for GPU node groups that may
    wait for capacity (or sit at minSize 0) for ever; vpc-cni and kube-proxy come before every group."""
    plan = cloud_plan(stack)
    installed = resources(plan, "aws:eks/addon:Addon")
    assert {a.inputs["addonName"] for a in installed} == addons | NETWORK_ADDONS
    groups = resources(plan, "aws:eks/nodeGroup:NodeGroup")
    cpu = {g.urn for g in groups if g.inputs["amiType"] == "AL2023_x86_64_STANDARD"}
    gpu = {g.urn for g in groups} - cpu
    assert cpu and gpu
    for addon in installed:
        if addon.inputs["addonName"] in NETWORK_ADDONS:
            assert all(addon.urn in g.dependencies for g in groups), addon.name
        else:
            assert cpu <= set(addon.dependencies) and not gpu & set(addon.dependencies), addon.name
    ebs = next(a for a in installed if a.inputs["addonName"] == "aws-ebs-csi-driver")
    assert ebs.inputs["serviceAccountRoleArn"].startswith("arn:aws:iam:")


@pytest.fixture(scope="module")
def prod() -> AwsPlatform:
    return build_platform(parse(template("aws-enterprise-prod"), "aws-enterprise-prod"))


@pytest.fixture(scope="module")
def dev() -> AwsPlatform:
    return build_platform(parse(template("aws-smb-dev"), "aws-smb-dev"))


DATA_BEARING = (
    ("aws:kms/key:Key", "-key-key"),
    ("aws:s3/bucket:Bucket", "-storage-data"),
    ("aws:s3/bucket:Bucket", "-storage-datasets"),
    ("aws:kms/key:Key", "-datasets-key"),
    ("aws:s3/bucket:Bucket", "-storage-logs"),
)
SHARED_FS = {
    "aws-enterprise-prod": "aws:fsx/lustreFileSystem:LustreFileSystem",
    "aws-smb-dev": "aws:efs/fileSystem:FileSystem",
}


@pytest.mark.parametrize(("stack", "protect"), [("aws-enterprise-prod", True), ("aws-smb-dev", False)])
def test_production_protects_its_data_and_dev_does_not(
    cloud_plan: Callable[[str], Plan], stack: str, protect: bool
) -> None:
    plan = cloud_plan(stack)
    (file_system,) = plan.by_type(SHARED_FS[stack])
    data = [one(plan, token, suffix) for token, suffix in DATA_BEARING] + [file_system]
    assert {r.protect for r in data} == {protect}
    # The production control plane is protected too (review aws.md C1, test_aws_bringup.py).
    assert one(plan, "aws:eks/cluster:Cluster", "-cluster-eks").protect is protect


def test_handle_describes_the_cluster_for_the_kubernetes_layer(prod: AwsPlatform) -> None:
    handle = prod.handle
    assert (handle.cloud, handle.name, handle.kubernetes_version) == (
        Cloud.AWS,
        "aws-enterprise-prod-aws",
        "1.35",
    )
    assert handle.registry == "123456789012.dkr.ecr.me-central-1.amazonaws.com/aws-enterprise-prod-aws"
    # The rollout's and the drift monitor's roles append to the lifecycle record, which an audited stack
    # keeps (docs/lifecycle.md); the image verifier reads the signing key's public half (docs/images.md).
    assert set(handle.identities) == {
        *("training", "inference", "registry", "cluster-autoscaler", "rollout", "drift-monitor"),
        "image-verifier",
    }
    # The API server's private endpoint is in the VPC (EKS "Cluster API server endpoint").
    assert handle.api_server == Peer("kubernetes-api", "10.51.0.0/16", 443)
    assert handle.lifecycle_record is not None
    assert all(set(a) == {"eks.amazonaws.com/role-arn"} for a in handle.identities.values())
    efa = handle.pool("gpu-efa")
    assert (efa.fabric, efa.fabric_devices_per_node, efa.gpus_per_node) == (Fabric.EFA, 16, 8)
    assert efa.labels[POOL_LABEL] == "gpu-efa"
    assert [(t.key, t.value) for t in efa.taints] == [("nvidia.com/gpu", "true")]
    assert handle.pool("inference").taints == ()
    assert handle.fabrics == {Fabric.EFA}
    shared = handle.storage.shared
    assert shared is not None and shared.kind is SharedStorageKind.FSX_LUSTRE
    assert shared.csi["driver"] == "fsx.csi.aws.com"
    assert set(shared.csi) == {"driver", "volumeHandle", "volumeAttributes"}
    assert set(shared.csi["volumeAttributes"]) == {"dnsname", "mountname"}
    assert (shared.capacity_gib, shared.mount_options) == (4800, ("flock",))


def test_an_unaudited_stack_keeps_no_lifecycle_record_and_no_role_for_it(dev: AwsPlatform) -> None:
    assert dev.handle.lifecycle_record is None
    assert not {"rollout", "drift-monitor"} & set(dev.handle.identities)


def test_smb_handle_mounts_efs(dev: AwsPlatform) -> None:
    shared = dev.handle.storage.shared
    assert shared is not None and shared.kind is SharedStorageKind.EFS
    assert set(shared.csi) == {"driver", "volumeHandle"} and shared.csi["driver"] == "efs.csi.aws.com"
    assert dev.handle.fabrics == frozenset()


def test_bucket_uri_and_exports(cloud_plan: Callable[[str], Plan]) -> None:
    outputs = cloud_plan("aws-smb-dev").outputs
    assert outputs["bucket"].startswith("s3://aws-smb-dev-aws-storage-data-")
    assert outputs["datasets"].startswith("s3://aws-smb-dev-aws-storage-datasets-")
    assert outputs["sharedFileSystemId"]
    assert [p["name"] for p in outputs["nodePools"]] == ["cpu", "gpu"]
    assert set(outputs["identities"]) == {
        *("training", "inference", "registry", "cluster-autoscaler", "image-verifier")
    }


class _NothingOffered(PlanMocks):
    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            return {"instanceTypes": [], "locations": [], "locationTypes": []}, []
        return super().call(args)


def test_preflight_names_type_zone_and_command_when_not_offered() -> None:
    def run() -> None:
        pulumi.runtime.set_mocks(_NothingOffered("me-central-1", ""), project="p", stack="s", preview=True)

        def check() -> None:
            parent = pulumi.ComponentResource("test:index:Parent", "parent")
            ensure_offered("p5.48xlarge", ["me-central-1a"], "me-central-1", pool="gpu-efa", parent=parent)

        _sync_await(run_pulumi_func(check))

    with pytest.raises(pulumi.RunError) as caught:
        isolated(run)
    message = str(caught.value)
    assert "node pool 'gpu-efa': p5.48xlarge is not offered in me-central-1a (me-central-1)" in message
    assert (
        "aws ec2 describe-instance-type-offerings --region me-central-1 --location-type availability-zone "
        "--filters Name=instance-type,Values=p5.48xlarge"
    ) in message


ENDPOINT_POLICY = "aws:ec2/vpcEndpointPolicy:VpcEndpointPolicy"


def _restricted(extra: list[str]) -> Callable[[dict[str, Any]], None]:
    def edit(platform: dict[str, Any]) -> None:
        platform["network"]["s3EndpointPolicy"] = {"enabled": True, "extraBuckets": extra}

    return edit


@pytest.mark.parametrize("stack", ["aws-smb-dev", "aws-enterprise-prod"])
def test_the_s3_endpoint_is_open_unless_the_stack_opts_in(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """Review D7 is opt-in (docs/aws.md "S3 endpoint policy"): what the EKS AL2023 AMI and public
    registries fetch from S3 in the region is not documented as a closed list, so a template does not
    risk node boot on it."""
    plan = cloud_plan(stack)
    assert plan.by_type(ENDPOINT_POLICY) == []
    assert "policy" not in one(plan, "aws:ec2/vpcEndpoint:VpcEndpoint", "-network-s3").inputs


def test_an_opted_in_s3_endpoint_reaches_the_stack_buckets_and_what_nodes_pull_only(
    variant: Callable[..., Plan],
) -> None:
    """Review D7: the S3 gateway endpoint lets through the stack's buckets (every bucket the plan creates,
    so a bucket added later cannot be forgotten) and the config's extra buckets with any action IAM
    allows; ECR image layers as the ECR user guide's "Minimum Amazon S3 bucket permissions for Amazon
    ECR" example (s3:GetObject and s3:PutObject on prod-<region>-starport-layer-bucket/*) and the Amazon
    Linux 2023 repositories read-only (aws-samples/data-perimeter-policy-examples s3_endpoint_policy.json:
    al2023-repos-<region>-de612dc2); nothing else. A VpcEndpointPolicy of its own (pulumi-aws
    ``ec2.VpcEndpointPolicy``) on the S3 endpoint, created after every bucket it names."""
    plan = variant("aws-enterprise-prod", _restricted(["team-datasets.me-central-1"]))
    (restriction,) = plan.by_type(ENDPOINT_POLICY)
    endpoint = one(plan, "aws:ec2/vpcEndpoint:VpcEndpoint", "-network-s3")
    assert restriction.property_dependencies["vpcEndpointId"] == [endpoint.urn]
    buckets = {r.urn for r in plan.by_type("aws:s3/bucket:Bucket")}
    assert buckets
    assert buckets <= set(restriction.dependencies)
    assert buckets == set(restriction.property_dependencies["policy"])
    stack, layers, repositories = policy(restriction.inputs["policy"])["Statement"]
    assert stack["Action"] == "s3:*" and stack["Principal"] == "*"
    named = [arn for arn in stack["Resource"] if not arn.endswith("/*")]
    assert len(named) == len(buckets) + 1 and "arn:aws:s3:::team-datasets.me-central-1" in named
    assert sorted(stack["Resource"]) == sorted([*named, *(f"{arn}/*" for arn in named)])
    assert layers == {
        "Sid": "EcrImageLayers",
        "Effect": "Allow",
        "Principal": "*",
        "Action": ["s3:GetObject", "s3:PutObject"],
        "Resource": "arn:aws:s3:::prod-me-central-1-starport-layer-bucket/*",
    }
    assert repositories["Action"] == "s3:GetObject"
    assert repositories["Resource"] == "arn:aws:s3:::al2023-repos-me-central-1-de612dc2/*"
    assert all(s["Effect"] == "Allow" for s in (stack, layers, repositories))
