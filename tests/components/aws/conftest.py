"""Fixtures for the AWS adapter tests: cloud-only plans of the four shipped AWS templates, cached."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import cloud_only, plan_config, template


@pytest.fixture(scope="session")
def aws_plan(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Plan]:
    """``aws_plan("aws-enterprise-prod")`` → the plan of that shipped template with the in-cluster layer
    off (the adapter's resources are the same either way; the full plan is tested once per template)."""
    directory: Path = tmp_path_factory.mktemp("aws-stacks")
    cache: dict[str, Plan] = {}

    def plan(stack: str) -> Plan:
        if stack not in cache:
            cache[stack] = plan_config(cloud_only(template(stack)), directory, stack)
        return cache[stack]

    return plan


@pytest.fixture
def variant(tmp_path: Path) -> Callable[[str, Callable[[dict[str, object]], None]], Plan]:
    """``variant("aws-enterprise-prod", edit)`` → the plan of a cloud-only copy of the template after
    ``edit`` changed its ``ml-platform:platform`` body."""

    def plan(stack: str, edit: Callable[[dict[str, object]], None]) -> Plan:
        config = cloud_only(template(stack))
        edit(config["ml-platform:platform"])
        return plan_config(config, tmp_path, stack)

    return plan
