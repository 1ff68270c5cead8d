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

The account also requires secure transfer, what Microsoft documents as making every NFS mount encrypted
(MicrosoftDocs/azure-docs articles/storage/files/encryption-in-transit-for-nfs-shares.md, 2025-06-27,
"Enforce encryption in transit"). A PUT of the file service sets its whole properties and Incremental mode
reapplies every property (learn.microsoft.com/azure/azure-resource-manager/templates/deployment-modes): the
last writer wins, so a second writer of the account's file service fails whatever it sets (review rev35g
A2). Only what ARM certainly deploys counts: a template with a ``condition`` (conditional-resource-
deployment), a ``copy`` (copy-resources: its count may be 0), an ``existing`` symbolic resource
(resource-declaration), an expression, a parameter, a nested deployment or a ``templateLink`` cannot be
judged and fails (A1). The API version is compared as a date, ``-preview`` refused (C1); an NFS share on an
account the plan does not make cannot be judged and fails (C2).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySettings
from mlplatform.cli import app
from mlplatform.plan import Plan

from .conftest import found
from .test_audit import of_type, with_inputs, without

POLICY = "azure-files-nfs-tls-required"
PlanDict = dict[str, Any]
Findings = Callable[[PlanDict], set[tuple[str, str]]]
DEPLOYMENT = of_type("azure-native:resources:Deployment", "-shared-file-service")
ACCOUNT = of_type("azure-native:storage:StorageAccount", "-shared-account")
SHARE = of_type("azure-native:storage:FileShare", "-shared-share")
REFUSED = {(POLICY, "azure-smb-dev-azure-shared-account")}
# What the policy reads, and the providers: the pack judges only these.
READ_TYPES = ("azure-native:storage:", "azure-native:resources:", "pulumi:providers:")


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


def _api(version: str) -> Callable[[dict[str, Any]], None]:
    def edit(inputs: dict[str, Any]) -> None:
        _service(inputs)["apiVersion"] = version

    edit.__name__ = f"_api_{version}"
    return edit


def _on_service(**keys: Any) -> Callable[[dict[str, Any]], None]:
    """The file service resource with ARM's deployment switches ``keys``: ARM may not deploy it."""

    def edit(inputs: dict[str, Any]) -> None:
        _service(inputs).update(keys)

    edit.__name__ = f"_with_{'_'.join(keys)}"
    return edit


def _symbolic_existing(inputs: dict[str, Any]) -> None:
    """Template language 2.0: resources by symbolic name; ``existing`` is a reference, not a deployment."""
    template = inputs["properties"]["template"]
    template["languageVersion"] = "2.0"
    template["resources"] = {"service": {**_service(inputs), "existing": True}}


def _required_by_parameter(inputs: dict[str, Any]) -> None:
    _service(inputs)["properties"]["protocolSettings"]["nfs"]["encryptionInTransit"]["required"] = (
        "[parameters('required')]"
    )
    inputs["properties"]["template"]["parameters"] = {"required": {"type": "bool"}}
    inputs["properties"]["parameters"] = {"required": {"value": False}}


def _name_by_expression(inputs: dict[str, Any]) -> None:
    service = _service(inputs)
    account = service["name"].split("/")[0]
    service["name"] = f"[concat('{account}', '/default')]"


def _template_link(inputs: dict[str, Any]) -> None:
    del inputs["properties"]["template"]
    inputs["properties"]["templateLink"] = {"uri": "https://example.invalid/template.json"}


def _writer(service: dict[str, Any], required: bool, **keys: Any) -> dict[str, Any]:
    written = copy.deepcopy(service)
    written["properties"]["protocolSettings"]["nfs"]["encryptionInTransit"]["required"] = required
    return {**written, **keys}


def _nested_deployment(inputs: dict[str, Any]) -> None:
    """A nested Microsoft.Resources/deployments in the template, after the service, setting it false."""
    template = inputs["properties"]["template"]
    inner = {**template, "resources": [_writer(_service(inputs), False)]}
    template["resources"].append(
        {
            "type": "Microsoft.Resources/deployments",
            "apiVersion": "2022-09-01",
            "name": "later",
            "properties": {"mode": "Incremental", "template": inner},
        }
    )


def _second_writer_in_template(inputs: dict[str, Any]) -> None:
    """A second, plain literal file service resource in the same template setting it false."""
    template = inputs["properties"]["template"]
    template["resources"].append(_writer(_service(inputs), False, dependsOn=[_service(inputs)["name"]]))


def _child_of_account_resource(inputs: dict[str, Any]) -> None:
    """The account itself in the template, carrying a nested child ``fileServices`` setting it false."""
    service = _service(inputs)
    account = service["name"].split("/")[0]
    child = _writer(service, False, type="fileServices", name="default")
    inputs["properties"]["template"]["resources"].append(
        {
            "type": "Microsoft.Storage/storageAccounts",
            "apiVersion": "2025-01-01",
            "name": account,
            "resources": [child],
        }
    )


def _account_in_template(inputs: dict[str, Any]) -> None:
    """A plain PUT of the account itself beside the service, secure transfer off: a second writer of it."""
    account = _service(inputs)["name"].split("/")[0]
    inputs["properties"]["template"]["resources"].append(
        {
            "type": "Microsoft.Storage/storageAccounts",
            "apiVersion": "2025-01-01",
            "name": account,
            "kind": "FileStorage",
            "properties": {"supportsHttpsTrafficOnly": False},
        }
    )


@pytest.mark.parametrize(
    "edit",
    [
        _not_required,
        _complete_mode,
        _older_api,
        _other_account,
        _other_group,
        _api("2025-1-1"),
        _api("9999"),
        _api("2025-01-01-preview"),
        _api("2025-02-30"),
        _on_service(condition=False),
        _on_service(condition="[equals(1, 2)]"),
        _on_service(copy={"name": "services", "count": 0}),
        _symbolic_existing,
        _required_by_parameter,
        _name_by_expression,
        _template_link,
        _nested_deployment,
        _second_writer_in_template,
        _child_of_account_resource,
        _account_in_template,
    ],
    ids=lambda edit: edit.__name__.strip("_"),
)
def test_an_account_whose_file_service_does_not_require_nfs_encryption_fails(
    smb: PlanDict, refused: Findings, edit: Callable[[dict[str, Any]], None]
) -> None:
    assert refused(with_inputs(smb, DEPLOYMENT, edit)) == REFUSED


def test_an_account_without_the_deployment_fails(smb: PlanDict, refused: Findings) -> None:
    assert refused(without(smb, DEPLOYMENT)) == REFUSED


def test_an_nfs_account_without_secure_transfer_fails(smb: PlanDict, refused: Findings) -> None:
    assert refused(with_inputs(smb, ACCOUNT, lambda i: i.update(enableHttpsTrafficOnly=False))) == REFUSED


def _beside(plan: PlanDict, pick: Callable[[dict[str, Any]], bool], resource: dict[str, Any]) -> PlanDict:
    """``plan`` with ``resource`` added, made from the one ``pick`` selects (its URN and name suffixed)."""
    edited = copy.deepcopy(plan)
    [base] = [r for r in edited["resources"] if pick(r)]
    edited["resources"].append(
        {**copy.deepcopy(base), **resource, "urn": f"{base['urn']}-later", "name": f"{base['name']}-later"}
    )
    return edited


def _later_deployment(plan: PlanDict, token: str, required: bool, **inputs: Any) -> PlanDict:
    [base] = [r for r in plan["resources"] if DEPLOYMENT(r)]
    service = _writer(_service(base["inputs"]), required)
    template = {**base["inputs"]["properties"]["template"], "resources": [service]}
    resource_inputs = {
        **base["inputs"],
        "properties": {"mode": "Incremental", "template": template},
        **inputs,
    }
    return _beside(
        plan,
        DEPLOYMENT,
        {"type": token, "inputs": resource_inputs, "dependencies": [*base["dependencies"], base["urn"]]},
    )


@pytest.mark.parametrize("required", [False, True], ids=["false", "true"])
def test_a_second_deployment_writing_the_file_service_fails_whatever_it_sets(
    smb: PlanDict, refused: Findings, required: bool
) -> None:
    assert refused(_later_deployment(smb, "azure-native:resources:Deployment", required)) == REFUSED


def test_a_deployment_at_the_groups_scope_is_a_second_writer(smb: PlanDict, refused: Findings) -> None:
    [account] = [r for r in smb["resources"] if ACCOUNT(r)]
    scope = f"/subscriptions/0/resourceGroups/{account['inputs']['resourceGroupName']}"
    planted = _later_deployment(smb, "azure-native:resources:DeploymentAtScope", False, scope=scope)
    [later] = [r for r in planted["resources"] if r["name"].endswith("-later")]
    del later["inputs"]["resourceGroupName"]
    assert refused(planted) == REFUSED


def test_a_typed_file_service_beside_the_deployment_is_a_second_writer(
    smb: PlanDict, refused: Findings
) -> None:
    [account] = [r for r in smb["resources"] if ACCOUNT(r)]
    typed = {
        "type": "azure-native:storage:FileServiceProperties",
        "inputs": {
            "accountName": account["inputs"]["accountName"],
            "resourceGroupName": account["inputs"]["resourceGroupName"],
            "fileServicesName": "default",
        },
        "dependencies": [account["urn"]],
        "propertyDependencies": {"accountName": [account["urn"]]},
    }
    assert refused(_beside(smb, DEPLOYMENT, typed)) == REFUSED


@pytest.mark.parametrize(
    ("token", "inputs"),
    [
        (
            "azure-native:resources:Resource",
            {
                "resourceProviderNamespace": "Microsoft.Storage",
                "parentResourcePath": "storageAccounts/{account}",
                "resourceType": "fileServices",
                "resourceName": "default",
                "apiVersion": "2025-01-01",
                "properties": {"protocolSettings": {"nfs": {"encryptionInTransit": {"required": False}}}},
            },
        ),
        (
            "azure-native:resources:AzureCliScript",
            {
                "kind": "AzureCLI",
                "azCliVersion": "2.61.0",
                "retentionInterval": "PT1H",
                "scriptContent": "az rest --method put --url .../fileServices/default --body @service.json",
            },
        ),
        ("azure-native:resources:AzurePowerShellScript", {"kind": "AzurePowerShell", "scriptContent": "..."}),
    ],
    ids=["generic-resource", "cli-script", "powershell-script"],
)
def test_a_resource_that_may_put_any_arm_resource_beside_an_nfs_account_cannot_be_judged(
    smb: PlanDict, refused: Findings, token: str, inputs: dict[str, Any]
) -> None:
    """Review rev35h A5: a generic ARM resource or a deployment script may write the file service in a
    form the plan does not show, so an NFS account beside one is refused."""
    [account] = [r for r in smb["resources"] if ACCOUNT(r)]
    group, name = account["inputs"]["resourceGroupName"], account["inputs"]["accountName"]
    filled = {k: v.format(account=name) if isinstance(v, str) else v for k, v in inputs.items()}
    opaque = {
        "type": token,
        "inputs": {"resourceGroupName": group, **filled},
        "dependencies": [account["urn"]],
        "propertyDependencies": {},
    }
    assert refused(_beside(smb, DEPLOYMENT, opaque)) == REFUSED


def test_an_nfs_share_on_an_account_the_stack_does_not_make_cannot_be_judged(
    smb: PlanDict, refused: Findings
) -> None:
    [share] = [r for r in smb["resources"] if SHARE(r)]
    outside = {
        "inputs": {**share["inputs"], "accountName": "someexistingaccount"},
        "dependencies": [],
        "propertyDependencies": {},
    }
    assert refused(_beside(smb, SHARE, outside)) == {(POLICY, f"{share['name']}-later")}


def test_a_template_given_as_json_text_is_read(smb: PlanDict, refused: Findings) -> None:
    assert refused(with_inputs(smb, DEPLOYMENT, _as_json_text)) == set()


def test_the_runbooks_first_step_runs_as_pasted_and_passes_the_shipped_plan(
    planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    """docs/operations.md, "Once: require NFS encryption in transit on the Azure Files account", step 1:
    ``mlplatform check --plan <plan of the running release>.json`` (a stack named beside ``--plan`` is
    refused, review rev35g B1). The shipped azure-smb-dev plan mounts only through the TLS tunnel: exit 0,
    no mandatory finding, and this policy passes."""
    plan_file = tmp_path / "running.json"
    plan_file.write_text(json.dumps(planned("azure-smb-dev").to_dict()))
    json_file = tmp_path / "check.json"
    result = CliRunner().invoke(app, ["check", "--plan", str(plan_file), "--json", str(json_file)])
    assert result.exit_code == 0, result.output
    [report] = json.loads(json_file.read_text())["stacks"]
    assert [v for v in report["violations"] if v["enforcement"] == "mandatory"] == []
    assert POLICY not in {v["policy"] for v in report["violations"]}
