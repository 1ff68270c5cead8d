"""Separation of duties (issue 35; review rows S1, I1, I2, E2), both ways, through the real pack over gRPC.

The shipped enterprise stacks pass ``identity-per-role`` and ``key-duties-separated``; a plan with one
merge planted in fails with the policy and the resource that carries it: an IRSA role or Azure workload
identity trusted by two service accounts, a grant beyond a role's set (a write where it only reads, a
wildcard action, Blob Data Contributor on datasets for training), a registry user listed twice or given
more than its role, a workload holding the registry admin's password, a key policy giving ``kms:*`` to
a role, or to the account root, or letting the root use the key or create grants with no condition (AWS
KMS developer guide, "Default key policy": "Allows key administrators to administer the KMS key",
"Allows key users to use the KMS key", with AWS services by ``kms:GrantIsForAWSResource``), and a role's
policy using a key of a domain it does not own (``key-use-within-domain``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySettings
from mlplatform.plan import Plan

from .conftest import found
from .test_audit import of_type, with_inputs

POLICIES = {"identity-per-role", "key-duties-separated", "key-use-within-domain"}
PlanDict = dict[str, Any]
Findings = Callable[[PlanDict], set[tuple[str, str]]]

AWS = "aws-enterprise-prod"
AZURE = "azure-enterprise-prod"
TRAINING_ROLE = f"{AWS}-aws-identities-training"
INFERENCE_ROLE = f"{AWS}-aws-identities-inference"
REGISTRY_SERVER = "deployment-ml-registry-registry"
INFERENCE_SERVER = "deployment-ml-inference-inference"
TRAINING_IDENTITY = f"{AZURE}-azure-training-identity-uai"
INFERENCE_SUBJECT = "system:serviceaccount:ml-inference:inference"
# Azure built-in roles reference: Storage Blob Data Reader and Contributor.
BLOB_READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
BLOB_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"


@pytest.fixture(scope="module")
def separation(pack: PolicyPackSession, defaults: dict[str, PolicySettings]) -> Findings:
    def judge(plan: PlanDict) -> set[tuple[str, str]]:
        return {(p, name) for p, name in found(pack.judge(plan, defaults)) if p in POLICIES}

    return judge


# What the two policies read (policies/mlplatform_policies/separation.py), and the providers: the pack
# judges only these, so each case costs seconds, not the minutes of a whole plan.
READ_TYPES = (
    "aws:iam/",
    "aws:kms/key:Key",
    # The users of the service roles and EKS Pod Identity associations, which name the service a role's
    # trust may admit (review rev35h A3).
    "aws:eks/",
    "aws:ec2/flowLog:FlowLog",
    "aws:cloudtrail/trail:Trail",
    "azure-native:managedidentity:",
    "azure-native:authorization:RoleAssignment",
    "azure-native:storage:BlobContainer",
    # The lifecycle record's account, whose writer role the registry holds (review rev40c A1).
    "azure-native:storage:StorageAccount",
    "kubernetes:apps/v1:",
    "kubernetes:batch/v1:",
    "pulumi:providers:",
)


def _read_by_policies(plan: Plan) -> PlanDict:
    whole = plan.to_dict()
    return {**whole, "resources": [r for r in whole["resources"] if r["type"].startswith(READ_TYPES)]}


@pytest.fixture(scope="module")
def aws_plan(planned: Callable[[str], Plan]) -> PlanDict:
    return _read_by_policies(planned(AWS))


@pytest.fixture(scope="module")
def azure_plan(cloud_plan: Callable[[str], Plan]) -> PlanDict:
    return _read_by_policies(cloud_plan(AZURE))


def test_shipped_enterprise_stacks_pass(
    aws_plan: PlanDict, azure_plan: PlanDict, separation: Findings
) -> None:
    assert separation(aws_plan) == set()
    assert separation(azure_plan) == set()


def _document(edit: Callable[[dict[str, Any]], None], key: str) -> Callable[[dict[str, Any]], None]:
    """An edit of the JSON document held in input ``key``."""

    def apply(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs[key])
        edit(document)
        inputs[key] = json.dumps(document)

    return apply


def _trust_also(subject: str) -> Callable[[dict[str, Any]], None]:
    def edit(document: dict[str, Any]) -> None:
        condition = document["Statement"][0]["Condition"]["StringEquals"]
        sub = next(k for k in condition if k.endswith(":sub"))
        condition[sub] = [condition[sub], subject]

    return _document(edit, "assumeRolePolicy")


def _add_statement(statement: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return _document(lambda d: d["Statement"].append(statement), "policy")


def _users(edit: Callable[[list[dict[str, Any]]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(inputs: dict[str, Any]) -> None:
        for container in inputs["spec"]["template"]["spec"]["containers"]:
            for variable in container.get("env", []):
                if variable["name"] == "REGISTRY_USERS":
                    users = json.loads(variable["value"])
                    edit(users)
                    variable["value"] = json.dumps(users)

    return apply


def _admin_password(inputs: dict[str, Any]) -> None:
    """The registry admin's password in the first container's environment, as a caller would take it."""
    container = inputs["spec"]["template"]["spec"]["containers"][0]
    reference = {"secretKeyRef": {"name": "registry-admin", "key": "password"}}
    container.setdefault("env", []).append({"name": "MLFLOW_TRACKING_PASSWORD", "valueFrom": reference})


def _policy_of(role: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: r["type"] == "aws:iam/rolePolicy:RolePolicy" and r["name"] == role


def _named(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: r["name"] == name


BUCKET_OBJECTS = "arn:aws:s3:::bucket"
AWS_CASES: list[tuple[str, Callable[[PlanDict], PlanDict], tuple[str, str]]] = [
    (
        "role-trusted-by-two-accounts",
        lambda p: with_inputs(p, of_type("aws:iam/role:Role", TRAINING_ROLE), _trust_also(INFERENCE_SUBJECT)),
        ("identity-per-role", TRAINING_ROLE),
    ),
    (
        "inference-writes-models",
        lambda p: with_inputs(
            p,
            _policy_of(INFERENCE_ROLE),
            _add_statement(
                {"Effect": "Allow", "Action": "s3:PutObject", "Resource": f"{BUCKET_OBJECTS}/models/*"}
            ),
        ),
        ("identity-per-role", INFERENCE_ROLE),
    ),
    (
        "training-reads-registry-artifacts",
        lambda p: with_inputs(
            p,
            _policy_of(TRAINING_ROLE),
            _add_statement(
                {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"{BUCKET_OBJECTS}/registry/*"}
            ),
        ),
        ("identity-per-role", TRAINING_ROLE),
    ),
    (
        "wildcard-action",
        lambda p: with_inputs(
            p,
            _policy_of(TRAINING_ROLE),
            _add_statement({"Effect": "Allow", "Action": "s3:*", "Resource": "*"}),
        ),
        ("identity-per-role", TRAINING_ROLE),
    ),
    (
        "registry-user-listed-twice",
        lambda p: with_inputs(p, _named(REGISTRY_SERVER), _users(lambda u: u.append(copy.deepcopy(u[0])))),
        ("identity-per-role", REGISTRY_SERVER),
    ),
    (
        "inference-user-edits",
        lambda p: with_inputs(
            p,
            _named(REGISTRY_SERVER),
            _users(
                lambda u: next(x for x in u if x["username"] == "ml-inference")["grants"].update(m="EDIT")
            ),
        ),
        ("identity-per-role", REGISTRY_SERVER),
    ),
    (
        "training-user-manages",
        lambda p: with_inputs(
            p,
            _named(REGISTRY_SERVER),
            _users(
                lambda u: next(x for x in u if x["username"] == "ml-training")["grants"].update(m="MANAGE")
            ),
        ),
        ("identity-per-role", REGISTRY_SERVER),
    ),
    (
        "inference-reads-the-admin-password",
        lambda p: with_inputs(p, _named(INFERENCE_SERVER), _admin_password),
        ("identity-per-role", INFERENCE_SERVER),
    ),
    (
        "key-policy-kms-star-to-a-role",
        lambda p: with_inputs(
            p,
            of_type("aws:kms/key:Key", "-aws-key-key"),
            _add_statement(
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": "arn:aws:iam::123456789012:role/platform-admin"},
                    "Action": "kms:*",
                    "Resource": "*",
                }
            ),
        ),
        ("key-duties-separated", f"{AWS}-aws-key-key"),
    ),
    (
        "key-administrator-also-decrypts",
        lambda p: with_inputs(
            p,
            of_type("aws:kms/key:Key", "-aws-key-key"),
            _add_statement(
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": "arn:aws:iam::123456789012:role/key-custodian"},
                    "Action": ["kms:ScheduleKeyDeletion", "kms:Decrypt"],
                    "Resource": "*",
                }
            ),
        ),
        ("key-duties-separated", f"{AWS}-aws-key-key"),
    ),
]


SECRETS_KEY = f"{AWS}-aws-key-key"
ROOT = "arn:aws:iam::123456789012:root"


def _root_statement(sid: str) -> Callable[[dict[str, Any]], None]:
    """The key policy with the root's administration statement replaced by the AWS default's ``kms:*``."""

    def edit(document: dict[str, Any]) -> None:
        (statement,) = [s for s in document["Statement"] if s.get("Sid") == sid]
        statement["Action"] = "kms:*"

    return _document(edit, "policy")


def _root_may(
    actions: list[str], condition: dict[str, Any] | None = None
) -> Callable[[dict[str, Any]], None]:
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"AWS": ROOT},
        "Action": actions,
        "Resource": "*",
    }
    if condition:
        statement["Condition"] = condition
    return _add_statement(statement)


ROOT_CASES = [
    ("root-kms-star", _root_statement("AccountAdministersKeyThroughIam")),
    ("root-decrypts-unconditioned", _root_may(["kms:Decrypt", "kms:GenerateDataKey*"])),
    ("root-creates-grants-unconditioned", _root_may(["kms:Create*"])),
]


@pytest.mark.parametrize(("case", "edit"), ROOT_CASES, ids=[c[0] for c in ROOT_CASES])
def test_a_key_the_account_root_may_use_freely_is_refused(
    case: str, edit: Callable[[dict[str, Any]], None], aws_plan: PlanDict, separation: Findings
) -> None:
    """The AWS default key policy's ``kms:*`` to the root lets every IAM policy in the account grant the key;
    the shipped keys give the root administration, use only by condition, grants only for AWS services."""
    planted = with_inputs(aws_plan, of_type("aws:kms/key:Key", "-aws-key-key"), edit)
    assert separation(planted) == {("key-duties-separated", SECRETS_KEY)}, case


def test_root_use_named_by_condition_passes(aws_plan: PlanDict, separation: Findings) -> None:
    """The other way: the same use, limited to the domain's service, is a key user statement."""
    via = {"StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}}
    planted = with_inputs(
        aws_plan, of_type("aws:kms/key:Key", "-object-data-key"), _root_may(["kms:Decrypt"], via)
    )
    assert separation(planted) == set()


def _decrypts_with(plan: PlanDict, role_policy: str, key_name: str, key_arn: str) -> PlanDict:
    """``role_policy`` also decrypts with key ``key_name`` (through S3, as its own statements do), the key
    in its document's property dependencies as the engine records it."""
    (key,) = [r for r in plan["resources"] if r["name"] == key_name]
    statement = {
        "Effect": "Allow",
        "Action": ["kms:Decrypt"],
        "Resource": key_arn,
        "Condition": {"StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}},
    }
    edited = with_inputs(
        plan, of_type("aws:iam/rolePolicy:RolePolicy", role_policy), _add_statement(statement)
    )
    (policy,) = [
        r for r in edited["resources"] if r["type"].endswith("RolePolicy") and r["name"].endswith(role_policy)
    ]
    policy["propertyDependencies"]["policy"] = [*policy["propertyDependencies"].get("policy", []), key["urn"]]
    return edited


def _uses_secrets_key(plan: PlanDict, role_policy: str) -> PlanDict:
    """``role_policy`` also decrypts with the Secrets key, whose ARN the EKS cluster role's policy names."""
    (cluster_kms,) = [r for r in plan["resources"] if r["name"].endswith("-cluster-role-kms")]
    arn = json.loads(cluster_kms["inputs"]["policy"])["Statement"][0]["Resource"]
    return _decrypts_with(plan, role_policy, SECRETS_KEY, arn)


def test_a_role_using_another_domains_key_is_refused(aws_plan: PlanDict, separation: Findings) -> None:
    """Training owns the object data's and the datasets' keys only: a grant on the Secrets key is a
    cross-domain grant."""
    planted = _uses_secrets_key(aws_plan, "-identities-training")
    assert separation(planted) == {("key-use-within-domain", TRAINING_ROLE)}


def test_only_training_uses_the_datasets_key(aws_plan: PlanDict, separation: Findings) -> None:
    """Review B5 (one data domain per bucket): the datasets are training's alone; inference reading them
    with the datasets key is a cross-domain grant. The key's ARN is the one training's policy names."""
    (training,) = [
        r
        for r in aws_plan["resources"]
        if r["name"] == TRAINING_ROLE and "inputs" in r and "policy" in r["inputs"]
    ]
    statements = json.loads(training["inputs"]["policy"])["Statement"]
    (use,) = [s for s in statements if s["Sid"] == "UseKeyThroughS3Datasets"]
    planted = _decrypts_with(aws_plan, "-identities-inference", f"{AWS}-aws-datasets-key", use["Resource"])
    assert separation(planted) == {("key-use-within-domain", INFERENCE_ROLE)}


POD_IDENTITY_TRUST = {
    "Effect": "Allow",
    "Principal": {"Service": "pods.eks.amazonaws.com"},
    "Action": ["sts:AssumeRole", "sts:TagSession"],
}


def _trust_service(statement: dict[str, Any], *, only: bool = False) -> Callable[[PlanDict], PlanDict]:
    """The training role's trust with ``statement`` added (or alone, ``only``)."""

    def edit(document: dict[str, Any]) -> None:
        document["Statement"] = [statement] if only else [*document["Statement"], statement]

    return lambda p: with_inputs(
        p, of_type("aws:iam/role:Role", TRAINING_ROLE), _document(edit, "assumeRolePolicy")
    )


def _pod_identity(plan: PlanDict, namespace: str, service_account: str) -> PlanDict:
    """``plan`` with an EKS Pod Identity association giving the training role to ``namespace`` /
    ``service_account`` (its ``roleArn`` refers to the role, as the engine records it)."""
    edited = copy.deepcopy(plan)
    (role,) = [
        r for r in edited["resources"] if r["type"] == "aws:iam/role:Role" and r["name"] == TRAINING_ROLE
    ]
    urn = (
        role["urn"].rsplit("::", 1)[0].rsplit("$", 1)[0]
        + "$aws:eks/podIdentityAssociation:PodIdentityAssociation::planted"
    )
    edited["resources"].append(
        {
            "urn": urn,
            "type": "aws:eks/podIdentityAssociation:PodIdentityAssociation",
            "name": "planted",
            "custom": True,
            "inputs": {
                "clusterName": f"{AWS}-aws",
                "namespace": namespace,
                "serviceAccount": service_account,
                "roleArn": f"arn:aws:iam::123456789012:role/{TRAINING_ROLE}",
                "tags": role["inputs"].get("tags", {}),
            },
            "dependencies": [role["urn"]],
            "propertyDependencies": {"roleArn": [role["urn"]]},
        }
    )
    return edited


# Review rev35h A3: a role's trust admits only the service its use in the plan needs (EKS user guide,
# "Amazon EKS cluster IAM role", "Amazon EKS node IAM role"; EKS Pod Identity's role trust policy only
# with an association naming the role's own service account).
AWS_CASES += [
    (
        "training-trusts-ec2",
        _trust_service(
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ),
        ("identity-per-role", TRAINING_ROLE),
    ),
    (
        "training-pod-identity-for-default-service-account",
        lambda p: _pod_identity(_trust_service(POD_IDENTITY_TRUST)(p), "default", "default"),
        ("identity-per-role", TRAINING_ROLE),
    ),
    (
        "training-pod-identity-without-association",
        lambda p: with_inputs(
            _trust_service(POD_IDENTITY_TRUST, only=True)(p),
            _policy_of(TRAINING_ROLE),
            lambda inputs: inputs.update(policy=json.dumps({"Version": "2012-10-17", "Statement": []})),
        ),
        ("identity-per-role", TRAINING_ROLE),
    ),
]


def test_training_moved_to_pod_identity_passes(aws_plan: PlanDict, separation: Findings) -> None:
    """The documented EKS Pod Identity shape (trust ``pods.eks.amazonaws.com`` with ``sts:AssumeRole`` and
    ``sts:TagSession``, an association naming ``ml-training/trainer``) keeps the role training's: it passes
    and still owns the datasets' key (review rev35h B1)."""
    moved = _pod_identity(_trust_service(POD_IDENTITY_TRUST, only=True)(aws_plan), "ml-training", "trainer")
    assert separation(moved) == set()


def test_pod_identity_without_association_names_the_cause(
    aws_plan: PlanDict, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    """Review rev35h B1: a Pod Identity trust with no association says why the role owns no domain."""
    planted = _trust_service(POD_IDENTITY_TRUST, only=True)(aws_plan)
    messages = [v.message for v in pack.judge(planted, defaults) if v.policy == "key-use-within-domain"]
    assert messages and all("EKS Pod Identity association" in m for m in messages)


@pytest.mark.parametrize(("case", "plant", "expected"), AWS_CASES, ids=[c[0] for c in AWS_CASES])
def test_planted_aws_merge_fails(
    case: str,
    plant: Callable[[PlanDict], PlanDict],
    expected: tuple[str, str],
    aws_plan: PlanDict,
    separation: Findings,
) -> None:
    assert separation(plant(aws_plan)) == {expected}, case


def _federate_inference_to_training(plan: PlanDict) -> PlanDict:
    """The inference federated credential moved onto the training identity: one identity, two roles."""
    edited = copy.deepcopy(plan)
    training = next(r for r in edited["resources"] if r["name"] == TRAINING_IDENTITY)
    federation = next(r for r in edited["resources"] if r["name"].endswith("-inference-identity-federation"))
    federation["propertyDependencies"]["resourceName"] = [training["urn"]]
    federation["dependencies"] = [u for u in federation["dependencies"] if "inference-identity-uai" not in u]
    federation["dependencies"].append(training["urn"])
    return edited


AZURE_CASES: list[tuple[str, Callable[[PlanDict], PlanDict], tuple[str, str]]] = [
    (
        "identity-federated-to-two-accounts",
        _federate_inference_to_training,
        ("identity-per-role", TRAINING_IDENTITY),
    ),
    (
        "training-writes-datasets",
        lambda p: with_inputs(
            p,
            _named(f"{AZURE}-azure-training-identity-datasets-storage_blob_data_reader"),
            lambda i: i.update(roleDefinitionId=i["roleDefinitionId"].replace(BLOB_READER, BLOB_CONTRIBUTOR)),
        ),
        ("identity-per-role", TRAINING_IDENTITY),
    ),
]


@pytest.mark.parametrize(("case", "plant", "expected"), AZURE_CASES, ids=[c[0] for c in AZURE_CASES])
def test_planted_azure_merge_fails(
    case: str,
    plant: Callable[[PlanDict], PlanDict],
    expected: tuple[str, str],
    azure_plan: PlanDict,
    separation: Findings,
) -> None:
    assert separation(plant(azure_plan)) == {expected}, case
