"""``key-users-named``: every AWS data key's policy names exactly the roles that use it (issue 35 item 3:
"each its own customer key with a policy naming only its users"; item 5; reviews 35b B1, 35c A1-A7).

The class: a role whose IAM policy grants a KMS use of data key K is a consumer of K, and K's policy must
name it (KMS developer guide, "Default key policy": a use needs the key policy and IAM both, so a consumer
left out breaks at run time), with ``kms:Decrypt`` alone where its IAM only decrypts (S3 user guide, "Using
server-side encryption with AWS KMS keys (SSE-KMS)": a reader needs ``kms:Decrypt``; review 35 C1). K's use
statements name no other principal: besides the consumers, only the people the role-to-key table
(``policies/key_users.yaml``) gives K's domains, and, in a statement that takes effect only through the
services that create K's stores with their caller's key rights (RDS and Secrets Manager on the registry
database's key, EFS and FSx on the training data's), the deployer alone (components/aws/keys.py
``DOMAIN_USERS``).

A use is any of the cryptographic actions, a write where it encrypts under K (``WRITE_ACTIONS``), and
``kms:CreateGrant`` (or a pattern covering it) without ``kms:GrantIsForAWSResource``, a write (a grant gives
its grantee use). A use statement with ``Principal: "*"`` naming no users by ``aws:PrincipalArn``, or with
``NotPrincipal``, is refused as it stands.

How the pack ties an ARN to the plan, with no ARN among a new resource's known values:

- a key policy names a role by ARN (``aws:PrincipalArn``, or as principal); a role of the plan is the role
  whose ``arn`` the engine knows (``AnalyzeStack`` judges the resources' outputs: pulumi/pulumi
  pkg/resource/deploy/step_generator.go ``AnalyzeResources``), or, for an ARN of a role of the stack's
  account (the account whose root the key policy names) with the role's path, the role of that ``name``,
  or, with a ``namePrefix``, named that prefix and the provider's 26-digit suffix (components/aws/iam.py
  ``NAME_PREFIX_SUFFIX``); another account's role, or an IAM user, of the same name is not the role (IAM
  user guide, "IAM identifiers"); a person is matched by the exact ARN its access entry names;
- a role's policies are its inline policies (``RolePolicy``, the role's ``inlinePolicies``) and the managed
  policies attached to it (``RolePolicyAttachment``, ``PolicyAttachment.roles``, the role's
  ``managedPolicyArns``), each tied to the role by the engine's property dependencies, or by name (a role
  outside the plan, a person's, is the stack's account's role of that name);
- a statement's key is the key whose ARN the engine knows, or whose ARN another resource's property refers
  to with that key as its only dependency (a bucket's encryption rule, the cluster's encryption config);
  a pattern (``key/*``, ``*``) covers each key whose ARN it matches, a key whose ARN the plan does not
  spell taken as ``arn:aws:kms:<Region>:<account>:key/<id>`` where the stack's other keys are (AWS KMS
  developer guide, "Specifying KMS keys in IAM policy statements"); ``NotResource`` covers every key it
  does not list; a statement naming an ARN the plan does not tie to a key counts for each key the policy
  depends on whose ARN is untied (``policy``'s property dependencies).

Service principals and the stack's account's AWS service-linked roles are outside the class (they attach
keys through grants or are named by the guides that require them), but a service principal's use must be
bound to the stack's account's resources (``_bound_to``: the confused deputy, review rev35e A5); another
account's service-linked role is a principal like any. A key whose policy, or the policy of a role that
depends on it, is unknown (a new stack's preview: the key policy waits for its users' ARNs) is judged once
known.
"""

from __future__ import annotations

import fnmatch
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
    administrative_actions,
    allowed_statements,
    allows,
    crypto_actions,
    grants_only_to_aws,
    is_account_root,
    key_administrators,
    key_policy,
    principal_arns,
    principals,
    strings,
    uses_key,
)
from .subject import Graph, Subject, names
from .values import is_unknown, parse_document

# What writes with a key (encrypts under it), beside the reads every use includes (AWS KMS API reference:
# Encrypt; ReEncrypt, whose ReEncryptTo encrypts under the destination key, so ``kms:ReEncrypt*`` writes,
# while ReEncryptFrom alone decrypts under the source key; GenerateDataKey, GenerateDataKeyWithoutPlaintext,
# and GenerateDataKeyPair, GenerateDataKeyPairWithoutPlaintext, which return "a copy of the private key that
# is encrypted under the symmetric encryption KMS key you specify": review 35c A7).
WRITE_ACTIONS = (
    "kms:Encrypt",
    "kms:ReEncryptTo",
    "kms:GenerateDataKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:GenerateDataKeyPair",
    "kms:GenerateDataKeyPairWithoutPlaintext",
)
WRITE, READ = "write", "read"
# A grant lets its grantee use the key in the operations it lists (AWS KMS developer guide, "Grants in AWS
# KMS"), so ``kms:CreateGrant`` (or a pattern covering it, ``kms:*``) is a write use unless the statement
# keeps grants to AWS services attaching the key to a resource they create (``kms:GrantIsForAWSResource``:
# "Default key policy", "Allows key users to use the KMS key"; review 35c A5).
CREATE_GRANT = "kms:CreateGrant"
# The provider's unique suffix after a role's ``namePrefix`` (terraform-plugin-sdk ``helper/id``,
# ``UniqueIDSuffixLength``; components/aws/iam.py ``NAME_PREFIX_SUFFIX``).
PREFIX_SUFFIX = r"[0-9]{26}"
# An AWS service-linked role's path (IAM user guide, "Using service-linked roles").
SERVICE_LINKED = "role/aws-service-role/"
# The domains whose stores the deployer creates through services that need its own key rights, by the
# ``kms:ViaService`` prefixes of those services (components/aws/keys.py ``DOMAIN_USERS``): RDS and Secrets
# Manager for the registry database and its managed password (RDS user guide, "Password management with
# Amazon RDS and AWS Secrets Manager"), EFS and FSx for the shared file system (EFS user guide, "Amazon EFS
# key policies for AWS KMS"). ``kms:ViaService`` limits the service a request comes through, not who makes
# it (AWS KMS developer guide, "kms:ViaService"), so the exemption is the deployer's alone (review 35c A2).
STORE_CREATION: dict[str, tuple[str, ...]] = {
    "registry-database": ("rds.", "secretsmanager."),
    "training-data": ("elasticfilesystem.", "fsx."),
}
# A key's ID position in a canonical key ARN, for matching IAM resource patterns (``key/*``) against a key
# whose ID the plan does not know (AWS KMS developer guide, "Specifying KMS keys in IAM policy statements":
# wildcards in the Region and key ID positions select several keys; review 35c A6).
_ANY_KEY_ID = "key/" + "\x00" * 36
POLICY_ATTACHMENTS = "aws:iam/policyAttachment:PolicyAttachment"


def _grants_freely(statement: Mapping[str, Any], account: str | None) -> bool:
    """Whether a statement allows ``kms:CreateGrant`` to grantees other than AWS services
    (``grants_only_to_aws``: ``kms:GrantIsForAWSResource`` true, or service-linked grantees, by operator)."""
    return allows(statement, CREATE_GRANT) and not grants_only_to_aws(statement, account)


def _mode(statement: Mapping[str, Any], account: str | None) -> str | None:
    """How a statement uses a key: ``write``, ``read`` (``kms:Decrypt``, ``ReEncryptFrom``), or not."""
    if _grants_freely(statement, account) or any(allows(statement, action) for action in WRITE_ACTIONS):
        return WRITE
    return READ if uses_key(statement) else None


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


def _arn(arn: str) -> tuple[str, str, str] | None:
    """An ARN's service, account and resource (IAM user guide, "IAM identifiers")."""
    parts = arn.split(":", 5)
    return (parts[2], parts[4], parts[5]) if len(parts) == 6 and parts[0] == "arn" else None


def _account(key: Subject, document: Mapping[str, Any]) -> str | None:
    """The stack's account: the key's ARN's where the plan knows it, else the one whose root the key
    policy's administration is delegated to (``administered_by_account``), else the one root it names."""
    parsed = _arn(str(key.get("arn")))
    if parsed and parsed[1]:
        return parsed[1]
    statements = allowed_statements(document)
    for candidates in ([s for s in statements if administrative_actions(s)], statements):
        roots = {
            p if p.isdigit() else p.split(":")[4]
            for s in candidates
            for p in principals(s)
            if is_account_root(p)
        }
        if len(roots) == 1:
            return roots.pop()
    return None


def _own_role(arn: str, account: str | None) -> tuple[str, str] | None:
    """(path, name) of an IAM role of ``account`` an ARN names, or of the role a session of it
    (``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``, path ``""``: unknown) is of; None for another
    account's principal, an IAM user or any other type."""
    parsed = _arn(arn)
    if parsed is None or (account is not None and parsed[1] != account):
        return None
    service, _, resource = parsed
    if service == "sts" and resource.startswith("assumed-role/"):
        return "", resource.split("/")[1]
    if service != "iam" or not resource.startswith("role/"):
        return None
    path, name = resource.removeprefix("role").rsplit("/", 1)
    return f"{path}/", name


def _service_linked(arn: str, account: str | None) -> bool:
    """An AWS service-linked role of the stack's account; another account's is a principal like any."""
    parsed = _arn(arn)
    return (
        parsed is not None
        and parsed[0] == "iam"
        and parsed[1] == account
        and parsed[2].startswith(SERVICE_LINKED)
    )


def _via(statement: Mapping[str, Any]) -> tuple[str, ...]:
    condition = statement.get("Condition")
    return tuple(
        value
        for operands in (condition.values() if isinstance(condition, Mapping) else [])
        if isinstance(operands, Mapping)
        for value in strings(operands.get("kms:ViaService"))
    )


def _store_creation(domains: list[str], via: tuple[str, ...]) -> bool:
    """Whether a statement limited to ``via`` takes effect only through the services that create the
    key's stores with their caller's key rights (``STORE_CREATION``)."""
    return bool(via) and any(
        all(v.startswith(STORE_CREATION[d]) for v in via) for d in domains if d in STORE_CREATION
    )


@dataclass(frozen=True)
class _Grant:
    """An IAM policy document and the roles holding it: ``owner``'s ``prop`` (whose property dependencies
    tie it to keys), the plan's roles, and roles outside the plan by name."""

    owner: Subject
    prop: str
    value: Any
    roles: tuple[Subject, ...]
    outside: tuple[str, ...] = ()


@dataclass
class _Plan:
    """What the graph tells about roles and keys, read once per judgement."""

    graph: Graph
    account: str | None
    key_arns: dict[str, str] = field(default_factory=dict)  # a key's ARN as the plan spells it -> URN
    grants: list[_Grant] = field(default_factory=list)
    places: set[tuple[str, str, str]] = field(default_factory=set)  # (partition, Region, account) of keys

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
        self.places = {
            (arn.split(":")[1], arn.split(":")[3], arn.split(":")[4])
            for arn in self.key_arns
            if arn.startswith("arn:") and arn.count(":") >= 5
        }
        self.grants = list(self._grants())

    def role_of(self, arn: str) -> Subject | None:
        """The plan's role an ARN names: by its exact ARN where known, else as a role of the stack's account
        with the role's path and name (or name prefix) (review 35c A3)."""
        roles = self.graph.of(ROLE)
        for role in roles:
            if role.get("arn") == arn:
                return role
        own = _own_role(arn, self.account)
        if own is None:
            return None
        path, name = own
        for role in roles:
            if path and (role.get("path") or "/") != path:
                continue
            prefix = role.get("namePrefix")
            if role.get("name") == name or (
                isinstance(prefix, str) and re.fullmatch(re.escape(prefix) + PREFIX_SUFFIX, name)
            ):
                return role
        return None

    def _grants(self) -> Iterator[_Grant]:
        """Every IAM document a role holds (review 35c A6): its inline policies (``RolePolicy`` and the
        role's ``inlinePolicies``), and each managed policy of the plan attached to it
        (``RolePolicyAttachment``, ``PolicyAttachment.roles``, the role's ``managedPolicyArns``: pulumi_aws
        iam/role.py)."""
        graph = self.graph
        for policy in graph.of(ROLE_POLICY):
            yield _Grant(
                policy, "policy", policy.get("policy"), tuple(graph.linked(policy, "role", [ROLE], "name"))
            )
        for role in graph.of(ROLE):
            inline = role.get("inlinePolicies")
            for entry in inline if isinstance(inline, list) else []:
                if isinstance(entry, Mapping):
                    yield _Grant(role, "inlinePolicies", entry.get("policy"), (role,))
        for policy in graph.of(IAM_POLICY):
            roles: dict[str, Subject] = {}
            outside: list[str] = []
            for attachment in graph.of(POLICY_ATTACHMENT):
                if policy in graph.linked(attachment, "policyArn", [IAM_POLICY], "name"):
                    found = graph.linked(attachment, "role", [ROLE], "name")
                    roles.update((r.urn, r) for r in found)
                    outside += [] if found else [str(attachment.get("role"))]
            for attachment in graph.of(POLICY_ATTACHMENTS):
                if policy in graph.linked(attachment, "policyArn", [IAM_POLICY], "name"):
                    roles.update((r.urn, r) for r in graph.linked(attachment, "roles", [ROLE]))
                    for name in strings(attachment.get("roles")):
                        found = [r for r in graph.of(ROLE) if names(name, r.get("name"))]
                        roles.update((r.urn, r) for r in found)
                        outside += [] if found or is_unknown(name) else [name]
            for role in graph.of(ROLE):
                arns = strings(role.get("managedPolicyArns"))
                if policy in graph.linked(role, "managedPolicyArns", [IAM_POLICY]) or any(
                    names(arn, policy.get("name")) for arn in arns
                ):
                    roles[role.urn] = role
            yield _Grant(policy, "policy", policy.get("policy"), tuple(roles.values()), tuple(outside))

    def _arns(self, key: Subject) -> list[str]:
        """The ARNs a key answers to: those the plan spells, and its canonical ``key/<id>`` form."""
        known = [arn for arn, urn in self.key_arns.items() if urn == key.urn and arn.startswith("arn:")]
        places = {(arn.split(":")[1], arn.split(":")[3], arn.split(":")[4]) for arn in known}
        # A key whose ARN the plan does not spell lives where the stack's other keys do.
        places = places or self.places or {("aws", str(key.aws_region()), str(self.account))}
        return [*known, *(f"arn:{p}:kms:{r}:{a}:{_ANY_KEY_ID}" for p, r, a in places)]

    def _covers(self, grant: _Grant, resource: str, key: Subject) -> bool:
        """Whether an IAM statement's resource names K: ``*``, a pattern matching one of K's ARNs, the ARN
        the plan ties to K, or an untied KMS ARN where ``grant`` depends on K."""
        if resource == "*":
            return True
        if "*" in resource or "?" in resource:
            return any(fnmatch.fnmatchcase(arn, resource) for arn in self._arns(key))
        if resource in self.key_arns:
            return self.key_arns[resource] == key.urn
        tied = set(self.key_arns.values())
        return (
            ":kms:" in resource
            and key.urn not in tied
            and key in self.graph.linked(grant.owner, grant.prop, [KMS_KEY])
        )

    def _names_key(self, grant: _Grant, statement: Mapping[str, Any], key: Subject) -> bool:
        """``NotResource`` names every resource it does not list (IAM JSON policy reference, "IAM JSON
        policy elements: NotResource")."""
        if "NotResource" in statement:
            return not any(self._covers(grant, r, key) for r in strings(statement.get("NotResource")))
        return any(self._covers(grant, r, key) for r in strings(statement.get("Resource")))

    def consumers(self, key: Subject) -> tuple[dict[str, str], dict[str, str]]:
        """Who K's IAM users are: the plan's roles (URN -> mode) and roles outside the plan, by name, that a
        managed policy using K is attached to (name -> mode)."""
        roles: dict[str, str] = {}
        outside: dict[str, str] = {}
        for grant in self.grants:
            mode = self._use(grant, key)
            if mode is None:
                continue
            for role in grant.roles:
                _merge(roles, role.urn, mode)
            for name in grant.outside:
                _merge(outside, name, mode)
        return roles, outside

    def _use(self, grant: _Grant, key: Subject) -> str | None:
        """How ``grant`` uses K: ``write``, ``read`` or not at all (``None``). A document not known yet is
        judged once known where it depends on K (the engine's property dependencies); one that does not
        cannot name K but by a literal ARN, and is left to the ``pulumi up`` that makes it known."""
        try:
            document = parse_document(grant.value, grant.prop)
        except UnknownValueError:
            if key in self.graph.linked(grant.owner, grant.prop, [KMS_KEY]):
                raise
            return None
        mode: str | None = None
        for statement in allowed_statements(document):
            used = _mode(statement, self.account)
            if used is not None and self._names_key(grant, statement, key):
                mode = WRITE if WRITE in (mode, used) else used
        return mode


def _use_statements(
    document: Mapping[str, Any], account: str | None
) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    """(Sid, statement, mode) for each Allow statement of a key policy that uses the key."""
    for index, statement in enumerate(allowed_statements(document)):
        mode = _mode(statement, account)
        if mode is not None:
            yield str(statement.get("Sid") or f"Statement[{index}]"), statement, mode


def _named(
    document: Mapping[str, Any], account: str | None
) -> Iterator[tuple[str, str, str, tuple[str, ...]]]:
    """(statement's Sid, principal ARN, mode, the services it is limited to) for each principal a key
    policy's use statements name: by ``aws:PrincipalArn`` for the account root or ``*``, outright otherwise
    (service principals and the stack's account's AWS service-linked roles aside)."""
    for sid, statement, mode in _use_statements(document, account):
        named: list[str] = []
        for principal in principals(statement):
            if is_account_root(principal) or principal == "*":
                named += principal_arns(statement)
            elif principal.startswith("arn:") and not _service_linked(principal, account):
                named.append(principal)
        for arn in named:
            yield sid, arn, mode, _via(statement)


def _unnamed(document: Mapping[str, Any], key: Subject, account: str | None) -> Iterator[str]:
    """A use statement that names no principal the pack can hold to the key's users: ``Principal: "*"``
    (or ``{"AWS": "*"}``) with no ``aws:PrincipalArn`` naming users, which "gives every identity in every
    AWS account permission to use the KMS key" unless a condition limits it (AWS KMS developer guide,
    "Determining access: examining the key policy"; an account condition still names no user; review 35c
    A1), and ``Allow`` with ``NotPrincipal``, which AWS does not support (IAM user guide, "AWS JSON policy
    elements: NotPrincipal"; review 35c C7)."""
    for sid, statement, _ in _use_statements(document, account):
        if "NotPrincipal" in statement:
            yield (
                f"key policy statement {sid} allows use of key {key.name} with NotPrincipal, every principal "
                "but those listed (IAM 'NotPrincipal': not supported with Allow); name the key's users"
            )
        roots = sorted(p for p in principals(statement) if is_account_root(p))
        if roots and crypto_actions(statement) and not principal_arns(statement):
            yield (
                f"key policy statement {sid} lets every principal of {', '.join(roots)} whose IAM allows it "
                f"use key {key.name} (AWS KMS developer guide, 'Default key policy': the account root "
                "delegates to IAM); name the key's users by exact ARN (ArnEquals aws:PrincipalArn)"
            )
        if "*" in principals(statement) and not principal_arns(statement):
            yield (
                f'key policy statement {sid} lets any principal ("*") use key {key.name}: it "gives every '
                'identity in every AWS account permission to use the KMS key" (AWS KMS developer guide, '
                "'Determining access: examining the key policy'); name the key's users by exact ARN "
                "(ArnEquals aws:PrincipalArn)"
            )


# Conditions that bind a service principal's use to the stack's account's own resources (IAM user guide,
# "The confused deputy problem"; AWS KMS developer guide, "Using service principals in key policies":
# ``aws:SourceAccount``/``aws:SourceArn``, ``kms:CallerAccount``), or to an encryption context naming them
# (CloudWatch Logs user guide, "Encrypt log data in CloudWatch Logs using AWS KMS":
# ``kms:EncryptionContext:aws:logs:arn``): under a positive operator, every value the account's (review
# rev35e A5). ``kms:ViaService`` is none of them: it limits the service a request comes through, not the
# account whose resource it serves (AWS KMS developer guide, "kms:ViaService"; review rev35f C2).
_ACCOUNT_KEYS = ("aws:SourceAccount", "kms:CallerAccount")
_ARN_KEYS = ("aws:SourceArn",)
_ENCRYPTION_CONTEXT = "kms:EncryptionContext:"


def _bound_to(statement: Mapping[str, Any], account: str | None) -> bool:
    """Whether a statement's conditions keep a service principal's use to ``account``'s resources."""
    condition = statement.get("Condition")
    for operator, operands in condition.items() if isinstance(condition, Mapping) else []:
        if "Not" in operator or operator.endswith("IfExists") or not isinstance(operands, Mapping):
            continue
        for name, value in operands.items():
            values = [str(v) for v in (value if isinstance(value, list) else [value])]
            if name in _ACCOUNT_KEYS and values and all(v == account for v in values):
                return True
            arns = name in _ARN_KEYS or name.startswith(_ENCRYPTION_CONTEXT)
            if arns and values and all((_arn(v) or ("", "", ""))[1] == account for v in values):
                return True
    return False


def _unbound_services(document: Mapping[str, Any], key: Subject, account: str | None) -> Iterator[str]:
    """A use statement naming a service principal with no condition binding it to the stack's account: the
    service then uses the key for any account's resource that names it (IAM user guide, "The confused
    deputy problem")."""
    for sid, statement, _ in _use_statements(document, account):
        principal = statement.get("Principal")
        services = strings(principal.get("Service")) if isinstance(principal, Mapping) else []
        if services and not _bound_to(statement, account):
            yield (
                f"key policy statement {sid} lets {', '.join(services)} use key {key.name} with no condition "
                f"binding it to account {account}'s resources; add aws:SourceAccount or aws:SourceArn (IAM "
                "user guide, 'The confused deputy problem'; AWS KMS developer guide, 'Using service "
                "principals in key policies')"
            )


def _people_modes(graph: Graph, domains: list[str]) -> dict[str, str]:
    """Each named person (its full ARN, or its role name where the plan knows only that) the role-to-key
    table gives one of ``domains`` -> its mode."""
    found: dict[str, str] = {}
    for person, roles in aws_people(graph).items():
        for role in roles:
            modes = [table().get(role, {}).get("aws", {}).get(d) for d in domains]
            if any(modes):
                _merge(found, person, WRITE if WRITE in modes else READ)
    return found


def _outside_mode(
    arn: str, account: str | None, people: Mapping[str, str], outside: Mapping[str, str]
) -> str | None:
    """The mode a principal outside the plan needs: a person's by exact ARN (or, known by name only, as a
    role of the stack's account), and a role outside the plan holding a policy that uses K (by name, as
    an attachment names it), a role of the stack's account only (review 35c A3)."""
    own = _own_role(arn, account)
    name = own[1] if own else None
    given = [m for person, m in people.items() if person == arn or (name and person == name)]
    if name is not None and name in outside:
        given.append(outside[name])
    return WRITE if WRITE in given else (READ if given else None)


def _deployer(plan: _Plan, people: Mapping[str, set[str]]) -> str | None:
    """The deployer's ARN: the one principal the store-creating statements of the stack's keys name
    (components/aws/keys.py ``DOMAIN_USERS``) that is neither a role of the plan (the registry reads the
    database's password through Secrets Manager) nor a person, and, where a key policy names its
    administrators, one of them (``key_administrators``: the custodians and the deployer). None where that
    is not one principal: then no one is exempt."""
    graph = plan.graph
    named: set[str] = set()
    administrators: set[str] = set()
    for key in graph.of(KMS_KEY):
        domains = declared_domains(key)
        if not set(domains) & STORE_CREATION.keys():
            continue
        try:
            document = key_policy(key, graph)
        except UnknownValueError:
            continue
        administrators.update(key_administrators(document))
        uses = _named(document, _account(key, document))
        named.update(arn for _, arn, _, via in uses if _store_creation(domains, via))
    candidates = {
        arn
        for arn in named
        if arn not in people and role_name(arn) not in people and plan.role_of(arn) is None
    }
    if administrators:
        candidates &= administrators
    return candidates.pop() if len(candidates) == 1 else None


def _inexact_administrators(document: Mapping[str, Any], key: Subject) -> Iterator[str]:
    """An administrative statement that names its administrators by pattern: a principal with ``*`` or
    ``?``, or an ``aws:PrincipalArn`` under a ``...Like`` operator or with a wildcard. Administrators "can
    give themselves and others AWS KMS permissions not specified in this policy" (AWS KMS developer
    guide, "Default key policy", "Allows key administrators to administer the KMS key": ``kms:Put*``
    rewrites the policy), so a pattern makes every role it matches a possible user; they are named
    exactly, as the users are (``ArnEquals``; components/aws/keys.py ``key_administration``; review
    rev35h A4)."""
    for index, statement in enumerate(allowed_statements(document)):
        if not administrative_actions(statement):
            continue
        sid = str(statement.get("Sid") or f"Statement[{index}]")
        patterns = [p for p in principals(statement) if "*" in p or "?" in p]
        condition = statement.get("Condition")
        for operator, operands in condition.items() if isinstance(condition, Mapping) else ():
            if not isinstance(operands, Mapping) or "Not" in str(operator):
                continue
            arns = strings(operands.get("aws:PrincipalArn"))
            like = "Like" in str(operator)
            patterns += [f"{operator} {arn}" for arn in arns if like or "*" in arn or "?" in arn]
        if patterns:
            yield (
                f"key policy statement {sid} lets {', '.join(patterns)} administer key {key.name}: a pattern "
                "is no one custodian, and an administrator can give itself the key's use (kms:Put*); name "
                "each key custodian by its exact ARN (ArnEquals aws:PrincipalArn)"
            )


def _key_users_named(key: Subject, graph: Graph) -> Iterator[str]:
    domains = declared_domains(key)
    if not domains:
        return
    document = key_policy(key, graph)
    account = _account(key, document)
    plan = _Plan(graph, account)
    roles, outside = plan.consumers(key)
    people = _people_modes(graph, domains)
    deployer = _deployer(plan, aws_people(graph))
    yield from _unnamed(document, key, account)
    yield from _inexact_administrators(document, key)
    yield from _unbound_services(document, key, account)
    seen: set[str] = set()
    # principal -> (the mode its IAM or the table needs, how findings name it, mode -> first Sid granting it)
    named: dict[str, tuple[str, str, dict[str, str]]] = {}
    for sid, arn, mode, via in dict.fromkeys(_named(document, account)):
        if "*" in arn or "?" in arn:
            yield (
                f"key policy statement {sid} names the pattern {arn}: it is no one user; name each of the "
                "key's users by its exact ARN (ArnEquals aws:PrincipalArn)"
            )
            continue
        role = plan.role_of(arn)
        if role is not None:
            seen.add(role.urn)
            needed = roles.get(role.urn)
            what = f"role {role.name} ({arn})"
        else:
            seen.add(arn)
            own = _own_role(arn, account)
            if own:
                seen.add(own[1])
            needed = _outside_mode(arn, account, people, outside)
            what = arn if own else f"{arn} (not a role of the stack's account {account})"
            if needed is None and _store_creation(domains, via):
                if arn != deployer:
                    yield (
                        f"key policy statement {sid} names {what} through {', '.join(via)}: only the "
                        f"deployer ({deployer or 'not one principal'}) creates the key's stores with its key "
                        "rights, and kms:ViaService limits the service, not the caller (AWS KMS developer "
                        "guide, 'kms:ViaService'); name no one else"
                    )
                continue
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
        'create the key\'s stores with its key rights; no other principal, no Principal "*" without named '
        "users, no NotPrincipal, no kms:CreateGrant without kms:GrantIsForAWSResource, and its "
        "administrators (the key custodians) named by exact ARN as its users are.",
        per_node((KMS_KEY,), _key_users_named),
        severity=Severity.HIGH,
    ),
]
