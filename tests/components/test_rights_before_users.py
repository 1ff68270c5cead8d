"""Rights before their users, in the dependencies ``AnalyzeStack`` sees (registry review A1).

A pod that starts before its cloud identity may act fails its first call: on AWS, IAM answers
``iam:CreateRole`` and ``iam:PutRolePolicy`` / ``iam:AttachRolePolicy`` as separate calls and the role's
ARN exists after the first; on Azure, a federated credential and role assignments are separate ARM
resources, and grants take minutes to reach the services that check them (propagation.py). A Job that
fails its first attempts fails ``pulumi up`` (pulumi-kubernetes awaits Jobs). So every service account
that names a cloud identity waits for that identity's policies, credential and propagated grants
(components/ordering.py); every pod-creating object waits for the service accounts of its batch; the
registry's schema migration waits for its database and, on Azure, the database's Entra administrator.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlplatform.graph import Plan, PlannedResource

SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"


def _upstream(plan: Plan, resource: PlannedResource) -> set[str]:
    """URNs ``resource`` waits for, directly or through what it waits for."""
    by_urn = {r.urn: r for r in plan.resources}
    seen: set[str] = set()
    todo = [resource]
    while todo:
        current = todo.pop()
        direct = set(current.dependencies) | {u for us in current.property_dependencies.values() for u in us}
        for urn in direct - seen:
            seen.add(urn)
            if urn in by_urn:
                todo.append(by_urn[urn])
    return seen


def _service_accounts(plan: Plan) -> list[PlannedResource]:
    return [r for r in plan.resources if r.type == SERVICE_ACCOUNT]


def _identities(plan: Plan, account: PlannedResource, token: str) -> list[PlannedResource]:
    """The cloud identities (resources of type ``token``) the account's annotations name."""
    by_urn = {r.urn: r for r in plan.resources}
    named = account.property_dependencies.get("metadata", [])
    return [by_urn[u] for u in named if u in by_urn and by_urn[u].type == token]


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "aws-smb-dev"])
def test_aws_service_accounts_wait_for_their_roles_policies(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    plan = planned(stack)
    policies = plan.by_type("aws:iam/rolePolicy:RolePolicy")
    checked = 0
    for account in _service_accounts(plan):
        roles = {r.urn for r in _identities(plan, account, "aws:iam/role:Role")}
        if not roles:
            continue
        checked += 1
        own = [p for p in policies if set(p.property_dependencies.get("role", [])) & roles]
        upstream = _upstream(plan, account)
        assert own and all(p.urn in upstream for p in own), account.name
    assert checked >= 3  # training, inference, registry


def test_azure_service_accounts_wait_for_credential_and_propagated_grants(
    planned: Callable[[str], Plan],
) -> None:
    plan = planned("azure-enterprise-prod")
    checked = 0
    for account in _service_accounts(plan):
        for identity in _identities(plan, account, "azure-native:managedidentity:UserAssignedIdentity"):
            checked += 1
            prefix = identity.name.removesuffix("-uai")
            needed = [r for r in plan.resources if r.name in (f"{prefix}-federation", f"{prefix}-propagated")]
            upstream = _upstream(plan, account)
            assert len(needed) == 2 and all(r.urn in upstream for r in needed), account.name
    assert checked >= 3


@pytest.mark.parametrize("stack", ["azure-enterprise-prod", "aws-enterprise-prod"])
def test_pods_wait_for_the_service_accounts_they_name(stack: str, planned: Callable[[str], Plan]) -> None:
    plan = planned(stack)
    accounts = {
        (r.inputs["metadata"].get("namespace"), r.inputs["metadata"]["name"]): r
        for r in _service_accounts(plan)
    }
    checked = 0
    for resource in plan.resources:
        if resource.type not in ("kubernetes:apps/v1:Deployment", "kubernetes:batch/v1:Job"):
            continue
        if "helm.sh/v3:Release$" in resource.urn:  # a chart's objects: Helm applies them, in its order
            continue
        pod = resource.inputs["spec"]["template"]["spec"]
        account = accounts.get((resource.inputs["metadata"].get("namespace"), pod.get("serviceAccountName")))
        if account is None:
            continue
        checked += 1
        assert account.urn in _upstream(plan, resource), resource.name
    assert checked >= 3


def test_azure_registry_migration_waits_for_its_database_and_entra_admin(
    planned: Callable[[str], Plan],
) -> None:
    plan = planned("azure-enterprise-prod")
    [job] = [
        r for r in plan.resources if r.type == "kubernetes:batch/v1:Job" and "registry-migrate" in r.name
    ]
    upstream = _upstream(plan, job)
    for token in (
        "azure-native:dbforpostgresql:Database",
        "azure-native:dbforpostgresql:AdministratorsMicrosoftEntra",
    ):
        [resource] = plan.by_type(token)
        assert resource.urn in upstream, token


def test_azure_flexible_server_operations_run_one_at_a_time(planned: Callable[[str], Plan]) -> None:
    """A flexible server refuses a second concurrent operation with ServerIsBusy
    (Azure/azure-postgresql#134): the TLS parameter, the Entra administrator and the database in turn."""
    plan = planned("azure-enterprise-prod")
    [tls] = plan.by_type("azure-native:dbforpostgresql:Configuration")
    [admin] = plan.by_type("azure-native:dbforpostgresql:AdministratorsMicrosoftEntra")
    [database] = plan.by_type("azure-native:dbforpostgresql:Database")
    assert tls.urn in _upstream(plan, admin) and admin.urn in _upstream(plan, database)
