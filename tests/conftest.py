"""Shared fixtures: plans of the real stack templates, made once per test session.

Planning runs the real program under Pulumi's mocks (mlplatform.plan); a template that breaks fails
every test that plans it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlplatform.plan import Plan, resolve_target, run_plan

_PLANS: dict[str, Plan] = {}


def plan_stack(stack: str) -> Plan:
    if stack not in _PLANS:
        _PLANS[stack] = run_plan(resolve_target(stack))
    return _PLANS[stack]


@pytest.fixture(scope="session")
def planned() -> Callable[[str], Plan]:
    """``planned("aws-smb-dev")`` → the Plan of that shipped stack template (cached)."""
    return plan_stack
