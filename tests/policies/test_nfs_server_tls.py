"""An Azure Files account with an NFS share requires encryption in transit server-side
(``azure-files-nfs-tls-required``, policies/mlplatform_policies/stack.py), both ways, through the real
pack over gRPC.

The file service's ``protocolSettings.nfs.encryptionInTransit.required`` (storage API 2025-01-01:
Azure/bicep-types-az generated/storage/microsoft.storage/2025-01-01/types.md, ``ProtocolSettings.nfs`` →
``NfsSetting.encryptionInTransit`` → ``EncryptionInTransit.required: bool``; Azure/azure-rest-api-specs
Microsoft.Storage stable/2025-01-01 examples/FileServicesPut_EncryptionInTransitRequired.json) makes the
server refuse a clear NFS mount, whatever the client asks. The shipped Azure stacks set it in an
Incremental ARM template deployment and pass; with the setting false, the deployment removed, or a
deployment that does not reach that account's file service, the account fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySettings
from mlplatform.plan import Plan

from .conftest import found
from .test_audit import of_type, with_inputs, without

POLICY = "azure-files-nfs-tls-required"
PlanDict = dict[str, Any]
Findings = Callable[[PlanDict], set[tuple[str, str]]]
DEPLOYMENT = of_type("azure-native:resources:Deployment", "-shared-file-service")
# What the policy reads, and the providers: the pack judges only these.
READ_TYPES = ("azure-native:storage:", "azure-native:resources:Deployment", "pulumi:providers:")


@pytest.fixture(scope="module")
def refused(pack: PolicyPackSession, defaults: dict[str, PolicySettings]) -> Findings:
    def judge(plan: PlanDict) -> set[tuple[str, str]]:
        return {(p, name) for p, name in found(pack.judge(plan, defaults)) if p == POLICY}

    return judge


def _read_by_policy(plan: Plan) -> PlanDict:
    whole = plan.to_dict()
    return {**whole, "resources": [r for r in whole["resources"] if r["type"].startswith(READ_TYPES)]}


@pytest.fixture(scope="module")
def smb(cloud_plan: Callable[[str], Plan]) -> PlanDict:
    return _read_by_policy(cloud_plan("azure-smb-dev"))


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_the_shipped_stacks_accounts_refuse_clear_nfs_mounts(
    cloud_plan: Callable[[str], Plan], refused: Findings, stack: str
) -> None:
    assert refused(_read_by_policy(cloud_plan(stack))) == set()


def _service(inputs: dict[str, Any]) -> dict[str, Any]:
    [service] = inputs["properties"]["template"]["resources"]
    result: dict[str, Any] = service
    return result


def _not_required(inputs: dict[str, Any]) -> None:
    _service(inputs)["properties"]["protocolSettings"]["nfs"]["encryptionInTransit"]["required"] = False


def _complete_mode(inputs: dict[str, Any]) -> None:
    inputs["properties"]["mode"] = "Complete"


def _older_api(inputs: dict[str, Any]) -> None:
    _service(inputs)["apiVersion"] = "2024-01-01"


def _other_account(inputs: dict[str, Any]) -> None:
    _service(inputs)["name"] = "someoneelse/default"


def _other_group(inputs: dict[str, Any]) -> None:
    inputs["resourceGroupName"] = "another-group"


def _as_json_text(inputs: dict[str, Any]) -> None:
    """The SDK takes a template as an object or as JSON text ("It can be a JObject or well-formed JSON
    string", DeploymentPropertiesArgs.template): text is read alike."""
    inputs["properties"]["template"] = json.dumps(inputs["properties"]["template"])


@pytest.mark.parametrize(
    "edit",
    [_not_required, _complete_mode, _older_api, _other_account, _other_group],
    ids=lambda edit: edit.__name__,
)
def test_an_account_whose_file_service_does_not_require_nfs_encryption_fails(
    smb: PlanDict, refused: Findings, edit: Callable[[dict[str, Any]], None]
) -> None:
    planted = with_inputs(smb, DEPLOYMENT, edit)
    assert refused(planted) == {(POLICY, "azure-smb-dev-azure-shared-account")}


def test_an_account_without_the_deployment_fails(smb: PlanDict, refused: Findings) -> None:
    assert refused(without(smb, DEPLOYMENT)) == {(POLICY, "azure-smb-dev-azure-shared-account")}


def test_a_template_given_as_json_text_is_read(smb: PlanDict, refused: Findings) -> None:
    assert refused(with_inputs(smb, DEPLOYMENT, _as_json_text)) == set()
