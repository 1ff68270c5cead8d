"""Fixtures for the Azure adapter tests: cloud-only plans of the four shipped Azure templates, cached."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mlplatform.plan import Plan
from tests.components.azure.azure_plan_support import cloud_only, plan_config, template


@pytest.fixture(scope="session")
def azure_plan(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Plan]:
    """``azure_plan("azure-smb-dev")`` → the plan of that shipped template with the in-cluster layer off
    (the Azure resources are the same either way; full plans are checked in test_azure_platform.py)."""
    directory: Path = tmp_path_factory.mktemp("azure-stacks")
    cache: dict[str, Plan] = {}

    def plan(stack: str) -> Plan:
        if stack not in cache:
            cache[stack] = plan_config(cloud_only(template(stack)), directory, stack)
        return cache[stack]

    return plan
