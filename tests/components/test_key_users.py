"""Which people's role uses which data key (issue 35 item 3; review 35 A1), from the one role-to-key table
(``policies/key_users.yaml``):

- docs/security.md's table ("Which people's role uses which key") is that file, line for line;
- each AWS data key's use statements for the account root name exactly the named people whose roles the
  table gives the key's domain, the readers with kms:Decrypt alone (KMS developer guide, "Default key
  policy", "Allows access to the AWS account and enables IAM policies": such a statement lets the account
  principals it names use the key where their IAM policy allows it; S3 user guide, "Using server-side
  encryption with AWS KMS keys (SSE-KMS)": a reader of an SSE-KMS bucket decrypts with the bucket's key
  under its own identity);
- the people who append to the lifecycle record with their own identity (docs/lifecycle.md: the model
  approvers approve, reject and promote; the ML engineers request promotions and pause, resume or abort
  rollouts; review 35b A1) get the record writers' rights: a policy tagged with their people's role
  attached on AWS, the writer role on the record's account on Azure.
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


def _listed(modes: dict[str, str]) -> str:
    return ", ".join(f"{domain} ({mode})" for domain, mode in modes.items()) or "none"


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


def _people_named(plan: Plan) -> dict[str, dict[str, list[str]]]:
    """Each KMS key's domains -> statement id -> the named people its root use statements name."""
    everyone = set(EVERYONE)
    found: dict[str, dict[str, list[str]]] = {}
    for key in plan.by_type("aws:kms/key:Key"):
        domains = key.inputs["tags"].get("ml-platform.io/data-domain")
        for statement in json.loads(key.inputs["policy"])["Statement"]:
            if "kms:Decrypt" in statement["Action"] and statement["Principal"].get("AWS", "").endswith(
                ":root"
            ):
                users = statement["Condition"]["ArnEquals"]["aws:PrincipalArn"]
                if named := sorted(everyone & set(users)):
                    found.setdefault(domains, {})[statement["Sid"]] = named
    return found


def test_each_aws_key_names_the_people_the_table_gives_it_and_no_other(
    people_plan: Callable[[str], Plan],
) -> None:
    assert _people_named(people_plan(AWS)) == {
        # The registry appends to the lifecycle record (its bucket's key) for everyone (review rev40c A1): the
        # people only read it, the ML engineers too, though they write the datasets bucket
        # (policies/key_users.yaml gives a mode per key).
        "object-data": {"ObjectDataReadersDecrypt": sorted([APPROVER, AUDITOR, *ENGINEERS])},
        # The ML engineers put the training data in.
        "datasets": {"DatasetsUsersUseKey": sorted(ENGINEERS)},
        # The auditors read the trail's bucket, with kms:Decrypt alone (review 35 C1).
        "audit": {"AuditReadersDecrypt": [AUDITOR]},
    }


def test_the_people_who_act_on_the_record_read_it_and_only_the_registry_writes(
    people_plan: Callable[[str], Plan],
) -> None:
    """Review rev40c A1: the approvers and the ML engineers append through the registry, which names them
    as it authenticated them; their own cloud identities read the record, never write it. They read every
    event's version (review rev35f A7: a delete marker hides the current object, never its versions)."""
    aws = people_plan(AWS)
    policies = {p.urn: p for p in aws.by_type("aws:iam/policy:Policy") if "-record-reader" in p.name}
    # One read-only policy per people's role (the pack reads the role from its tag), the same rights.
    writers = {p.inputs["tags"]["ml-platform.io/access-roles"]: p for p in policies.values()}
    assert set(writers) == {"model-approver", "ml-engineer"}
    assert writers["model-approver"].inputs["policy"] == writers["ml-engineer"].inputs["policy"]
    statements = json.loads(writers["ml-engineer"].inputs["policy"])["Statement"]
    assert {
        a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    } == {"s3:ListBucket", "s3:ListBucketVersions", "s3:GetObject", "s3:GetObjectVersion", "kms:Decrypt"}
    attached: dict[str, set[str]] = {}
    for attachment in aws.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment"):
        for role, policy in writers.items():
            if attachment.property_dependencies.get("policyArn") == [policy.urn]:
                attached.setdefault(role, set()).add(attachment.inputs["role"])
    assert attached == {
        "model-approver": {APPROVER.rsplit("/", 1)[1]},
        "ml-engineer": {arn.rsplit("/", 1)[1] for arn in ENGINEERS},
    }
    azure = people_plan(AZURE)
    assignments = list(azure.by_type("azure-native:authorization:RoleAssignment"))
    # The registry's grant: the record writer role on the record's account, held by no one else.
    [registry] = [a for a in assignments if a.name.endswith("-registry-identity-record-writer")]
    writer = registry.inputs["roleDefinitionId"]
    assert [a.name for a in assignments if a.inputs.get("roleDefinitionId") == writer] == [registry.name]
    # The people read the record's account (Storage Blob Data Reader, built-in id 2a2b9908-…).
    holders = {
        (a.inputs["description"], a.inputs["principalId"], a.inputs["principalType"])
        for a in assignments
        if a.inputs.get("scope") == registry.inputs["scope"]
        and str(a.inputs.get("roleDefinitionId", "")).endswith("2a2b9908-6ea1-4ae2-8e65-a410df84e7d1")
        and str(a.inputs.get("description", "")).startswith("ml-platform access: ")
    }
    engineers = [g for groups in PEOPLE_AZURE["mlEngineers"].values() for g in groups]
    assert holders == {
        ("ml-platform access: model-approver", PEOPLE_AZURE["modelApprovers"][0], "Group"),
        *(("ml-platform access: ml-engineer", group, "Group") for group in engineers),
    }
