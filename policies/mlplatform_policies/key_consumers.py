"""``key-users-named``: every AWS data key's policy names exactly the roles that use it (issue 35 item 3:
"each its own customer key with a policy naming only its users"; item 5; review 35b B1).

The class: a role whose IAM policy grants a KMS use of data key K is a consumer of K, and K's policy must
name it (KMS developer guide, "Default key policy": a use needs the key policy and IAM both, so a consumer
left out breaks at run time), with ``kms:Decrypt`` alone where its IAM only decrypts (S3 user guide, "Using
server-side encryption with AWS KMS keys (SSE-KMS)": a reader needs ``kms:Decrypt``; review 35 C1). K's use
statements name no other principal: besides the consumers, only the people the role-to-key table
(``policies/key_users.yaml``) gives K's domains, and, in a statement that takes effect only through the
services that create stores with their caller's key rights (RDS, Secrets Manager, EFS, FSx), the deployer
(components/aws/keys.py ``DOMAIN_USERS``; ``key-duties-separated`` allows one such principal only).

How the pack ties an ARN to the plan, with no ARN among a new resource's known values:

- a key policy names a role by ARN (``aws:PrincipalArn``, or as principal); a role of the plan is the role
  whose ``arn`` or ``name`` the engine knows (``AnalyzeStack`` judges the resources' outputs:
  pulumi/pulumi pkg/resource/deploy/step_generator.go ``AnalyzeResources``), or, with a
  ``namePrefix``, the role named that prefix and the provider's 26-digit suffix (components/aws/iam.py
  ``NAME_PREFIX_SUFFIX``);
- a role's policies are its inline policies and the managed policies attached to it, each tied to the role
  by the engine's property dependencies (``role``), or, for a role outside the plan (a person's), by name;
- a statement's key is the key whose ARN the engine knows, or whose ARN another resource's property refers
  to with that key as its only dependency (a bucket's encryption rule, the cluster's encryption config);
  a statement naming an ARN the plan does not tie to a key counts for each key the policy depends on whose
  ARN is untied (``policy``'s property dependencies).

Service principals and AWS service-linked roles are outside the class (they attach keys through grants or
are named by the guides that require them). A key whose policy, or the policy of a role that depends on
it, is unknown (a new stack's preview: the key policy waits for its users' ARNs) is judged once known.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi_policy import Severity
from pulumi_policy.proxy import UnknownValueError

from .factory import per_node, stack_policy
from .key_domains import declared_domains
from .key_users import IAM_POLICY, POLICY_ATTACHMENT, aws_people, role_name, table
from .separation import (
    KMS_KEY,
    ROLE,
    ROLE_POLICY,
    allowed_statements,
    allows,
    is_account_root,
    principal_arns,
    principals,
    strings,
    through_store_creation,
    uses_key,
)
from .subject import Graph, Subject
from .values import is_unknown, parse_document

# What writes with a key (an encrypting caller), beside the reads every use includes.
WRITE_ACTIONS = (
    "kms:Encrypt",
    "kms:ReEncryptTo",
    "kms:GenerateDataKey",
    "kms:GenerateDataKeyWithoutPlaintext",
)
WRITE, READ = "write", "read"
# The provider's unique suffix after a role's ``namePrefix`` (terraform-plugin-sdk ``helper/id``,
# ``UniqueIDSuffixLength``; components/aws/iam.py ``NAME_PREFIX_SUFFIX``).
PREFIX_SUFFIX = r"[0-9]{26}"
SERVICE_LINKED = "/aws-service-role/"


def _mode(statement: Mapping[str, Any]) -> str:
    return WRITE if any(allows(statement, action) for action in WRITE_ACTIONS) else READ


def _merge(found: dict[str, str], who: str, mode: str) -> None:
    found[who] = WRITE if WRITE in (mode, found.get(who)) else READ


def _strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for each in value.values():
            yield from _strings_in(each)
    elif isinstance(value, list):
        for each in value:
            yield from _strings_in(each)


@dataclass
class _Plan:
    """What the graph tells about roles and keys, read once per judgement."""

    graph: Graph
    key_arns: dict[str, str] = field(default_factory=dict)  # a key's ARN as the plan spells it -> URN

    def __post_init__(self) -> None:
        for key in self.graph.of(KMS_KEY):
            for prop in ("arn", "keyId"):
                value = key.get(prop)
                if isinstance(value, str) and not is_unknown(value):
                    self.key_arns[value] = key.urn
        for subject in self.graph.subjects:
            for prop, urns in subject.property_dependencies.items():
                keys = [u for u in urns if (each := self.graph.find(u)) is not None and each.type == KMS_KEY]
                if len(keys) != 1 or subject.type in (ROLE_POLICY, IAM_POLICY, KMS_KEY):
                    continue
                for value in _strings_in(subject.get(prop)):
                    if value.startswith("arn:") and ":kms:" in value and not is_unknown(value):
                        self.key_arns.setdefault(value, keys[0])

    def role_of(self, arn: str) -> Subject | None:
        """The plan's role an ARN names."""
        name = role_name(arn)
        for role in self.graph.of(ROLE):
            if role.get("arn") == arn or role.get("name") == name:
                return role
            prefix = role.get("namePrefix")
            if isinstance(prefix, str) and re.fullmatch(re.escape(prefix) + PREFIX_SUFFIX, name):
                return role
        return None

    def used_keys(self, policy: Subject, resource: str) -> list[str]:
        """The keys (URNs) a statement's resource names: a key whose ARN the plan ties (``key_arns``), every
        key for ``*``, else each key ``policy`` depends on whose ARN is untied."""
        if resource == "*":
            return [k.urn for k in self.graph.of(KMS_KEY)]
        if resource in self.key_arns:
            return [self.key_arns[resource]]
        tied = set(self.key_arns.values())
        return [s.urn for s in self.graph.linked(policy, "policy", [KMS_KEY]) if s.urn not in tied]

    def consumers(self, key: Subject) -> tuple[dict[str, str], dict[str, str]]:
        """Who K's IAM users are: the plan's roles (URN -> mode) and roles outside the plan, by name, that a
        managed policy using K is attached to (name -> mode)."""
        roles: dict[str, str] = {}
        outside: dict[str, str] = {}
        for policy in self.graph.of(ROLE_POLICY, IAM_POLICY):
            mode = self._use(policy, key)
            if mode is None:
                continue
            if policy.type == ROLE_POLICY:
                for role in self.graph.linked(policy, "role", [ROLE], identity="name"):
                    _merge(roles, role.urn, mode)
                continue
            for attachment in self.graph.of(POLICY_ATTACHMENT):
                if policy not in self.graph.linked(attachment, "policyArn", [IAM_POLICY]):
                    continue
                found = self.graph.linked(attachment, "role", [ROLE], identity="name")
                for role in found:
                    _merge(roles, role.urn, mode)
                if not found:
                    _merge(outside, str(attachment.get("role")), mode)
        return roles, outside

    def _use(self, policy: Subject, key: Subject) -> str | None:
        """How ``policy`` uses K: ``write``, ``read`` or not at all (``None``). A document not known yet is
        judged once known where the policy depends on K (the engine's property dependencies); one that does
        not cannot name K but by a literal ARN, and is left to the ``pulumi up`` that makes it known."""
        try:
            document = parse_document(policy.get("policy"), "policy")
        except UnknownValueError:
            if key in self.graph.linked(policy, "policy", [KMS_KEY]):
                raise
            return None
        mode: str | None = None
        for statement in allowed_statements(document):
            if not uses_key(statement):
                continue
            if any(key.urn in self.used_keys(policy, r) for r in strings(statement.get("Resource"))):
                mode = WRITE if WRITE in (mode, _mode(statement)) else _mode(statement)
        return mode


def _named(document: Mapping[str, Any]) -> Iterator[tuple[str, str, str, bool]]:
    """(statement's Sid, principal ARN, mode, whether only through store-creating services) for each
    principal a key policy's use statements name: by ``aws:PrincipalArn`` for the account root, outright
    otherwise (AWS service-linked roles and service principals aside)."""
    for index, statement in enumerate(allowed_statements(document)):
        if not uses_key(statement):
            continue
        sid = str(statement.get("Sid") or f"Statement[{index}]")
        named: list[str] = []
        for principal in principals(statement):
            if is_account_root(principal):
                named += principal_arns(statement)
            elif principal.startswith("arn:") and SERVICE_LINKED not in principal:
                named.append(principal)
        for arn in named:
            yield sid, arn, _mode(statement), through_store_creation(statement)


def _people_modes(graph: Graph, domains: list[str]) -> dict[str, str]:
    """Each named person (role name) the role-to-key table gives one of ``domains`` -> its mode."""
    found: dict[str, str] = {}
    for person, roles in aws_people(graph).items():
        for role in roles:
            entry = table().get(role, {})
            if set(domains) & set(entry.get("aws", ())):
                _merge(found, role_name(person), READ if entry.get("reads_only") else WRITE)
    return found


def _key_users_named(key: Subject, graph: Graph) -> Iterator[str]:
    domains = declared_domains(key)
    if not domains:
        return
    plan = _Plan(graph)
    document = parse_document(key.get("policy"), "policy")
    roles, outside = plan.consumers(key)
    people = _people_modes(graph, domains)
    seen: set[str] = set()
    # principal -> (the mode its IAM or the table needs, how findings name it, mode -> first Sid granting it)
    named: dict[str, tuple[str, str, dict[str, str]]] = {}
    for sid, arn, mode, store_creation in dict.fromkeys(_named(document)):
        role = plan.role_of(arn)
        if role is not None:
            seen.add(role.urn)
            needed = roles.get(role.urn)
            what = f"role {role.name} ({arn})"
        else:
            name = role_name(arn)
            seen.add(name)
            given = [m for m in (outside.get(name), people.get(name)) if m]
            needed = WRITE if WRITE in given else (READ if given else None)
            what = arn
            if needed is None and store_creation:
                continue  # the deployer's, where the store's service needs its caller's key rights
        if needed is None:
            yield (
                f"key policy statement {sid} names {what}, whose IAM uses nothing under key {key.name} and "
                f"whom the role-to-key table (policies/key_users.yaml) does not give {' '.join(domains)}; "
                "name only the key's users (components/aws/keys.py DOMAIN_USERS)"
            )
        else:
            named.setdefault(arn, (needed, what, {}))[2].setdefault(mode, sid)
    for needed, what, by_mode in named.values():
        granted = WRITE if WRITE in by_mode else READ
        sid = by_mode[granted]
        if granted == WRITE and needed == READ:
            yield (
                f"key policy statement {sid} lets {what} encrypt with key {key.name}, but it only reads "
                "(kms:Decrypt); name it in the readers' statement (kms:Decrypt alone)"
            )
        elif granted == READ and needed == WRITE:
            yield (
                f"key policy statement {sid} names {what} to decrypt only, but its IAM encrypts with key "
                f"{key.name}; name it in the users' statement"
            )
    for urn, needed in sorted(roles.items()):
        if urn not in seen:
            found = graph.find(urn)
            yield (
                f"role {found.name if found else urn}'s IAM policy uses key {key.name} ({needed}), "
                "but the key policy does not name it: name every consumer by its exact ARN "
                "(ArnEquals aws:PrincipalArn), or drop the IAM grant"
            )
    for name, needed in sorted(outside.items()):
        if name not in seen:
            yield (
                f"role {name} holds a policy that uses key {key.name} ({needed}), but the key policy does "
                "not name it: name it, or detach the policy"
            )


POLICIES = [
    stack_policy(
        "key-users-named",
        "Each AWS data key's policy names exactly its users: every role whose IAM policy uses the key, by "
        "its exact ARN and with kms:Decrypt alone where it only decrypts, the people the role-to-key table "
        "(policies/key_users.yaml) gives the key's domains, and the deployer only through the services that "
        "create stores with its key rights; no other principal.",
        per_node((KMS_KEY,), _key_users_named),
        severity=Severity.HIGH,
    ),
]
