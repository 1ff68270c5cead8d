"""The objects each judged stack plans, made once per session: the eight shipped templates (the shared
plan cache) and the all-features variants."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from judges.scheduling import NodePool
from mlplatform.judging import cluster_network, managed_kubernetes, node_pools
from mlplatform.plan import Plan, all_stack_targets
from mlplatform.report import kubernetes_objects
from tests.conftest import plan_stack
from tests.stack_variants import ALL_FEATURES, all_features, plan_config

SHIPPED = [target.stack for target in all_stack_targets()]
JUDGED = [*SHIPPED, *ALL_FEATURES]


@dataclass(frozen=True)
class Judged:
    """A planned stack as the judges take it: its Kubernetes objects, the cluster's network and its node
    pools."""

    objects: list[dict[str, Any]]
    network: str
    pools: list[NodePool]
    cluster: str | None


def _judged(plan: Plan) -> Judged:
    objects = kubernetes_objects(plan)
    return Judged(objects, cluster_network(plan), node_pools(plan, objects), managed_kubernetes(plan))


@pytest.fixture(scope="session")
def stack_plan(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Plan]:
    directory = tmp_path_factory.mktemp("all-features")
    cache: dict[str, Plan] = {}

    def get(stack: str) -> Plan:
        if stack not in cache:
            cache[stack] = (
                plan_config(all_features(ALL_FEATURES[stack]), directory, stack, shared=True)
                if stack in ALL_FEATURES
                else plan_stack(stack)
            )
        return cache[stack]

    return get


@pytest.fixture(scope="session")
def judged(stack_plan: Callable[[str], Plan]) -> Callable[[str], Judged]:
    cache: dict[str, Judged] = {}

    def get(stack: str) -> Judged:
        if stack not in cache:
            cache[stack] = _judged(stack_plan(stack))
        return cache[stack]

    return get


@pytest.fixture(scope="session")
def judged_from_json(stack_plan: Callable[[str], Plan]) -> Callable[[str], Judged]:
    """A planned stack as ``mlplatform check --plan`` judges it: written by ``plan --json`` and read back
    (the JSON orders resources as ``Plan.to_dict`` does, not as the program made them)."""
    cache: dict[str, Judged] = {}

    def get(stack: str) -> Judged:
        if stack not in cache:
            text = json.dumps(stack_plan(stack).to_dict())
            cache[stack] = _judged(Plan.from_dict(json.loads(text)))
        return cache[stack]

    return get
