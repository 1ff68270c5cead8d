"""Workload identity: federated credentials pinned to one issuer, subject and audience; least-privilege
blob grants; the service-account annotations the handle carries."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from components.azure.identity import CLIENT_ID_ANNOTATION
from components.azure.roles import BuiltInRole
from components.handle import WORKLOAD_IDENTITIES
from mlplatform.plan import Plan
from tests.components.azure.azure_plan_support import role_assignments, target
from tests.stack_variants import one

PlanFn = Callable[[str], Plan]
FEDERATION = "azure-native:managedidentity:FederatedIdentityCredential"


@pytest.mark.parametrize(
    ("workload", "subject"),
    [
        ("training", "system:serviceaccount:ml-training:trainer"),
        ("inference", "system:serviceaccount:ml-inference:inference"),
    ],
)
def test_federated_credential_is_exact(cloud_plan: PlanFn, workload: str, subject: str) -> None:
    plan = cloud_plan("azure-enterprise-prod")
    credential = one(plan, FEDERATION, f"-{workload}-identity-federation").inputs
    assert credential["subject"] == subject
    assert credential["audiences"] == ["api://AzureADTokenExchange"]
    assert credential["issuer"] == plan.outputs["oidcIssuerUrl"]
    assert f"-{workload}-identity-uai" in credential["resourceName"]


def test_subjects_come_from_the_shared_contract() -> None:
    assert WORKLOAD_IDENTITIES["training"].subject == "system:serviceaccount:ml-training:trainer"
    assert WORKLOAD_IDENTITIES["inference"].subject == "system:serviceaccount:ml-inference:inference"


def test_blob_grants_are_scoped_to_containers(cloud_plan: PlanFn) -> None:
    plan = cloud_plan("azure-smb-dev")
    writers = role_assignments(plan, BuiltInRole.STORAGE_BLOB_DATA_CONTRIBUTOR)
    readers = role_assignments(plan, BuiltInRole.STORAGE_BLOB_DATA_READER)
    assert sorted(target(g["scope"]) for g in writers) == [
        "azure-smb-dev-azure-objects-models",
        # Only the registry's identity may write its container (the server proxies every transfer).
        "azure-smb-dev-azure-objects-registry",
    ]
    # Training reads datasets and never writes them (review I1; pack policy identity-per-role).
    assert sorted(target(g["scope"]) for g in readers) == [
        "azure-smb-dev-azure-objects-datasets",
        "azure-smb-dev-azure-objects-models",
    ]


def test_workload_client_ids_are_exported(cloud_plan: PlanFn) -> None:
    identities = cloud_plan("azure-smb-dev").outputs["workloadIdentities"]
    # The admission verifier reads the image signing key (components/kubernetes/image_verification.py).
    assert sorted(identities) == ["image-verifier", "inference", "registry", "training"]
    assert CLIENT_ID_ANNOTATION == "azure.workload.identity/client-id"


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_the_image_verifier_reads_the_signing_key_and_pulls_from_the_stacks_registry_only(
    cloud_plan: PlanFn, stack: str
) -> None:
    """policy-controller v0.13.1 reads signatures with its pod's own identity (pkg/webhook/registryauth/
    azure/acrhelper.go: azidentity's default credential, this workload identity, exchanged for an ACR
    token): AcrPull on the stack's registry (learn.microsoft.com built-in roles, AcrPull
    7f951dda-4ed3-4680-a7ca-43fe172d538d), beside the signing key's read; nothing else."""
    plan = cloud_plan(stack)
    credential = one(plan, FEDERATION, "-image-verifier-identity-federation").inputs
    assert credential["subject"] == "system:serviceaccount:cosign-system:policy-controller-webhook"
    grants = {
        r.inputs["roleDefinitionId"].rsplit("/", 1)[1]: r.inputs["scope"]
        for r in plan.by_type("azure-native:authorization:RoleAssignment")
        if "-image-verifier-identity-" in r.name
    }
    registry = one(plan, "azure-native:containerregistry:Registry", "-registry-acr").inputs["registryName"]
    assert set(grants) == {BuiltInRole.ACR_PULL, BuiltInRole.KEY_VAULT_CRYPTO_SERVICE_ENCRYPTION_USER}
    # The mocks' ARM id of the registry ends in its name.
    assert grants[BuiltInRole.ACR_PULL].endswith(f"/{registry}")
    assert grants[BuiltInRole.KEY_VAULT_CRYPTO_SERVICE_ENCRYPTION_USER].endswith("/keys/image-signing")
