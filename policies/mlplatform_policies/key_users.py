"""``key-use-by-role``: no person uses a data key its role does not need (issue 35 item 3; review 35 A1).

The role-to-key table (``policies/key_users.yaml``, the same file the program builds its key policies
from) lists, per people's role and cloud, the data domains whose key the role may use for data. The pack
refuses a key policy or role assignment that lets a named person use a key of any other domain:

- AWS: who the stack names as a person: an EKS access entry's principal, its roles in the tag
  ``ml-platform.io/access-roles`` (components/aws/access.py), and each role a people's managed policy is
  attached to (the auditors' policy, the lifecycle record writers' for the model approvers: the policy's
  same tag, the attachment's ``role``); the key custodians are ``key-duties-separated``'s. Who a KMS key
  policy lets use the key (an Allow of ``kms:Encrypt``, ``Decrypt``, ``ReEncrypt*`` or
  ``GenerateDataKey*``): a principal it names (a role session, ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/
  SESSION``, is its role's person; review 35 A3); for a statement of the account root (AWS KMS developer
  guide, "Default key policy", "Allows access to the AWS account and enables IAM policies": any account
  principal whose IAM policy allows it), each person its ``aws:PrincipalArn`` condition names (``ArnLike``,
  ``ArnEquals``), or, naming none, every person it does not leave out (``ArnNotEquals``, ``ArnNotLike``).
  The key's domains are its tag ``ml-platform.io/data-domain``.
- Azure: a people's role assignment (description ``ml-platform access: <role>``), or any assignment to a
  person those name, by principal (object) id whatever its description (review 35 A4), whose role uses keys:
  Key Vault Administrator, Crypto Officer, Crypto User, Crypto Service Encryption User or Crypto Service
  Release User (their data actions include the keys' cryptographic operations: Azure built-in roles,
  "Security", learn.microsoft.com/azure/role-based-access-control/built-in-roles/security), or a custom
  role whose data actions cover encrypt, decrypt, wrap, unwrap, sign or release and whose
  ``notDataActions`` do not take them out. The table gives no people's role an Azure key (Azure's stores
  encrypt through their own identities), so any such assignment is refused; and the deployer's key
  administration on the stack's vaults (described ``ml-platform deployer: key administration``) uses no
  key either (review 35 A5).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML is in the pack's venv; its stubs are not
from pulumi_policy import Severity

from .audit import granted_data_actions
from .duties import DEPLOYER_KEYS_DESCRIPTION, attached_people
from .factory import Finding, StackRule, stack_policy
from .key_domains import declared_domains
from .separation import KMS_KEY, allowed_statements, is_account_root, principal_arns, principals, uses_key
from .subject import Graph, Subject
from .values import parse_document

ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
ACCESS_ROLES_TAG = "ml-platform.io/access-roles"
ACCESS_DESCRIPTION = "ml-platform access: "
TABLE = Path(__file__).resolve().parents[1] / "key_users.yaml"

# Azure built-in roles that use keys (Azure built-in roles reference, "Security").
KEY_USING_BUILT_IN_ROLES = {
    "00482a5a-887f-4fb3-b363-3b7fe8e74483": "Key Vault Administrator",
    "14b46e9e-c2b7-41b4-b07b-48a6ebf60603": "Key Vault Crypto Officer",
    "12338af0-0e69-4776-bea7-57ae8d297424": "Key Vault Crypto User",
    "e147488a-f6f5-4113-8e2d-b22465e65bf6": "Key Vault Crypto Service Encryption User",
    "08bbd89e-9f13-488c-ac41-acfcb10c90ab": "Key Vault Crypto Service Release User",
}
KEY_USE_DATA_ACTIONS = tuple(
    f"Microsoft.KeyVault/vaults/keys/{op}/action"
    for op in ("encrypt", "decrypt", "wrap", "unwrap", "sign", "release")
)


@cache
def table() -> dict[str, dict[str, Any]]:
    """People's role -> {"aws": [domains], "azure": [domains], "why": ...}."""
    document = yaml.safe_load(TABLE.read_text(encoding="utf-8"))
    roles: dict[str, dict[str, Any]] = document["roles"]
    return roles


def _allowed(roles: set[str], cloud: str) -> set[str]:
    return {domain for role in roles for domain in table().get(role, {}).get(cloud, ())}


def _role_name(arn: str) -> str:
    """A role ARN's name (its last segment); an STS role session's role (IAM user guide, "IAM identifiers":
    ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``): a key policy may name a person by session
    (review 35 A3)."""
    if ":assumed-role/" in arn:
        return arn.split(":assumed-role/", 1)[1].split("/", 1)[0]
    return arn.rsplit("/", 1)[-1]


def _aws_people(graph: Graph) -> dict[str, set[str]]:
    """Each person's role name (the last segment of its role ARN: an attachment names a role by name)
    -> the people's roles it holds."""
    people: dict[str, set[str]] = {}
    for entry in graph.of(ACCESS_ENTRY):
        roles = str(entry.tags().get(ACCESS_ROLES_TAG) or "").split()
        people.setdefault(_role_name(str(entry.get("principalArn"))), set()).update(roles)
    for name, role, _urn in attached_people(graph):
        people.setdefault(name, set()).add(role)
    return people


def _matches(person: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(person, _role_name(p)) for p in patterns)


def _key_users(document: Mapping[str, Any], people: Mapping[str, set[str]]) -> Iterator[tuple[str, str]]:
    """(statement id, person) for each person a key policy lets use the key."""
    for index, statement in enumerate(allowed_statements(document)):
        if not uses_key(statement):
            continue
        sid = str(statement.get("Sid") or f"Statement[{index}]")
        for principal in principals(statement):
            if not is_account_root(principal):
                found = [p for p in people if principal == "*" or _matches(p, [principal])]
            elif named := principal_arns(statement):
                found = [p for p in people if _matches(p, named)]
            else:
                excluded = principal_arns(statement, excluded=True)
                found = [p for p in people if not _matches(p, excluded)]
            for person in found:
                yield sid, person


def _aws(graph: Graph) -> Iterator[Finding]:
    people = _aws_people(graph)
    for key in graph.of(KMS_KEY):
        domains = declared_domains(key)
        document = parse_document(key.get("policy"), "policy")
        for sid, person in dict.fromkeys(_key_users(document, people)):
            roles = people[person]
            foreign = [d for d in domains if d not in _allowed(roles, "aws")]
            if foreign:
                yield (
                    key.urn,
                    f"key policy statement {sid} lets role {person} ({', '.join(sorted(roles))}) use key "
                    f"{key.name}, a key of {' '.join(foreign)}, which the role-to-key table "
                    "(policies/key_users.yaml) does not give its roles; name only the domain's users "
                    "(ArnEquals aws:PrincipalArn; components/aws/keys.py DOMAIN_USERS)",
                )


def _azure_people(graph: Graph) -> dict[str, set[str]]:
    """Each person the stack names (``access``; its assignments are described ``ml-platform access:
    <role>``), by principal (object) id -> the people's roles it holds."""
    people: dict[str, set[str]] = {}
    for assignment in graph.of(ROLE_ASSIGNMENT):
        description = str(assignment.get("description") or "")
        if description.startswith(ACCESS_DESCRIPTION):
            role = description.removeprefix(ACCESS_DESCRIPTION)
            people.setdefault(str(assignment.get("principalId")), set()).add(role)
    return people


def _azure(graph: Graph) -> Iterator[Finding]:
    """Every assignment to a named person, by its description or by its principal id whatever its
    description (review 35 A4: an auditor's object id given Crypto User undescribed is still the auditor)."""
    people = _azure_people(graph)
    for assignment in graph.of(ROLE_ASSIGNMENT):
        description = str(assignment.get("description") or "")
        if description == DEPLOYER_KEYS_DESCRIPTION:
            yield from _deployer(assignment, graph)
            continue
        principal = str(assignment.get("principalId"))
        roles = set(people.get(principal, ()))
        if description.startswith(ACCESS_DESCRIPTION):
            roles.add(description.removeprefix(ACCESS_DESCRIPTION))
        if not roles:
            continue
        using = granted_data_actions(assignment, graph, KEY_USE_DATA_ACTIONS, KEY_USING_BUILT_IN_ROLES)
        if using and not _allowed(roles, "azure"):
            named = ", ".join(sorted(roles))
            why = "; ".join(
                str(table().get(r, {}).get("why", f"{r}: not a role of the table")) for r in sorted(roles)
            )
            yield (
                assignment.urn,
                f"{named} {principal} is granted {', '.join(using)}, which uses keys; the role-to-key table "
                f"(policies/key_users.yaml) gives a {named} no Azure key: {why}",
            )


def _deployer(assignment: Subject, graph: Graph) -> Iterator[Finding]:
    """The deployer administers the keys of the stack's vaults and uses none (review 35 A5): its role
    there keeps Crypto Officer's key actions without the cryptographic ones (components/azure/keys.py
    ``key_administration_role``); the stores wrap with their own identities."""
    using = granted_data_actions(assignment, graph, KEY_USE_DATA_ACTIONS, KEY_USING_BUILT_IN_ROLES)
    if using:
        yield (
            assignment.urn,
            f"the deployer's key administration ({DEPLOYER_KEYS_DESCRIPTION!r}) grants {', '.join(using)}, "
            "which uses keys: the deployer would keep standing use of every data key of the vault; give it "
            "the stack's key administration role (Crypto Officer without encrypt, decrypt, wrap, unwrap, "
            "sign, release)",
        )


def _rule(graph: Graph) -> Iterator[Finding]:
    yield from _aws(graph)
    yield from _azure(graph)


_RULE: StackRule = _rule

POLICIES = [
    stack_policy(
        "key-use-by-role",
        "No person uses a data key its role does not need: a KMS key policy or a Key Vault role assignment "
        "lets a named platform admin, key custodian, ML engineer, model approver or auditor use only the "
        "keys of the domains the role-to-key table (policies/key_users.yaml) gives that role; the Azure "
        "deployer's key administration uses no key.",
        _RULE,
        severity=Severity.HIGH,
    ),
]
