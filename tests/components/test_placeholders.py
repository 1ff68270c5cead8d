"""Template placeholders (all-zero image digests, documentation networks, example addresses): a stack
that holds one plans and previews with a warning naming each key, and ``pulumi up`` refuses it before
it creates anything, one line per key (__main__.py). The update runs under the same mocks as a plan,
with ``pulumi.runtime.is_dry_run()`` false, as ``pulumi up`` runs the program."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import PLATFORM_KEY, parse_stack_config, placeholder_problems
from mlplatform.errors import InputError
from mlplatform.mocks import PlanMocks
from mlplatform.plan import Plan, all_stack_targets, resolve_target, run_plan
from tests.stack_variants import plan_config, template

SHIPPED = [t.stack for t in all_stack_targets()]


def _real(value: Any) -> Any:
    """The template with every placeholder replaced by a value a user might write."""
    if isinstance(value, dict):
        return {k: _real(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_real(v) for v in value]
    if isinstance(value, str):
        return value.replace("@example.ae", "@corp.ae").replace("203.0.113.0/24", "198.18.0.0/24")
    return value


def _update(config: dict[str, Any], path: Path) -> Plan:
    """The stack run as ``pulumi up`` runs it, under the plan's mocks."""
    path.write_text(yaml.safe_dump({"config": config}))
    return run_plan(resolve_target(stack_file=path), update=True)


@pytest.mark.parametrize("stack", SHIPPED)
def test_plan_warns_of_each_placeholder_the_shipped_template_holds(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    """What plan prints as warnings is exactly the placeholders, one line per key."""
    expected = placeholder_problems(parse_stack_config(template(stack), f"Pulumi.{stack}.yaml"))
    assert expected, f"{stack} holds no placeholder: the templates ship with an example owner address"
    assert planned(stack).warnings == expected


def test_each_kind_of_placeholder_is_named_by_its_key() -> None:
    config = template("aws-smb-dev")
    body = config[PLATFORM_KEY]
    body["owner"] = "ml-team@example.com"
    body["cluster"]["publicAccessCidrs"] = ["94.200.0.0/16", "198.51.100.7/32"]
    body["workloads"]["inference"]["image"] = "ml-platform/inference@sha256:" + "2" * 64
    lines = placeholder_problems(parse_stack_config(config, "Pulumi.aws-smb-dev.yaml"))
    keys = [line.split(": ")[1] for line in lines]
    assert keys == [
        f"{PLATFORM_KEY}.owner",
        f"{PLATFORM_KEY}.cluster.publicAccessCidrs[1]",
    ]
    assert all(re.match(r"Pulumi\.aws-smb-dev\.yaml: ", line) for line in lines)


@pytest.mark.parametrize("stack", ["aws-smb-dev", "azure-enterprise-prod"])
def test_pulumi_up_refuses_a_placeholder_before_creating_anything(
    stack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[str] = []
    new_resource = PlanMocks.new_resource

    def counted(self: PlanMocks, args: Any) -> Any:
        created.append(args.typ)
        return new_resource(self, args)

    monkeypatch.setattr(PlanMocks, "new_resource", counted)
    config = template(stack)
    expected = placeholder_problems(parse_stack_config(config, f"Pulumi.{stack}.yaml"))
    path = tmp_path / f"Pulumi.{stack}.yaml"
    with pytest.raises(InputError) as refused:
        _update(config, path)
    refusal = " (pulumi up refuses template placeholders)"
    assert refused.value.problems == [line + refusal for line in expected]
    assert created == []
    # The same stack with its placeholders replaced is not refused by the update.
    applied = _update(_real(copy.deepcopy(config)), path)
    assert created and not applied.warnings


def test_a_stack_without_placeholders_plans_without_warnings(tmp_path: Path) -> None:
    assert plan_config(_real(template("aws-smb-dev")), tmp_path, "aws-smb-dev").warnings == []
