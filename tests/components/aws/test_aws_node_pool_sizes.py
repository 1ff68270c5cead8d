"""docs/operations.md, "Grow or shrink a node pool", on AWS (review 38 A1): the stack leaves a node group's
desired size to cluster-autoscaler (``ignoreChanges``), so an update sends the refreshed desired size with
the new bounds, and EKS UpdateNodegroupConfig refuses one outside them: "Minimum capacity 3 can't be greater
than desired size 2" (terraform-aws-eks #3521, #3306, #2508; wandb/terraform-aws-wandb #201), "desiredSize
can't be greater than maxSize" (ministryofjustice/cloud-platform-infrastructure #4595). The program reads
the live group (pulumi-aws ``eks.get_node_groups``, ``eks.get_node_group``) and refuses such an edit before
anything is made, naming the command that moves the group; after it, the update sends nothing for it.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components.config import PLATFORM_KEY
from mlplatform.mocks import ExistingAccount, PlanMocks
from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import build_platform, capacity_block, parse, reserved
from tests.components.test_day2_refresh import day2_updates, updates_from
from tests.stack_variants import cloud_only, one, plan_config, template

STACK = "aws-enterprise-prod"
CLUSTER = f"{STACK}-aws"
NG = "aws:eks/nodeGroup:NodeGroup"
# The live groups, named as the provider names a node_group_name_prefix (the prefix and 26 digits).
GROUPS = {"system": "system-20261101120000000000000001", "gpu-efa": "gpu-efa-20261101120000000000000002"}
RESERVATION = "cr-0123456789abcdef0"


def _config(**pools: dict[str, Any]) -> dict[str, Any]:
    """The shipped template, the in-cluster layer off, each named pool edited."""
    config = cloud_only(template(STACK))
    for pool in config[PLATFORM_KEY]["nodePools"]:
        pool.update(pools.get(pool["name"], {}))
    return config


def _account(**scaling: dict[str, int]) -> ExistingAccount:
    """The stack's cluster with its groups as EKS reports them; unnamed pools at their template sizes. It
    holds gpu-efa's Capacity Block (``RESERVATION``, zone 0) too, for the pools that name it."""
    sizes = {p["name"]: p for p in template(STACK)[PLATFORM_KEY]["nodePools"]}
    groups = {}
    for pool, group in GROUPS.items():
        declared = sizes[pool]
        live = {
            "minSize": declared["minSize"],
            "maxSize": declared["maxSize"],
            "desiredSize": declared["minSize"],
        }
        groups[f"{CLUSTER}/{group}"] = {**live, **scaling.get(pool, {})}
    return reserved({RESERVATION: capacity_block()}, ExistingAccount(node_groups=groups))


def _refused(config: dict[str, Any], account: ExistingAccount) -> list[str]:
    """The refusal's lines; nothing of the stack was registered before it."""
    mocks = _Recording(account)
    with pytest.raises(pulumi.RunError) as refused:
        build_platform(parse(config, STACK), mocks)
    assert [t for t in mocks.created if not t.startswith("ml-platform:")] == []
    return str(refused.value).splitlines()


class _Recording(PlanMocks):
    def __init__(self, existing: ExistingAccount) -> None:
        super().__init__(aws_region="me-central-1", azure_location="", existing=existing)
        self.created: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.created.append(args.typ)
        return super().new_resource(args)


_COMMAND = re.compile(
    r"`aws eks update-nodegroup-config --region me-central-1 --cluster-name (\S+) --nodegroup-name (\S+) "
    r"--scaling-config minSize=(\d+),maxSize=(\d+),desiredSize=(\d+)`"
)


def _run(line: str, account: ExistingAccount) -> ExistingAccount:
    """The account after the command the line names: the group's scaling config set as given (EKS
    UpdateNodegroupConfig), the command's own rule checked (min <= desired <= max)."""
    match = _COMMAND.search(line)
    assert match, line
    cluster, group, low, high, desired = match.groups()
    assert int(low) <= int(desired) <= int(high)
    sizes = {"minSize": int(low), "maxSize": int(high), "desiredSize": int(desired)}
    return ExistingAccount(node_groups={**account.node_groups, f"{cluster}/{group}": sizes})


def test_a_new_minimum_above_the_groups_size_is_refused_with_the_command_that_moves_it() -> None:
    """gpu-efa grows from 2..4 to 3..6 while the autoscaler holds it at 2: the update would send
    minSize 3 with desiredSize 2, which EKS refuses. One line names the stack key, the group, and the
    command, whose desired size is the live one clamped into the new bounds (3)."""
    account = _account()
    [line] = _refused(_config(**{"gpu-efa": {"minSize": 3, "maxSize": 6}}), account)
    assert line.startswith(f"{PLATFORM_KEY}.nodePools[2] (gpu-efa): minSize 3 is above the desired size 2 ")
    assert _COMMAND.search(line).groups() == (CLUSTER, GROUPS["gpu-efa"], "3", "6", "3")  # type: ignore[union-attr]


def test_a_new_maximum_below_the_groups_size_is_refused() -> None:
    """The autoscaler holds system at 6; maxSize 4 leaves it out: the command scales the group to 4."""
    account = _account(system={"desiredSize": 6})
    [line] = _refused(_config(system={"maxSize": 4}), account)
    assert "(system): maxSize 4 is below the desired size 6 " in line
    assert _COMMAND.search(line).groups()[2:] == ("3", "4", "4")  # type: ignore[union-attr]


def test_a_group_the_same_edit_replaces_is_refused_too() -> None:
    """Review 38 (second review) C2 took this refusal for a needless step where the group is replaced
    anyway ("an instance-type change, which creates a new group"). But the engine creates the
    replacement from the goal state, in which an ``ignoreChanges`` property holds its old value
    (pulumi/pulumi PR #2657), so the new group would be sent the live desired size 3 with minSize 4."""
    [line] = _refused(_config(system={"instanceType": "m7i.2xlarge", "minSize": 4}), _account())
    assert "(system): minSize 4 is above the desired size 3 " in line


def test_bounds_that_hold_the_groups_size_and_a_new_stack_pass() -> None:
    """A growth whose bounds hold the live size needs nothing by hand; a new stack has no cluster (the
    lookup fails) and nothing to compare."""
    build_platform(
        parse(_config(**{"gpu-efa": {"maxSize": 8}}), STACK),
        PlanMocks("me-central-1", "", existing=_account()),
    )
    build_platform(parse(_config(**{"gpu-efa": {"minSize": 3}}), STACK), PlanMocks("me-central-1", ""))


def test_a_capacity_block_pool_scaled_in_its_window_is_refused_a_maximum_below_its_size() -> None:
    """A Capacity Block pool starts at 0 (minSize 0, no desiredSize) and is scaled by hand inside its
    window (docs/operations.md); a maxSize below that size is refused like any other pool's, and one
    that holds it is not."""
    block = {"capacityReservation": {"id": RESERVATION, "kind": "capacity-block"}, "availabilityZone": 0}
    account = _account(**{"gpu-efa": {"minSize": 0, "maxSize": 4, "desiredSize": 4}})
    [line] = _refused(_config(**{"gpu-efa": {**block, "minSize": 0, "maxSize": 2}}), account)
    assert _COMMAND.search(line).groups()[2:] == ("0", "2", "2")  # type: ignore[union-attr]
    build_platform(
        parse(_config(**{"gpu-efa": {**block, "minSize": 0, "maxSize": 4}}), STACK),
        PlanMocks("me-central-1", "", existing=account),
    )


def test_after_the_command_the_update_sends_nothing_for_the_group(
    tmp_path: Path, cloud_plan: Callable[[str], Plan]
) -> None:
    """The runbook end to end: the refused growth, the command, then the plan again. After the refresh
    the state holds what the command set, and the update the engine would send (ignored paths from
    state: tests/components/test_day2_refresh.py) changes nothing: not the group, not anything else."""
    edit = {"gpu-efa": {"minSize": 3, "maxSize": 6}}
    account = _account()
    [line] = _refused(_config(**edit), account)
    after = _run(line, account)
    second = plan_config(_config(**edit), tmp_path, STACK, existing=after)
    first = copy.deepcopy(cloud_plan(STACK))
    group = one(first, NG, "-gpu-efa-ng")
    # What the refresh reads: EKS's scaling config for the group.
    group.inputs["scalingConfig"] = dict(after.node_groups[f"{CLUSTER}/{GROUPS['gpu-efa']}"])
    updates, _ = day2_updates(first, second)
    assert updates == {}


class _Denied(PlanMocks):
    """An account whose deployer may not list node groups (AccessDeniedException, not a missing cluster)."""

    def __init__(self) -> None:
        super().__init__(aws_region="me-central-1", azure_location="", existing=ExistingAccount())

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if args.token == "aws:eks/getNodeGroups:getNodeGroups":
            return {}, [("clusterName", "listing EKS Node Groups: AccessDeniedException: not authorized")]
        return super().call(args)


def test_a_lookup_refused_for_another_reason_than_a_new_stack_is_a_warning_not_silence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review 38 (second review) C1: the size check cannot run without eks:ListNodegroups; the plan goes
    on, and says what it did not check and which right it needs."""
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *_, **__: warnings.append(str(message)))
    build_platform(parse(_config(**{"gpu-efa": {"minSize": 3, "maxSize": 6}}), STACK), _Denied())
    [warning] = [w for w in warnings if w.startswith("could not list the node groups")]
    assert f"of {CLUSTER} (" in warning and "AccessDeniedException" in warning
    assert "eks:ListNodegroups" in warning


def test_a_capacity_block_pool_grown_in_its_window_and_shrunk_before_its_end_takes_no_update(
    tmp_path: Path,
) -> None:
    """ "Capacity Blocks" in the runbook: the pool is made at 0 nodes; inside the block's window the
    operator scales it (`aws eks update-nodegroup-config --scaling-config desiredSize=4`), and back to 0
    before the window ends. After each, the refresh reads EKS's scaling config, the plan reads the live
    group (its size within the bounds: no refusal), and the update sends nothing (not the group, not
    anything else): the autoscaler's and the operator's desired size is never reset by `pulumi up`."""
    block = {"capacityReservation": {"id": RESERVATION, "kind": "capacity-block"}, "availabilityZone": 0}
    config = _config(**{"gpu-efa": {**block, "minSize": 0, "maxSize": 4}})
    first = plan_config(config, tmp_path, STACK, existing=reserved({RESERVATION: capacity_block()}))
    group = one(first, NG, "-gpu-efa-ng")
    assert group.inputs["scalingConfig"]["desiredSize"] == 0, "a Capacity Block pool is made at 0 nodes"
    for desired in (4, 0):  # grown inside the window, shrunk before its end
        account = _account(**{"gpu-efa": {"minSize": 0, "maxSize": 4, "desiredSize": desired}})
        second = plan_config(config, tmp_path, STACK, existing=account)
        # What the refresh reads: EKS's scaling config for the group, every other resource as made.
        states = {r.urn: r.inputs for r in first.resources}
        states[group.urn] = {
            **group.inputs,
            "scalingConfig": account.node_groups[f"{CLUSTER}/{GROUPS['gpu-efa']}"],
        }
        assert updates_from(states, second) == {}
    # The same grown group without the stack's ignoreChanges: the update would reset it to 0 nodes.
    (kept,) = [r for r in second.resources if r.urn == group.urn]
    planted = dataclasses.replace(
        second,
        resources=[
            *(r for r in second.resources if r is not kept),
            dataclasses.replace(kept, ignore_changes=()),
        ],
    )
    states[group.urn] = {**group.inputs, "scalingConfig": {"minSize": 0, "maxSize": 4, "desiredSize": 4}}
    assert updates_from(states, planted) == {group.urn: ["scalingConfig.desiredSize"]}
