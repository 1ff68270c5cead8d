"""Every AWS data key names exactly its users (issue 35 item 3: "each its own customer key with a policy
naming only its users"; item 2: "the deployer identity is not left with standing data rights after
`pulumi up` where the cloud allows it"; review 35 A1, C1, C4).

The class: a role whose IAM policy in the plan grants a KMS use action on key K, or an S3 object action on
a bucket K encrypts (S3 user guide, "Using server-side encryption with AWS KMS keys (SSE-KMS)": a caller
of an SSE-KMS bucket uses its key with its own identity), is a consumer of K; K's policy must name every
consumer (KMS developer guide, "Default key policy": a use needs the key policy and IAM both, so a
consumer left out breaks at run time) and no other principal: beside the consumers, the named people the
role-to-key table (policies/key_users.yaml) gives K's domains, and the deployer only where the cloud needs
it (the registry database's managed password and the file systems: components/aws/keys.py
``DOMAIN_USERS``). A consumer that only reads (kms:Decrypt, s3:GetObject) is named with kms:Decrypt alone.
Services that attach the key through grants (``kms:GrantIsForAWSResource``) and service-linked roles are
outside the class. Shown both ways: the shipped plans have no finding, and a consumer left out, an extra
principal let in, a reader given GenerateDataKey and the deployer kept on the datasets key are each found.
"""

from __future__ import annotations

import copy
import fnmatch
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from components.key_users import table
from mlplatform.plan import Plan
from tests.stack_variants import PEOPLE_AWS

AWS = "aws-enterprise-prod"
SMB = "aws-smb-dev"
# The mocks' deployer (mlplatform/mocks.py getCallerIdentity: a user, its own session issuer).
DEPLOYER = "arn:aws:iam::123456789012:user/mock"
# Domains whose stores the deployer creates through a service that uses the caller's key rights.
DEPLOYER_DOMAINS = {"registry-database", "training-data"}
KMS_WRITE = ("kms:Encrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:GenerateDataKey")
KMS_READ = ("kms:Decrypt",)
S3_WRITE = ("s3:PutObject",)
S3_READ = ("s3:GetObject", "s3:GetObjectVersion")
PEOPLE_ROLES = {
    "platformAdmins": "platform-admin",
    "keyCustodians": "key-custodian",
    "modelApprovers": "model-approver",
    "auditors": "auditor",
}
Resources = list[dict[str, Any]]
# principal (a role's name, or an ARN outside IAM roles) -> "write" or "read"
Users = dict[str, str]


def _strings(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def _granted(actions: list[str], wanted: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(w, a) or fnmatch.fnmatchcase(a, w) for a in actions for w in wanted)


def _name(arn: str) -> str:
    """A role's name from its ARN; another principal (the deployer, a user) stays its ARN."""
    return arn.rsplit("/", 1)[-1] if ":role/" in arn else arn


def _merge(users: Users, principal: str, mode: str) -> None:
    users[principal] = "write" if "write" in (mode, users.get(principal)) else "read"


def _keys(resources: Resources) -> dict[str, dict[str, Any]]:
    """Each data key (tagged with its domains) by name: the mocks' key ARN ends in ``<name>-<hash>``."""
    return {
        r["name"]: r
        for r in resources
        if r["type"] == "aws:kms/key:Key" and "ml-platform.io/data-domain" in r["inputs"].get("tags", {})
    }


def _key_of(arn: str, keys: dict[str, dict[str, Any]]) -> str | None:
    segment = arn.rsplit(":", 1)[-1]
    return next((name for name in keys if segment.startswith(f"{name}-")), None)


def _role_policies(resources: Resources) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role name, IAM policy document) for every inline policy and every managed policy the plan attaches
    (the mocks give a role the id ``<name>-id`` and a managed policy the ARN ending in its name)."""
    managed = {
        r["inputs"]["namePrefix"]: json.loads(r["inputs"]["policy"])
        for r in resources
        if r["type"] == "aws:iam/policy:Policy"
    }
    for r in resources:
        if r["type"] == "aws:iam/rolePolicy:RolePolicy":
            yield r["inputs"]["role"].removesuffix("-id"), json.loads(r["inputs"]["policy"])
        elif r["type"] == "aws:iam/rolePolicyAttachment:RolePolicyAttachment":
            segment = r["inputs"]["policyArn"].rsplit(":", 1)[-1]
            for prefix, document in managed.items():
                if segment.startswith(prefix):
                    yield r["inputs"]["role"], document


def consumers(resources: Resources) -> dict[str, Users]:
    """Each data key -> the roles whose IAM policy grants them a use of it or of a bucket it encrypts."""
    keys = _keys(resources)
    buckets: dict[str, str] = {}
    for r in resources:
        if r["type"].startswith("aws:s3/bucketServerSideEncryptionConfiguration"):
            for rule in r["inputs"]["rules"]:
                key = _key_of(rule["applyServerSideEncryptionByDefault"].get("kmsMasterKeyId", ""), keys)
                if key:
                    buckets[r["inputs"]["bucket"].removesuffix("-id")] = key
    found: dict[str, Users] = {name: {} for name in keys}
    for role, document in _role_policies(resources):
        for statement in document["Statement"]:
            if statement.get("Effect", "Allow") != "Allow":
                continue
            actions = _strings(statement.get("Action"))
            for resource in _strings(statement.get("Resource")):
                key = _key_of(resource, keys)
                bucket = buckets.get(resource.rsplit(":", 1)[-1].split("/", 1)[0])
                if key and _granted(actions, KMS_WRITE):
                    _merge(found[key], role, "write")
                elif key and _granted(actions, KMS_READ):
                    _merge(found[key], role, "read")
                elif bucket and "/" in resource and _granted(actions, S3_WRITE):
                    _merge(found[bucket], role, "write")
                elif bucket and "/" in resource and _granted(actions, S3_READ):
                    _merge(found[bucket], role, "read")
    return found


def named(resources: Resources) -> dict[str, Users]:
    """Each data key -> the principals its policy lets use it for data: the account root's use statements'
    ``aws:PrincipalArn`` roles, and any principal named outright but AWS service-linked roles."""
    found: dict[str, Users] = {}
    for name, key in _keys(resources).items():
        users: Users = {}
        for statement in json.loads(key["inputs"]["policy"])["Statement"]:
            actions = _strings(statement["Action"])
            if statement["Effect"] != "Allow" or not _granted(actions, (*KMS_WRITE, *KMS_READ)):
                continue
            mode = "write" if _granted(actions, KMS_WRITE) else "read"
            for principal in _strings(statement["Principal"].get("AWS")):
                if principal.endswith(":root"):
                    condition = statement.get("Condition", {})
                    principals = [
                        a for op in condition.values() for a in _strings(op.get("aws:PrincipalArn"))
                    ]
                    principals = principals or ["<every account principal its IAM allows>"]
                elif "/aws-service-role/" in principal:
                    continue
                else:
                    principals = [principal]
                for each in principals:
                    _merge(users, _name(each), mode)
        found[name] = users
    return found


def people(access: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for field, arns in access.items():
        for arn in arns.values() if isinstance(arns, dict) else [arns]:
            for each in _strings(arn):
                yield each, PEOPLE_ROLES.get(field, "ml-engineer")


def expected(resources: Resources, access: dict[str, Any]) -> dict[str, Users]:
    """The consumers, the people the role-to-key table gives each key's domains, and the deployer where
    the cloud needs it."""
    wanted = consumers(resources)
    for name, key in _keys(resources).items():
        domains = set(key["inputs"]["tags"]["ml-platform.io/data-domain"].split())
        for arn, role in people(access):
            keys = table().roles[role]
            if domains & set(keys.aws):
                _merge(wanted[name], _name(arn), "read" if keys.reads_only else "write")
        if domains & DEPLOYER_DOMAINS:
            _merge(wanted[name], DEPLOYER, "write")
    return wanted


def findings(resources: Resources, access: dict[str, Any]) -> list[str]:
    """One line per principal a key leaves out, lets in beyond its users, or lets write where it reads."""
    out: list[str] = []
    have, want = named(resources), expected(resources, access)
    for key in sorted(want):
        for principal in sorted(set(have[key]) | set(want[key])):
            if principal not in have[key]:
                out.append(f"{key}: consumer {principal} is not named")
            elif principal not in want[key]:
                out.append(f"{key}: {principal} is named but uses nothing under it")
            elif have[key][principal] != want[key][principal]:
                out.append(f"{key}: {principal} may {have[key][principal]} but needs {want[key][principal]}")
    return out


@pytest.fixture(scope="module")
def enterprise(people_plan: Callable[[str], Plan]) -> Resources:
    resources: Resources = people_plan(AWS).to_dict()["resources"]
    return resources


def _use_statement(resources: Resources, key: str, sid: str) -> dict[str, Any]:
    (found,) = [r for r in resources if r["name"] == key]
    policy = json.loads(found["inputs"]["policy"])
    statements: list[dict[str, Any]] = [s for s in policy["Statement"] if s["Sid"] == sid]
    (statement,) = statements
    return statement


def _planted(resources: Resources, key: str, sid: str, edit: Callable[[dict[str, Any]], None]) -> Resources:
    changed = copy.deepcopy(resources)
    (found,) = [r for r in changed if r["name"] == key]
    policy = json.loads(found["inputs"]["policy"])
    edit(next(s for s in policy["Statement"] if s["Sid"] == sid))
    found["inputs"]["policy"] = json.dumps(policy)
    return changed


def test_every_key_names_exactly_its_consumers_and_people(
    enterprise: Resources, cloud_plan: Callable[[str], Plan]
) -> None:
    assert findings(enterprise, PEOPLE_AWS) == []
    assert findings(cloud_plan(SMB).to_dict()["resources"], {}) == []
    # The class is not empty: every workload's S3 and Secrets Manager use is among the consumers.
    used = consumers(enterprise)
    assert {mode for users in used.values() for mode in users.values()} == {"read", "write"}
    assert len([u for users in used.values() for u in users]) >= 9


def test_the_secrets_key_names_the_cluster_role_by_its_exact_arn(enterprise: Resources) -> None:
    statement = _use_statement(enterprise, f"{AWS}-aws-key-key", "KubernetesSecretsUsersUseKey")
    (role,) = statement["Condition"]["ArnEquals"]["aws:PrincipalArn"]
    assert "*" not in role
    assert "ArnLike" not in statement["Condition"]
    (cluster_role,) = [
        r for r in enterprise if r["name"] == f"{AWS}-aws-cluster-role" and r["type"] == "aws:iam/role:Role"
    ]
    assert _name(role).startswith(cluster_role["inputs"]["namePrefix"])


def test_readers_only_decrypt(enterprise: Resources) -> None:
    statement = _use_statement(enterprise, f"{AWS}-aws-audit-key", "AuditReadersDecrypt")
    assert statement["Action"] == ["kms:Decrypt", "kms:DescribeKey"]
    assert statement["Condition"]["ArnEquals"]["aws:PrincipalArn"] == PEOPLE_AWS["auditors"]


DATASETS = f"{AWS}-aws-datasets-key"
OBJECT_DATA = f"{AWS}-aws-object-data-key"


def _drop_training(statement: dict[str, Any]) -> None:
    arns = statement["Condition"]["ArnEquals"]["aws:PrincipalArn"]
    arns[:] = [a for a in arns if "-train-" not in a]


def _add(arn: str) -> Callable[[dict[str, Any]], None]:
    def edit(statement: dict[str, Any]) -> None:
        statement["Condition"]["ArnEquals"]["aws:PrincipalArn"].append(arn)

    return edit


@pytest.mark.parametrize(
    ("key", "sid", "edit", "finding"),
    [
        pytest.param(
            OBJECT_DATA,
            "ObjectDataUsersUseKey",
            _drop_training,
            "consumer aws-enterprise-prod-aws-train-",
            id="consumer-left-out",
        ),
        pytest.param(
            OBJECT_DATA,
            "ObjectDataUsersUseKey",
            _add(PEOPLE_AWS["platformAdmins"][0]),
            "platform-admins is named",
            id="extra-principal",
        ),
        pytest.param(
            DATASETS,
            "DatasetsUsersUseKey",
            _add(DEPLOYER),
            f"{DEPLOYER} is named but uses nothing",
            id="deployer-keeps-datasets",
        ),
        pytest.param(
            OBJECT_DATA,
            "ObjectDataUsersUseKey",
            _add(PEOPLE_AWS["auditors"][0]),
            "auditors may write but needs read",
            id="reader-writes",
        ),
    ],
)
def test_a_planted_key_user_defect_is_found(
    enterprise: Resources,
    key: str,
    sid: str,
    edit: Callable[[dict[str, Any]], None],
    finding: str,
) -> None:
    found = findings(_planted(enterprise, key, sid, edit), PEOPLE_AWS)
    assert len(found) == 1, found
    assert found[0].startswith(f"{key}: ") and finding in found[0], found
