"""The model registry's PostgreSQL flexible server on Azure, as planned from the shipped templates.

Sources: pulumi-azure-native ``dbforpostgresql.Server`` docstrings (API 2025-08-01: network, data
encryption, auth config, backup, high availability); "Network with private access (VNet integration)"
(a subnet delegated to Microsoft.DBforPostgreSQL/flexibleServers and a private zone ending in
``.private.postgres.database.azure.com``); "Secure connectivity with TLS and SSL"
(``require_secure_transport``); REFERENCE.md "UAE data residency" (uaenorth pairs with uaecentral).
"""

from __future__ import annotations

from collections.abc import Callable

from mlplatform.plan import Plan
from tests.stack_variants import one

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
