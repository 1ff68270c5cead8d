"""What a real first ``pulumi up`` on Azure refuses that the mocks accept (issue 24, review azure.md A/C).

Each test names the rule and its source, and failed on the code before its fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from components.config import ConfigError, parse_stack_config
from mlplatform.plan import Plan
from tests.components.azure.azure_plan_support import AZURE_STACKS, PLATFORM
from tests.stack_variants import template

PlanFn = Callable[[str], Plan]
VariantFn = Callable[[str, Callable[[dict[str, Any]], None]], Plan]

# "Tag names can't contain these characters: <, >, %, &, \, ?, /" (learn.microsoft.com/azure/
# azure-resource-manager/management/tag-resources#limitations).
_ARM_TAG_NAME_FORBIDDEN = re.compile(r"[<>%&\\?/]")


def _tag_names(value: Any) -> Iterator[str]:
    """Every key of every ``tags`` mapping anywhere in a resource's inputs (top level, agent pool profiles)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "tags" and isinstance(item, Mapping):
                yield from item
            else:
                yield from _tag_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tag_names(item)


@pytest.mark.parametrize("stack", AZURE_STACKS)
def test_no_azure_tag_name_arm_refuses(cloud_plan: PlanFn, stack: str) -> None:
    """A1: ARM answers InvalidTagNameCharacters for a tag name with ``/`` (the creation vault's role tag)."""
    bad = [
        (r.name, name)
        for r in cloud_plan(stack).resources
        if r.type.startswith("azure-native:")
        for name in _tag_names(r.inputs)
        if _ARM_TAG_NAME_FORBIDDEN.search(name)
    ]
    assert bad == []


def test_config_refuses_a_tag_name_arm_refuses() -> None:
    """A1, at the edge: a stack's own ``tags`` reach every resource, so a bad name fails at config time."""
    raw = template("azure-smb-dev")
    raw[PLATFORM]["tags"] = {"team/owner": "vision"}
    with pytest.raises(ConfigError, match=r"ml-platform:platform\.tags\.team/owner: Azure tag names"):
        parse_stack_config(raw, "Pulumi.azure-smb-dev.yaml")
