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
