"""The training Job as the real stack templates plan it: sized from the p5 pool, user code from config."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mlplatform.plan import Plan
from tests.stack_variants import plan_config, template

JOB = "kubernetes:batch/v1:Job"


def _job(plan: Plan) -> dict[str, Any]:
    """The training run's Job: in ml-training (the registry's migration and the storage preparation are
    Jobs elsewhere), not a fabric test's."""
    inputs = next(
        r
        for r in plan.resources
        if r.type == JOB
        and r.inputs["metadata"]["namespace"] == "ml-training"
        and "fabric-test" not in r.name
    ).inputs
    assert isinstance(inputs, dict)
    return inputs


def _trainer(job: dict[str, Any]) -> dict[str, Any]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert isinstance(container, dict)
    return container


@pytest.fixture(autouse=True)
def event_loop_for_pulumi() -> Iterator[None]:
    """Pulumi's mocked run asks asyncio for the current loop; tests that ran asyncio.run() before this
    one (the inference server's) leave none set in the main thread."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    loop.close()


def test_p5_training_pod_requests_most_of_the_node(planned: Callable[[str], Plan]) -> None:
    """aws-enterprise-prod trains on p5.48xlarge (192 vCPUs, 2048 GiB, 8 GPUs): at least a quarter each."""
    requests = _trainer(_job(planned("aws-enterprise-prod")))["resources"]["requests"]
    assert int(requests["cpu"]) * 4 >= 192
    assert int(requests["memory"].removesuffix("Gi")) * 4 >= 2048
    assert requests["nvidia.com/gpu"] == "8"


def test_stack_config_passes_the_teams_code_and_recipe(tmp_path: Any) -> None:
    config = template("aws-enterprise-prod")
    body = config["ml-platform:platform"]
    body["workloads"]["training"] |= {
        "dataset": "fraud.data:transactions",
        "model": "fraud.model:tabular_mlp",
        "batchSize": 256,
        "lr": 0.0005,
        "patience": 5,
        "cpu": 96,
        "datasetEgressCidrs": ["52.95.0.0/16"],
    }
    plan = plan_config(config, tmp_path, "aws-enterprise-prod")
    trainer = _trainer(_job(plan))
    command = trainer["command"][-1]
    assert trainer["resources"]["requests"]["cpu"] == "96"
    policy = next(
        r for r in plan.resources if r.type.endswith("NetworkPolicy") and r.name.endswith("-digits-001")
    )
    assert {"ipBlock": {"cidr": "52.95.0.0/16"}} in policy.inputs["spec"]["egress"][-1]["to"]
    assert "--dataset=fraud.data:transactions --model=fraud.model:tabular_mlp" in command
    assert "--batch-size=256 --lr=0.0005 --patience=5 --expect-network=Libfabric" in command
