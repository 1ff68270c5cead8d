"""Helpers for the Azure adapter tests: plan the shipped Azure templates (or edited copies) and look
resources up in the plan by type and logical-name suffix."""

from __future__ import annotations

from typing import Any

from mlplatform.plan import Plan

AZURE_STACKS = ("azure-smb-dev", "azure-smb-prod", "azure-enterprise-dev", "azure-enterprise-prod")
PLATFORM = "ml-platform:platform"


def target(resource_id: str) -> str:
    """The logical name of the resource an ARM id points at (the mocks append an 8-character hash)."""
    return resource_id.rsplit("/", 1)[1][:-8]


def role_assignments(plan: Plan, role_guid: str) -> list[dict[str, Any]]:
    return [
        r.inputs
        for r in plan.by_type("azure-native:authorization:RoleAssignment")
        if r.inputs["roleDefinitionId"].endswith(f"/roleDefinitions/{role_guid}")
    ]
