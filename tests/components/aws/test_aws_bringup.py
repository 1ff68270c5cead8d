"""Issue 23: what a real ``pulumi up`` on AWS would still refuse or leave open (review
``shared/reviews/aws.md``), each rule checked on the shipped stack templates and named with its source."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pulumi
import pytest
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.aws import platform as aws_platform
from components.aws.account import enable_region_command
from components.aws.iam import NAME_PREFIX_SUFFIX
from components.aws.node_pools import NODE_GROUP_NAME_MAX, node_group_name_prefix
from components.aws.platform import AwsPlatform
from components.aws.preflight import (
    AUTOSCALING_ROLE_COMMAND,
    SUPPORT_WARNING_DAYS,
    UPGRADE_PATH,
    standard_support_notice,
    vcpu_demand,
)
from components.catalog.aws import EKS_STANDARD_SUPPORT_END
from components.config import PLATFORM_KEY, ConfigError, PlatformConfig, RdsLog, version_pins
from components.handle import Cloud, ClusterHandle, Fabric, PoolHandle, PoolKind, StorageHandle
from components.kubernetes.addons import efa_device_plugin
from components.kubernetes.charts import pin
from mlplatform.mocks import ExistingAccount, PlanMocks
from mlplatform.plan import Plan, isolated
from tests.components.aws.aws_plan_support import (
    AWS_STACKS,
    capacity_block,
    parse,
    policy,
    reservation,
    reserved,
    resources,
)
from tests.stack_variants import template

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
    # The control plane's, the flow logs', the audit trail's copy where the stack keeps a trail, and each
    # exported log of the registry's database where it has one (components/aws/registry_database.py).
    trails = resources(plan, "aws:cloudtrail/trail:Trail")
    databases = resources(plan, "aws:rds/instance:Instance")
    assert len(groups) == 2 + len(trails) + len(RdsLog) * len(databases)
    assert all(g.protect is prod for g in groups)


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_cluster_support_policy_is_chosen_not_defaulted(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """D1: extended support is the default and billed at a higher rate (EKS user guide, "Kubernetes
    version lifecycle"); the cluster states STANDARD (EKS API reference, UpgradePolicyRequest)."""
    (cluster,) = resources(cloud_plan(stack), EKS)
    assert cluster.inputs["upgradePolicy"] == {"supportType": "STANDARD"}


TODAY = "2026-11-26"


def _refusal(stack: str, edit: Callable[[dict[str, Any]], None]) -> list[str]:
    body = template(stack)
    edit(body[PLATFORM_KEY])
    with pytest.raises(ConfigError) as refused:
        parse(body, stack)
    return refused.value.problems


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_stacks_run_a_kubernetes_version_in_standard_support_pinned_everywhere(stack: str) -> None:
    """D1 / issue 23 item 2: 1.33 left EKS standard support on 2026-07-29 (EKS user guide, "Kubernetes
    version lifecycle"; the table in components/catalog/aws.py). The stacks' version has every per-minor
    pin: EKS add-ons and the cluster-autoscaler chart of that minor."""
    version = parse(template(stack), stack).cluster.kubernetes_version
    assert EKS_STANDARD_SUPPORT_END[version] > TODAY
    assert all(version in minors for minors in version_pins(Cloud.AWS).values())
    assert pin("cluster-autoscaler", version).version == "9.59.0"


def test_a_version_some_pin_lacks_is_refused_at_config_time() -> None:
    """Issue 23 item 2: 1.32 used to pass config and fail inside the program (charts.pin); now one line
    names the key and where it is not pinned."""
    problems = _refusal("aws-smb-dev", lambda b: b["cluster"].update(kubernetesVersion="1.32"))
    assert len(problems) == 1
    assert "ml-platform:platform.cluster.kubernetesVersion: 1.32 is not pinned in" in problems[0]
    assert "cluster-autoscaler chart" in problems[0] and "EKS add-ons" in problems[0]
    assert problems[0].endswith("pinned everywhere: 1.33, 1.34, 1.35")


def test_private_endpoint_with_the_kubernetes_layer_needs_an_access_rule() -> None:
    """A4: with public access off the API is reachable only through rules on the cluster security
    group (EKS user guide, "Cluster API server endpoint"); without one, phase two cannot connect."""

    def drop_access(body: dict[str, Any]) -> None:
        body["cluster"].pop("privateAccessCidrs")

    (problem,) = _refusal("aws-enterprise-prod", drop_access)
    assert "cluster.privateAccessCidrs: a private endpoint with kubernetes.enabled needs" in problem

    def phase_one(body: dict[str, Any]) -> None:
        drop_access(body)
        body["kubernetes"] = {"enabled": False}

    body = template("aws-enterprise-prod")
    phase_one(body[PLATFORM_KEY])
    assert not parse(body, "aws-enterprise-prod").kubernetes.enabled


@pytest.mark.parametrize("stack", ("aws-enterprise-dev", "aws-enterprise-prod"))
def test_private_api_is_reachable_from_the_configured_runner(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """A4 (offline check API-REACH): a private endpoint needs a 443 rule on the cluster security group."""
    rules = [
        r
        for r in resources(cloud_plan(stack), INGRESS, "-cluster-api-")
        if r.inputs["fromPort"] <= 443 <= r.inputs["toPort"]
    ]
    assert rules


def test_efa_device_plugin_is_pulled_from_the_stack_regions_eks_registry() -> None:
    """B1: the chart's default image is us-west-2's registry; a region-deny SCP refuses the pull
    (EKS user guide, "View Amazon container image registries for Amazon EKS add-ons": use the region's
    own registry; me-central-1's account is 759879836304)."""
    efa = PoolHandle("efa", PoolKind.GPU, "p5en.48xlarge", 8, Fabric.EFA, 16, 192, 2048)
    handle = ClusterHandle(
        Cloud.AWS, "c", pulumi.Output.from_input("k"), "1.35", (efa,), StorageHandle("s3://b"), "r"
    )
    values = efa_device_plugin(handle, "me-central-1").values
    assert values["image"]["repository"] == (
        "759879836304.dkr.ecr.me-central-1.amazonaws.com/eks/aws-efa-k8s-device-plugin"
    )


LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
RESERVATION = "cr-0123456789abcdef0"


def _reservation_in_zone_1(kind: str, instance_type: str) -> ExistingAccount:
    """The account holding ``RESERVATION`` as the preflight reads it: of the pool's type, in zone 1
    (me-central-1b under the mocks), the kind asked for (a Capacity Block ``scheduled``)."""
    made = capacity_block if kind == "capacity-block" else reservation
    return reserved({RESERVATION: made(instance_type, "me-central-1b")})


def _reserve(kind: str, pool_name: str = "gpu-efa", **placement: object) -> Callable[[dict[str, Any]], None]:
    """The pool reserved in zone 1 (the reservation's), a Capacity Block's starting at 0 nodes."""

    def edit(body: dict[str, Any]) -> None:
        pool = next(p for p in body["nodePools"] if p["name"] == pool_name)
        pool["capacityReservation"] = {"id": RESERVATION, "kind": kind}
        pool["availabilityZone"] = 1
        if kind == "capacity-block":
            pool["minSize"] = 0
            pool.pop("desiredSize", None)
        if placement:
            pool["placementGroup"] = placement

    return edit


@pytest.mark.parametrize(
    ("kind", "market", "capacity"),
    [("odcr", None, "ON_DEMAND"), ("capacity-block", {"marketType": "capacity-block"}, "CAPACITY_BLOCK")],
)
def test_reserved_pools_launch_into_their_reservation_without_a_new_placement_group(
    variant: Callable[..., Plan], kind: str, market: object, capacity: str
) -> None:
    """A5: a Capacity Block needs ``InstanceMarketOptions.MarketType = capacity-block`` in the launch
    template and ``capacityType = CAPACITY_BLOCK`` on the managed node group (EKS user guide, "Create a
    managed node group with Capacity Blocks for ML"); both kinds target the reservation by id (EC2
    CreateLaunchTemplate, CapacityReservationSpecification); a placement group the reservation was not
    made in gets InsufficientInstanceCapacity (terraform-aws-eks PR #3730, eksctl #7949 / PR #8220)."""
    plan = variant(
        "aws-enterprise-prod", _reserve(kind), existing=_reservation_in_zone_1(kind, "p5en.48xlarge")
    )
    lt = next(r for r in resources(plan, LAUNCH_TEMPLATE) if r.name.endswith("-gpu-efa-lt"))
    assert lt.inputs["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": RESERVATION}
    }
    assert lt.inputs.get("instanceMarketOptions") == market
    assert "placement" not in lt.inputs
    assert not resources(plan, PLACEMENT_GROUP)
    ng = next(r for r in resources(plan, NODE_GROUP) if "-gpu-efa-" in r.name)
    assert ng.inputs["capacityType"] == capacity
    # N1: one subnet, the reservation's zone; a Capacity Block group created empty.
    assert _zones(plan, ng) == [_zone_names(plan)[1]]
    if kind == "capacity-block":
        assert ng.inputs["scalingConfig"]["desiredSize"] == ng.inputs["scalingConfig"]["minSize"] == 0


def _zone_names(plan: Plan) -> list[str]:
    return sorted({r.inputs["availabilityZone"] for r in resources(plan, "aws:ec2/subnet:Subnet")})


def _zones(plan: Plan, group: Any) -> list[str]:
    """The zones of the subnets a node group launches from (its subnetIds' dependencies)."""
    by_urn = {r.urn: r for r in plan.resources}
    return [by_urn[urn].inputs["availabilityZone"] for urn in group.property_dependencies["subnetIds"]]


def test_a_reserved_cpu_pool_runs_in_its_reservations_zone_only(variant: Callable[..., Plan]) -> None:
    """N1: an ODCR on the inference pool (every zone before) launches from its zone's subnet only."""
    plan = variant(
        "aws-enterprise-prod",
        _reserve("odcr", "inference"),
        existing=_reservation_in_zone_1("odcr", "c7i.4xlarge"),
    )
    ng = next(r for r in resources(plan, NODE_GROUP) if "-inference-" in r.name)
    assert len(ng.inputs["subnetIds"]) == 1 and _zones(plan, ng) == [_zone_names(plan)[1]]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda p: p.update(capacityReservation={"id": RESERVATION, "kind": "odcr"}),
            "nodePools[1].availabilityZone: a capacity reservation lives in one Availability Zone",
        ),
        (
            lambda p: p.update(
                capacityReservation={"id": RESERVATION, "kind": "capacity-block"}, availabilityZone=0
            ),
            "nodePools[1].minSize: a Capacity Block pool starts at 0 nodes",
        ),
    ],
    ids=["no-zone", "block-not-empty"],
)
def test_a_reservation_without_its_zone_or_a_block_not_starting_empty_is_refused(
    edit: Callable[[dict[str, Any]], None], problem: str
) -> None:
    """N1: EC2 launches into a reservation only in its Availability Zone and while it is active (EC2
    user guide, "Launch instances into an existing Capacity Reservation"); a Capacity Block group is
    created at desired 0 (EKS user guide, Capacity Blocks for ML)."""
    problems = _refusal("aws-enterprise-prod", lambda body: edit(body["nodePools"][1]))
    assert any(f"ml-platform:platform.{problem}" in p for p in problems), problems


def test_a_reservation_made_in_a_placement_group_names_it() -> None:
    """A5: ``existing`` names the reservation's own group; asking for a new one is refused."""
    problems = _refusal("aws-enterprise-prod", _reserve("odcr", enabled=True))
    assert len(problems) == 1 and "nodePools[2].placementGroup: a new placement group" in problems[0]
    body = template("aws-enterprise-prod")
    _reserve("capacity-block", existing="reserved-pg")(body[PLATFORM_KEY])
    assert parse(body, "aws-enterprise-prod").pool("gpu-efa").placement_group.existing == "reserved-pg"


def test_unreserved_efa_pools_keep_their_cluster_placement_group(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    (group,) = resources(plan, PLACEMENT_GROUP)
    assert group.inputs["strategy"] == "cluster"
    (ng,) = (r for r in resources(plan, NODE_GROUP) if "-gpu-efa-" in r.name)
    assert ng.inputs["capacityType"] == "ON_DEMAND"


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_node_group_names_fit_eks_limit_for_every_name_config_accepts(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """A7: EKS refuses node group names over 63 characters (pulumi-aws eks.NodeGroup docstring;
    terraform-aws-eks #1713); the autoname ``<cluster>-<pool>-ng-<7>`` reached 73 for a 10-character
    environment and a 32-character pool. A per-cluster prefix of the pool name plus the provider's
    26-character suffix stays within it for the longest pool name (32)."""
    for group in resources(cloud_plan(stack), NODE_GROUP):
        prefix = group.inputs["nodeGroupNamePrefix"]
        assert "nodeGroupName" not in group.inputs
        assert len(prefix) + NAME_PREFIX_SUFFIX <= NODE_GROUP_NAME_MAX
    assert len(node_group_name_prefix("p" * 32)) + NAME_PREFIX_SUFFIX <= NODE_GROUP_NAME_MAX


class _FreshAccount(PlanMocks):
    """An account that never had an Auto Scaling group: IAM GetRole answers NoSuchEntity."""

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if args.token == "aws:iam/getRole:getRole":
            # How the engine reports a failed invoke: a failure the SDK raises from get_role.
            return {}, [("name", f"NoSuchEntity: The role with name {args.args['name']} cannot be found.")]
        return super().call(args)


def test_a_fresh_account_is_told_to_create_the_autoscaling_role_before_the_key() -> None:
    """A6: KMS refuses a key policy whose principal does not exist (MalformedPolicyDocumentException;
    terraform-aws-eks #3013), and the key policy names AWSServiceRoleForAutoScaling, which a fresh
    account lacks: preview stops first, with the command that creates the role."""
    config = parse(template("aws-smb-dev"), "aws-smb-dev")
    created: list[str] = []

    class Recording(_FreshAccount):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
            created.append(args.typ)
            return super().new_resource(args)

    with pytest.raises(pulumi.RunError) as stopped:
        _build(config, Recording(aws_region=config.region, azure_location=""))
    assert AUTOSCALING_ROLE_COMMAND in str(stopped.value)
    assert "aws:kms/key:Key" not in created


EFS = "aws:efs/fileSystem:FileSystem"


@pytest.mark.parametrize("stack", ("aws-smb-dev", "aws-smb-prod"))
def test_efs_is_tls_only_and_backed_up_in_production(cloud_plan: Callable[[str], Plan], stack: str) -> None:
    """D2: Security Hub EFS.2 (AWS Backup) in production, and a file system policy that denies requests
    without TLS while still admitting mounts through mount targets (EFS user guide, "Creating file system
    policies", the "Enforce in-transit encryption" preset)."""
    plan = cloud_plan(stack)
    (file_system,) = resources(plan, EFS)
    (tls,) = resources(plan, "aws:efs/fileSystemPolicy:FileSystemPolicy")
    assert file_system.urn in tls.dependencies
    statements = {s["Sid"]: s for s in policy(tls.inputs["policy"])["Statement"]}
    assert statements["DenyWithoutTls"]["Effect"] == "Deny"
    assert statements["DenyWithoutTls"]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert statements["MountThroughMountTargets"]["Condition"] == {
        "Bool": {"elasticfilesystem:AccessedViaMountTarget": "true"}
    }
    backups = resources(plan, "aws:efs/backupPolicy:BackupPolicy")
    assert [b.inputs["backupPolicy"] for b in backups] == ([{"status": "ENABLED"}] if stack in PROD else [])


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_eks_addons_resolve_update_conflicts_with_the_programs_values(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """D5: without resolveConflicts on update, a later add-on version bump can fail on fields EKS sees
    changed (EKS API reference, UpdateAddon resolveConflicts)."""
    addons = resources(cloud_plan(stack), "aws:eks/addon:Addon")
    assert addons and all(a.inputs["resolveConflictsOnUpdate"] == "OVERWRITE" for a in addons)


def _build(config: PlatformConfig, mocks: PlanMocks) -> None:
    def run() -> None:
        pulumi.runtime.set_mocks(mocks, project="ml-platform", stack=config.stack_name, preview=True)

        def program() -> None:
            AwsPlatform(f"{config.stack_name}-aws", config)

        _sync_await(run_pulumi_func(program))

    isolated(run)


class _NoPQuota(PlanMocks):
    """A fresh account: Running On-Demand P instances is 0 vCPUs."""

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if args.token == "aws:servicequotas/getServiceQuota:getServiceQuota":
            return {"value": 0.0 if args.args["quotaCode"] == "L-417A185B" else 1e6}, []
        return super().call(args)


def test_pools_beyond_the_accounts_vcpu_quota_stop_preview_with_the_request() -> None:
    """Issue 23 item 4: EC2 counts running vCPUs per family against Service Quotas (EC2 user guide,
    "Amazon EC2 instance type quotas"); p5en at maxSize 4 needs 768 P vCPUs, and a fresh account has 0."""
    config = parse(template("aws-enterprise-prod"), "aws-enterprise-prod")
    demand = vcpu_demand((p, config.instance_type(p)) for p in config.node_pools)
    assert {q.code: v for q, v in demand.items()} == {"L-417A185B": 4 * 192, "L-1216C47A": 6 * 4 + 12 * 16}
    with pytest.raises(pulumi.RunError) as stopped:
        _build(config, _NoPQuota(aws_region=config.region, azure_location=""))
    assert "Running On-Demand P instances (L-417A185B) in me-central-1 is 0 vCPUs" in str(stopped.value)
    assert "--quota-code L-417A185B --desired-value 768 --region me-central-1" in str(stopped.value)


def test_reserved_and_spot_pools_count_against_their_own_quotas() -> None:
    config = parse(template("aws-smb-dev"), "aws-smb-dev")
    demand = {
        q.code: v for q, v in vcpu_demand((p, config.instance_type(p)) for p in config.node_pools).items()
    }
    assert demand == {"L-34B43A08": 4 * 8, "L-3819A6DF": 2 * 4}  # spot Standard, spot G and VT
    body = template("aws-enterprise-prod")
    _reserve("capacity-block")(body[PLATFORM_KEY])
    reserved = parse(body, "aws-enterprise-prod")
    assert "L-417A185B" not in {
        q.code for q in vcpu_demand((p, reserved.instance_type(p)) for p in reserved.node_pools)
    }


class _RegionNotEnabled(PlanMocks):
    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {}, [("region", "OptInRequired: You are not subscribed to this service.")]
        return super().call(args)


def test_a_region_the_account_has_not_enabled_stops_preview_with_the_command() -> None:
    """Issue 23 item 4: me-central-1 is an opt-in region; EC2 refuses calls until it is enabled (AWS
    Account Management reference guide, "Enable or disable AWS Regions in your account")."""
    config = parse(template("aws-smb-dev"), "aws-smb-dev")
    with pytest.raises(pulumi.RunError) as stopped:
        _build(config, _RegionNotEnabled(aws_region=config.region, azure_location=""))
    assert enable_region_command("me-central-1") in str(stopped.value)


def test_the_end_of_standard_support_is_warned_ahead_and_refused_after() -> None:
    """Review D1 (/work/wt-aws2-REPORT.md): with upgradePolicy STANDARD, EKS upgrades the control plane at
    the end of standard support (EKS user guide, "Understand the Kubernetes version lifecycle on EKS"),
    and with Pulumi.yaml's ``refresh: always`` the next `pulumi up` reads 1.36 and asks EKS to go back
    to 1.35, which UpdateClusterVersion cannot. Fixed dates around 1.35's end (2027-03-27, the table in
    components/catalog/aws.py)."""
    end = datetime.date.fromisoformat(EKS_STANDARD_SUPPORT_END["1.35"])
    assert end == datetime.date(2027, 3, 27)
    assert standard_support_notice("1.35", end - datetime.timedelta(days=SUPPORT_WARNING_DAYS + 1)) is None
    for day in (end - datetime.timedelta(days=SUPPORT_WARNING_DAYS), end):
        warning = standard_support_notice("1.35", day)
        assert warning is not None and not warning.refuse
        assert "leaves EKS standard support on 2027-03-27" in warning.message
    refusal = standard_support_notice("1.35", end + datetime.timedelta(days=1))
    assert refusal is not None and refusal.refuse
    assert "pin Kubernetes 1.36's EKS add-ons" in refusal.message
    assert "ml-platform:platform.cluster.kubernetesVersion" in refusal.message
    assert UPGRADE_PATH in refusal.message


def test_preview_warns_before_the_end_and_stops_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The program says it at preview: a warning on the stack 30 days before, a RunError the day after
    (before any resource is registered)."""
    config = parse(template("aws-smb-dev"), "aws-smb-dev")
    end = datetime.date.fromisoformat(EKS_STANDARD_SUPPORT_END[config.cluster.kubernetes_version])
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warned.append(message))
    monkeypatch.setattr(aws_platform, "today", lambda: end - datetime.timedelta(days=30))
    _build(config, PlanMocks(aws_region=config.region, azure_location=""))
    assert [w for w in warned if "leaves EKS standard support" in w]
    created: list[str] = []

    class Recording(PlanMocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
            created.append(args.typ)
            return super().new_resource(args)

    monkeypatch.setattr(aws_platform, "today", lambda: end + datetime.timedelta(days=1))
    with pytest.raises(pulumi.RunError) as stopped:
        _build(config, Recording(aws_region=config.region, azure_location=""))
    assert "left EKS standard support" in str(stopped.value)
    assert "aws:eks/cluster:Cluster" not in created
