"""Azure RBAC facts that more than one policy reads, named once (review rev35h A1, A7)."""

from __future__ import annotations

from .subject import Graph, Subject

# Azure built-in roles that assign any role (Azure built-in roles, "Privileged",
# learn.microsoft.com/azure/role-based-access-control/built-in-roles/privileged): User Access Administrator,
# "Lets you manage user access to Azure resources" (``Microsoft.Authorization/*``), and Role Based Access
# Control Administrator, "Manage access to Azure resources by assigning roles using Azure RBAC"
# (``Microsoft.Authorization/roleAssignments/write``). Whoever holds one at a scope can give itself, or
# anyone, any role there, a data role included; every policy that refuses one refuses both.
ROLE_ASSIGNERS = {
    "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9": "User Access Administrator",
    "f58310d9-a9f6-439a-9e8d-f62e7b41a168": "Role Based Access Control Administrator",
}

ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
# A PIM-eligible assignment (pulumi-azure-native 3.29.0 ``authorization/pim_role_eligibility_schedule.py``:
# ``principalId``, ``roleDefinitionId``, ``scope``, as an assignment's): "Eligible assignments require the
# member of the role to perform an action to use the role" (Microsoft Entra PIM, docs/security.md), an
# action the member takes itself, so it holds the role's duty as an active assignment's holder does
# (review rev35h A1). The SDK has no other eligibility resource.
PIM_ELIGIBILITY = "azure-native:authorization:PimRoleEligibilitySchedule"


def role_grants(graph: Graph) -> list[Subject]:
    """Every grant of an Azure role in the plan, active or eligible: what each policy that judges who
    holds a role reads."""
    return graph.of(ROLE_ASSIGNMENT, PIM_ELIGIBILITY)
