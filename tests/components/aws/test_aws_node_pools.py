"""Node pools as planned: EFA launch templates with one interface per card, single-zone EFA pools in a
placement group (or an existing one, or none), the GPU taint, IMDSv2, encrypted roots, spot."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.aws.node_pools import (
    ACCELERATOR_LABEL,
    accelerator_type,
    efa_network_interfaces,
    pool_handle,
    pool_zone_indexes,
)
from components.catalog import catalog
from components.config import NodePoolConfig
from components.handle import GPU_TAINT_KEY, POOL_LABEL, Cloud, Fabric, PoolKind, TaintEffect
from mlplatform.errors import InputError
from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import AWS_STACKS, parse, resources
from tests.stack_variants import cloud_only, one, plan_config, template

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
PG = "aws:ec2/placementGroup:PlacementGroup"


def _interfaces(plan: Plan, pool: str) -> list[dict[str, Any]]:
    interfaces: list[dict[str, Any]] = one(plan, LT, f"-{pool}-lt").inputs["networkInterfaces"]
    return interfaces


@pytest.mark.parametrize(("stack", "count"), [("aws-enterprise-prod", 16), ("aws-enterprise-dev", 16)])
def test_efa_pools_get_one_interface_per_card(
    cloud_plan: Callable[[str], Plan], stack: str, count: int
) -> None:
    """p5.48xlarge: 32 cards; p4d.24xlarge: 4 (REFERENCE.md). Card 0 is EFA at device index 0, every
    other card EFA-only at device index 1; none has a public address; all die with the instance."""
    interfaces = _interfaces(cloud_plan(stack), "gpu-efa")
    assert len(interfaces) == count
    assert [i["networkCardIndex"] for i in interfaces] == list(range(count))
    assert (interfaces[0]["interfaceType"], interfaces[0]["deviceIndex"]) == ("efa", 0)
    assert {(i["interfaceType"], i["deviceIndex"]) for i in interfaces[1:]} == {("efa-only", 1)}
    assert {i["associatePublicIpAddress"] for i in interfaces} == {"false"}
    assert {i["deleteOnTermination"] for i in interfaces} == {"true"}


def test_efa_interfaces_carry_cluster_and_self_referencing_groups(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    interfaces = _interfaces(plan, "gpu-efa")
    efa_group = one(plan, "aws:ec2/securityGroup:SecurityGroup", "-gpu-efa-efa")
    for interface in interfaces:
        cluster_group, own_group = interface["securityGroups"]
        assert cluster_group.startswith("sg-")  # the EKS cluster security group (mock id)
        assert own_group.startswith(efa_group.name)
    template_inputs = one(plan, LT, "-gpu-efa-lt").inputs
    assert "vpcSecurityGroupIds" not in template_inputs  # EC2 refuses groups on both levels
    for token, suffix in (
        ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "-gpu-efa-efa-in"),
        ("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "-gpu-efa-efa-out"),
    ):
        rule = one(plan, token, suffix).inputs
        assert rule["ipProtocol"] == "-1"
        assert rule["securityGroupId"] == rule["referencedSecurityGroupId"]
        assert rule["securityGroupId"].startswith(efa_group.name)


def test_cpu_pools_have_no_efa_interfaces(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    for pool in ("system", "inference"):
        inputs = one(plan, LT, f"-{pool}-lt").inputs
        assert "networkInterfaces" not in inputs
        assert len(inputs["vpcSecurityGroupIds"]) == 1
        assert "placement" not in inputs


def test_efa_pool_is_in_one_private_subnet_and_a_placement_group(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    group = one(plan, NG, "-gpu-efa-ng").inputs
    assert len(group["subnetIds"]) == 1
    assert group["subnetIds"][0].startswith("aws-enterprise-prod-aws-network-private-0-")
    placement = one(plan, PG, "-gpu-efa-pg")
    assert placement.inputs["strategy"] == "cluster"
    assert one(plan, LT, "-gpu-efa-lt").inputs["placement"]["groupName"].startswith(placement.name)
    assert len(resources(plan, PG)) == 1


def test_other_pools_span_every_zone(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    for pool in ("system", "inference"):
        subnets = one(plan, NG, f"-{pool}-ng").inputs["subnetIds"]
        assert [s.split("-private-")[1][0] for s in subnets] == ["0", "1", "2"]


def test_gpu_pools_are_tainted_and_labelled(cloud_plan: Callable[[str], Plan]) -> None:
    for stack, pool in (("aws-enterprise-prod", "gpu-efa"), ("aws-smb-dev", "gpu")):
        group = one(cloud_plan(stack), NG, f"-{pool}-ng").inputs
        assert group["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
        assert group["labels"][POOL_LABEL] == pool
        assert group["labels"]["nvidia.com/gpu.present"] == "true"
        assert group["amiType"] == "AL2023_x86_64_NVIDIA"
    efa = one(cloud_plan("aws-enterprise-prod"), NG, "-gpu-efa-ng").inputs
    assert efa["labels"]["vpc.amazonaws.com/efa.present"] == "true"


def test_cpu_pools_are_untainted(cloud_plan: Callable[[str], Plan]) -> None:
    group = one(cloud_plan("aws-smb-dev"), NG, "-cpu-ng").inputs
    assert "taints" not in group or group["taints"] == []
    assert group["labels"] == {POOL_LABEL: "cpu"}
    assert group["amiType"] == "AL2023_x86_64_STANDARD"


def test_every_template_is_hardened(cloud_plan: Callable[[str], Plan]) -> None:
    for stack in ("aws-smb-dev", "aws-enterprise-prod"):
        plan = cloud_plan(stack)
        templates = resources(plan, LT)
        assert len(templates) == len(resources(plan, NG)) > 0
        for lt in templates:
            assert lt.inputs["metadataOptions"] == {
                "httpEndpoint": "enabled",
                "httpTokens": "required",
                "httpPutResponseHopLimit": 1,
            }
            (root,) = lt.inputs["blockDeviceMappings"]
            assert root["deviceName"] == "/dev/xvda"
            assert root["ebs"]["encrypted"] == "true"
            assert root["ebs"]["kmsKeyId"] == plan.outputs["kmsKeys"]["node-volumes"]
            assert root["ebs"]["volumeType"] == "gp3"


def test_sizes_spot_and_autoscaler_tags_follow_config(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-smb-dev")
    gpu = one(plan, NG, "-gpu-ng").inputs
    assert gpu["scalingConfig"] == {"minSize": 0, "maxSize": 2, "desiredSize": 0}
    assert gpu["capacityType"] == "SPOT"
    assert gpu["instanceTypes"] == ["g6.xlarge"]
    assert gpu["tags"]["k8s.io/cluster-autoscaler/enabled"] == "true"
    assert gpu["tags"]["k8s.io/cluster-autoscaler/aws-smb-dev-aws"] == "owned"
    assert gpu["launchTemplate"]["version"] == "1"
    prod = one(cloud_plan("aws-enterprise-prod"), NG, "-gpu-efa-ng").inputs
    assert prod["capacityType"] == "ON_DEMAND"
    assert prod["scalingConfig"] == {"minSize": 2, "maxSize": 4, "desiredSize": 2}


def _gpu_efa(body: dict[str, Any]) -> dict[str, Any]:
    pool: dict[str, Any] = next(p for p in body["nodePools"] if p["name"] == "gpu-efa")
    return pool


def test_existing_placement_group_is_used_not_created(variant: Callable[..., Plan]) -> None:
    plan = variant(
        "aws-enterprise-prod", lambda body: _gpu_efa(body).update(placementGroup={"existing": "cr-pg"})
    )
    assert resources(plan, PG) == []
    assert one(plan, LT, "-gpu-efa-lt").inputs["placement"] == {"groupName": "cr-pg"}
    assert len(one(plan, NG, "-gpu-efa-ng").inputs["subnetIds"]) == 1


def test_placement_group_can_be_turned_off(variant: Callable[..., Plan]) -> None:
    plan = variant(
        "aws-enterprise-prod", lambda body: _gpu_efa(body).update(placementGroup={"enabled": False})
    )
    assert resources(plan, PG) == []
    inputs = one(plan, LT, "-gpu-efa-lt").inputs
    assert "placement" not in inputs
    assert len(inputs["networkInterfaces"]) == 16


def test_configured_zone_pins_the_efa_pool_and_lustre(variant: Callable[..., Plan]) -> None:
    plan = variant("aws-enterprise-prod", lambda body: _gpu_efa(body).update(availabilityZone=2))
    assert (
        one(plan, NG, "-gpu-efa-ng")
        .inputs["subnetIds"][0]
        .startswith("aws-enterprise-prod-aws-network-private-2-")
    )
    lustre = one(plan, "aws:fsx/lustreFileSystem:LustreFileSystem", "-shared-lustre").inputs
    assert lustre["subnetIds"].startswith("aws-enterprise-prod-aws-network-private-2-")


def test_efa_on_a_type_without_it_is_refused_naming_the_supported_types(tmp_path: Path) -> None:
    config = cloud_only(template("aws-smb-dev"))
    gpu = next(p for p in config["ml-platform:platform"]["nodePools"] if p["name"] == "gpu")
    gpu.update(fabric="efa", spot=False)
    with pytest.raises(InputError) as caught:
        plan_config(config, tmp_path, "aws-smb-efa")
    (line,) = [p for p in caught.value.problems if "fabric" in p]
    assert "nodePools[1].fabric" in line and "g6.xlarge has no efa fabric" in line
    # Only the EFA types me-central-1 sells are offered as the alternative.
    assert line.endswith("supported: p5en.48xlarge")


def test_pool_handle_carries_fabric_devices_from_the_catalog() -> None:
    pool = NodePoolConfig(
        name="gpu-efa",
        kind=PoolKind.GPU,
        instance_type="p5.48xlarge",
        min_size=0,
        max_size=2,
        fabric=Fabric.EFA,
    )
    handle = pool_handle(pool, catalog(Cloud.AWS)["p5.48xlarge"])
    assert (handle.fabric, handle.fabric_devices_per_node, handle.gpus_per_node) == (Fabric.EFA, 32, 8)
    assert handle.taints[0].key == GPU_TAINT_KEY and handle.taints[0].effect is TaintEffect.NO_SCHEDULE
    assert handle.node_selector == {POOL_LABEL: "gpu-efa"}
    assert pool_zone_indexes(pool, 3) == [0]


def test_pool_label_wins_over_config_labels() -> None:
    pool = NodePoolConfig(
        name="cpu",
        kind=PoolKind.CPU,
        instance_type="c7i.large",
        min_size=0,
        max_size=1,
        labels={POOL_LABEL: "other", "team": "a"},
    )
    handle = pool_handle(pool, catalog(Cloud.AWS)["c7i.large"])
    assert handle.labels == {POOL_LABEL: "cpu", "team": "a"}
    assert (handle.taints, handle.fabric_devices_per_node) == ((), 0)
    assert pool_zone_indexes(pool, 2) == [0, 1]


def test_efa_interface_builder() -> None:
    interfaces = efa_network_interfaces(2, ["sg-a"])
    assert [(i["network_card_index"], i["device_index"], i["interface_type"]) for i in interfaces] == [
        (0, 0, "efa"),
        (1, 1, "efa-only"),
    ]


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_cpu_pools_use_avx512_types(stack: str) -> None:
    """CPU training and inference lean on AVX-512 (ONNX Runtime, torch CPU kernels): every shipped CPU
    pool's type has it in the catalog."""
    config = parse(template(stack), stack)
    cpu = [p for p in config.node_pools if p.kind is PoolKind.CPU]
    assert cpu and all(config.instance_type(p).avx512 for p in cpu)


ASG_TAG = "aws:autoscaling/tag:Tag"
ACCELERATOR_TAG = "k8s.io/cluster-autoscaler/node-template/label/k8s.amazonaws.com/accelerator"


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_gpu_node_groups_carry_the_autoscalers_accelerator_label(
    cloud_plan: Callable[[str], Plan], stack: str
) -> None:
    """Review B1 (/work/wt-aws2-REPORT.md): cluster-autoscaler AWS README, "Special note on GPU
    instances": label GPU nodes ``k8s.amazonaws.com/accelerator=<gpu-type>`` before they join, or the
    autoscaler takes a node whose device plugin has not yet advertised nvidia.com/gpu for one without
    GPUs and scales out again (up to maxSize p5en). The label, and its node-template ASG tag for scaling
    from zero, name the catalog's GPU model; CPU groups carry neither."""
    plan = cloud_plan(stack)
    config = parse(template(stack), stack)
    for pool in config.node_pools:
        group = one(plan, NG, f"-{pool.name}-ng")
        tags = {
            t.inputs["tag"]["key"]: t.inputs["tag"]["value"]
            for t in resources(plan, ASG_TAG, f"-{pool.name}-asg-")
        }
        model = config.instance_type(pool).gpu_model
        if group.inputs["amiType"].endswith("_NVIDIA"):
            assert model, pool.name
            assert group.inputs["labels"][ACCELERATOR_LABEL] == f"nvidia-{model.lower()}"
            assert tags[ACCELERATOR_TAG] == group.inputs["labels"][ACCELERATOR_LABEL]
        else:
            assert ACCELERATOR_LABEL not in group.inputs["labels"] and ACCELERATOR_TAG not in tags


def test_the_accelerator_type_comes_from_the_catalogs_gpu_model() -> None:
    """The autoscaler's own AWS GPU types are spelled nvidia-<model> (aws_cloud_provider.go
    availableGPUTypes: "nvidia-a10g", "nvidia-tesla-t4")."""
    types = catalog(Cloud.AWS)
    assert accelerator_type(types["p5en.48xlarge"]) == "nvidia-h200"
    assert accelerator_type(types["g5.xlarge"]) == "nvidia-a10g"
    assert accelerator_type(types["g6.xlarge"]) == "nvidia-l4"
