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
- Cluster access is judged by its grant, not by a tag or a description (review rev35f A3): each EKS access
  policy association is a duty by its policy and scope (cluster-admin or admin at cluster scope a platform
  admin's, any other but AmazonEKSViewPolicy an ML engineer's), and each Azure role assignment of AKS RBAC
  Cluster Admin, RBAC Admin, Cluster Admin Role (a platform admin's at the cluster or above, an ML
  engineer's at a namespace) or RBAC Writer (an ML engineer's) at the cluster, a namespace of it or above
  it. The principal holds that duty whatever else it holds, and a grant beyond the roles the stack's
  ``access`` names it for (the entry's tag, the assignments' descriptions), or to a principal it names
  for none, is refused; the Azure deployer's own cluster admin is its standing right.
- Azure: a people's role assignment says its role in its description (``ml-platform access: <role>``);
  any assignment whose role administers keys, judged by its data actions (Key Vault Crypto Officer, Key
  Vault Administrator, the stack's key-administration role or any role of the plan whose ``dataActions``
  create, update, rotate or delete keys: review rev35f A4), holds the key custodian's duty whatever its
  description; the deployer's key administration (described ``ml-platform deployer: key administration``)
  and its Crypto Officer on the image-signing vault make its principal one, as the AWS deployer is through
  the key policies (components/azure/keys.py ``deployer_key_access``).

The deployer is none of these people: it holds its standing rights to apply the stack (docs/security.md),
and the stack never names it in a people's role; naming it as one makes it a person with two duties.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pulumi_policy import Severity

from . import tokens
from .audit import above, granted_data_actions
from .azure_rbac import role_grants
from .factory import Finding, StackRule, stack_policy
from .registry import MLFLOW_NAME, template_labels
from .separation import KMS_KEY, key_administrators, key_policy, registry_users
from .subject import Graph, Subject
from .values import elements, parse_document, statements

ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
IAM_POLICY = "aws:iam/policy:Policy"
POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
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
# EKS access policies that administer (EKS user guide, "Review access policy permissions":
# AmazonEKSClusterAdminPolicy is cluster-admin, AmazonEKSAdminPolicy admin): the platform admin's duty at
# cluster scope, a team's ML engineer's at namespace scope; any other but the view policy writes in or
# reads Secrets of what it is scoped to (AmazonEKSEditPolicy, AmazonEKSAdminViewPolicy): an ML engineer's.
_ADMIN_POLICIES = ("AmazonEKSClusterAdminPolicy", "AmazonEKSAdminPolicy")
# Azure built-in roles that reach an AKS cluster's Kubernetes API or its admin credential (Azure built-in
# roles, "Containers"): Azure Kubernetes Service RBAC Cluster Admin ("manage all resources in the
# cluster"), RBAC Admin ("manage all resources under cluster/namespace"), Cluster Admin Role (lists the
# cluster admin credential), each an administrator's at the cluster or above; RBAC Writer a namespace
# writer's. At a namespace scope (``.../namespaces/<name>``) each is a team's.
_AKS_ADMIN_ROLES = frozenset(
    {
        "b1ff04bb-8a4e-4dc4-8eb5-8693973ce19b",
        "3498e952-d568-435e-9b2c-8d77e338d7f7",
        "0ab0b1a8-8aac-4efd-b8c2-3ee1fb270be8",
    }
)
_AKS_WRITER_ROLES = frozenset({"a7ffa36f-339b-4b5c-8bdf-e2c188b2c0eb"})
# A custom role of the plan is judged by its data actions (AKS, "Use Azure RBAC for Kubernetes
# authorization": a role's dataActions name ``Microsoft.ContainerService/managedClusters/<group>/<kind>/
# <verb>``): binding cluster roles administers the cluster; writing workloads or reading Secrets is a
# namespace writer's reach.
_AKS_ADMIN_DATA_ACTIONS = (
    "Microsoft.ContainerService/managedClusters/rbac.authorization.k8s.io/clusterrolebindings/write",
)
_AKS_WRITER_DATA_ACTIONS = (
    "Microsoft.ContainerService/managedClusters/apps/deployments/write",
    "Microsoft.ContainerService/managedClusters/secrets/read",
)
# Key administration on Azure, judged by the role's data actions, not its name (review rev35f A4): Key Vault
# Crypto Officer and Key Vault Administrator ("Perform any action on the keys of a key vault"; Azure
# built-in roles, "Security"), or a role of the plan (the stack's key-administration role, or any other)
# whose dataActions cover creating, importing, updating, rotating, deleting or purging a key, or writing
# its rotation policy (Key Vault data actions, learn.microsoft.com/azure/key-vault/general/rbac-guide).
KEY_ADMINISTRATION_BUILT_IN_ROLES = {
    KEY_VAULT_CRYPTO_OFFICER: "Key Vault Crypto Officer",
    "00482a5a-887f-4fb3-b363-3b7fe8e74483": "Key Vault Administrator",
}
KEY_ADMINISTRATION_DATA_ACTIONS = (
    *(
        f"Microsoft.KeyVault/vaults/keys/{op}/action"
        for op in ("create", "import", "update", "rotate", "recover")
    ),
    "Microsoft.KeyVault/vaults/keys/delete",
    "Microsoft.KeyVault/vaults/deletedKeys/delete",
    "Microsoft.KeyVault/vaults/keyrotationpolicies/write",
)
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


def _cluster_duty(policy: str, namespaced: bool) -> str | None:
    """The people's duty an EKS access policy is, by what it grants: None for the read-only view policy."""
    name = policy.rsplit("/", 1)[-1]
    if name == VIEW_POLICY:
        return None
    return PLATFORM_ADMIN if name in _ADMIN_POLICIES and not namespaced else ML_ENGINEER


def _aws_granted(graph: Graph) -> Iterator[tuple[str, str, Subject]]:
    """(principal, duty, association) for each EKS access policy association that reaches the cluster."""
    for association in graph.of(ASSOCIATION):
        scope = association.get("accessScope")
        namespaced = isinstance(scope, Mapping) and scope.get("type") == "namespace"
        duty = _cluster_duty(str(association.get("policyArn")), namespaced)
        if duty is not None:
            yield str(association.get("principalArn")), duty, association


RBAC = "kubernetes:rbac.authorization.k8s.io/v1:"
_BINDINGS = (f"{RBAC}ClusterRoleBinding", f"{RBAC}RoleBinding")
_RBAC_ROLES = (f"{RBAC}ClusterRole", f"{RBAC}Role")
# Kubernetes "Using RBAC Authorization", "User-facing roles": cluster-admin (a superuser; in a RoleBinding,
# full control of the namespace), admin and edit (read/write most objects of a namespace, Secrets
# included). A custom role with a write verb on Secrets (or ``*``) writes what the keys seal.
_RBAC_ADMIN_ROLES = ("cluster-admin", "admin")
_RBAC_WRITE_ROLES = (*_RBAC_ADMIN_ROLES, "edit")
_WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection", "*"})
# A binding subject's kind and name -> the principals it is.
Principals = Callable[[str, str], list[str]]


def _writes_secrets(role: Subject) -> bool:
    return any(
        _WRITE_VERBS & set(_strings(rule.get("verbs")))
        and {"secrets", "*"} & set(_strings(rule.get("resources")))
        for rule in elements(role.props, "rules")
        if isinstance(rule, Mapping)
    )


def _rbac_duty(binding: Subject, graph: Graph) -> str | None:
    """The people's duty a Kubernetes RoleBinding or ClusterRoleBinding grants, by the role it binds:
    cluster-admin or admin cluster-wide a platform admin's, any other write (edit, either admin in one
    namespace, a role of the plan writing Secrets) an ML engineer's; None for what only reads."""
    ref = binding.get("roleRef")
    if not isinstance(ref, Mapping):
        return None
    name, kind = str(ref.get("name")), str(ref.get("kind"))
    cluster_wide = binding.type.endswith("ClusterRoleBinding")
    if kind == "ClusterRole" and name in _RBAC_WRITE_ROLES:
        return PLATFORM_ADMIN if cluster_wide and name in _RBAC_ADMIN_ROLES else ML_ENGINEER
    namespace = (binding.get("metadata") or {}).get("namespace")
    for role in graph.of(f"{RBAC}{kind}"):
        metadata = role.get("metadata") or {}
        same = metadata.get("name") == name and (
            kind == "ClusterRole" or metadata.get("namespace") == namespace
        )
        if same and _writes_secrets(role):
            return PLATFORM_ADMIN if cluster_wide else ML_ENGINEER
    return None


def _rbac_granted(graph: Graph, principals: Principals) -> Iterator[tuple[str, str, Subject]]:
    """(principal, duty, binding) for each Kubernetes binding of the plan that grants a write to a Group or
    User, each resolved to the principals the cloud maps it from (``principals(kind, name)``): review
    rev35h A2, cluster access judged by its grant however it is given."""
    for binding in graph.of(*_BINDINGS):
        duty = _rbac_duty(binding, graph)
        if duty is None:
            continue
        for subject in elements(binding.props, "subjects"):
            if isinstance(subject, Mapping) and subject.get("kind") in ("Group", "User"):
                for principal in principals(str(subject.get("kind")), str(subject.get("name"))):
                    yield principal, duty, binding


def _eks_principals(graph: Graph) -> Principals:
    """EKS access entries map their principal to ``kubernetesGroups`` and a ``userName`` (EKS user guide,
    "Create access entries"): a binding to that group or user is that principal's."""

    def principals(kind: str, name: str) -> list[str]:
        return [
            str(entry.get("principalArn"))
            for entry in graph.of(ACCESS_ENTRY)
            if (kind == "Group" and name in _strings(entry.get("kubernetesGroups")))
            or (kind == "User" and entry.get("userName") == name)
        ]

    return principals


def _aks_principals(kind: str, name: str) -> list[str]:
    """AKS with Microsoft Entra integration names a group or user by its object ID (AKS, "Use Kubernetes
    RBAC with Microsoft Entra integration"): the binding's subject is the principal."""
    return [] if name.startswith("system:") else [name]


def _aws_tagged(graph: Graph) -> dict[str, set[str]]:
    """The stack's role table on AWS: each access entry's principal -> the people's roles ``access`` names
    it for (the entry's tag, components/aws/access.py)."""
    tagged: dict[str, set[str]] = {}
    for entry in graph.of(ACCESS_ENTRY):
        roles = str(entry.tags().get(ACCESS_ROLES_TAG) or "").split()
        tagged.setdefault(str(entry.get("principalArn")), set()).update(roles)
    return tagged


def _aws_roles(graph: Graph) -> dict[str, dict[str, str]]:
    """Principal -> its people's roles -> where each is given (a resource's URN): the roles the stack names
    it for, and the duty each access policy association grants it whatever its tags say (review rev35f A3).
    A role known only by an attachment joins the principal of the same role name, or stands under its
    name."""
    held: dict[str, dict[str, str]] = {}
    for entry in graph.of(ACCESS_ENTRY):
        principal = str(entry.get("principalArn"))
        for role in str(entry.tags().get(ACCESS_ROLES_TAG) or "").split():
            held.setdefault(principal, {}).setdefault(role, entry.urn)
    for principal, duty, association in _aws_granted(graph):
        held.setdefault(principal, {}).setdefault(duty, association.urn)
    for principal, duty, binding in _rbac_granted(graph, _eks_principals(graph)):
        held.setdefault(principal, {}).setdefault(duty, binding.urn)
    for key in graph.of(KMS_KEY):
        for principal in key_administrators(key_policy(key, graph)):
            held.setdefault(principal, {}).setdefault(KEY_CUSTODIAN, key.urn)
    for name, role, urn in attached_people(graph):
        named = [p for p in held if p.rsplit("/", 1)[-1] == name] or [name]
        for principal in named:
            held.setdefault(principal, {}).setdefault(role, urn)
    return held


def _beyond_role(granted: str, named: set[str]) -> bool:
    """Whether a cluster duty granted is more than the roles the stack names the principal for: a platform
    admin may hold a team's access too, nobody else the platform admin's."""
    return granted not in named and not (granted == ML_ENGINEER and PLATFORM_ADMIN in named)


def _aws_cluster_grants(graph: Graph) -> Iterator[Finding]:
    """An access policy association whose grant is beyond the roles the stack's ``access`` names its
    principal for, or to a principal it names for none (a key custodian's, a workload's, a stranger's)."""
    tagged = _aws_tagged(graph)
    for principal, duty, association in _aws_granted(graph):
        named = tagged.get(principal, set())
        if _beyond_role(duty, named):
            yield (
                association.urn,
                f"{principal} is granted {str(association.get('policyArn')).rsplit('/', 1)[-1]}, a {duty}'s "
                f"cluster access, but the stack's access names it {', '.join(sorted(named)) or 'for no role'}"
                f" (EKS user guide, 'Review access policy permissions'); grant cluster access only to the "
                f"access.{'platformAdmins' if duty == PLATFORM_ADMIN else 'mlEngineers'} the stack names",
            )


def _deployers(graph: Graph) -> set[str]:
    """The Azure deployer's principal: the one holding the stack's own key administration on its vaults
    (components/azure/keys.py ``deployer_key_access``). Its standing rights, the AKS cluster admin it
    applies the stack with included, are documented (docs/security.md, "The deployer's standing rights")."""
    return {
        str(a.get("principalId"))
        for a in role_grants(graph)
        if a.get("description") == DEPLOYER_KEYS_DESCRIPTION
    }


def _aks_granted(graph: Graph) -> Iterator[tuple[str, str, Subject]]:
    """(principal, duty, assignment) for each role assignment that reaches an AKS cluster of the stack: an
    AKS role at the cluster (by dependency or its resource ID), a namespace of it, or above it (its
    resource group, subscription, management group: Azure RBAC, "Understand scope for Azure RBAC")."""
    clusters = graph.of(tokens.AKS_CLUSTER)
    for assignment in role_grants(graph):
        role = str(assignment.get("roleDefinitionId")).rsplit("/", 1)[-1].lower()
        administers = role in _AKS_ADMIN_ROLES or bool(
            granted_data_actions(assignment, graph, _AKS_ADMIN_DATA_ACTIONS, {})
        )
        if not administers and not (
            role in _AKS_WRITER_ROLES or granted_data_actions(assignment, graph, _AKS_WRITER_DATA_ACTIONS, {})
        ):
            continue
        scope = str(assignment.get("scope") or "").lower()
        reached = graph.linked(assignment, "scope", [tokens.AKS_CLUSTER]) or [
            c
            for c in clusters
            if f"/managedclusters/{str(c.get('resourceName') or '').lower()}" in scope
            or above(assignment, c, graph)
        ]
        if not reached:
            continue
        namespaced = "/namespaces/" in scope
        duty = PLATFORM_ADMIN if administers and not namespaced else ML_ENGINEER
        yield str(assignment.get("principalId")), duty, assignment


def azure_people(graph: Graph) -> dict[str, set[str]]:
    """The stack's role table on Azure: each principal -> the people's roles its described assignments
    name (``ml-platform access: <role>``, components/azure/access.py)."""
    named: dict[str, set[str]] = {}
    for assignment in role_grants(graph):
        description = str(assignment.get("description") or "")
        if description.startswith(ACCESS_DESCRIPTION):
            role = description.removeprefix(ACCESS_DESCRIPTION)
            named.setdefault(str(assignment.get("principalId")), set()).add(role)
    return named


def administers_keys(assignment: Subject, graph: Graph) -> list[str]:
    """What of an assignment's role administers keys (review rev35f A4)."""
    return granted_data_actions(
        assignment, graph, KEY_ADMINISTRATION_DATA_ACTIONS, KEY_ADMINISTRATION_BUILT_IN_ROLES
    )


def _azure_roles(graph: Graph) -> dict[str, dict[str, str]]:
    """Principal -> its people's roles -> where each is given: the role a described assignment names, the
    key custodian's for any assignment whose role administers keys (by its data actions, whatever its
    description: review rev35f A4), and the cluster duty each AKS role grants (A3); the deployer's own
    cluster admin is its standing right, not a person's duty."""
    held: dict[str, dict[str, str]] = {}
    for assignment in role_grants(graph):
        principal = str(assignment.get("principalId"))
        description = str(assignment.get("description") or "")
        if description.startswith(ACCESS_DESCRIPTION):
            role = description.removeprefix(ACCESS_DESCRIPTION)
            held.setdefault(principal, {}).setdefault(role, assignment.urn)
        if description == DEPLOYER_KEYS_DESCRIPTION or administers_keys(assignment, graph):
            held.setdefault(principal, {}).setdefault(KEY_CUSTODIAN, assignment.urn)
    deployers = _deployers(graph)
    for principal, duty, assignment in _aks_granted(graph):
        if principal not in deployers:
            held.setdefault(principal, {}).setdefault(duty, assignment.urn)
    for principal, duty, binding in _rbac_granted(graph, _aks_principals):
        if principal not in deployers:
            held.setdefault(principal, {}).setdefault(duty, binding.urn)
    return held


def _azure_cluster_grants(graph: Graph) -> Iterator[Finding]:
    """An AKS role beyond the roles the stack's ``access`` names its principal for, or to a principal it
    names for none; the deployer's is its standing right."""
    named, deployers = azure_people(graph), _deployers(graph)
    for principal, duty, assignment in _aks_granted(graph):
        roles = named.get(principal, set())
        if principal not in deployers and _beyond_role(duty, roles):
            role = str(assignment.get("roleDefinitionId")).rsplit("/", 1)[-1]
            yield (
                assignment.urn,
                f"{principal} is granted AKS role {role} on {assignment.get('scope')}, a {duty}'s cluster "
                f"access, but the stack's access names it {', '.join(sorted(roles)) or 'for no role'} (Azure "
                "built-in roles, 'Containers'); grant cluster access only to the "
                f"access.{'platformAdmins' if duty == PLATFORM_ADMIN else 'mlEngineers'} the stack names",
            )


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
    for assignment in role_grants(graph):
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
    yield from _aws_cluster_grants(graph)
    yield from _auditor_grants_aws(graph, aws)
    yield from _merged(_azure_roles(graph), "Azure")
    yield from _azure_cluster_grants(graph)
    yield from _auditor_grants_azure(graph)
    yield from _approvers_who_train(graph)


_RULE: StackRule = _duties

POLICIES = [
    stack_policy(
        "duties-separated",
        "People's duties stay apart: no key custodian reaches the cluster (platform admin, ML engineer), no "
        "model approver trains or restores, no auditor holds another role or any write; cluster access (EKS "
        "access policy associations, AKS roles) and key administration (Key Vault roles by their data "
        "actions) are judged by what they grant, and cluster access only to whom the stack's access names.",
        _RULE,
        severity=Severity.HIGH,
    ),
]
