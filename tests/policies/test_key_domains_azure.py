"""Keys per data domain on Azure (issue 35 item 3), both ways, through the real pack over gRPC.

The shipped Azure stacks give each data domain its own Key Vault key (``keyVaultKeys``, as AWS exports
``kmsKeys``), so ``keys-per-domain`` finds nothing; a store pointed at another domain's key is refused with
every store of the merged key; a stack made before the split (the NFS share, the registry's PostgreSQL,
the audit archive and the ``datasets`` container on ``storage-cmk``) keeps that layout with
``storage.onStackKey`` (no store's key or identity changes, no container replaced, no new key) and the
pack says so until it migrates (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.config import PLATFORM_KEY, KeyDomain
from mlplatform.plan import Plan
from tests.stack_variants import cloud_only, plan_config, template

from .conftest import Findings, PlanDict
from .test_audit import of_type, with_inputs

ENTERPRISE, SMB = "azure-enterprise-prod", "azure-smb-dev"
READ_TYPES = (
    "azure-native:containerservice:ManagedCluster",
    "azure-native:dbforpostgresql:Server",
    "azure-native:compute:DiskEncryptionSet",
    "azure-native:containerregistry:Registry",
    "azure-native:storage:StorageAccount",
    "azure-native:storage:EncryptionScope",
    "azure-native:storage:BlobContainer",
    "pulumi:providers:",
)
ACCOUNT = "azure-native:storage:StorageAccount"
PG = "azure-native:dbforpostgresql:Server"
SCOPE = "azure-native:storage:EncryptionScope"
CONTAINER = "azure-native:storage:BlobContainer"
KEPT = ["training-data", "registry-database", "logs", "datasets"]


def _datasets_container(plan: Plan) -> Any:
    (container,) = [r for r in plan.by_type(CONTAINER) if r.inputs["containerName"] == "datasets"]
    return container


def _read_by_policy(plan: Plan) -> PlanDict:
    whole = plan.to_dict()
    return {**whole, "resources": [r for r in whole["resources"] if r["type"].startswith(READ_TYPES)]}


def _account_keys(plan: Plan) -> dict[str, str]:
    return {
        r.name.rsplit("-azure-", 1)[1]: r.inputs["encryption"]["keyVaultProperties"]["keyName"]
        for r in plan.by_type(ACCOUNT)
    }


@pytest.mark.parametrize("stack", [ENTERPRISE, SMB])
def test_shipped_stacks_keep_each_domain_on_its_own_key(
    planned: Callable[[str], Plan], merged: Findings, stack: str
) -> None:
    plan = planned(stack)
    assert merged(_read_by_policy(plan)) == set()
    keys = plan.outputs["keyVaultKeys"]
    assert {"kubernetes-secrets", "node-volumes", "images", "object-data"} <= set(keys)
    assert len(set(keys.values())) == len(keys), keys  # one key per domain
    if stack == ENTERPRISE:
        assert set(keys) == {d.value for d in KeyDomain}
        assert _account_keys(plan) == {
            "objects-account": "storage-cmk",
            "shared-account": "training-data-cmk",
            "audit-account": "logs-cmk",
            # The lifecycle record is object data, as AWS's record bucket (components/azure/record.py).
            "record-account": "storage-cmk",
        }
        (pg,) = plan.by_type(PG)
        assert pg.inputs["dataEncryption"]["primaryKeyURI"].endswith("/keys/registry-database-cmk")
    # The datasets (review rev35f A6): the container's only scope, under the datasets key, versionless
    # ("Create and manage encryption scopes": a key URI without its version follows the key's rotation).
    (scope,) = plan.by_type(SCOPE)
    assert scope.inputs["source"] == "Microsoft.KeyVault"
    assert scope.inputs["keyVaultProperties"]["keyUri"].endswith("/keys/datasets-cmk")
    assert keys["datasets"].endswith("/keys/datasets-cmk")
    container = _datasets_container(plan)
    assert container.inputs["defaultEncryptionScope"] == scope.inputs["encryptionScopeName"]
    assert container.inputs["denyEncryptionScopeOverride"] is True


def test_a_store_on_another_domains_key_is_refused(planned: Callable[[str], Plan], merged: Findings) -> None:
    plan = _read_by_policy(planned(ENTERPRISE))
    (objects,) = [r for r in plan["resources"] if r["name"].endswith("-objects-account")]
    properties = objects["inputs"]["encryption"]["keyVaultProperties"]

    def on_storage_key(inputs: dict[str, Any]) -> None:
        inputs["dataEncryption"]["primaryKeyURI"] = f"{properties['keyVaultUri']}keys/{properties['keyName']}"

    planted = with_inputs(plan, of_type(PG), on_storage_key)
    assert merged(planted) == {
        f"{ENTERPRISE}-azure-registry-pg",
        f"{ENTERPRISE}-azure-objects-account",
        f"{ENTERPRISE}-azure-record-account",
    }


def test_datasets_on_the_object_datas_key_are_refused(
    planned: Callable[[str], Plan], merged: Findings
) -> None:
    """The datasets scope planted on ``storage-cmk`` (the account's key): one key for two domains."""
    plan = _read_by_policy(planned(ENTERPRISE))

    def on_storage_key(inputs: dict[str, Any]) -> None:
        inputs["keyVaultProperties"]["keyUri"] = inputs["keyVaultProperties"]["keyUri"].replace(
            "/keys/datasets-cmk", "/keys/storage-cmk"
        )

    assert merged(with_inputs(plan, of_type(SCOPE), on_storage_key)) == {
        f"{ENTERPRISE}-azure-objects-datasets-scope",
        f"{ENTERPRISE}-azure-objects-account",
        f"{ENTERPRISE}-azure-record-account",
    }


def test_a_stack_made_before_the_split_keeps_its_stores_and_the_pack_says_so(
    tmp_path: Path, planned: Callable[[str], Plan], merged: Findings
) -> None:
    """Day 2: with ``storage.onStackKey`` listing the four domains, the stores name ``storage-cmk`` as they
    did (the NFS account through the storage identity), the ``datasets`` container is the one the stack
    made, with no encryption scope (a container takes one at creation only: changing it replaces the
    container and its data), no new key is made, and the pack refuses the merged key until the stack
    migrates."""
    config = cloud_only(template(ENTERPRISE))
    config[PLATFORM_KEY].setdefault("storage", {})["onStackKey"] = KEPT
    plan = plan_config(config, tmp_path, ENTERPRISE)
    assert set(_account_keys(plan).values()) == {"storage-cmk"}
    (pg,) = plan.by_type(PG)
    assert pg.inputs["dataEncryption"]["primaryKeyURI"].endswith("/keys/storage-cmk")
    identities = {
        r.name.rsplit("-azure-", 1)[1]: r.inputs["encryption"]["encryptionIdentity"]
        for r in plan.by_type(ACCOUNT)
    }
    assert identities["shared-account"] == identities["objects-account"]
    key_names = {r.inputs["keyName"] for r in plan.by_type("azure-native:keyvault:Key")}
    assert not key_names & {"training-data-cmk", "registry-database-cmk", "logs-cmk", "datasets-cmk"}
    assert plan.outputs["keyVaultKeys"]["registry-database"].endswith("/keys/storage-cmk")
    assert plan.outputs["keyVaultKeys"]["datasets"].endswith("/keys/storage-cmk")
    assert plan.by_type(SCOPE) == []
    kept, shipped = _datasets_container(plan), _datasets_container(planned(ENTERPRISE))
    assert kept.urn == shipped.urn
    scoped = ("defaultEncryptionScope", "denyEncryptionScopeOverride")
    assert kept.inputs == {k: v for k, v in shipped.inputs.items() if k not in scoped}
    refused = merged(_read_by_policy(plan))
    assert {
        f"{ENTERPRISE}-azure-registry-pg",
        f"{ENTERPRISE}-azure-shared-account",
        # The kept datasets container: under its account's key, the object data's.
        f"{ENTERPRISE}-azure-objects-datasets",
    } <= refused
    # The unchanged stores against the shipped layout: only the moved ones differ.
    assert _account_keys(planned(ENTERPRISE))["objects-account"] == "storage-cmk"
