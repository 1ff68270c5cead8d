"""Signature verification at admission (components/kubernetes/image_verification.py), on the shipped
stacks' plans and judged by judges/signatures.py.

Rules and their sources (sigstore/policy-controller v0.13.1, the app of chart 0.10.6):
- ``ClusterImagePolicy`` ``key.kms`` takes cosign's KMS URIs (``awskms://``, ``azurekms://``;
  ``pkg/apis/policy/v1beta1/clusterimagepolicy_validation.go``); a key authority without ``ctlog`` skips
  the transparency log (``pkg/webhook/validator.go`` ``checkOptsFromAuthority``).
- The webhook sees only namespaces labelled ``policy.sigstore.dev/include: "true"`` (README, "Enable
  policy-controller Admission Controller for Namespaces"); an image no policy matches is refused under
  ``no-match-policy: deny`` (``pkg/config/store.go``).
- Globs: ``**`` any characters, ``*`` any but ``/`` (``pkg/apis/glob/glob.go``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from components.handle import IMAGE_VERIFIER
from components.kubernetes.image_admission import LABEL
from components.kubernetes.image_verification import INCLUDE_LABEL, POLICY, signature_policy
from judges.kube import pods
from judges.signatures import CLOUD_IDENTITY, POLICY_IDENTITY, WEBHOOK, glob_pattern, judge_signatures
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects

STACKS = ["aws-smb-dev", "azure-enterprise-prod"]


@pytest.mark.parametrize("stack", STACKS)
def test_the_stack_verifies_its_images_against_its_own_signing_key(
    planned: Callable[[str], Plan], stack: str
) -> None:
    plan = planned(stack)
    objects = kubernetes_objects(plan)
    [policy] = [o for o in objects if o["kind"] == "ClusterImagePolicy"]
    assert policy["metadata"]["name"] == POLICY and policy["spec"]["mode"] == "enforce"
    # The key operators verify with (stack output imageSigningKey) is the one admission verifies with.
    assert policy["spec"]["authorities"] == [
        {"name": "stack-signing-key", "key": {"kms": plan.outputs["imageSigningKey"]}}
    ]
    [glob] = [g["glob"] for g in policy["spec"]["images"]]
    # Every namespace the image policy denies in is one the verifier's webhook sees; no other.
    namespaces = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objects if o["kind"] == "Namespace"}
    guarded = {n for n, labels in namespaces.items() if labels[LABEL] == "deny"}
    # Every image those namespaces run lies under the policy's glob.
    images = {str(c["image"]) for pod in pods(objects) if pod.namespace in guarded for c in pod.containers()}
    assert images and all(glob_pattern(glob).match(i) for i in images), images
    assert guarded and guarded == {
        n for n, labels in namespaces.items() if labels.get(INCLUDE_LABEL) == "true"
    }
    webhooks = [
        w
        for o in objects
        if o["kind"] == "ValidatingWebhookConfiguration"
        for w in o["webhooks"]
        if w["name"] == WEBHOOK
    ]
    assert [w["failurePolicy"] for w in webhooks] == ["Fail"]
    assert judge_signatures(objects) == []


def test_the_policy_refuses_a_key_cosign_cannot_name() -> None:
    with pytest.raises(ValueError, match="not a cosign KMS key"):
        signature_policy("example.azurecr.io", "https://vault.example/keys/image-signing")


@pytest.mark.parametrize(
    ("glob", "image", "matches"),
    [
        ("r.example/stack/**", "r.example/stack/ml-platform/trainer:abc@sha256:" + "0" * 64, True),
        ("r.example/stack/*", "r.example/stack/ml-platform/trainer", False),
        ("r.example/stack/**", "r.example/stackX/trainer", False),
        ("r.example/stack/**", "rXexample/stack/trainer", False),
    ],
)
def test_globs_match_as_policy_controller_compiles_them(glob: str, image: str, matches: bool) -> None:
    assert bool(glob_pattern(glob).match(image)) is matches


def test_on_aws_the_webhook_reads_the_signing_keys_public_half_and_no_other_key(
    planned: Callable[[str], Plan],
) -> None:
    """IRSA (EKS user guide, "IAM roles for service accounts"): the role trusts exactly the webhook's
    account and may GetPublicKey/DescribeKey on the stack's signing key only (AWS KMS API reference,
    GetPublicKey: cosign's awskms verifier reads the public key and verifies locally); its other two
    statements read the registry (tests/components/aws/test_aws_iam.py)."""
    plan = planned("aws-smb-dev")
    [role] = [
        r for r in plan.resources if r.type == "aws:iam/role:Role" and r.name.endswith("-image-verifier")
    ]
    assert f"system:serviceaccount:{IMAGE_VERIFIER.namespace}:{IMAGE_VERIFIER.service_account}" in str(
        role.inputs["assumeRolePolicy"]
    )
    [policy] = [
        r
        for r in plan.resources
        if r.type == "aws:iam/rolePolicy:RolePolicy" and r.name.endswith("-image-verifier")
    ]
    statement, *registry = json.loads(policy.inputs["policy"])["Statement"]
    assert [s["Sid"] for s in registry] == ["LogInToRegistry", "PullStackRepositories"]
    assert statement["Action"] == ["kms:GetPublicKey", "kms:DescribeKey"]
    assert plan.outputs["imageSigningKey"] == f"awskms:///{statement['Resource']}"
    [account] = [
        o
        for o in kubernetes_objects(plan)
        if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == IMAGE_VERIFIER.service_account
    ]
    assert account["metadata"]["namespace"] == IMAGE_VERIFIER.namespace
    assert (
        account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
        .split("/")[-1]
        .startswith(str(role.inputs.get("namePrefix", "")))
    )


def test_on_azure_the_webhook_reads_the_signing_key_through_its_workload_identity(
    planned: Callable[[str], Plan],
) -> None:
    """AKS workload identity (learn.microsoft.com/azure/aks/workload-identity-deploy-cluster): a federated
    credential for exactly the webhook's account, the client-id annotation on it and the
    ``azure.workload.identity/use`` label on its pods, as a string; the grant on the one signing key."""
    plan = planned("azure-enterprise-prod")
    [credential] = [
        r
        for r in plan.resources
        if r.type == "azure-native:managedidentity:FederatedIdentityCredential"
        and "-image-verifier-" in r.name
    ]
    assert credential.inputs["subject"] == IMAGE_VERIFIER.subject
    [grant] = [
        r
        for r in plan.resources
        if r.type == "azure-native:authorization:RoleAssignment"
        and r.name.endswith("-image-verifier-identity-signing-key-read")
    ]
    assert grant.inputs["scope"].endswith("/keys/image-signing")
    # Key Vault Crypto Service Encryption User: key read (its wrap/unwrap do not apply to a sign/verify key).
    assert grant.inputs["roleDefinitionId"].endswith("/e147488a-f6f5-4113-8e2d-b22465e65bf6")
    objects = kubernetes_objects(plan)
    [account] = [
        o
        for o in objects
        if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == IMAGE_VERIFIER.service_account
    ]
    assert account["metadata"]["annotations"]["azure.workload.identity/client-id"]
    [webhook] = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["namespace"] == IMAGE_VERIFIER.namespace
    ]
    assert webhook["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"] == "true"


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objects if (o["kind"], o["metadata"]["name"]) == (kind, name)]
    return found


def _no_account_annotation(objects: list[dict[str, Any]], annotation: str) -> None:
    del _named(objects, "ServiceAccount", IMAGE_VERIFIER.service_account)["metadata"]["annotations"][
        annotation
    ]


def _no_pod_label(objects: list[dict[str, Any]], _: str) -> None:
    webhook = _named(objects, "Deployment", IMAGE_VERIFIER.service_account)
    del webhook["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"]


@pytest.mark.parametrize(
    ("stack", "cluster", "plant", "says"),
    [
        (
            "aws-smb-dev",
            "eks",
            _no_account_annotation,
            "annotation eks.amazonaws.com/role-arn on ServiceAccount",
        ),
        (
            "azure-enterprise-prod",
            "aks",
            _no_account_annotation,
            "annotation azure.workload.identity/client-id on ServiceAccount",
        ),
        ("azure-enterprise-prod", "aks", _no_pod_label, "label azure.workload.identity/use: 'true'"),
    ],
)
def test_a_verifier_whose_pods_carry_no_cloud_identity_fails(
    planned: Callable[[str], Plan],
    stack: str,
    cluster: str,
    plant: Callable[[list[dict[str, Any]], str], None],
    says: str,
) -> None:
    """policy-controller reads signatures as its own pod (registryauth.go): on EKS through IRSA (the
    account's role-arn annotation, EKS user guide "IAM roles for service accounts"), on AKS through
    workload identity (the account's client-id annotation and the pod's use label: AKS workload identity,
    "Service account labels and annotations"). Without it the judge finds the webhook's Deployment."""
    objects = copy.deepcopy(kubernetes_objects(planned(stack)))
    assert [f for f in judge_signatures(objects, cluster=cluster) if f.policy == POLICY_IDENTITY] == []
    plant(objects, CLOUD_IDENTITY[cluster][0])
    found = [f for f in judge_signatures(objects, cluster=cluster) if f.policy == POLICY_IDENTITY]
    assert [(str(f.subject), f.mandatory) for f in found] == [
        (f"Deployment {IMAGE_VERIFIER.namespace}/{IMAGE_VERIFIER.service_account}", True)
    ]
    assert says in found[0].message
    # Plain manifests (no managed cluster known): not judged.
    assert [f for f in judge_signatures(objects) if f.policy == POLICY_IDENTITY] == []
