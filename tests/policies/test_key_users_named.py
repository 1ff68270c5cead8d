"""``key-users-named``: every AWS data key names exactly its users (issue 35 item 3: "each its own customer
key with a policy naming only its users"; item 5: pack policies for the key separation; review 35b B1).

The class: a role whose IAM policy in the plan grants a KMS use of key K is a consumer of K; K's policy must
name every consumer (KMS developer guide, "Default key policy": a use needs the key policy and IAM both, so a
consumer left out breaks at run time), a consumer that only decrypts with ``kms:Decrypt`` alone (S3 user
guide, "Using server-side encryption with AWS KMS keys (SSE-KMS)"; review 35 C1), and no other principal
beside the people the role-to-key table (policies/key_users.yaml) gives K's domains and the deployer where
the store's service needs its key rights (components/aws/keys.py ``DOMAIN_USERS``). Shown both ways on the
pack the users run: the shipped enterprise plan with every people's role named and the SMB plan have no
finding, and each planted form is found (a workload left out, a reader left out, a principal the stack
does not have, a role of the stack that uses nothing under the key, the deployer kept on the datasets key,
a reader given encrypt, a writer given decrypt only, a principal named outright).
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
from tests.stack_variants import PEOPLE_AWS

from .conftest import found
from .test_audit import with_inputs
from .test_policy_config import UNKNOWN_STRING

POLICY = "key-users-named"
AWS = "aws-enterprise-prod"
SMB = "aws-smb-dev"
ACCOUNT = "arn:aws:iam::123456789012"
# The mocks' deployer (mlplatform/mocks.py getCallerIdentity).
DEPLOYER = f"{ACCOUNT}:user/mock"
DATASETS = f"{AWS}-aws-datasets-key"
OBJECT_DATA = f"{AWS}-aws-object-data-key"
SECRETS = f"{AWS}-aws-key-key"
PlanDict = dict[str, Any]
Edit = Callable[[dict[str, Any]], None]
# What the policy reads (roles, their policies and attachments, keys, the people's access entries, and the
# resources that tie a key's ARN to the key), so each plant is judged without the rest of the stack.
READ_TYPES = (
    "aws:eks/access",
    "aws:eks/cluster:Cluster",
    "aws:iam/",
    "aws:kms/key:Key",
    "aws:s3/bucketServerSideEncryptionConfiguration",
)


@pytest.fixture(scope="module")
def named(pack: PolicyPackSession, defaults: dict[str, PolicySettings]) -> Callable[[PlanDict], set[str]]:
    """The resources ``key-users-named`` refuses, as mandatory, in a plan."""

    def judge(plan: PlanDict) -> set[str]:
        return {name for policy, name in found(pack.judge(plan, defaults)) if policy == POLICY}

    return judge


@pytest.fixture(scope="module")
def enterprise(people_plan: Callable[[str], Plan]) -> PlanDict:
    return _read_by_policy(people_plan(AWS))


def _read_by_policy(plan: Plan) -> PlanDict:
    whole = plan.to_dict()
    return {**whole, "resources": [r for r in whole["resources"] if r["type"].startswith(READ_TYPES)]}


def test_shipped_plans_name_exactly_their_key_users(
    enterprise: PlanDict,
    people_plan: Callable[[str], Plan],
    cloud_plan: Callable[[str], Plan],
    named: Callable[[PlanDict], set[str]],
) -> None:
    assert named(people_plan(AWS).to_dict()) == set()
    assert named(cloud_plan(SMB).to_dict()) == set()
    # The judged part alone passes too, so each plant below is found for what it plants.
    assert named(enterprise) == set()


def _role_arn(plan: PlanDict, resource: str) -> str:
    """A role's ARN as the mocks name it: its name prefix and the provider's 26-digit suffix."""
    (role,) = [r for r in plan["resources"] if r["name"] == resource and r["type"] == "aws:iam/role:Role"]
    return f"{ACCOUNT}:role/{role['inputs']['namePrefix']}{'0' * 26}"


def _statement(sid: str, edit: Edit) -> Edit:
    def apply(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs["policy"])
        edit(next(s for s in document["Statement"] if s.get("Sid") == sid))
        inputs["policy"] = json.dumps(document)

    return apply


def _users(statement: dict[str, Any]) -> list[str]:
    users: list[str] = statement["Condition"]["ArnEquals"]["aws:PrincipalArn"]
    return users


def _drop(part: str) -> Edit:
    return lambda s: _users(s).__setitem__(slice(None), [a for a in _users(s) if part not in a])


def _add(arn: str) -> Edit:
    return lambda s: _users(s).append(arn)


def _break_glass_decrypts(inputs: dict[str, Any]) -> None:
    document = json.loads(inputs["policy"])
    document["Statement"].append(
        {
            "Sid": "BreakGlass",
            "Effect": "Allow",
            "Principal": {"AWS": f"{ACCOUNT}:role/break-glass"},
            "Action": "kms:Decrypt",
            "Resource": "*",
        }
    )
    inputs["policy"] = json.dumps(document)


def _readers_encrypt(statement: dict[str, Any]) -> None:
    statement["Action"] = ["kms:Decrypt", "kms:GenerateDataKey*"]


def _move_training_to_readers(inputs: dict[str, Any]) -> None:
    document = json.loads(inputs["policy"])
    by_sid = {s["Sid"]: s for s in document["Statement"]}
    writers, readers = _users(by_sid["ObjectDataUsersUseKey"]), _users(by_sid["ObjectDataReadersDecrypt"])
    training = [a for a in writers if "-train-" in a]
    writers[:] = [a for a in writers if a not in training]
    readers += training
    inputs["policy"] = json.dumps(document)


def _plant(edit: Edit) -> Callable[[PlanDict], Edit]:
    return lambda _plan: edit


def _node_role_let_in(plan: PlanDict) -> Edit:
    """The node role, a role of the stack whose IAM uses no data key, named on the object data's key."""
    return _statement("ObjectDataUsersUseKey", _add(_role_arn(plan, f"{AWS}-aws-node")))


PLANTS: list[Any] = [
    pytest.param(
        OBJECT_DATA, _plant(_statement("ObjectDataUsersUseKey", _drop("-train-"))), id="writer-left-out"
    ),
    pytest.param(
        OBJECT_DATA, _plant(_statement("ObjectDataReadersDecrypt", _drop("-infer-"))), id="reader-left-out"
    ),
    pytest.param(
        DATASETS,
        _plant(_statement("DatasetsUsersUseKey", _add(f"{ACCOUNT}:role/break-glass"))),
        id="outside-principal",
    ),
    pytest.param(OBJECT_DATA, _node_role_let_in, id="stack-role-using-nothing"),
    pytest.param(
        DATASETS, _plant(_statement("DatasetsUsersUseKey", _add(DEPLOYER))), id="deployer-keeps-datasets"
    ),
    pytest.param(
        OBJECT_DATA,
        _plant(_statement("ObjectDataUsersUseKey", _add(PEOPLE_AWS["auditors"][0]))),
        id="reader-writes",
    ),
    pytest.param(
        OBJECT_DATA, _plant(_statement("ObjectDataReadersDecrypt", _readers_encrypt)), id="readers-encrypt"
    ),
    pytest.param(OBJECT_DATA, _plant(_move_training_to_readers), id="writer-decrypts-only"),
    pytest.param(SECRETS, _plant(_break_glass_decrypts), id="principal-named-outright"),
]


@pytest.mark.parametrize(("key", "plant"), PLANTS)
def test_a_planted_key_user_defect_is_refused(
    enterprise: PlanDict, named: Callable[[PlanDict], set[str]], key: str, plant: Callable[[PlanDict], Edit]
) -> None:
    planted = with_inputs(enterprise, lambda r: r["name"] == key, plant(enterprise))
    assert named(planted) == {key}


def test_a_new_stacks_preview_is_not_refused_for_key_policies_not_known_yet(
    enterprise: PlanDict, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    """On a new stack's preview a data key's policy waits for its users' role ARNs (docs/security.md, "Keys
    per data domain"): the policy says it cannot judge it, and refuses nothing."""

    def unknown(inputs: dict[str, Any]) -> None:
        inputs["policy"] = UNKNOWN_STRING

    planted = with_inputs(enterprise, lambda r: r["name"] in (DATASETS, OBJECT_DATA), unknown)
    violations = [v for v in pack.judge(planted, defaults) if v.policy == POLICY]
    assert violations
    assert {v.enforcement for v in violations} == {"advisory"}
    assert all("can't be known during preview" in v.message for v in violations)


def test_a_role_policy_naming_a_key_by_a_literal_arn_is_a_consumer(
    enterprise: PlanDict, named: Callable[[PlanDict], set[str]]
) -> None:
    """A grant written by hand names the key's ARN as text (no dependency on the key): the ARN the plan
    ties to the key (its bucket's encryption rule) still makes the role a consumer the key must name."""
    planted = copy.deepcopy(enterprise)
    (sse,) = [
        r
        for r in planted["resources"]
        if r["type"].startswith("aws:s3/bucketServerSideEncryptionConfiguration")
        and r["propertyDependencies"]["rules"] == [_urn(planted, DATASETS)]
    ]
    datasets_arn = sse["inputs"]["rules"][0]["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"]
    (inference,) = [
        r
        for r in planted["resources"]
        if r["name"] == f"{AWS}-aws-identities-inference" and r["type"] == "aws:iam/rolePolicy:RolePolicy"
    ]
    document = json.loads(inference["inputs"]["policy"])
    document["Statement"].append(
        {"Sid": "ByHand", "Effect": "Allow", "Action": "kms:Decrypt", "Resource": datasets_arn}
    )
    inference["inputs"]["policy"] = json.dumps(document)
    assert named(planted) == {DATASETS}


def _urn(plan: PlanDict, name: str) -> str:
    (found,) = [r["urn"] for r in plan["resources"] if r["name"] == name]
    urn: str = found
    return urn
