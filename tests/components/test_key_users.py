"""Which people's role uses which data key (issue 35 item 3; review 35 A1), from the one role-to-key table
(``policies/key_users.yaml``):

- docs/security.md's table ("Which people's role uses which key") is that file, line for line;
- each AWS data key's use statement for the account root leaves out exactly the named people whose roles
  the table does not give the key's domain (KMS developer guide, "Default key policy", "Allows access to
  the AWS account and enables IAM policies": such a statement lets any account principal whose IAM policy
  allows it use the key; S3 user guide, "Using server-side encryption with AWS KMS keys (SSE-KMS)": a
  reader of an SSE-KMS bucket decrypts with the bucket's key under its own identity);
- the model approvers' cloud identities (``access.modelApprovers``) get the lifecycle record writers'
  rights: the policy attached on AWS, the writer role on the record's account on Azure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from components.aws.audit import AUDIT_DOMAIN
from components.aws.keys import DATASETS_DOMAIN
from components.config import KeyDomain
from components.key_users import TABLE, table
from mlplatform.plan import Plan
from tests.stack_variants import PEOPLE_AWS, PEOPLE_AZURE

AWS = "aws-enterprise-prod"
AZURE = "azure-enterprise-prod"
HEADER = "| people's role | AWS keys it may use | Azure keys it may use | why |"
ADMIN, CUSTODIAN = PEOPLE_AWS["platformAdmins"][0], PEOPLE_AWS["keyCustodians"][0]
AUDITOR, APPROVER = PEOPLE_AWS["auditors"][0], PEOPLE_AWS["modelApprovers"][0]
ENGINEERS = [arns[0] for arns in PEOPLE_AWS["mlEngineers"].values()]
EVERYONE = sorted([ADMIN, CUSTODIAN, AUDITOR, APPROVER, *ENGINEERS])


def _documented() -> list[str]:
    lines = Path("docs/security.md").read_text().splitlines()
    start = lines.index(HEADER)
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    return lines[start:end]


def _listed(domains: list[str]) -> str:
    return ", ".join(domains) or "none"


def test_the_docs_table_is_the_role_to_key_table() -> None:
    roles = yaml.safe_load(TABLE.read_text())["roles"]
    rendered = [HEADER, "|---|---|---|---|"] + [
        f"| {role} | {_listed(keys['aws'])} | {_listed(keys['azure'])} | {keys['why']} |"
        for role, keys in roles.items()
    ]
    assert _documented() == rendered
    assert set(table().roles) == {
        "platform-admin",
        "key-custodian",
        "ml-engineer",
        "model-approver",
        "auditor",
    }
    # Every domain it names is one the stack has a key for (a misspelt one would keep its role off every key).
    known = {d.value for d in KeyDomain} | {DATASETS_DOMAIN, AUDIT_DOMAIN}
    assert {d for keys in table().roles.values() for d in (*keys.aws, *keys.azure)} <= known


def _left_out(plan: Plan) -> dict[str, list[str]]:
    """Each KMS key's domains -> the roles its root use statement leaves out."""
    found: dict[str, list[str]] = {}
    for key in plan.by_type("aws:kms/key:Key"):
        for statement in json.loads(key.inputs["policy"])["Statement"]:
            condition = statement.get("Condition", {})
            if "kms:Decrypt" in statement["Action"] and statement["Principal"].get("AWS", "").endswith(
                ":root"
            ):
                domains = key.inputs["tags"]["ml-platform.io/data-domain"]
                found[domains] = condition.get("ArnNotEquals", {}).get("aws:PrincipalArn", [])
    return found


def test_each_aws_key_leaves_out_the_people_the_table_keeps_off_it(
    people_plan: Callable[[str], Plan],
) -> None:
    assert _left_out(people_plan(AWS)) == {
        # The auditors and the model approvers read and append the lifecycle record (its bucket's key).
        "object-data": sorted([ADMIN, CUSTODIAN, *ENGINEERS]),
        # The ML engineers put the training data in.
        "datasets": sorted([ADMIN, APPROVER, AUDITOR, CUSTODIAN]),
        # The auditors read the trail's bucket.
        "audit": sorted([ADMIN, APPROVER, CUSTODIAN, *ENGINEERS]),
        **{
            domain: EVERYONE
            for domain in (
                "kubernetes-secrets",
                "registry-database",
                "training-data",
                "images",
                "node-volumes",
            )
        },
    }


def test_the_approvers_get_the_record_writers_rights(people_plan: Callable[[str], Plan]) -> None:
    aws = people_plan(AWS)
    attached = {
        a.inputs["role"]
        for a in aws.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if "-record-writer-" in a.name
    }
    assert attached == {APPROVER.rsplit("/", 1)[1]}
    writer = next(p for p in aws.by_type("aws:iam/policy:Policy") if "-record-writer" in p.name)
    assert writer.inputs["tags"]["ml-platform.io/access-roles"] == "model-approver"
    azure = people_plan(AZURE)
    approver = PEOPLE_AZURE["modelApprovers"][0]
    (assignment,) = [
        a
        for a in azure.by_type("azure-native:authorization:RoleAssignment")
        if a.inputs.get("description") == "ml-platform access: model-approver"
    ]
    assert assignment.inputs["principalId"] == approver
    assert assignment.inputs["principalType"] == "Group"
    # The rollout's own grant: the record writer role on the record's account, nothing more.
    rollout = next(
        a
        for a in azure.by_type("azure-native:authorization:RoleAssignment")
        if a.name.endswith("-rollout-identity-record-writer")
    )
    assert (assignment.inputs["roleDefinitionId"], assignment.inputs["scope"]) == (
        rollout.inputs["roleDefinitionId"],
        rollout.inputs["scope"],
    )
