"""Shared fixtures: plans of the real stack templates, made once per test run (tests/once.py shares
them between xdist's workers).

Planning runs the real program under Pulumi's mocks (mlplatform.plan); a template that breaks fails
every test that plans it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from components.config import PLATFORM_KEY
from components.kubernetes import helm_engine
from mlplatform.mocks import ExistingAccount
from mlplatform.plan import Plan, resolve_target, run_plan
from tests import once, reaper, threads
from tests.stack_variants import cloud_only, plan_config, template, with_people


def pytest_configure(config: pytest.Config) -> None:
    reaper.start(config)
    once.start(config)
    threads.share(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    once.stop(config)
    helm_engine.close()  # before the reaper's sweep, which would count Helm's process as left running
    reaper.stop(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules marked ``slow`` first, then the others by their number of tests, most first.

    xdist's ``--dist loadscope`` hands out modules in this order (with ``--no-loadscope-reorder``, as
    ``make test`` runs it): longest first, so the run ends on short modules and neither worker idles
    while the other finishes a training run. xdist's own reordering (most tests first) would put a
    one-test module that trains for a minute last."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = sorted(
        modules.values(), key=lambda tests: (tests[0].get_closest_marker("slow") is None, -len(tests))
    )
    items[:] = [item for tests in order for item in tests]


def plan_stack(stack: str) -> Plan:
    target = resolve_target(stack)
    return once.plan(stack, target.stack_file.read_text(), lambda: run_plan(target))


@pytest.fixture(scope="session")
def planned() -> Callable[[str], Plan]:
    """``planned("aws-smb-dev")`` → the Plan of that shipped stack template (cached)."""
    return plan_stack


@pytest.fixture(scope="session")
def cloud_plan(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Plan]:
    """``cloud_plan("aws-enterprise-prod")`` → the plan of that shipped template with the in-cluster layer
    off (the adapter's resources are the same either way; full plans come from ``planned``), cached."""
    directory: Path = tmp_path_factory.mktemp("cloud-only")
    cache: dict[str, Plan] = {}

    def plan(stack: str) -> Plan:
        if stack not in cache:
            cache[stack] = plan_config(cloud_only(template(stack)), directory, stack, shared=True)
        return cache[stack]

    return plan


@pytest.fixture(scope="session")
def people_plan(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Plan]:
    """``people_plan("aws-enterprise-prod")`` → the whole plan of the template with teams and every
    people's role named (tests/stack_variants.py ``with_people``), cached."""
    directory: Path = tmp_path_factory.mktemp("people")
    cache: dict[str, Plan] = {}

    def plan(stack: str) -> Plan:
        if stack not in cache:
            cache[stack] = plan_config(with_people(stack), directory, stack, shared=True)
        return cache[stack]

    return plan


@pytest.fixture
def variant(tmp_path: Path) -> Callable[..., Plan]:
    """``variant("aws-enterprise-prod", edit)`` → the plan of a cloud-only copy of the template after
    ``edit`` changed its ``ml-platform:platform`` body; ``existing=``: what the account holds already
    (a fresh one by default)."""

    def plan(
        stack: str, edit: Callable[[dict[str, object]], None], existing: ExistingAccount | None = None
    ) -> Plan:
        config = cloud_only(template(stack))
        edit(config[PLATFORM_KEY])
        return plan_config(config, tmp_path, stack, existing=existing)

    return plan
