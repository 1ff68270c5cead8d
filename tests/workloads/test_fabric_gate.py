"""The fabric test on the cluster: one awaited Job per fabric pool, as the real stack templates plan it.

Built by the training Job builder (workloads/training/k8s.py) with ``entry`` set to the fabric test, so
devices, placement, sizing and hardening are the training run's; the floor comes from the pool's
sourced line rate (workloads/fabric_gate.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from components.handle import Fabric, PoolHandle, PoolKind
from mlplatform.plan import Plan, PlannedResource
from tests.stack_variants import plan_config, template
from workloads.fabric_gate import BUSBW_FLOOR_FRACTION, LINE_RATE_GBPS, busbw_floor_gbytes

JOB = "kubernetes:batch/v1:Job"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# stack -> (fabric pool, the fabric's device resource, NCCL network, floor in GB/s at the default share)
FABRIC_STACKS = {
    # p5en.48xlarge: 3200 Gb/s = 400 GB/s; a quarter is 100.
    "aws-enterprise-dev": ("gpu-efa", "vpc.amazonaws.com/efa", "Libfabric", 100.0),
    "aws-enterprise-prod": ("gpu-efa", "vpc.amazonaws.com/efa", "Libfabric", 100.0),
    # ND96asr_v4: 8 x 200 Gb/s = 200 GB/s; a quarter is 50.
    "azure-enterprise-dev": ("gpu-ib", "rdma/shared_ib", "IB", 50.0),
    # ND96isr_H100_v5: 8 x 400 Gb/s = 400 GB/s; a quarter is 100.
    "azure-enterprise-prod": ("gpu-ib", "rdma/shared_ib", "IB", 100.0),
}


@pytest.fixture(autouse=True)
def event_loop_for_pulumi() -> Iterator[None]:
    """Pulumi's mocked run asks asyncio for the current loop; earlier asyncio.run() tests leave none.
    The loop found before is put back, so later tests see what they would have without these."""
    policy = asyncio.get_event_loop_policy()
    try:
        previous: asyncio.AbstractEventLoop | None = policy.get_event_loop()
    except RuntimeError:
        previous = None
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    loop.close()
    asyncio.set_event_loop(previous)


def _jobs(plan: Plan) -> dict[str, PlannedResource]:
    return {r.inputs["metadata"]["name"]: r for r in plan.resources if r.type == JOB}


def _fabric_jobs(plan: Plan) -> dict[str, PlannedResource]:
    return {name: r for name, r in _jobs(plan).items() if name.startswith("fabric-test-")}


def _container(job: dict[str, Any]) -> dict[str, Any]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert isinstance(container, dict)
    return container


@pytest.mark.parametrize("stack", sorted(FABRIC_STACKS))
def test_each_fabric_stack_tests_its_fabric_pool_on_two_whole_nodes(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    pool, device, network, floor = FABRIC_STACKS[stack]
    jobs = _fabric_jobs(planned(stack))
    assert sorted(jobs) == [f"fabric-test-{pool}-run-1"]
    job = jobs[f"fabric-test-{pool}-run-1"].inputs
    pod = job["spec"]["template"]["spec"]
    container = _container(job)
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8" and limits[device] != "0"
    assert pod["nodeSelector"] == {"ml-platform/pool": pool}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    command = container["command"][-1]
    assert "--nnodes=2 --nproc-per-node=8" in command
    assert f"-m workloads.fabric_test --expect-network={network} --floor-gbytes={floor}" in command
    # One more pod per index: a late pod 0 or a node that failed to join does not fail `pulumi up` on
    # the first try (cluster review B2); torchrun itself does not restart the test.
    assert job["spec"]["completions"] == 2 and job["spec"]["backoffLimitPerIndex"] == 1
    assert "--max-restarts=0" in command


@pytest.mark.parametrize("stack", sorted(FABRIC_STACKS))
def test_pulumi_up_waits_for_the_test_before_the_training_run(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    """pulumi-kubernetes awaits a Job's completion unless it carries ``pulumi.com/skipAwait`` (REFERENCE.md);
    the test is awaited (with a timeout that leaves room for a scale-up from zero), the run depends on it."""
    plan = planned(stack)
    fabric = next(iter(_fabric_jobs(plan).values()))
    annotations = fabric.inputs["metadata"]["annotations"]
    assert "pulumi.com/skipAwait" not in annotations
    assert annotations["pulumi.com/timeoutSeconds"] == "3600"
    # A failed test runs again at the next `pulumi up` (replaced), instead of failing it unchanged.
    assert annotations["pulumi.com/replaceUnready"] == "true"
    training = next(
        r
        for name, r in _jobs(plan).items()
        if r.inputs["metadata"]["namespace"] == "ml-training" and not name.startswith("fabric-test-")
    )
    assert training.inputs["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert fabric.urn in training.dependencies
    # Serving does not wait for the GPU gate (cluster review D8).
    serving = [r for r in plan.resources if r.type.endswith(":Deployment") and r.name.endswith("inference")]
    assert serving and all(fabric.urn not in r.dependencies for r in serving)


@pytest.mark.parametrize("stack", sorted(FABRIC_STACKS))
def test_the_test_is_admitted_by_kueue_like_the_run(stack: str, planned: Callable[[str], Plan]) -> None:
    """The pack's k8s-jobs-queued: a Job in a queued namespace names the LocalQueue."""
    labels = next(iter(_fabric_jobs(planned(stack)).values())).inputs["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == "default"


@pytest.mark.parametrize("stack", ["aws-smb-dev", "aws-smb-prod", "azure-smb-dev", "azure-smb-prod"])
def test_stacks_without_a_fabric_have_no_fabric_test(stack: str, planned: Callable[[str], Plan]) -> None:
    plan = planned(stack)
    assert _jobs(plan), "the training Job is planned"
    assert not _fabric_jobs(plan)


def test_floor_share_and_run_id_are_stack_overrides(tmp_path: Path) -> None:
    """A new runId is a new Job (the way to test again); floorFraction moves the floor."""
    config = template("aws-enterprise-dev")
    config["ml-platform:platform"]["workloads"]["fabricTest"] |= {"runId": "run-2", "floorFraction": 0.5}
    jobs = _fabric_jobs(plan_config(config, tmp_path, "aws-enterprise-dev"))
    assert sorted(jobs) == ["fabric-test-gpu-efa-run-2"]
    assert "--floor-gbytes=200.0" in _container(jobs["fabric-test-gpu-efa-run-2"].inputs)["command"][-1]


def _pool(instance_type: str, fabric: Fabric) -> PoolHandle:
    return PoolHandle("gpu", PoolKind.GPU, instance_type, 8, fabric, 8, 96, 1900)


def test_the_floor_is_the_share_of_the_sourced_line_rate_in_gigabytes() -> None:
    assert busbw_floor_gbytes(_pool("Standard_ND96isr_H100_v5", Fabric.INFINIBAND), 1.0) == 400.0
    assert busbw_floor_gbytes(_pool("p5en.48xlarge", Fabric.EFA), BUSBW_FLOOR_FRACTION) == 100.0


def test_no_floor_where_the_line_rate_is_not_sourced() -> None:
    """NDm A100 v4 and p4d/p6 rates were not confirmed from a source: the transport check alone."""
    for unsourced in ("Standard_ND96amsr_A100_v4", "p4d.24xlarge", "p6-b200.48xlarge"):
        assert unsourced not in LINE_RATE_GBPS
    assert busbw_floor_gbytes(_pool("Standard_ND96amsr_A100_v4", Fabric.INFINIBAND), 0.5) is None
    assert busbw_floor_gbytes(_pool("g6.12xlarge", Fabric.NONE), 0.5) is None
