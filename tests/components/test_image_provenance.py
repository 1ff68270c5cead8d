"""Provenance of what the stack builds (issue 36, review compliance V1, V3): every image resource in every
shipped stack's plan is attested (a Syft SPDX SBOM and a SLSA provenance predicate) and signed with the
stack's own key, by a step that names the digest the push produced; the key signs for the deployer only.

Nothing is built: the plan holds the build's inputs and the step's command. Sources: cosign "Signing with
KMS" (``awskms:///<ARN>``, ``azurekms://<vault>/<key>``), ``cosign attest --type spdxjson|slsaprovenance1``;
AWS KMS developer guide "Key policies" (only the key policy can grant ``kms:Sign`` here: the account root is
not given it, so no IAM policy can); pulumi/pulumi-docker-build#73 (no buildx attestations in the provider).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from fnmatch import fnmatchcase
from typing import Any

import pytest

from components.aws.account import AwsAccount
from components.aws.registry import signing_key_policy
from mlplatform.mocks import ACCOUNT_ID, TENANT_ID, _pushed_image
from mlplatform.plan import Plan, PlannedResource

IMAGE = "docker-build:index:Image"
COMMAND = "command:local:Command"
STACKS = [f"{c}-{t}-{e}" for c in ("aws", "azure") for t in ("smb", "enterprise") for e in ("dev", "prod")]
# The deployer the mocks sign in as (mlplatform/mocks.py getCallerIdentity).
DEPLOYER = f"arn:aws:iam::{ACCOUNT_ID}:user/mock"


def _statements(policy: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for statement in policy["Statement"]:
        actions = statement["Action"]
        yield {**statement, "Action": [actions] if isinstance(actions, str) else actions}


def signers(policy: dict[str, Any]) -> set[str]:
    """The principals a key policy lets sign (an Allow whose actions match ``kms:Sign``, wildcards too)."""
    return {
        str(statement["Principal"]["AWS"])
        for statement in _statements(policy)
        if statement["Effect"] == "Allow" and any(fnmatchcase("kms:Sign", a) for a in statement["Action"])
    }


def _attest_step(plan: Plan, image: PlannedResource) -> PlannedResource:
    [step] = [r for r in plan.resources if r.type == COMMAND and image.urn in r.dependencies]
    return step


@pytest.mark.parametrize("stack", STACKS)
def test_every_built_image_is_attested_and_signed_by_digest_with_the_stacks_key(
    planned: Callable[[str], Plan], stack: str
) -> None:
    plan = planned(stack)
    images = [r for r in plan.resources if r.type == IMAGE]
    assert images, "every shipped stack builds its workload images"
    aws = stack.startswith("aws")
    [key] = [
        r
        for r in plan.resources
        if (r.type == "aws:kms/key:Key" and r.inputs.get("keyUsage") == "SIGN_VERIFY")
        or (r.type == "azure-native:keyvault:Key" and r.inputs["keyName"] == "image-signing")
    ]
    if aws:
        assert key.inputs["customerMasterKeySpec"] == "ECC_NIST_P256"
        key_uri = "awskms:///arn:aws:kms:"
    else:
        assert key.inputs["properties"]["kty"] in ("EC", "EC-HSM")
        assert key.inputs["properties"]["curveName"] == "P-256"
        assert sorted(key.inputs["properties"]["keyOps"]) == ["sign", "verify"]
        key_uri = "azurekms://"
    for image in images:
        step = _attest_step(plan, image)
        digest_ref = _pushed_image(image.inputs)["ref"]  # the Image's `ref` output: <repo>:<tag>@sha256:…
        lines = step.inputs["create"].splitlines()
        assert f"syft scan registry:{digest_ref} --output spdx-json=" in step.inputs["create"]
        cosign = [line for line in lines if line.startswith("cosign ")]
        assert [line.split()[1] for line in cosign] == ["attest", "attest", "verify"]
        assert "--type spdxjson --predicate" in cosign[0] and "sbom.spdx.json" in cosign[0]
        assert "--type slsaprovenance1 --predicate" in cosign[1] and "provenance.json" in cosign[1]
        # The signature: only where none verifies yet, in the legacy format the admission verifier
        # checks with a key (sigstore/policy-controller validator.go: bundles for keyless only).
        verify, sign = cosign[2].split(" || ")
        assert verify.endswith(f" {digest_ref} > /dev/null 2>&1") and sign.startswith("cosign sign ")
        assert "--new-bundle-format=false" in sign and "--registry-referrers-mode" not in sign
        for line in [*cosign[:2], sign]:
            assert line.endswith(f" {digest_ref}"), "signs the pushed digest, never a tag"
            # The stack output operators verify with (docs/images.md) is the key every step signs with.
            assert plan.outputs["imageSigningKey"].startswith(key_uri)
            assert f"--key {plan.outputs['imageSigningKey']} " in line
            assert "--tlog-upload=false" in line
        for line in cosign[:2]:
            assert "--registry-referrers-mode=oci-1-1" in line and "--new-bundle-format " in line
        assert key.urn in step.dependencies, "signs once the key exists"
        # A workload is created only once the image it runs is signed (the admission verifier refuses an
        # unsigned one: components/kubernetes/image_verification.py).
        assert any(step.urn in r.dependencies for r in plan.resources if r.type.startswith("kubernetes:"))
        assert step.inputs["triggers"] == [_pushed_image(image.inputs)["digest"]], "a new digest signs again"
        assert step.inputs["environment"]["COSIGN_EXPERIMENTAL"] == "1"
        # Day 2: the registry token changes on every run; read by the command, it is no input to diff on.
        assert "PASSWORD" not in json.dumps(step.inputs["environment"])
        login = "aws ecr get-login-password --region " if aws else "az acr login --subscription "
        assert lines[1].startswith(f'REGISTRY_PASSWORD="$({login}')
        [predicate] = [shlex.split(line)[2] for line in lines if line.startswith("printf %s ")]
        provenance = json.loads(predicate)
        assert (
            provenance["buildDefinition"]["externalParameters"]["dockerfile"]
            == (image.inputs["dockerfile"]["location"])
        )


@pytest.mark.parametrize("stack", ["aws-smb-dev", "aws-enterprise-prod"])
def test_only_the_deployer_may_sign_with_the_aws_key(planned: Callable[[str], Plan], stack: str) -> None:
    [key] = [
        r
        for r in planned(stack).resources
        if r.type == "aws:kms/key:Key" and r.inputs.get("keyUsage") == "SIGN_VERIFY"
    ]
    assert signers(json.loads(key.inputs["policy"])) == {DEPLOYER}


def test_the_signer_check_catches_a_policy_that_lets_the_account_sign() -> None:
    """Planted: the account root given ``kms:*`` (as the data key's policy does) lets any IAM policy sign."""
    account = AwsAccount(ACCOUNT_ID, "aws", "me-central-1", ("me-central-1a",))
    policy = signing_key_policy(account, DEPLOYER)
    policy["Statement"][0]["Action"] = "kms:*"
    assert signers(policy) == {DEPLOYER, account.root_arn}


def test_where_custodians_are_named_only_they_and_the_deployer_administer_the_signing_key() -> None:
    """Review 35 A2: an unconditioned administrative statement for the account root would let any IAM
    administrator rewrite the key's policy (PutKeyPolicy) and give itself ``kms:Sign`` (AWS KMS developer
    guide, "Default key policy", "Allows key administrators to administer the KMS key": they "can give
    themselves" permissions). The signing key is administered as the data keys are."""
    account = AwsAccount(ACCOUNT_ID, "aws", "me-central-1", ("me-central-1a",))
    custodian = f"arn:aws:iam::{ACCOUNT_ID}:role/ml-key-custodians"
    policy = signing_key_policy(account, DEPLOYER, (DEPLOYER, custodian))
    changes = [s for s in _statements(policy) if any(fnmatchcase("kms:PutKeyPolicy", a) for a in s["Action"])]
    assert [(s["Principal"]["AWS"], s["Condition"]) for s in changes] == [
        (account.root_arn, {"ArnEquals": {"aws:PrincipalArn": [DEPLOYER, custodian]}})
    ]
    assert signers(policy) == {DEPLOYER}
    [verify] = [s for s in _statements(policy) if "kms:Verify" in s["Action"]]
    assert (verify["Principal"]["AWS"], verify.get("Condition")) == (account.root_arn, None)


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_only_the_deployer_holds_a_role_on_the_azure_signing_vault(
    planned: Callable[[str], Plan], stack: str
) -> None:
    """Key Vault RBAC roles that sign are vault-wide here, so the signing key has a vault of its own where
    the deployer alone holds a data-plane role (the stack's key vault grants the AKS KMS identity one)."""
    plan = planned(stack)
    [vault] = [r for r in plan.resources if r.type == "azure-native:keyvault:Vault" and "-signing-" in r.name]
    assert vault.inputs["properties"]["publicNetworkAccess"] == "Disabled"
    grants = [
        r
        for r in plan.resources
        if r.type == "azure-native:authorization:RoleAssignment"
        and vault.urn in r.property_dependencies.get("scope", [])
    ]
    assert [(g.name.endswith("-deployer-crypto-officer"), g.inputs["principalId"]) for g in grants] == [
        (True, TENANT_ID)  # the deployer: the mocks' client config
    ]
