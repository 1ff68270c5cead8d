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
a reader given encrypt, a writer given decrypt only, a principal named outright), with review 35c's forms
(A1-A7, C5, C7): each test id names the AWS page its rule comes from.
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
REGISTRY_DATABASE = f"{AWS}-aws-registry-database-key"
OTHER_ACCOUNT = "arn:aws:iam::999999999999"
VERIFIER = f"{AWS}-aws-identities-image-verifier"
PlanDict = dict[str, Any]
Edit = Callable[[dict[str, Any]], None]
# What the policy reads (roles, their policies and attachments, keys, the people's access entries, and the
# resources that tie a key's ARN to the key), so each plant is judged without the rest of the stack.
READ_TYPES = (
    "aws:eks/access",
    "aws:eks/cluster:Cluster",
    "aws:iam/",
    "aws:kms/key:Key",
    "aws:kms/keyPolicy:KeyPolicy",
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
    # Without people the root administers the keys unconditioned: the deployer is found from the
    # store-creating statements alone, beside the registry's role there.
    assert named(cloud_plan(AWS).to_dict()) == set()
    assert named(cloud_plan(SMB).to_dict()) == set()
    # The judged part alone passes too, so each plant below is found for what it plants.
    assert named(enterprise) == set()


def _role_arn(plan: PlanDict, resource: str) -> str:
    """A role's ARN as the mocks name it: its name prefix and the provider's 26-digit suffix."""
    (role,) = [r for r in plan["resources"] if r["name"] == resource and r["type"] == "aws:iam/role:Role"]
    return f"{ACCOUNT}:role/{role['inputs']['namePrefix']}{'0' * 26}"


def _grant_unless_for_aws_resource(statement: dict[str, Any]) -> None:
    """The readers' statement turned into CreateGrant under a negated kms:GrantIsForAWSResource."""
    _set_actions("kms:CreateGrant")(statement)
    statement["Condition"]["StringNotEquals"] = {"kms:GrantIsForAWSResource": "true"}


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


def _administrators(operator: str, arn: str) -> Edit:
    """The custodians' statement naming its administrators by ``operator`` ``arn`` instead."""
    return lambda s: s.__setitem__("Condition", {operator: {"aws:PrincipalArn": arn}})


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
    # The mode is per key (policies/key_users.yaml): an ML engineer writes the datasets key and only reads
    # the object data's (the registry alone appends to the lifecycle record).
    pytest.param(
        OBJECT_DATA,
        _plant(_statement("ObjectDataUsersUseKey", _add(next(iter(PEOPLE_AWS["mlEngineers"].values()))[0]))),
        id="engineer-writes-object-data",
    ),
    pytest.param(
        OBJECT_DATA, _plant(_statement("ObjectDataReadersDecrypt", _readers_encrypt)), id="readers-encrypt"
    ),
    pytest.param(OBJECT_DATA, _plant(_move_training_to_readers), id="writer-decrypts-only"),
    pytest.param(SECRETS, _plant(_break_glass_decrypts), id="principal-named-outright"),
    # Review rev35h A4: the custodians' administration widened to every role of the account, by ArnLike
    # or by a wildcard under ArnEquals (AWS KMS developer guide, "Default key policy": an administrator
    # can give itself the key's use).
    pytest.param(
        DATASETS,
        _plant(_statement("KeyCustodiansAdministerKey", _administrators("ArnLike", f"{ACCOUNT}:role/*"))),
        id="administrators-arnlike-every-role",
    ),
    pytest.param(
        DATASETS,
        _plant(
            _statement("KeyCustodiansAdministerKey", _administrators("ArnEquals", f"{ACCOUNT}:role/key-*"))
        ),
        id="administrators-wildcard",
    ),
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
    datasets_arn = _datasets_arn(planted)
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


# Review 35c: each form a key policy or an IAM policy can take that the policy must hold to "naming only
# its users" (issue 35 item 3), one plant per reviewer's plant (/work/rev-35c-out plant*.py), each judged
# on the enterprise plan with people configured (the deployer, arn:aws:iam::123456789012:user/mock, is then
# one of the key administrators the policy names).


def _append(statement: dict[str, Any]) -> Edit:
    def apply(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs["policy"])
        document["Statement"].append(statement)
        inputs["policy"] = json.dumps(document)

    return apply


def _outright(sid: str, principal: Any, actions: list[str], **extra: Any) -> Edit:
    return _append(
        {"Sid": sid, "Effect": "Allow", "Principal": principal, "Action": actions, "Resource": "*", **extra}
    )


def _for_root(sid: str, arn: str, actions: list[str], via: str, operator: str = "StringEquals") -> Edit:
    condition = {"ArnEquals": {"aws:PrincipalArn": [arn]}, operator: {"kms:ViaService": via}}
    return _outright(sid, {"AWS": f"{ACCOUNT}:root"}, actions, Condition=condition)


def _other_accounts(plan: PlanDict, resource: str) -> str:
    return _role_arn(plan, resource).replace(ACCOUNT, OTHER_ACCOUNT)


def _iam_user_named_like(plan: PlanDict, resource: str) -> str:
    return _role_arn(plan, resource).replace(":role/", ":user/")


def _set_actions(*actions: str) -> Edit:
    return lambda s: s.__setitem__("Action", ["kms:Decrypt", "kms:DescribeKey", *actions])


STRANGER = f"{ACCOUNT}:role/stranger"
INFERENCE = f"{AWS}-aws-identities-inference"
# The EC2 Auto Scaling service-linked role, another account's (the stack's own is named on the volumes key:
# EC2 Auto Scaling user guide, "Required AWS KMS key policy for use with encrypted volumes").
OTHER_AUTOSCALING = (
    f"{OTHER_ACCOUNT}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
)
USE = ["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey*"]

KEY_POLICY_FORMS: list[Any] = [
    # A1. AWS KMS developer guide, "Determining access: examining the key policy": Principal "*" in an
    # Allow "gives every identity in every AWS account permission to use the KMS key" unless conditions
    # limit it; an account condition still names no user.
    pytest.param(
        DATASETS,
        _plant(_outright("Anyone", {"AWS": "*"}, ["kms:Decrypt"])),
        id="A1-kms-determining-access-key-policy-aws-star",
    ),
    pytest.param(
        DATASETS,
        _plant(
            _outright(
                "AnyoneOfAccount",
                "*",
                ["kms:Decrypt"],
                Condition={"StringEquals": {"aws:PrincipalAccount": "123456789012"}},
            )
        ),
        id="A1-kms-determining-access-key-policy-star-account-condition",
    ),
    # IAM user guide, "AWS JSON policy elements: NotPrincipal": not supported with Allow (review 35c C7).
    pytest.param(
        DATASETS,
        _plant(
            _append(
                {
                    "Sid": "AllBut",
                    "Effect": "Allow",
                    "NotPrincipal": {"AWS": f"{ACCOUNT}:root"},
                    "Action": "kms:Decrypt",
                    "Resource": "*",
                }
            )
        ),
        id="C7-iam-notprincipal-with-allow",
    ),
    # A2. AWS KMS developer guide, "kms:ViaService": it limits the service, not the caller; only the
    # deployer creates the registry database and file systems with its key rights (DOMAIN_USERS).
    pytest.param(
        REGISTRY_DATABASE,
        _plant(_statement("RegistryDatabaseUsersUseKey", _add(STRANGER))),
        id="A2-kms-viaservice-stranger-beside-the-deployer",
    ),
    pytest.param(
        REGISTRY_DATABASE,
        _plant(
            _for_root("StrangerViaSecretsManager", STRANGER, USE, "secretsmanager.me-central-1.amazonaws.com")
        ),
        id="A2-kms-viaservice-stranger-through-secrets-manager",
    ),
    pytest.param(
        DATASETS,
        _plant(_for_root("DeployerViaRds", DEPLOYER, USE, "rds.me-central-1.amazonaws.com")),
        id="A2-kms-viaservice-deployer-on-a-key-rds-does-not-create",
    ),
    pytest.param(
        DATASETS,
        _plant(_for_root("StrangerViaRds", STRANGER, USE, "rds.*", operator="StringLike")),
        id="A2-kms-viaservice-stranger-rds-pattern",
    ),
    # A3. IAM user guide, "IAM identifiers": an ARN names the account and the resource type; AWS KMS
    # developer guide, "Allowing users in other accounts to use a KMS key".
    pytest.param(
        OBJECT_DATA,
        lambda plan: _outright("Foreign", {"AWS": _other_accounts(plan, INFERENCE)}, ["kms:Decrypt"]),
        id="A3-iam-identifiers-other-accounts-role-of-a-consumers-name",
    ),
    pytest.param(
        OBJECT_DATA,
        lambda plan: _outright(
            "UserSameName", {"AWS": _iam_user_named_like(plan, INFERENCE)}, ["kms:Decrypt"]
        ),
        id="A3-iam-identifiers-iam-user-of-a-consumers-name",
    ),
    pytest.param(
        OBJECT_DATA,
        _plant(
            _outright(
                "ForeignAuditors",
                {"AWS": PEOPLE_AWS["auditors"][0].replace(ACCOUNT, OTHER_ACCOUNT)},
                ["kms:Decrypt"],
            )
        ),
        id="A3-iam-identifiers-other-accounts-role-of-a-persons-name",
    ),
    pytest.param(
        OBJECT_DATA,
        lambda plan: _statement("ObjectDataReadersDecrypt", _add(_other_accounts(plan, INFERENCE))),
        id="A3-iam-identifiers-other-accounts-role-in-principal-arn",
    ),
    pytest.param(
        DATASETS,
        _plant(
            _outright(
                "OtherAccountThroughS3",
                {"AWS": f"{OTHER_ACCOUNT}:root"},
                ["kms:Decrypt"],
                Condition={"StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}},
            )
        ),
        id="A3-kms-cross-account-root-through-s3",
    ),
    # AWS KMS developer guide, "Default key policy": the account root delegates to IAM, so a use statement
    # for it that names no users by aws:PrincipalArn lets every principal of the account whose IAM allows
    # it use the key, limited to a service or not.
    pytest.param(
        DATASETS,
        _plant(
            _outright(
                "AccountThroughS3",
                {"AWS": f"{ACCOUNT}:root"},
                ["kms:Decrypt"],
                Condition={"StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}},
            )
        ),
        id="kms-default-key-policy-root-without-named-users",
    ),
    # A4. AWS KMS developer guide, "Allowing users in other accounts to use a KMS key": another account's
    # service-linked role is that account's principal.
    pytest.param(
        DATASETS,
        _plant(_outright("ForeignAutoScaling", {"AWS": OTHER_AUTOSCALING}, USE)),
        id="A4-kms-cross-account-service-linked-role",
    ),
    # A5. AWS KMS developer guide, "Grants in AWS KMS" (a grant gives its grantee use) and "Default key
    # policy" (the key users' CreateGrant is limited by kms:GrantIsForAWSResource).
    pytest.param(
        DATASETS,
        _plant(_outright("StrangerGrants", {"AWS": STRANGER}, ["kms:CreateGrant"])),
        id="A5-kms-grants-create-grant-without-grant-is-for-aws-resource",
    ),
    pytest.param(
        DATASETS,
        _plant(_statement("DatasetsReadersDecrypt", _set_actions("kms:CreateGrant"))),
        id="A5-kms-grants-reader-given-create-grant",
    ),
    # Review rev35e A1. AWS KMS developer guide, "kms:GrantIsForAWSResource": only Bool (or StringEquals)
    # "true" keeps grants to AWS services; a negated or IfExists operator allows the grants a principal
    # makes itself.
    pytest.param(
        DATASETS,
        _plant(
            _outright(
                "StrangerGrantsNotForAws",
                {"AWS": STRANGER},
                ["kms:CreateGrant"],
                Condition={"StringNotEquals": {"kms:GrantIsForAWSResource": "true"}},
            )
        ),
        id="rev35e-A1-kms-grant-is-for-aws-resource-string-not-equals",
    ),
    pytest.param(
        DATASETS,
        _plant(
            _outright(
                "StrangerGrantsIfExists",
                {"AWS": STRANGER},
                ["kms:CreateGrant"],
                Condition={"BoolIfExists": {"kms:GrantIsForAWSResource": "true"}},
            )
        ),
        id="rev35e-A1-kms-grant-is-for-aws-resource-bool-if-exists",
    ),
    pytest.param(
        OBJECT_DATA,
        _plant(_statement("ObjectDataReadersDecrypt", _grant_unless_for_aws_resource)),
        id="rev35e-A1-kms-grant-is-for-aws-resource-reader-string-not-equals",
    ),
    # Review rev35e A5. IAM user guide, "The confused deputy problem"; AWS KMS developer guide, "Using
    # service principals in key policies": a service principal's use bound to no account's resources, or
    # to another account's.
    pytest.param(
        DATASETS,
        _plant(
            _outright(
                "LogsUnbound", {"Service": "logs.amazonaws.com"}, ["kms:Decrypt", "kms:GenerateDataKey*"]
            )
        ),
        id="rev35e-A5-iam-confused-deputy-service-principal-unbound",
    ),
    pytest.param(
        DATASETS,
        _plant(
            _outright(
                "LogsOtherAccount",
                {"Service": "logs.amazonaws.com"},
                ["kms:Decrypt"],
                Condition={"StringEquals": {"aws:SourceAccount": "999999999999"}},
            )
        ),
        id="rev35e-A5-iam-confused-deputy-service-principal-other-account",
    ),
    pytest.param(
        DATASETS,
        _plant(
            _outright(
                "LogsNegated",
                {"Service": "logs.amazonaws.com"},
                ["kms:Decrypt"],
                Condition={"StringNotEquals": {"aws:SourceAccount": "123456789012"}},
            )
        ),
        id="rev35e-A5-iam-confused-deputy-service-principal-negated",
    ),
    # A7. AWS KMS API reference, GenerateDataKeyPair and GenerateDataKeyPairWithoutPlaintext: a private key
    # "encrypted under the symmetric encryption KMS key you specify" is a write.
    pytest.param(
        DATASETS,
        _plant(_statement("DatasetsReadersDecrypt", _set_actions("kms:GenerateDataKeyPair"))),
        id="A7-kms-api-generate-data-key-pair-is-write",
    ),
    pytest.param(
        DATASETS,
        _plant(_statement("DatasetsReadersDecrypt", _set_actions("kms:GenerateDataKeyPairWithoutPlaintext"))),
        id="A7-kms-api-generate-data-key-pair-without-plaintext-is-write",
    ),
]


@pytest.mark.parametrize(("key", "plant"), KEY_POLICY_FORMS)
def test_a_key_policy_form_naming_more_than_its_users_is_refused(
    enterprise: PlanDict, named: Callable[[PlanDict], set[str]], key: str, plant: Callable[[PlanDict], Edit]
) -> None:
    planted = with_inputs(enterprise, lambda r: r["name"] == key, plant(enterprise))
    assert named(planted) == {key}


def test_a_null_check_on_the_principal_arn_names_no_principal(
    enterprise: PlanDict, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    """Review rev35e C2: ``Null`` takes ``true`` or ``false``, whether a key is absent, not a value to match
    (IAM user guide, "IAM JSON policy elements: Condition operators", "Condition operator to check
    existence of condition keys"). ``Principal "*"`` with ``Null {aws:PrincipalArn: "false"}`` names no
    user: it is refused as letting any principal use the key, not as naming a principal called false."""
    condition = {"Null": {"aws:PrincipalArn": "false"}, "StringEquals": {"aws:PrincipalOrgID": "o-example"}}
    plant = _outright("NullCheck", "*", ["kms:Decrypt"], Condition=condition)
    planted = with_inputs(enterprise, lambda r: r["name"] == DATASETS, plant)
    messages = [
        v.message
        for v in pack.judge(planted, defaults)
        if v.policy == POLICY and v.name == DATASETS and "NullCheck" in v.message
    ]
    assert messages and all("false" not in m for m in messages), messages
    assert any('lets any principal ("*") use key' in m for m in messages), messages


def test_only_the_deployer_is_exempt_through_the_store_creating_services_without_people(
    cloud_plan: Callable[[str], Plan], named: Callable[[PlanDict], set[str]]
) -> None:
    """Without key custodians the root administers the keys unconditioned, and the deployer is the one
    principal the store-creating statements name (AWS KMS developer guide, "kms:ViaService"): a second one
    there exempts no one."""
    smb = _read_by_policy(cloud_plan(SMB))
    training_data = f"{SMB}-aws-training-data-key"
    planted = with_inputs(
        smb, lambda r: r["name"] == training_data, _statement("TrainingDataUsersUseKey", _add(STRANGER))
    )
    assert named(planted) == {training_data}


def _iam_statement(resource: str, kind: str = "Resource") -> dict[str, Any]:
    return {
        "Sid": "Planted",
        "Effect": "Allow",
        "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
        kind: resource,
    }


def _verifier_grants(statement: dict[str, Any]) -> Callable[[PlanDict], PlanDict]:
    def apply(plan: PlanDict) -> PlanDict:
        return with_inputs(
            plan,
            lambda r: r["name"] == VERIFIER and r["type"] == "aws:iam/rolePolicy:RolePolicy",
            _append(statement),
        )

    return apply


def _datasets_arn(plan: PlanDict) -> str:
    """The datasets key's ARN as the plan spells it: the datasets bucket's encryption rule's."""
    (sse,) = [
        r
        for r in plan["resources"]
        if r["type"].startswith("aws:s3/bucketServerSideEncryptionConfiguration")
        and r["propertyDependencies"]["rules"] == [_urn(plan, DATASETS)]
    ]
    arn: str = sse["inputs"]["rules"][0]["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"]
    return arn


def _resource(**fields: Any) -> dict[str, Any]:
    kind, name = fields.pop("type"), fields.pop("name")
    return {
        "urn": f"urn:pulumi:{AWS}::ml-platform::{kind}::{name}",
        "type": kind,
        "name": name,
        "custom": True,
        "inputs": fields.pop("inputs"),
        "dependencies": [],
        "propertyDependencies": {},
        **fields,
    }


def _datasets_policy(plan: PlanDict) -> dict[str, Any]:
    document = {"Version": "2012-10-17", "Statement": [_iam_statement(_datasets_arn(plan))]}
    return _resource(
        type="aws:iam/policy:Policy",
        name="planted-datasets-read",
        inputs={"name": "planted-datasets-read", "policy": json.dumps(document)},
    )


def _verifier_role(plan: PlanDict) -> dict[str, Any]:
    (role,) = [r for r in plan["resources"] if r["name"] == VERIFIER and r["type"] == "aws:iam/role:Role"]
    found: dict[str, Any] = role
    return found


def _by_policy_attachment(plan: PlanDict) -> PlanDict:
    planted = copy.deepcopy(plan)
    role_name = _role_arn(planted, VERIFIER).rsplit("/", 1)[1]
    attachment = _resource(
        type="aws:iam/policyAttachment:PolicyAttachment",
        name="planted-attachment",
        inputs={"policyArn": f"{ACCOUNT}:policy/planted-datasets-read", "roles": [role_name]},
    )
    planted["resources"] += [_datasets_policy(planted), attachment]
    return planted


def _by_managed_policy_arns(plan: PlanDict) -> PlanDict:
    planted = copy.deepcopy(plan)
    planted["resources"].append(_datasets_policy(planted))
    _verifier_role(planted)["inputs"]["managedPolicyArns"] = [f"{ACCOUNT}:policy/planted-datasets-read"]
    return planted


def _by_inline_policies(plan: PlanDict) -> PlanDict:
    planted = copy.deepcopy(plan)
    document = {"Version": "2012-10-17", "Statement": [_iam_statement(_datasets_arn(planted))]}
    _verifier_role(planted)["inputs"]["inlinePolicies"] = [
        {"name": "planted", "policy": json.dumps(document)}
    ]
    return planted


CONSUMER_FORMS: list[Any] = [
    # A6. pulumi_aws iam/role.py (inline_policies, managed_policy_arns) and iam/policy_attachment.py
    # (roles): each is a role's IAM policy, so the role is a consumer the key policy must name.
    pytest.param(_by_inline_policies, id="A6-pulumi-aws-role-inline-policies"),
    pytest.param(_by_policy_attachment, id="A6-pulumi-aws-policy-attachment-roles"),
    pytest.param(_by_managed_policy_arns, id="A6-pulumi-aws-role-managed-policy-arns"),
]


@pytest.mark.parametrize("plant", CONSUMER_FORMS)
def test_a_role_using_a_key_through_any_iam_attachment_is_a_consumer(
    enterprise: PlanDict, named: Callable[[PlanDict], set[str]], plant: Callable[[PlanDict], PlanDict]
) -> None:
    assert named(plant(enterprise)) == {DATASETS}


def test_an_iam_user_or_group_uses_a_key_only_where_the_key_policy_names_the_user(
    enterprise: PlanDict, named: Callable[[PlanDict], set[str]]
) -> None:
    """Review rev40e A5, for keys: a key's use needs its key policy and IAM both (AWS KMS developer guide,
    "Default key policy"), and the key policy names users by exact ARN, so an IAM user's or group's grant
    (pulumi_aws iam/user_policy.py, group_policy.py) uses nothing by itself; a user group cannot be a
    principal at all (IAM user guide, "AWS JSON policy elements: Principal"). The key policy side holds
    the class: naming the IAM user that holds the grant, not a person the role-to-key table names, is
    refused; the grants alone leave the key as it is."""
    document = json.dumps({"Version": "2012-10-17", "Statement": [_iam_statement(_datasets_arn(enterprise))]})
    grants = copy.deepcopy(enterprise)
    grants["resources"] += [
        _resource(
            type="aws:iam/userPolicy:UserPolicy",
            name="planted-user",
            inputs={"user": "ops", "policy": document},
        ),
        _resource(
            type="aws:iam/groupPolicy:GroupPolicy",
            name="planted-group",
            inputs={"group": "ops", "policy": document},
        ),
    ]
    assert named(grants) == set()
    user = _outright("OpsUser", {"AWS": f"{ACCOUNT}:user/ops"}, ["kms:Decrypt", "kms:GenerateDataKey"])
    assert named(with_inputs(grants, lambda r: r["name"] == DATASETS, user)) == {DATASETS}


def test_iam_key_wildcards_and_not_resource_select_every_key_like_a_star(
    enterprise: PlanDict, named: Callable[[PlanDict], set[str]]
) -> None:
    """AWS KMS developer guide, "Specifying KMS keys in IAM policy statements": a wildcard in the key ID
    position selects every key of the Region and account; IAM JSON policy reference, "NotResource": every
    resource but those listed. Both spell "Resource": "*" for the role's KMS use (review 35c A6)."""
    every_key = named(_verifier_grants(_iam_statement("*"))(enterprise))
    assert {DATASETS, OBJECT_DATA, SECRETS} <= every_key
    key_wildcard = _iam_statement("arn:aws:kms:me-central-1:123456789012:key/*")
    assert named(_verifier_grants(key_wildcard)(enterprise)) == every_key
    not_resource = _iam_statement("arn:aws:s3:::nothing", kind="NotResource")
    assert named(_verifier_grants(not_resource)(enterprise)) == every_key
    other_region = _iam_statement("arn:aws:kms:eu-west-1:123456789012:key/*")
    assert named(_verifier_grants(other_region)(enterprise)) == set()


def test_a_principal_pattern_is_refused_as_a_pattern(
    enterprise: PlanDict, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    """A readers' statement naming training by ``ArnLike role/<stack>-aws-train-*`` names no one user: the
    finding says it is a pattern, and training still reads as left out (review 35c C5)."""

    def pattern(statement: dict[str, Any]) -> None:
        statement["Condition"]["ArnLike"] = {"aws:PrincipalArn": [f"{ACCOUNT}:role/{AWS}-aws-train-*"]}
        del statement["Condition"]["ArnEquals"]

    planted = with_inputs(
        enterprise, lambda r: r["name"] == DATASETS, _statement("DatasetsReadersDecrypt", pattern)
    )
    messages = [v.message for v in pack.judge(planted, defaults) if v.policy == POLICY]
    assert any("names the pattern" in m for m in messages)
    assert any("does not name it" in m for m in messages)


def _grantees(value: Any, operator: str = "ArnLike") -> Edit:
    return _statement(
        "GrantsOnlyToServiceLinkedRoles",
        lambda s: s.__setitem__("Condition", {operator: {"kms:GranteePrincipal": value}}),
    )


@pytest.mark.parametrize(
    ("plant", "refused"),
    [
        pytest.param(_grantees(f"{ACCOUNT}:role/aws-service-role/*"), False, id="shipped-service-linked"),
        pytest.param(_grantees(f"{ACCOUNT}:role/*"), True, id="any-role-of-the-account"),
        pytest.param(_grantees("*", "StringLike"), True, id="any-grantee"),
        pytest.param(_grantees(f"{OTHER_ACCOUNT}:role/aws-service-role/*"), True, id="other-accounts-slr"),
        pytest.param(
            _grantees(f"{ACCOUNT}:role/aws-service-role/*", "ArnNotLike"), True, id="negated-operator"
        ),
    ],
)
def test_the_roots_grants_are_held_to_service_linked_grantees(
    enterprise: PlanDict,
    pack: PolicyPackSession,
    defaults: dict[str, PolicySettings],
    plant: Edit,
    refused: bool,
) -> None:
    """Review rev35e A2: the account root's ``kms:CreateGrant`` is limited by the VALUE of
    ``kms:GranteePrincipal`` (AWS KMS developer guide, "kms:GranteePrincipal": "only for the specified
    grantee principal"; "Grants in AWS KMS": a grant gives its grantee use), so any grantee but a
    service-linked role of the stack's account (IAM user guide, "Using service-linked roles") lets a key
    custodian grant itself use: ``key-duties-separated`` refuses it."""
    planted = with_inputs(enterprise, lambda r: r["name"] == DATASETS, plant)
    refusing = {policy for policy, name in found(pack.judge(planted, defaults)) if name == DATASETS}
    assert ("key-duties-separated" in refusing) is refused, refusing


def _key_policy_resource(plan: PlanDict, document: dict[str, Any]) -> PlanDict:
    """A ``KeyPolicy`` attached to the datasets key by its ``keyId``'s property dependency, through the
    key's provider (its Region)."""
    key = _urn(plan, DATASETS)
    (provider,) = [r.get("provider") for r in plan["resources"] if r["urn"] == key]
    attached = _resource(
        provider=provider,
        type="aws:kms/keyPolicy:KeyPolicy",
        name="planted-key-policy",
        inputs={"keyId": UNKNOWN_STRING, "policy": json.dumps(document)},
        dependencies=[key],
        propertyDependencies={"keyId": [key]},
    )
    return {**plan, "resources": [*plan["resources"], attached]}


def test_a_key_policy_resource_is_judged_as_its_keys_policy(
    enterprise: PlanDict, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    """Review rev35e A3: an ``aws:kms/keyPolicy:KeyPolicy`` replaces its key's policy (pulumi_aws
    kms/key_policy.py, "Attaches a KMS Key Policy to a KMS Key"), so it is judged as the key's: one giving
    ``kms:*`` to ``Principal {"AWS": "*"}`` is refused by ``key-users-named`` and ``key-duties-separated``,
    while one carrying the key's own policy passes."""
    (key,) = [r for r in enterprise["resources"] if r["name"] == DATASETS]
    judged = {POLICY, "key-duties-separated"}

    def refusing(plan: PlanDict) -> set[str]:
        return {p for p, name in found(pack.judge(plan, defaults)) if name == DATASETS} & judged

    assert refusing(_key_policy_resource(enterprise, json.loads(key["inputs"]["policy"]))) == set()
    everyone = {
        "Sid": "Everyone",
        "Effect": "Allow",
        "Principal": {"AWS": "*"},
        "Action": "kms:*",
        "Resource": "*",
    }
    opened = {"Version": "2012-10-17", "Statement": [everyone]}
    assert refusing(_key_policy_resource(enterprise, opened)) == judged


@pytest.mark.parametrize(
    "condition",
    [
        {"StringEquals": {"aws:SourceAccount": "123456789012"}},
        {"ArnLike": {"aws:SourceArn": "arn:aws:logs:me-central-1:123456789012:log-group:*"}},
        {
            "ArnLike": {
                "kms:EncryptionContext:aws:logs:arn": "arn:aws:logs:me-central-1:123456789012:log-group:*"
            }
        },
    ],
)
def test_a_service_principal_bound_to_the_stacks_account_passes(
    enterprise: PlanDict, named: Callable[[PlanDict], set[str]], condition: dict[str, Any]
) -> None:
    """Review rev35e A5's other side: the confused-deputy conditions the guides give (IAM user guide, "The
    confused deputy problem"; CloudWatch Logs user guide, "Encrypt log data in CloudWatch Logs using AWS
    KMS") naming the stack's account keep a service principal's use to its resources."""
    bound = _outright("LogsBound", {"Service": "logs.amazonaws.com"}, ["kms:Decrypt"], Condition=condition)
    assert named(with_inputs(enterprise, lambda r: r["name"] == DATASETS, bound)) == set()


def test_a_service_principal_tied_only_by_the_service_it_comes_through_is_refused(
    enterprise: PlanDict, named: Callable[[PlanDict], set[str]]
) -> None:
    """Review rev35f C2: ``kms:ViaService`` limits the service a request comes through, not the account
    whose resource it serves (AWS KMS developer guide, "kms:ViaService"), so it binds a service principal
    to nothing (IAM user guide, "The confused deputy problem")."""
    via = {"StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}}
    loose = _outright("LogsVia", {"Service": "logs.amazonaws.com"}, ["kms:Decrypt"], Condition=via)
    assert named(with_inputs(enterprise, lambda r: r["name"] == DATASETS, loose)) == {DATASETS}


TRAINING = f"{AWS}-aws-identities-training"
ROLLOUT = f"{AWS}-aws-identities-rollout"
DRIFT_MONITOR = f"{AWS}-aws-identities-drift-monitor"
REGISTRY = f"{AWS}-aws-identities-registry"
CLUSTER_ROLE = f"{AWS}-aws-cluster-role"
EBS_CSI = f"{AWS}-aws-addons-ebs-csi"
# Another EKS cluster's OIDC issuer in the same account, and GitHub's (review rev35f A2).
OTHER_ISSUER = "oidc.eks.me-central-1.amazonaws.com/id/0THERC1USTER0000000000000000000"
GITHUB_ISSUER = "token.actions.githubusercontent.com"
Trust = Callable[[dict[str, Any]], None]


def _also_trusts(**trusted: Any) -> Trust:
    def edit(document: dict[str, Any]) -> None:
        document["Statement"].append({"Effect": "Allow", "Action": "sts:AssumeRole", **trusted})

    return edit


def _web_identity(issuer: str, subject: str) -> dict[str, Any]:
    return {
        "Effect": "Allow",
        "Principal": {"Federated": f"{ACCOUNT}:oidc-provider/{issuer}"},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{issuer}:sub": subject, f"{issuer}:aud": "sts.amazonaws.com"}},
    }


def _also_provider(issuer: str, subject: str) -> Trust:
    def edit(document: dict[str, Any]) -> None:
        document["Statement"].append(_web_identity(issuer, subject))

    return edit


def _repointed(issuer: str, subject: str) -> Trust:
    def edit(document: dict[str, Any]) -> None:
        document["Statement"] = [_web_identity(issuer, subject)]

    return edit


TRAINER = "system:serviceaccount:ml-training:trainer"


@pytest.mark.parametrize(
    ("role", "edit"),
    [
        pytest.param(
            TRAINING, _also_trusts(Principal={"AWS": f"{OTHER_ACCOUNT}:root"}), id="another-account"
        ),
        pytest.param(
            INFERENCE,
            _also_trusts(
                Principal={"AWS": "*"}, Condition={"StringEquals": {"aws:PrincipalOrgID": "o-abc123"}}
            ),
            id="star-with-org-id",
        ),
        pytest.param(TRAINING, _also_trusts(Principal={"AWS": f"{ACCOUNT}:root"}), id="the-accounts-root"),
        # Review rev35f A1: every role of the stack, not three (t1, t2, t5, t8, t9).
        pytest.param(
            ROLLOUT, _also_trusts(Principal={"AWS": f"{OTHER_ACCOUNT}:root"}), id="rollout-another-account"
        ),
        pytest.param(
            DRIFT_MONITOR,
            _also_trusts(
                Principal={"AWS": "*"}, Condition={"StringEquals": {"aws:PrincipalOrgID": "o-abc123"}}
            ),
            id="drift-monitor-star-with-org-id",
        ),
        pytest.param(VERIFIER, _also_trusts(Principal={"AWS": f"{ACCOUNT}:root"}), id="image-verifier-root"),
        pytest.param(
            CLUSTER_ROLE,
            _also_trusts(Principal={"AWS": f"{OTHER_ACCOUNT}:root"}),
            id="eks-cluster-role-another",
        ),
        pytest.param(EBS_CSI, _also_trusts(Principal={"AWS": f"{ACCOUNT}:root"}), id="ebs-csi-root"),
        # Review rev35f A2: a web identity from another OIDC provider than the cluster's (t3, t4, t7).
        pytest.param(TRAINING, _also_provider(OTHER_ISSUER, TRAINER), id="second-cluster-provider-same-sub"),
        pytest.param(TRAINING, _repointed(OTHER_ISSUER, TRAINER), id="repointed-to-another-provider"),
        pytest.param(
            REGISTRY,
            _also_provider(GITHUB_ISSUER, "system:serviceaccount:ml-registry:registry"),
            id="github-provider",
        ),
    ],
)
def test_a_roles_trust_admitting_other_than_its_documented_assumer_is_refused(
    enterprise: PlanDict,
    pack: PolicyPackSession,
    defaults: dict[str, PolicySettings],
    role: str,
    edit: Trust,
) -> None:
    """Reviews rev35e A4, rev35f A1 and A2: every role of the stack is assumed only by its service account's
    web identity through the stack's own cluster OIDC provider (EKS user guide, "Assign IAM roles to
    Kubernetes service accounts"), or by the AWS service of a service role (IAM user guide, "Role trust
    policies"; "AWS JSON policy elements: Principal": "Do not leave your role accessible to everyone!"). Any
    other assumer, another account, ``*`` with an org id, the account root, another provider with the same
    ``sub``, becomes a user of the keys the role's key policies name it for: ``identity-per-role`` refuses
    the role; the shipped trust passes."""

    def trust(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs["assumeRolePolicy"])
        edit(document)
        inputs["assumeRolePolicy"] = json.dumps(document)

    def refused(plan: PlanDict) -> bool:
        return ("identity-per-role", role) in found(pack.judge(plan, defaults))

    assert not refused(enterprise)
    assert refused(
        with_inputs(enterprise, lambda r: r["name"] == role and r["type"] == "aws:iam/role:Role", trust)
    )


@pytest.mark.parametrize("role", [TRAINING, CLUSTER_ROLE])
def test_session_tags_beside_the_documented_assumer_pass(
    enterprise: PlanDict, pack: PolicyPackSession, defaults: dict[str, PolicySettings], role: str
) -> None:
    """Review rev35f C1: a trust that lets its web identity or its service pass session tags allows
    ``sts:TagSession`` beside the assume action (IAM user guide, "Passing session tags in AWS STS"; EKS user
    guide, "EKS Pod Identity"); it admits no one else."""

    def tag_session(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs["assumeRolePolicy"])
        for statement in document["Statement"]:
            statement["Action"] = [statement["Action"], "sts:TagSession"]
        inputs["assumeRolePolicy"] = json.dumps(document)

    tagged = with_inputs(
        enterprise, lambda r: r["name"] == role and r["type"] == "aws:iam/role:Role", tag_session
    )
    assert ("identity-per-role", role) not in found(pack.judge(tagged, defaults))
