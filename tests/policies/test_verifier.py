"""The admission signature verifier can read the registry it verifies (``image-verifier-reads-registry``,
policies/mlplatform_policies/verifier.py), both ways, through the real pack over gRPC.

policy-controller v0.13.1 reads each signature with its pod's own identity
(pkg/webhook/registryauth/registryauth.go: amazon-ecr-credential-helper on EKS, its ACR helper on
azidentity's default credential on AKS): without the right to read, every lookup fails and the
fail-closed webhook refuses every pod it guards. The shipped stacks pass; with the grant removed (ECR's
login, the pull on the stack's repositories; AcrPull on the registry) or narrowed to part of what the
ClusterImagePolicy verifies, the policy fails on that ClusterImagePolicy. ECR: AWS Service Authorization
Reference (GetAuthorizationToken has no resource type; BatchGetImage and GetDownloadUrlForLayer take the
repository); ACR: Azure built-in roles, AcrPull.
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
from .test_audit import of_type, with_inputs, without, without_statements

POLICY = "image-verifier-reads-registry"
PlanDict = dict[str, Any]
Findings = Callable[[PlanDict], set[tuple[str, str]]]
IMAGE_POLICY = "clusterimagepolicy-ml-platform-signed-images"
# What the policy reads, and the providers: the pack judges only these.
READ_TYPES = (
    "aws:iam/",
    "azure-native:managedidentity:",
    "azure-native:authorization:RoleAssignment",
    "azure-native:containerregistry:Registry",
    "kubernetes:policy.sigstore.dev/",
    "pulumi:providers:",
)


@pytest.fixture(scope="module")
def reads(pack: PolicyPackSession, defaults: dict[str, PolicySettings]) -> Findings:
    def judge(plan: PlanDict) -> set[tuple[str, str]]:
        return {(p, name) for p, name in found(pack.judge(plan, defaults)) if p == POLICY}

    return judge


def _read_by_policy(plan: Plan) -> PlanDict:
    whole = plan.to_dict()
    return {**whole, "resources": [r for r in whole["resources"] if r["type"].startswith(READ_TYPES)]}


@pytest.fixture(scope="module")
def aws_plan(planned: Callable[[str], Plan]) -> PlanDict:
    return _read_by_policy(planned("aws-enterprise-prod"))


@pytest.fixture(scope="module")
def azure_plan(planned: Callable[[str], Plan]) -> PlanDict:
    return _read_by_policy(planned("azure-enterprise-prod"))


def test_the_shipped_stacks_verifier_reads_their_registry(
    aws_plan: PlanDict, azure_plan: PlanDict, reads: Findings
) -> None:
    assert reads(aws_plan) == set()
    assert reads(azure_plan) == set()


def _mirror_only(inputs: dict[str, Any]) -> None:
    """The pull narrowed to the mirror's repositories: the stack's own images' signatures unread."""
    document = json.loads(inputs["policy"])
    [pull] = [s for s in document["Statement"] if s.get("Sid") == "PullStackRepositories"]
    pull["Resource"] = pull["Resource"].removesuffix("/*") + "/mirror/*"
    inputs["policy"] = json.dumps(document)


def _not(sid: str) -> Callable[[dict[str, Any]], bool]:
    return lambda statement: statement.get("Sid") != sid


VERIFIER_POLICY = of_type("aws:iam/rolePolicy:RolePolicy", "-identities-image-verifier")
AWS_CASES: list[tuple[str, Callable[[PlanDict], PlanDict]]] = [
    (
        "pull-removed",
        lambda p: with_inputs(p, VERIFIER_POLICY, without_statements(_not("PullStackRepositories"))),
    ),
    ("login-removed", lambda p: with_inputs(p, VERIFIER_POLICY, without_statements(_not("LogInToRegistry")))),
    ("pull-on-the-mirror-only", lambda p: with_inputs(p, VERIFIER_POLICY, _mirror_only)),
    (
        "no-role-for-the-verifier",
        lambda p: without(p, of_type("aws:iam/role:Role", "-identities-image-verifier")),
    ),
]


@pytest.mark.parametrize(("case", "plant"), AWS_CASES, ids=[c[0] for c in AWS_CASES])
def test_an_ecr_verifier_that_cannot_read_the_stacks_repositories_fails(
    case: str, plant: Callable[[PlanDict], PlanDict], aws_plan: PlanDict, reads: Findings
) -> None:
    assert reads(plant(aws_plan)) == {(POLICY, IMAGE_POLICY)}, case


def test_an_acr_verifier_without_acrpull_on_the_registry_fails(azure_plan: PlanDict, reads: Findings) -> None:
    """The grant removed: the kubelet's AcrPull on the same registry does not count."""
    pull = of_type("azure-native:authorization:RoleAssignment", "-image-verifier-identity-registry-pull")
    assert reads(without(azure_plan, pull)) == {(POLICY, IMAGE_POLICY)}
