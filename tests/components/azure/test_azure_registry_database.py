"""The model registry's PostgreSQL flexible server on Azure, as planned from the shipped templates.

Sources: pulumi-azure-native ``dbforpostgresql.Server`` docstrings (API 2025-08-01: network, data
encryption, auth config, backup, high availability); "Network with private access (VNet integration)"
(a subnet delegated to Microsoft.DBforPostgreSQL/flexibleServers and a private zone ending in
``.private.postgres.database.azure.com``); "Secure connectivity with TLS and SSL"
(``require_secure_transport``); REFERENCE.md "UAE data residency" (uaenorth pairs with uaecentral).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from components.config import PLATFORM_KEY, ConfigError, parse_stack_config
from mlplatform.plan import Plan
from tests.stack_variants import one, template

SERVER = "azure-native:dbforpostgresql:Server"
PlanFn = Callable[[str], Plan]


def test_smb_keeps_sqlite_and_builds_no_server(cloud_plan: PlanFn) -> None:
    assert cloud_plan("azure-smb-dev").by_type(SERVER) == []


def test_enterprise_server_is_private_tls_only_and_under_the_stack_key(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-enterprise-prod")
    server = one(plan, SERVER, "-registry-pg")
    inputs = server.inputs
    # Private access: the delegated subnet and the linked private zone, both set at creation.
    subnet = one(plan, "azure-native:network:Subnet", "-database-subnet").inputs
    assert subnet["delegations"][0]["serviceName"] == "Microsoft.DBforPostgreSQL/flexibleServers"
    assert inputs["network"]["publicNetworkAccess"] == "Disabled"
    zone = one(plan, "azure-native:privatedns:PrivateZone", "-registry-pg-dns").inputs
    assert zone["privateZoneName"] == f"{inputs['serverName']}.private.postgres.database.azure.com"
    link = one(plan, "azure-native:privatedns:VirtualNetworkLink", "-registry-pg-dns-link")
    assert link.urn in server.dependencies
    # TLS enforced by the server parameter.
    tls = one(plan, "azure-native:dbforpostgresql:Configuration", "-registry-pg-tls").inputs
    assert (tls["configurationName"], tls["value"]) == ("require_secure_transport", "ON")
    # The customer key, versionless, through a user-assigned identity whose grant has propagated.
    encryption = inputs["dataEncryption"]
    assert encryption["type"] == "AzureKeyVault"
    assert "-registry-pg-encryption-uai" in encryption["primaryUserAssignedIdentityId"]
    assert inputs["identity"]["type"] == "UserAssigned"
    assert any(
        "dynamic:Resource::" in dep and dep.endswith("-registry-pg-encryption-propagated")
        for dep in server.dependencies
    ), server.dependencies
    # No password: Entra only.
    assert inputs["authConfig"]["passwordAuth"] == "Disabled"
    assert inputs["authConfig"]["activeDirectoryAuth"] == "Enabled"
    assert "administratorLoginPassword" not in inputs
    # Backups in the region, high availability across zones in uaenorth, protected in prod.
    assert inputs["backup"] == {"backupRetentionDays": 14, "geoRedundantBackup": "Disabled"}
    assert inputs["location"] == "uaenorth"
    assert inputs["highAvailability"]["mode"] == "ZoneRedundant"
    assert server.protect


def test_dev_server_has_no_standby_and_is_not_protected(cloud_plan: PlanFn) -> None:
    server = one(cloud_plan("azure-enterprise-dev"), SERVER, "-registry-pg")
    assert server.inputs["highAvailability"]["mode"] == "Disabled"
    assert server.inputs["backup"]["backupRetentionDays"] == 7
    assert not server.protect


GROUP = {"objectId": "0b6c6f4e-8a7d-4c3b-9b2a-5f1e2d3c4b5a", "name": "ml-platform-registry-dba"}


def test_an_entra_group_is_the_humans_second_administrator(
    variant: Callable[[str, Callable[[dict[str, object]], None]], Plan],
) -> None:
    """Azure review D1: the server takes Entra logins only and its one administrator was the registry's
    workload identity, so no person could log in; ``workloads.registry.databaseAdmins`` adds a group
    ("you can configure multiple Microsoft Entra administrators", concepts-azure-ad-authentication),
    created after the first (the server takes one operation at a time) and before the database."""

    def edit(platform: dict[str, object]) -> None:
        workloads = platform.setdefault("workloads", {})
        assert isinstance(workloads, dict)
        workloads.setdefault("registry", {})["databaseAdmins"] = GROUP

    plan = variant("azure-enterprise-dev", edit)
    admins = plan.by_type("azure-native:dbforpostgresql:AdministratorsMicrosoftEntra")
    assert sorted(a.inputs["principalType"] for a in admins) == ["Group", "ServicePrincipal"]
    (group,) = [a for a in admins if a.inputs["principalType"] == "Group"]
    (identity,) = [a for a in admins if a.inputs["principalType"] == "ServicePrincipal"]
    assert (group.inputs["objectId"], group.inputs["principalName"]) == (GROUP["objectId"], GROUP["name"])
    assert identity.urn in group.dependencies
    (database,) = plan.by_type("azure-native:dbforpostgresql:Database")
    assert group.urn in database.dependencies


@pytest.mark.parametrize("stack", ["azure-smb-dev", "aws-enterprise-dev"])
def test_a_database_admin_group_without_the_azure_database_is_refused_naming_the_key(stack: str) -> None:
    config = copy.deepcopy(template(stack))
    config[PLATFORM_KEY].setdefault("workloads", {}).setdefault("registry", {})["databaseAdmins"] = GROUP
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(config, f"Pulumi.{stack}.yaml")
    [line] = raised.value.problems
    assert "workloads.registry.databaseAdmins: an Entra group administers" in line, line
