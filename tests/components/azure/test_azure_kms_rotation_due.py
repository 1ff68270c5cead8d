"""The plan says when the AKS KMS rotation runbook is due (review of issue 38, B7).

AKS KMS holds a versioned key id; the program ignores it after creation, so that only the runbook
(docs/operations.md, "Rotate keys") moves the cluster and rewrites every Secret. Under ``refresh: always``
a preview then knows both the cluster's version and the vault's newest (the key's ``keyUriWithVersion``),
and says in one warning when the cluster is behind: the runbook is due before the cluster's version expires
(components/azure/keys.py ``kms_version_lag``). Offline, the mocks' cluster reports the version it was
given; the planted case reports an older one, as the state holds it after Key Vault rotated.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.azure.keys import kms_version_lag
from mlplatform import mocks
from mlplatform.plan import Plan
from tests.stack_variants import cloud_only, plan_config, template

STACK = "azure-smb-dev"
URI = "https://mlp-kv-x.vault.azure.net/keys/secrets-cmk"
OLD, NEW = "0" * 32, "f" * 32


def _profile(version: str) -> dict[str, Any]:
    return {"azureKeyVaultKms": {"enabled": True, "keyId": f"{URI}/{version}"}}


def test_the_line_names_both_versions_and_the_runbook() -> None:
    line = kms_version_lag(_profile(OLD), f"{URI}/{NEW}")
    assert line is not None and "\n" not in line
    assert line.startswith(f"AKS KMS encrypts Kubernetes Secrets with secrets-cmk version {OLD}; ")
    assert (
        f"the vault's newest is {NEW}: run the KMS rotation runbook (docs/operations.md, 'Rotate keys')"
        in line
    )
    assert "near-expiry event for it fires 30 days before" in line
    assert kms_version_lag(_profile(NEW), f"{URI}/{NEW}") is None
    assert kms_version_lag(None, f"{URI}/{NEW}") is None


def _lag_warnings(plan: Plan) -> list[str]:
    return [w for w in plan.warnings if w.startswith("AKS KMS encrypts Kubernetes Secrets")]


def test_a_cluster_behind_the_vault_is_said_in_the_plan(
    cloud_plan: Callable[[str], Plan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _lag_warnings(cloud_plan(STACK)) == [], "a cluster on the vault's newest version is no warning"
    created = mocks._AZURE_EXTRA["azure-native:containerservice:ManagedCluster"]

    def behind(physical: str, inputs: dict[str, Any]) -> dict[str, Any]:
        kms = inputs["securityProfile"]["azureKeyVaultKms"]
        pinned = {**kms, "keyId": kms["keyId"].rsplit("/", 1)[0] + "/" + OLD}
        return {
            **created(physical, inputs),
            "securityProfile": {**inputs["securityProfile"], "azureKeyVaultKms": pinned},
        }

    monkeypatch.setitem(mocks._AZURE_EXTRA, "azure-native:containerservice:ManagedCluster", behind)
    [line] = _lag_warnings(plan_config(cloud_only(template(STACK)), tmp_path, STACK))
    assert f"secrets-cmk version {OLD}; the vault's newest is " in line
