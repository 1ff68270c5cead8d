"""People's duties kept apart (issue 35; review rows S1, I2, E2): ``duties-separated`` refuses a stack that
gives one identity two duties a bank keeps apart (docs/security.md, "Who can do what"):

- a key custodian who also reaches the cluster, as a platform admin or a team's ML engineer: whoever runs
  the cluster, or edits a namespace's Secrets, would also hold the keys that seal them (docs/security.md:
  custodians "may not reach the cluster");
- a model approver (the registry's promotion identities, ``REGISTRY_PROMOTERS`` on the MLflow server,
  workloads/registry/server/guard.py) who also trains: a user that logs runs (EDIT on an experiment) or a
  team's user (``team-<name>``, which trains in its namespace), approving its own models, or who is a
  restorer (``REGISTRY_RESTORERS``: the drift monitor, whose retrains would reach ``@champion`` unapproved);
- an auditor with write: an auditor who holds another person's role, an access entry of an auditor with
  an EKS access policy other than AmazonEKSViewPolicy, an auditor's Azure role other than a reader's, or
  the auditors' IAM policy allowing an action that is not a read.

Who holds which duty, as the engine sees it:
- AWS: an EKS access entry (``aws:eks/accessEntry:AccessEntry``) tags its principal's roles
  (``ml-platform.io/access-roles``); its access policy associations (``AccessPolicyAssociation``, by
  ``principalArn``) are what it is granted (EKS user guide, "Review access policy permissions":
  AmazonEKSClusterAdminPolicy, AmazonEKSEditPolicy, AmazonEKSViewPolicy); a KMS key policy names its
  custodians in the account root's administration statement by ``aws:PrincipalArn`` (components/aws/
  keys.py ``administered_by_account``), or as a principal holding administrative actions; the auditors'
  policy (``aws:iam/policy:Policy``) carries the auditor tag, the lifecycle record writers' policies the
  model approver's or the ML engineer's, and each role they are attached to holds that role.
- Azure: a people's role assignment says its role in its description (``ml-platform access: <role>``);
  the deployer's key administration (described ``ml-platform deployer: key administration``) and any
  other Key Vault Crypto Officer assignment (the image-signing vault's) are the deployer's
  (components/azure/keys.py ``deployer_key_access``): it administers the keys, so its principal holds the
  key custodian's duty, as the AWS deployer does through the key policies.

The deployer is none of these people: it holds its standing rights to apply the stack (docs/security.md),
and the stack never names it in a people's role; naming it as one makes it a person with two duties.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import Severity

from . import tokens
from .factory import Finding, StackRule, stack_policy
from .registry import MLFLOW_NAME, template_labels
from .separation import KMS_KEY, key_administrators, key_policy, registry_users
from .subject import Graph, Subject
from .values import elements, parse_document, statements

ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
IAM_POLICY = "aws:iam/policy:Policy"
POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
ACCESS_ROLES_TAG = "ml-platform.io/access-roles"
ACCESS_DESCRIPTION = "ml-platform access: "
PROMOTERS_VARIABLE = "REGISTRY_PROMOTERS"
RESTORERS_VARIABLE = "REGISTRY_RESTORERS"
# The approver role, whose approvals the registry decides each promotion on (guard.py ``promotion_policy``).
APPROVERS_VARIABLE = "REGISTRY_APPROVERS"

PLATFORM_ADMIN, KEY_CUSTODIAN, AUDITOR = "platform-admin", "key-custodian", "auditor"
ML_ENGINEER = "ml-engineer"
# The people's roles that reach the cluster (an EKS access entry, an AKS role).
CLUSTER_ROLES = (PLATFORM_ADMIN, ML_ENGINEER)
# Azure built-in roles reference: Key Vault Crypto Officer (every key's management and use).
KEY_VAULT_CRYPTO_OFFICER = "14b46e9e-c2b7-41b4-b07b-48a6ebf60603"
# The deployer's own key assignment on the stack's vaults (components/azure/keys.py ``deployer_key_access``).
DEPLOYER_KEYS_DESCRIPTION = "ml-platform deployer: key administration"
# The EKS access policy an auditor may hold (read-only, no Secrets).
VIEW_POLICY = "AmazonEKSViewPolicy"
# Azure built-in roles that only read (Azure built-in roles reference): Azure Kubernetes Service RBAC
# Reader, Log Analytics Reader, Storage Blob Data Reader, Reader.
AZURE_READERS = frozenset(
    {
        "7f6c6a51-bcf8-42ba-9220-52d62157d7db",
        "73c42c96-874c-492b-b04d-ab87d138a893",
        "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1",
        "acdd72a7-3385-48ef-bd42-f606fba81ae7",
    }
)
# IAM action names that only read (the verbs of the Service Authorization Reference's Read and List access
# levels), and reads whose verb says otherwise: CloudWatch Logs Insights queries, decrypting an object
# read through S3.
_READ_VERBS = ("Get", "List", "Describe", "Lookup", "Filter")
_READS = frozenset({"logs:StartQuery", "logs:StopQuery", "kms:Decrypt"})


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else []


def _reads_only(action: str) -> bool:
    verb = action.split(":", 1)[-1]
    return action in _READS or (verb.startswith(_READ_VERBS) and "*" not in verb)


def attached_people(graph: Graph) -> Iterator[tuple[str, str, str]]:
    """(role name, people's role, the attachment's URN) for each IAM role a people's managed policy is
    attached to: a policy tagged with the people's role it is for (the auditors', the lifecycle record
    writers' for the model approvers and for the ML engineers: components/aws/access.py, identities.py).
    An attachment names its role by name, not ARN."""
    for attachment in graph.of(POLICY_ATTACHMENT):
        for policy in graph.linked(attachment, "policyArn", [IAM_POLICY]):
            for role in str(policy.tags().get(ACCESS_ROLES_TAG) or "").split():
                yield str(attachment.get("role")), role, attachment.urn


def _aws_roles(graph: Graph) -> dict[str, dict[str, str]]:
    """Principal -> its people's roles -> where each is given (a resource's URN). A role known only by an
    attachment joins the principal of the same role name, or stands under its name."""
    held: dict[str, dict[str, str]] = {}
    for entry in graph.of(ACCESS_ENTRY):
        principal = str(entry.get("principalArn"))
        for role in str(entry.tags().get(ACCESS_ROLES_TAG) or "").split():
            held.setdefault(principal, {}).setdefault(role, entry.urn)
    for key in graph.of(KMS_KEY):
        for principal in key_administrators(key_policy(key, graph)):
            held.setdefault(principal, {}).setdefault(KEY_CUSTODIAN, key.urn)
    for name, role, urn in attached_people(graph):
        named = [p for p in held if p.rsplit("/", 1)[-1] == name] or [name]
        for principal in named:
            held.setdefault(principal, {}).setdefault(role, urn)
    return held


def _azure_roles(graph: Graph) -> dict[str, dict[str, str]]:
    held: dict[str, dict[str, str]] = {}
    for assignment in graph.of(ROLE_ASSIGNMENT):
        description = str(assignment.get("description") or "")
        if description.startswith(ACCESS_DESCRIPTION):
            role = description.removeprefix(ACCESS_DESCRIPTION)
        elif (
            description == DEPLOYER_KEYS_DESCRIPTION
            or str(assignment.get("roleDefinitionId")).rsplit("/", 1)[-1] == KEY_VAULT_CRYPTO_OFFICER
        ):
            role = KEY_CUSTODIAN
        else:
            continue
        held.setdefault(str(assignment.get("principalId")), {}).setdefault(role, assignment.urn)
    return held


def _merged(held: dict[str, dict[str, str]], cloud: str) -> Iterator[Finding]:
    """The pairs of duties one principal must not hold together."""
    for principal, roles in sorted(held.items()):
        for role in (r for r in CLUSTER_ROLES if r in roles and KEY_CUSTODIAN in roles):
            yield (
                roles[role],
                f"{principal} is both a {role} and a key custodian ({cloud}): who reaches the cluster would "
                "hold the keys that seal its Secrets and data; name different identities (access."
                f"{'platformAdmins' if role == PLATFORM_ADMIN else 'mlEngineers'}, access.keyCustodians)",
            )
        others = sorted(set(roles) - {AUDITOR})
        if AUDITOR in roles and others:
            yield (
                roles[AUDITOR],
                f"{principal} is an auditor and also {', '.join(others)} ({cloud}): an auditor only reads; "
                "name a separate identity for access.auditors",
            )


def _auditor_grants_aws(graph: Graph, held: dict[str, dict[str, str]]) -> Iterator[Finding]:
    auditors = {p for p, roles in held.items() if AUDITOR in roles}
    for association in graph.of(ASSOCIATION):
        principal, granted = str(association.get("principalArn")), str(association.get("policyArn"))
        if principal in auditors and not granted.endswith(f"/{VIEW_POLICY}"):
            yield (
                association.urn,
                f"auditor {principal} holds {granted.rsplit('/', 1)[-1]}; an auditor's cluster access is "
                f"{VIEW_POLICY} (read-only)",
            )
    for policy in graph.of(IAM_POLICY):
        if AUDITOR not in str(policy.tags().get(ACCESS_ROLES_TAG) or "").split():
            continue
        for statement in statements(parse_document(policy.get("policy"), "policy")):
            if statement.get("Effect") != "Allow":
                continue
            written = sorted(a for a in _strings(statement.get("Action")) if not _reads_only(a))
            if written:
                yield (
                    policy.urn,
                    f"the auditors' policy allows {', '.join(written)}, which is not a read; auditors only "
                    "read",
                )


def _auditor_grants_azure(graph: Graph) -> Iterator[Finding]:
    for assignment in graph.of(ROLE_ASSIGNMENT):
        if str(assignment.get("description") or "") != f"{ACCESS_DESCRIPTION}{AUDITOR}":
            continue
        role = str(assignment.get("roleDefinitionId")).rsplit("/", 1)[-1]
        if role not in AZURE_READERS:
            yield (
                assignment.urn,
                f"auditor {assignment.get('principalId')} is granted role {role}, not a reader's; auditors "
                "read only (AKS RBAC Reader, Log Analytics Reader, Storage Blob Data Reader)",
            )


def _users_named(subject: Subject, variable_name: str) -> list[str]:
    """The registry users a list variable of the MLflow server names (``REGISTRY_PROMOTERS``,
    ``REGISTRY_APPROVERS``, ``REGISTRY_RESTORERS``)."""
    spec = subject.get(tokens.POD_SPEC_PATHS[subject.type]) or {}
    for container in elements(spec, "containers"):
        for variable in elements(container, "env") if isinstance(container, Mapping) else ():
            if isinstance(variable, Mapping) and variable.get("name") == variable_name:
                try:
                    names = json.loads(str(variable.get("value")))
                except json.JSONDecodeError:
                    return []
                return [str(n) for n in names] if isinstance(names, list) else []
    return []


def _trains(user: Mapping[str, Any]) -> bool:
    experiments = user.get("experiments")
    logs_runs = isinstance(experiments, Mapping) and any(v != "READ" for v in experiments.values())
    return logs_runs or fnmatch.fnmatchcase(str(user.get("username")), "team-*")


def _approvers_who_train(graph: Graph) -> Iterator[Finding]:
    """A promoter that trains approves its own work; one that is a restorer (the drift monitor, which
    launches retrains) would move ``@champion`` to what its own loop produced, which only the gates and an
    approval may (docs/lifecycle.md)."""
    for workload in graph.of(*tokens.WORKLOADS):
        if template_labels(workload).get("app.kubernetes.io/name") != MLFLOW_NAME:
            continue
        promoters = set(_users_named(workload, PROMOTERS_VARIABLE))
        promoters |= set(_users_named(workload, APPROVERS_VARIABLE))
        trainers = {str(u.get("username")) for u in registry_users(workload) or () if _trains(u)}
        for name in sorted(promoters & trainers):
            yield (
                workload.urn,
                f"registry user {name} approves models ({PROMOTERS_VARIABLE}, {APPROVERS_VARIABLE}) and"
                " trains them; an approver "
                "never approves its own work (workloads.registry.approvers: name people, not callers)",
            )
        for name in sorted(promoters & set(_users_named(workload, RESTORERS_VARIABLE))):
            yield (
                workload.urn,
                f"registry user {name} approves models ({PROMOTERS_VARIABLE}, {APPROVERS_VARIABLE}) and is"
                " a restorer "
                f"({RESTORERS_VARIABLE}, the drift monitor that launches retrains): it may only roll back "
                "(workloads.registry.approvers: name people, not workloads)",
            )


def _duties(graph: Graph) -> Iterator[Finding]:
    aws = _aws_roles(graph)
    yield from _merged(aws, "AWS")
    yield from _auditor_grants_aws(graph, aws)
    yield from _merged(_azure_roles(graph), "Azure")
    yield from _auditor_grants_azure(graph)
    yield from _approvers_who_train(graph)


_RULE: StackRule = _duties

POLICIES = [
    stack_policy(
        "duties-separated",
        "People's duties stay apart: no key custodian reaches the cluster (platform admin, ML engineer), no "
        "model approver trains or restores, no auditor holds another role or any write.",
        _RULE,
        severity=Severity.HIGH,
    ),
]
