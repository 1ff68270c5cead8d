"""Helpers for the Azure adapter tests: plan the shipped Azure templates (or edited copies) and look
resources up in the plan by type and logical-name suffix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlplatform import plan as plan_module
from mlplatform.plan import REPO_ROOT, Plan, PlannedResource, resolve_target, run_plan

AZURE_STACKS = ("azure-smb-dev", "azure-smb-prod", "azure-enterprise-dev", "azure-enterprise-prod")
PLATFORM = "ml-platform:platform"


def template(stack: str) -> dict[str, Any]:
    """The ``config`` map of a shipped stack template."""
    document = yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    config: dict[str, Any] = document["config"]
    return config


def cloud_only(config: dict[str, Any]) -> dict[str, Any]:
    """A copy with the in-cluster layer off: the adapter's resources are the same either way."""
    edited = copy.deepcopy(config)
    edited[PLATFORM].setdefault("kubernetes", {})["enabled"] = False
    return edited


def plan_config(config: dict[str, Any], directory: Path, stack: str) -> Plan:
    stack_file = directory / f"Pulumi.{stack}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": config}))
    return run_plan(resolve_target(stack_file=stack_file))


def of_type(plan: Plan, token: str) -> list[PlannedResource]:
    return [r for r in plan.resources if r.type == token]


def named(plan: Plan, token: str, suffix: str) -> PlannedResource:
    """The one resource of ``token`` whose logical name ends with ``suffix``."""
    matches = [r for r in of_type(plan, token) if r.name.endswith(suffix)]
    assert len(matches) == 1, f"{len(matches)} {token} ending in {suffix!r}: {[r.name for r in matches]}"
    return matches[0]


def target(resource_id: str) -> str:
    """The logical name of the resource an ARM id points at (the mocks append an 8-character hash)."""
    return resource_id.rsplit("/", 1)[1][:-8]


def role_assignments(plan: Plan, role_guid: str) -> list[dict[str, Any]]:
    return [
        r.inputs
        for r in of_type(plan, "azure-native:authorization:RoleAssignment")
        if r.inputs["roleDefinitionId"].endswith(f"/roleDefinitions/{role_guid}")
    ]


def record_protect(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Record each registration's ``protect`` flag, which the plan's resource records leave out."""
    protected: dict[str, bool] = {}
    original = plan_module._CaptureMonitor.RegisterResource

    def spy(self: Any, request: Any) -> Any:
        protected[request.name] = bool(request.protect)
        return original(self, request)

    monkeypatch.setattr(plan_module._CaptureMonitor, "RegisterResource", spy)
    return protected
