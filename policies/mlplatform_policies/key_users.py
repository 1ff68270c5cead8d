"""``key-use-by-role``: no person uses a data key its role does not need (issue 35 item 3; review 35 A1).

The role-to-key table (``policies/key_users.yaml``, the same file the program builds its key policies
from) lists, per people's role and cloud, the data domains whose key the role may use for data. The pack
refuses a key policy or role assignment that lets a named person use a key of any other domain:

- AWS: who the stack names as a person: an EKS access entry's principal, its roles in the tag
  ``ml-platform.io/access-roles`` (components/aws/access.py), and each role a people's managed policy is
  attached to (the auditors' policy, the lifecycle record writers' for the model approvers and for the ML
  engineers: the policy's same tag, the attachment's ``role``); the key custodians are
  ``key-duties-separated``'s. Who a KMS key policy lets use the key (an Allow of ``kms:Encrypt``,
  ``Decrypt``, ``ReEncrypt*`` or ``GenerateDataKey*``): a principal it names (a role session,
  ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``, is its role's person; review 35 A3; a role by its full
  ARN, path included, where the plan has it: review 35 C3); a statement with ``NotAction`` uses the key
  unless it lists every cryptographic action (review 35 C2); for a statement of the account root (AWS KMS
  developer guide, "Default key policy", "Allows access to the AWS account and enables IAM policies": any
  account principal whose IAM policy allows it), each person its ``aws:PrincipalArn`` condition names
  (``ArnLike``, ``ArnEquals``), or, naming none, every person it does not leave out (``ArnNotEquals``,
  ``ArnNotLike``). The key's domains are its tag ``ml-platform.io/data-domain``.
- Azure: a people's role assignment (description ``ml-platform access: <role>``), or any assignment to a
  person those name, by principal (object) id whatever its description (review 35 A4), whose role uses keys:
  Key Vault Administrator, Crypto Officer, Crypto User, Crypto Service Encryption User or Crypto Service
  Release User (their data actions include the keys' cryptographic operations: Azure built-in roles,
  "Security", learn.microsoft.com/azure/role-based-access-control/built-in-roles/security), or a custom role
  whose data actions cover encrypt, decrypt, wrap, unwrap, sign or release, or backup or restore (a backup is
  restored into another vault and used there: Key Vault REST API, Keys - Backup Key; review 35 B2), and whose
  ``notDataActions`` do not take them out. The table gives no people's role an Azure key (Azure's stores
  encrypt through their own identities), so any such assignment is refused; and the deployer's key
  administration on the stack's vaults (described ``ml-platform deployer: key administration``) uses no key
  either (review 35 A5). Every other principal holding a key-using role on a key or vault of the stack
  (review rev35f A5) is an identity of the plan (its ``principalId`` refers to a managed identity, a disk
  encryption set, a registry) on one key, not a vault or above, and a workload's identity (federated from
  a service account) only on a key that signs and verifies; Key Vault Data Access Administrator or User
  Access Administrator on a vault, which assigns Crypto User to anyone, is the deployer's alone.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML is in the pack's venv; its stubs are not
from pulumi_policy import Severity

from . import tokens
from .audit import above, granted_data_actions
from .azure_rbac import ROLE_ASSIGNERS, role_grants
from .duties import ACCESS_DESCRIPTION, DEPLOYER_KEYS_DESCRIPTION, attached_people, azure_people
from .factory import Finding, StackRule, stack_policy
from .key_domains import declared_domains
from .separation import (
    EMPTY_PRINCIPALS,
    FEDERATION,
    IDENTITY,
    KMS_KEY,
    allowed_statements,
    allows,
    crypto_actions,
    empty_principal_list,
    is_account_root,
    key_policy,
    principal_arns,
    principals,
    strings,
    uses_key,
)
from .settings import AZURE_ROLE_TAG, LIFECYCLE_RECORD_ROLE, ROLE_TAG
from .subject import Graph, Subject
from .values import parse_document

ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
IAM_POLICY = "aws:iam/policy:Policy"
POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
TEAM_TAG = "ml-platform.io/team"
TEAM_NAMESPACE_PREFIX = "team-"
ML_ENGINEER = "ml-engineer"
BLOB_CONTAINER = "azure-native:storage:BlobContainer"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
DATASETS = "datasets"
OBJECT_DATA = "object-data"
ACCESS_ROLES_TAG = "ml-platform.io/access-roles"
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
# A key's backup is restored into another vault of the subscription and geography and used there (Key
# Vault REST API, Keys - Backup Key: "BACKUP the key, and then RESTORE it into another Azure Key Vault
# instance"); restore brings one in (review 35 B2). A key administration that keeps them copies keys.
KEY_COPY_DATA_ACTIONS = tuple(f"Microsoft.KeyVault/vaults/keys/{op}/action" for op in ("backup", "restore"))


@cache
def table() -> dict[str, dict[str, Any]]:
    """People's role -> {"aws": {domain: mode}, "azure": {domain: mode}, "why": ...} (mode: read, write)."""
    document = yaml.safe_load(TABLE.read_text(encoding="utf-8"))
    roles: dict[str, dict[str, Any]] = document["roles"]
    return roles


def _allowed(roles: set[str], cloud: str) -> set[str]:
    return {domain for role in roles for domain in table().get(role, {}).get(cloud, ())}


def role_name(arn: str) -> str:
    """A role ARN's name (its last segment); an STS role session's role (IAM user guide, "IAM identifiers":
    ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``): a key policy may name a person by session
    (review 35 A3)."""
    if ":assumed-role/" in arn:
        return arn.split(":assumed-role/", 1)[1].split("/", 1)[0]
    return arn.rsplit("/", 1)[-1]


def aws_people(graph: Graph) -> dict[str, set[str]]:
    """Each person -> the people's roles it holds. A person is its full role ARN where the plan has it (an
    access entry's principal); a role known only by an attachment (which names a role by name) joins the
    entry's ARN of that name, or stands under its name."""
    people: dict[str, set[str]] = {}
    for entry in graph.of(ACCESS_ENTRY):
        roles = str(entry.tags().get(ACCESS_ROLES_TAG) or "").split()
        people.setdefault(str(entry.get("principalArn")), set()).update(roles)
    for name, role, _urn in attached_people(graph):
        for person in [p for p in people if role_name(p) == name] or [name]:
            people.setdefault(person, set()).add(role)
    return people


def _matches(person: str, patterns: list[str]) -> bool:
    """Whether a policy's principal patterns name ``person``: by full ARN, path included, where the plan
    knows it (``aws:PrincipalArn`` carries a role's path, so a pattern without it names another role:
    review 35 C3); by role name for a role session (its ARN carries no path) or a person the plan knows
    only by name."""
    for pattern in patterns:
        if ":assumed-role/" in pattern or not person.startswith("arn:"):
            if fnmatch.fnmatchcase(role_name(person), role_name(pattern)):
                return True
        elif fnmatch.fnmatchcase(person, pattern):
            return True
    return False


def _key_users(document: Mapping[str, Any], people: Mapping[str, set[str]]) -> Iterator[tuple[str, str]]:
    """(how the finding names the statement, person) for each person a key policy lets use the key."""
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
                if empty_principal_list(statement):
                    sid += EMPTY_PRINCIPALS
            for person in found:
                yield sid, person


def _aws(graph: Graph) -> Iterator[Finding]:
    people = aws_people(graph)
    for key in graph.of(KMS_KEY):
        domains = declared_domains(key)
        document = key_policy(key, graph)
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


def _people_policies(graph: Graph) -> Iterator[Finding]:
    """A people's IAM policy (tagged with the people's roles it is for: the auditors', the record
    writers', each team's datasets policy) reaches only the buckets and uses only the keys of the domains the
    table gives those roles, by the domains each bucket and key it names declares (``ml-platform.io/
    data-domain``); a bucket of the object data only where it is the lifecycle record's (tag
    ``ml-platform.io/role: lifecycle-record``): every people's role the table gives the object-data key has it
    for the record alone (review 35b A1). An ML engineers' policy that reaches the datasets is one team's (tag
    ``ml-platform.io/team``): its objects and listings under ``datasets/<team>/`` only, attached only to roles
    whose access entry edits that team's namespace (review 35 B3), and no bucket but the datasets'; their
    record writers' policy (every team's engineers append requests and rollout controls to the one record:
    review 35b A1) reaches no dataset."""
    engineers = _team_engineers(graph)
    for policy in graph.of(IAM_POLICY):
        roles = set(str(policy.tags().get(ACCESS_ROLES_TAG) or "").split())
        if not roles:
            continue
        allowed = _allowed(roles, "aws")
        named = ", ".join(sorted(roles))
        document = parse_document(policy.get("policy"), "policy")
        stores = graph.linked(policy, "policy", tokens.S3_BUCKETS)
        keys = graph.linked(policy, "policy", [KMS_KEY]) if _uses_keys_only(document) else []
        for store in [*stores, *keys]:
            foreign = [d for d in declared_domains(store) if d not in allowed]
            if foreign:
                yield (
                    policy.urn,
                    f"the {named} policy reaches {store.name}, of {' '.join(foreign)}, which the role-to-key "
                    "table (policies/key_users.yaml) does not give its roles",
                )
        for store in stores:
            if OBJECT_DATA in declared_domains(store) and store.tags().get(ROLE_TAG) != LIFECYCLE_RECORD_ROLE:
                yield (
                    policy.urn,
                    f"the {named} policy reaches {store.name}, the workloads' object data: a person uses the "
                    "object-data key for the lifecycle record's bucket only (policies/key_users.yaml)",
                )
        datasets = any(DATASETS in declared_domains(store) for store in stores)
        if ML_ENGINEER in roles and (datasets or policy.tags().get(TEAM_TAG)):
            yield from _team_policy(policy, document, graph, engineers)
            for store in stores:
                if DATASETS not in declared_domains(store):
                    yield (
                        policy.urn,
                        f"an ML engineers' datasets policy reaches {store.name}, which holds no datasets: "
                        "a team's datasets policy reaches the datasets bucket only",
                    )


def _uses_keys_only(document: Mapping[str, Any]) -> bool:
    """Whether a policy's KMS statements all use keys: the keys it names (the engine's dependencies, not
    per statement) are then all used. A policy that also reads keys' configuration (the auditors' reads
    every key's) names keys it does not use; their use is judged on the key policies above."""
    kms = [
        s for s in allowed_statements(document) if any(a.startswith("kms:") for a in strings(s.get("Action")))
    ]
    return bool(kms) and all(crypto_actions(s) for s in kms)


def _team_policy(
    policy: Subject, document: Mapping[str, Any], graph: Graph, engineers: Mapping[str, set[str]]
) -> Iterator[Finding]:
    """An ML engineers' policy reaches its team's datasets prefix only, and only that team's engineers hold
    it."""
    team = str(policy.tags().get(TEAM_TAG) or "")
    if not team:
        yield policy.urn, f"an ML engineers' policy names no team (tag {TEAM_TAG}); give each team its own"
        return
    prefix = f"datasets/{team}/"
    for statement in allowed_statements(document):
        objects = [r.split("/", 1)[1] for r in strings(statement.get("Resource")) if ":s3:" in r and "/" in r]
        listed = strings(_listed_prefixes(statement))
        outside = [p for p in [*objects, *listed] if not p.startswith(prefix)]
        if allows(statement, "s3:ListBucket") and not listed:
            outside.append("every key of the bucket (s3:ListBucket without s3:prefix)")
        if outside or "*" in strings(statement.get("Resource")):
            yield (
                policy.urn,
                f"team {team}'s ML engineers' policy reaches {', '.join(outside) or '*'}, outside {prefix}: "
                "a team's engineers write their own team's datasets only",
            )
    for attachment in graph.of(POLICY_ATTACHMENT):
        if policy not in graph.linked(attachment, "policyArn", [IAM_POLICY]):
            continue
        role = str(attachment.get("role"))
        if team not in engineers.get(role, set()):
            yield (
                attachment.urn,
                f"team {team}'s datasets policy is attached to role {role}, which is not one of team "
                f"{team}'s ML engineers (access.mlEngineers.{team})",
            )


def _listed_prefixes(statement: Mapping[str, Any]) -> Any:
    condition = statement.get("Condition")
    like = condition.get("StringLike") if isinstance(condition, Mapping) else None
    return like.get("s3:prefix") if isinstance(like, Mapping) else None


def _team_engineers(graph: Graph) -> dict[str, set[str]]:
    """Role name -> the teams whose namespace (``team-<team>``) its ML engineer's access policy edits."""
    teams: dict[str, set[str]] = {}
    for association in graph.of(ASSOCIATION):
        scope = association.get("accessScope")
        namespaces = scope.get("namespaces") if isinstance(scope, Mapping) else None
        for namespace in strings(namespaces):
            if namespace.startswith(TEAM_NAMESPACE_PREFIX):
                name = role_name(str(association.get("principalArn")))
                teams.setdefault(name, set()).add(namespace.removeprefix(TEAM_NAMESPACE_PREFIX))
    return teams


def _team_assignments(graph: Graph) -> Iterator[Finding]:
    """An ML engineer's Azure role on a Blob container or storage account is the datasets container's,
    limited by its condition to its own team's part (``StringStartsWith '<team>/'`` on the blob path and
    the listing prefix; components/azure/access.py ``team_datasets_condition``; review 35 B3): without one
    it reaches every team's data, or another store. The one other store an engineer holds a role on is the
    lifecycle record's account (tagged ``ml-platform.io-role: lifecycle-record``), where every team's
    engineers append their promotion requests and rollout controls (review 35b A1), with the record
    writer role whose rights ``lifecycle-record-locked`` holds to create and read."""
    engineer = f"{ACCESS_DESCRIPTION}{ML_ENGINEER}"
    teams: dict[str, set[str]] = {}
    for assignment in role_grants(graph):
        scope = str(assignment.get("scope") or "")
        if assignment.get("description") == engineer and f"/namespaces/{TEAM_NAMESPACE_PREFIX}" in scope:
            team = scope.rsplit(f"/namespaces/{TEAM_NAMESPACE_PREFIX}", 1)[1]
            teams.setdefault(str(assignment.get("principalId")), set()).add(team)
    for assignment in role_grants(graph):
        if assignment.get("description") != engineer:
            continue
        stores = graph.linked(assignment, "scope", [BLOB_CONTAINER, STORAGE_ACCOUNT])
        if not stores or all(s.tags().get(AZURE_ROLE_TAG) == LIFECYCLE_RECORD_ROLE for s in stores):
            continue
        principal = str(assignment.get("principalId"))
        own = teams.get(principal, set())
        condition = str(assignment.get("condition") or "")
        limits = re.findall(r"StringStartsWith '([^']*)'", condition)
        problems = [
            f"{s.name}, not the datasets container" for s in stores if s.get("containerName") != DATASETS
        ]
        if not limits:
            problems.append("every team's datasets (no condition limits it to its team's path)")
        problems += [
            f"{limit}*, not its team's ({', '.join(sorted(own)) or 'none'})"
            for limit in limits
            if limit.rstrip("/") not in own
        ]
        if problems:
            yield (
                assignment.urn,
                f"ML engineer {principal}'s role reaches {'; '.join(problems)}: a team's engineers write "
                "their own team's datasets only",
            )


def _azure(graph: Graph) -> Iterator[Finding]:
    """Every assignment to a named person, by its description or by its principal id whatever its
    description (review 35 A4: an auditor's object id given Crypto User undescribed is still the auditor)."""
    people = azure_people(graph)
    for assignment in role_grants(graph):
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
        using = _using(assignment, graph)
        if using and not _allowed(roles, "azure"):
            named = ", ".join(sorted(roles))
            why = "; ".join(
                str(table().get(r, {}).get("why", f"{r}: not a role of the table")) for r in sorted(roles)
            )
            yield (
                assignment.urn,
                f"{named} {principal} is granted {', '.join(using)}, which uses keys or copies them into "
                "another vault; the role-to-key table (policies/key_users.yaml) gives a "
                f"{named} no Azure key: {why}",
            )


def _using(assignment: Subject, graph: Graph) -> list[str]:
    """What of an assignment's role uses keys, or copies one (backup, restore) where it may be used."""
    actions = (*KEY_USE_DATA_ACTIONS, *KEY_COPY_DATA_ACTIONS)
    return granted_data_actions(assignment, graph, actions, KEY_USING_BUILT_IN_ROLES)


def _deployer(assignment: Subject, graph: Graph) -> Iterator[Finding]:
    """The deployer administers the keys of the stack's vaults and uses none (review 35 A5): its role
    there keeps Crypto Officer's key actions without the cryptographic ones (components/azure/keys.py
    ``key_administration_role``); the stores wrap with their own identities."""
    using = _using(assignment, graph)
    if using:
        yield (
            assignment.urn,
            f"the deployer's key administration ({DEPLOYER_KEYS_DESCRIPTION!r}) grants {', '.join(using)}, "
            "which uses keys or copies them into another vault (a backup restores into any vault of the "
            "subscription, the signing vault included, where the deployer is Crypto Officer): the deployer "
            "would keep standing use of every data key of the vault; give it the stack's key administration "
            "role (Crypto Officer without encrypt, decrypt, wrap, unwrap, sign, release, backup, restore)",
        )


KEY = "azure-native:keyvault:Key"
VAULT = "azure-native:keyvault:Vault"
# Azure built-in roles that assign Key Vault data roles (Azure built-in roles, "Security": Key Vault Data
# Access Administrator, "Manage access to Azure Key Vault by adding or removing role assignments"; and the
# roles that assign any role, ``ROLE_ASSIGNERS``): whoever holds one on a vault can give itself, or anyone,
# Crypto User there.
KEY_ACCESS_ADMINISTRATORS = {
    "8b54135c-b56d-4d72-a534-26097cfdc8d8": "Key Vault Data Access Administrator",
    **ROLE_ASSIGNERS,
}
# The key operations that touch no data: a key with no others signs and verifies (the image-signing key,
# components/azure/signing), never encrypts or wraps a store's data.
_SIGNATURE_OPS = frozenset({"sign", "verify"})


def _reached(assignment: Subject, graph: Graph) -> tuple[list[Subject], list[Subject]]:
    """The stack's keys and vaults an assignment's scope reaches: a key or vault it refers to (by
    dependency, or its resource ID written literally: ``.../vaults/<vault>[/keys/<key>]``), or a vault whose
    resource group, subscription or management group it is (Azure RBAC, "Understand scope for Azure RBAC":
    lower levels inherit)."""
    scope = str(assignment.get("scope") or "").lower()
    keys = graph.linked(assignment, "scope", [KEY])
    vaults = graph.linked(assignment, "scope", [VAULT])
    for key in graph.of(KEY):
        written = f"/vaults/{key.get('vaultName')}/keys/{key.get('keyName')}".lower()
        if key not in keys and scope.endswith(written):
            keys.append(key)
    for vault in graph.of(VAULT):
        name = str(vault.get("vaultName") or vault.name).lower()
        if vault not in vaults and (scope.endswith(f"/vaults/{name}") or above(assignment, vault, graph)):
            vaults.append(vault)
    return keys, vaults


def _signs_only(key: Subject) -> bool:
    """Whether a key's operations are signing and verifying only (``properties.keyOps``)."""
    ops = set(strings(key.get("properties.keyOps")))
    return bool(ops) and ops <= _SIGNATURE_OPS


def _workload(principal: Subject, graph: Graph) -> bool:
    """Whether an identity is a workload's (a managed identity its service account federates into)."""
    return principal.type == IDENTITY and any(
        principal in graph.linked(f, "resourceName", [IDENTITY]) for f in graph.of(FEDERATION)
    )


def _azure_key_users(graph: Graph) -> Iterator[Finding]:
    """Who may use an Azure key (review rev35f A5): a role that uses keys (``_using``) only on one key, for
    an identity of the plan (its ``principalId`` refers to a managed identity, a disk encryption set, a
    registry: the stores' encryption identities, the AKS KMS identity), and a workload's identity only on a
    key that signs and verifies; never on a whole vault or above, never for a principal the plan does not
    have. The named people are ``_azure``'s (the table gives them no Azure key), the deployer
    ``_deployer``'s. No one but the deployer may assign Key Vault data roles on a vault of the stack."""
    people = azure_people(graph)
    deployers = {
        str(a.get("principalId"))
        for a in role_grants(graph)
        if a.get("description") == DEPLOYER_KEYS_DESCRIPTION
    }
    every = sorted({s.type for s in graph.subjects})
    for assignment in role_grants(graph):
        principal = str(assignment.get("principalId"))
        if principal in deployers or principal in people:
            continue
        keys, vaults = _reached(assignment, graph)
        if not keys and not vaults:
            continue
        role = str(assignment.get("roleDefinitionId")).rsplit("/", 1)[-1].lower()
        if role in KEY_ACCESS_ADMINISTRATORS and vaults:
            yield (
                assignment.urn,
                f"{principal} holds {KEY_ACCESS_ADMINISTRATORS[role]} on vault "
                f"{', '.join(v.name for v in vaults)}: it may assign itself or anyone Key Vault Crypto User "
                "there; only the deployer assigns the vaults' roles",
            )
        using = _using(assignment, graph)
        if not using:
            continue
        identities = graph.linked(assignment, "principalId", every)
        if vaults:
            why = f"every key of vault {', '.join(v.name for v in vaults)}; grant a store's identity its key"
        elif not identities:
            why = "a principal the plan does not have (no identity of the stack)"
        elif any(_workload(i, graph) for i in identities) and not all(_signs_only(k) for k in keys):
            why = "a workload's identity on a data key; the stores wrap with their own encryption identities"
        else:
            continue
        yield (
            assignment.urn,
            f"{principal} is granted {', '.join(using)}: {why} (issue 35 item 3: each key's users named; "
            "docs/security.md, 'Keys per data domain')",
        )


def _rule(graph: Graph) -> Iterator[Finding]:
    yield from _aws(graph)
    yield from _people_policies(graph)
    yield from _azure(graph)
    yield from _azure_key_users(graph)
    yield from _team_assignments(graph)


_RULE: StackRule = _rule

POLICIES = [
    stack_policy(
        "key-use-by-role",
        "No person uses a data key its role does not need: a KMS key policy or a Key Vault role assignment "
        "lets a named platform admin, key custodian, ML engineer, model approver or auditor use only the "
        "keys of the domains the role-to-key table (policies/key_users.yaml) gives that role; a people's IAM "
        "policy reaches only those domains' buckets and keys, an ML engineers' only its team's datasets/"
        "<team>/, attached to that team's engineers only (on Azure a datasets role conditioned to <team>/); "
        "the Azure deployer's key administration uses or copies no key; any other Azure key user is an "
        "identity of the plan on one key (a workload's only on a signing key), and no one but the deployer "
        "holds Key Vault Data Access Administrator on a vault.",
        _RULE,
        severity=Severity.HIGH,
    ),
]
