"""Separation of duties (issue 35; review rows S1, I1, I2, E2): one identity per role, each within its
role's set, and KMS key policies that keep key administrators apart from key users.

Identities, as the engine sees them:
- An IRSA role (``aws:iam/role:Role``) trusts web-identity tokens for the service-account subjects its
  trust policy names (``<issuer>:sub`` under ``StringEquals``/``StringLike``; EKS user guide, "IAM roles
  for service accounts"). A role trusted by two subjects is one identity for two roles. Every role of
  the stack is assumed only by its service account through the stack's own cluster OIDC provider (the
  ``aws:iam/openIdConnectProvider`` its trust refers to), or by its AWS service (``_other_assumers``).
  A workload
  role's inline policies (``aws:iam/rolePolicy:RolePolicy``, linked by ``role``) stay within its set
  (``WORKLOAD_SETS``): no wildcard action, S3 objects only under the role's prefixes, written only
  under the ones it writes, the key only through a service (``kms:ViaService``); and no managed policy
  attached (``aws:iam/rolePolicyAttachment:RolePolicyAttachment``), whose grants are AWS's to change.
- An Azure workload identity (``azure-native:managedidentity:UserAssignedIdentity``) is assumed through
  its federated credentials (``FederatedIdentityCredential``, linked by ``resourceName``): more than one
  subject is one identity for two roles. Its role assignments (``RoleAssignment``, linked by
  ``principalId``) are the Blob data roles on the containers of its set (``scope`` linked to a
  ``BlobContainer``), reading where it only reads.
- The registry's users (MLflow basic-auth, the launcher's ``REGISTRY_USERS`` on the MLflow server's
  Deployment, workloads/registry/server/launch.py): one user per role (a name listed twice is a merged
  identity); no user holds MANAGE, which administers permissions (mlflow/server/auth/permissions.py
  3.17.2); the inference and team users only read (``READ``, or no grant: ``default_permission``); and
  no workload but the MLflow servers mounts or reads the admin's Secret ``registry-admin``.

Keys (AWS KMS developer guide, "Default key policy",
https://docs.aws.amazon.com/kms/latest/developerguide/key-policy-default.html): the statement giving
the account root ``kms:*`` ("Allows access to the AWS account and enables IAM policies") is the one AWS
documents as needed, so that IAM policies can grant the key and the key cannot become unmanageable. Key
administrators get the administrative actions and key users the cryptographic ones, each in its own
statement ("Allows key administrators to administer the KMS key", "Allows key users to use the KMS
key"). The account root's statement is where IAM gets its say: ``kms:*`` there lets any IAM policy in
the account grant use of the key, so the root takes the administrators' actions only, use only under a
condition naming the key's users (``kms:ViaService``, ``aws:PrincipalArn``), and ``kms:CreateGrant`` only
for AWS services (``kms:GrantIsForAWSResource``, ``kms:GranteePrincipal``). ``kms:*`` (or ``*``) to any
other principal, and one principal holding both administrative and cryptographic actions, merge the two
duties. ``key-use-within-domain`` keeps each role's IAM grants to the keys of the domains it owns.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pulumi_policy import Severity
from pulumi_policy.proxy import UnknownValueError

from . import tokens
from .azure_rbac import role_grants
from .factory import Finding, StackRule, per_node, stack_policy
from .key_domains import declared_domains
from .registry import MLFLOW_NAME, template_labels
from .settings import AZURE_ROLE_TAG, LIFECYCLE_RECORD_PREFIX, LIFECYCLE_RECORD_ROLE
from .subject import Graph, Subject
from .values import elements, known, parse_document, statements

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"


@dataclass(frozen=True)
class IamPrincipal:
    """An IAM principal type and the resources that give it identity-based policies: its inline policy
    and its managed-policy attachment, each naming it by ``prop`` (pulumi_aws iam/role_policy.py,
    user_policy.py, group_policy.py and their ``*_policy_attachment.py``; ``PolicyAttachment`` lists
    each under ``roles``, ``users``, ``groups``). IAM evaluates a role's, a user's and a group member's
    identity-based policies alike (IAM user guide, "Policy evaluation logic")."""

    type: str
    inline: str
    attachment: str
    prop: str


IAM_PRINCIPALS = (
    IamPrincipal(ROLE, ROLE_POLICY, ROLE_POLICY_ATTACHMENT, "role"),
    IamPrincipal(
        "aws:iam/user:User",
        "aws:iam/userPolicy:UserPolicy",
        "aws:iam/userPolicyAttachment:UserPolicyAttachment",
        "user",
    ),
    IamPrincipal(
        "aws:iam/group:Group",
        "aws:iam/groupPolicy:GroupPolicy",
        "aws:iam/groupPolicyAttachment:GroupPolicyAttachment",
        "group",
    ),
)
KMS_KEY = "aws:kms/key:Key"
KEY_POLICY = "aws:kms/keyPolicy:KeyPolicy"
IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
FEDERATION = "azure-native:managedidentity:FederatedIdentityCredential"
BLOB_CONTAINER = "azure-native:storage:BlobContainer"

# Azure built-in role definition ids, the same in every tenant (Azure built-in roles reference).
BLOB_DATA_READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"


@dataclass(frozen=True)
class RoleSet:
    """What one workload role may touch: object prefixes (AWS) or containers (Azure) it reads, the ones
    it writes, and the AWS services its policies may name."""

    role: str
    reads: frozenset[str]
    writes: frozenset[str]
    services: frozenset[str] = frozenset({"s3", "kms"})
    # Holds the lifecycle record's writer role on the record's Azure account (``lifecycle-record-locked``
    # judges that role's rights).
    record: bool = False


# The workloads' service accounts (components/handle.WORKLOAD_IDENTITIES) and their sets (docs/security.md,
# "Who can do what"): training reads datasets and writes models and checkpoints; inference reads models;
# the registry's servers own the registry's artifacts and read their database's password.
WORKLOAD_SETS: dict[str, RoleSet] = {
    "system:serviceaccount:ml-training:trainer": RoleSet(
        "training",
        reads=frozenset({"datasets", "models", "checkpoints"}),
        writes=frozenset({"models", "checkpoints"}),
    ),
    "system:serviceaccount:ml-inference:inference": RoleSet(
        "inference", reads=frozenset({"models"}), writes=frozenset()
    ),
    # The registry appends to the lifecycle record too, its only writer (review rev40c A1): the record
    # bucket's prefix on AWS, the record's account on Azure (``record``).
    "system:serviceaccount:ml-registry:registry": RoleSet(
        "registry",
        reads=frozenset({"registry", LIFECYCLE_RECORD_PREFIX}),
        writes=frozenset({"registry", LIFECYCLE_RECORD_PREFIX}),
        services=frozenset({"s3", "kms", "secretsmanager"}),
        record=True,
    ),
}

# S3 object actions that only read; any other object action writes or deletes.
_S3_READS = frozenset({"s3:GetObject", "s3:GetObjectVersion", "s3:ListBucket"})
# KMS actions that administer a key rather than use it for data (the console's key-administrators
# statement, "Default key policy"); the key users' statement holds the cryptographic ones.
_KMS_ADMIN_PREFIXES = (
    "kms:Create",
    "kms:Delete",
    "kms:Disable",
    "kms:Enable",
    "kms:Put",
    "kms:Update",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:RotateKeyOnDemand",
)
# The administrative actions themselves (AWS KMS API reference), for a statement that lists what it does not
# allow (``NotAction``): it allows each of these it does not list.
_KMS_ADMIN_ACTIONS = (
    "kms:CreateAlias",
    "kms:DeleteAlias",
    "kms:UpdateAlias",
    "kms:DisableKey",
    "kms:EnableKey",
    "kms:DisableKeyRotation",
    "kms:EnableKeyRotation",
    "kms:RotateKeyOnDemand",
    "kms:PutKeyPolicy",
    "kms:UpdateKeyDescription",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
    "kms:TagResource",
    "kms:UntagResource",
)
_KMS_USE = frozenset({"kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*"})
# The cryptographic actions on data (AWS KMS API reference), matched against a statement's patterns.
_KMS_USE_ACTIONS = (
    "kms:Encrypt",
    "kms:Decrypt",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
    "kms:GenerateDataKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:GenerateDataKeyPair",
    "kms:GenerateDataKeyPairWithoutPlaintext",
)
# MLflow 3.17.2 permissions (mlflow/server/auth/permissions.py): MANAGE also grants and revokes.
_MANAGE = "MANAGE"
_READ_ONLY_USERS = ("ml-inference",)
_READ_ONLY_PREFIXES = ("team-",)
_USERS_VARIABLE = "REGISTRY_USERS"
# The registry admin's Secret (components/kubernetes/registry.py, docs/registry.md "Access").
ADMIN_SECRET = "registry-admin"


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def trusted_subjects(role: Subject) -> list[str]:
    """The service-account subjects a role's trust policy admits, in order, without repeats."""
    found: list[str] = []
    for statement in statements(parse_document(role.get("assumeRolePolicy"), "assumeRolePolicy")):
        if "sts:AssumeRoleWithWebIdentity" not in strings(statement.get("Action")):
            continue
        for operator in ("StringEquals", "StringLike"):
            condition = statement.get("Condition", {}).get(operator, {})
            for key, value in condition.items() if isinstance(condition, Mapping) else ():
                if key.endswith(":sub"):
                    found += [s for s in strings(value) if s not in found]
    return found


_WEB_IDENTITY = "sts:AssumeRoleWithWebIdentity"
_ASSUME_ROLE = "sts:AssumeRole"
# Session tags passed on assumption: a trust policy that lets a web identity or an AWS service pass them
# allows ``sts:TagSession`` beside its assume action (IAM user guide, "Passing session tags in AWS STS";
# EKS user guide, "EKS Pod Identity": the ``pods.eks.amazonaws.com`` trust has both; review rev35f C1).
_TAG_SESSION = "sts:TagSession"
OIDC_PROVIDER = "aws:iam/openIdConnectProvider:OpenIdConnectProvider"


def _issuers(role: Subject, graph: Graph) -> set[str]:
    """The issuers of the stack's own OIDC providers that the role's trust policy refers to (the engine's
    property dependencies of ``assumeRolePolicy``): ``url`` without its scheme, as IAM names the provider
    (``arn:aws:iam::ACCOUNT:oidc-provider/<issuer>``) and its claim keys (``<issuer>:sub``)."""
    found = {str(p.get("url") or "") for p in graph.linked(role, "assumeRolePolicy", [OIDC_PROVIDER])}
    return {url.removeprefix("https://") for url in found if url}


def _foreign_provider(statement: Mapping[str, Any], issuers: set[str]) -> str | None:
    """Why a web-identity statement's provider is not the stack's own cluster's, or None where it is (EKS
    user guide, "Assign IAM roles to Kubernetes service accounts": the trust names the cluster's OIDC
    provider and its ``<issuer>:sub``; IAM user guide, "Create a role for OpenID Connect federation": the
    ``Federated`` provider decides whose tokens are accepted; review rev35f A2). The provider's ARN is
    ``oidc-provider/<issuer>`` of a provider the trust refers to; an ARN in another form is accepted only
    as the one the plan computes for that provider (the engine's mocks name it otherwise), and every claim
    key the statement pins names that provider's issuer."""
    federated = statement["Principal"]["Federated"]
    if not issuers:
        return f"{federated} is no OIDC provider of the stack (the trust refers to none)"
    if not isinstance(federated, str) or not federated.startswith("arn:") or ":saml-provider/" in federated:
        return f"{federated} is not the cluster's OIDC provider"
    if ":oidc-provider/" in federated and federated.split(":oidc-provider/", 1)[1] not in issuers:
        return f"{federated} is another OIDC provider than the cluster's ({', '.join(sorted(issuers))})"
    condition = statement.get("Condition")
    claims = [
        key
        for operands in (condition.values() if isinstance(condition, Mapping) else [])
        if isinstance(operands, Mapping)
        for key in operands
        if key.endswith((":sub", ":aud"))
    ]
    foreign = sorted(key for key in claims if key.rsplit(":", 1)[0] not in issuers)
    if foreign or not claims:
        return f"its claims {', '.join(foreign) or '(none)'} are not the cluster's OIDC provider's"
    return None


# The AWS service each use of a role in the plan needs in its trust, by the resource and input that use
# it: the EKS cluster role trusts ``eks.amazonaws.com`` (EKS user guide, "Amazon EKS cluster IAM role"),
# the node role ``ec2.amazonaws.com`` ("Amazon EKS node IAM role"; an instance profile hands the role to
# EC2 the same way), the flow logs' role ``vpc-flow-logs.amazonaws.com`` (VPC user guide, "IAM role for
# publishing flow logs to CloudWatch Logs"), CloudTrail's ``cloudtrail.amazonaws.com`` (CloudTrail user
# guide, "Sending events to CloudWatch Logs"). A role no such resource uses serves no AWS service.
SERVICE_ROLE_USES: tuple[tuple[str, str, str], ...] = (
    ("aws:eks/cluster:Cluster", "roleArn", "eks.amazonaws.com"),
    ("aws:eks/nodeGroup:NodeGroup", "nodeRoleArn", "ec2.amazonaws.com"),
    ("aws:iam/instanceProfile:InstanceProfile", "role", "ec2.amazonaws.com"),
    ("aws:ec2/flowLog:FlowLog", "iamRoleArn", "vpc-flow-logs.amazonaws.com"),
    ("aws:cloudtrail/trail:Trail", "cloudWatchLogsRoleArn", "cloudtrail.amazonaws.com"),
)
# EKS Pod Identity (EKS user guide, "Learn how EKS Pod Identity grants pods access to AWS services" and
# its "role trust policy"): the role trusts ``pods.eks.amazonaws.com`` with ``sts:AssumeRole`` and
# ``sts:TagSession``, and an association names the namespace and service account that get it.
POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"
POD_IDENTITY_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


def _pod_identity_subjects(role: Subject, graph: Graph) -> list[str]:
    """The service accounts the plan's EKS Pod Identity associations give ``role`` to, as IRSA names them
    (``system:serviceaccount:NAMESPACE:NAME``), in order, without repeats."""
    found: list[str] = []
    for association in graph.of(POD_IDENTITY_ASSOCIATION):
        if role in graph.linked(association, "roleArn", [ROLE]):
            subject = (
                f"system:serviceaccount:{association.get('namespace')}:{association.get('serviceAccount')}"
            )
            found += [subject] if subject not in found else []
    return found


def workload_subjects(role: Subject, graph: Graph) -> list[str]:
    """The service accounts that act as ``role``: those its trust admits through the cluster's OIDC
    provider (IRSA) and, where it trusts EKS Pod Identity, those the plan's associations give it to."""
    found = trusted_subjects(role)
    if POD_IDENTITY_SERVICE in _trusted_services(role):
        found += [s for s in _pod_identity_subjects(role, graph) if s not in found]
    return found


def _served_services(role: Subject, graph: Graph) -> set[str]:
    """The AWS services that use ``role`` in the plan (``SERVICE_ROLE_USES``), and EKS Pod Identity where
    an association gives the role to a service account."""
    served = {
        service
        for token, prop, service in SERVICE_ROLE_USES
        for user in graph.of(token)
        if role in graph.linked(user, prop, [ROLE], identity="name")
    }
    return served | ({POD_IDENTITY_SERVICE} if _pod_identity_subjects(role, graph) else set())


def _documented_assumer(statement: Mapping[str, Any], issuers: set[str], served: set[str]) -> str | None:
    """None where an Allow statement of a trust policy admits only what a role of the stack is assumed by:
    a service account's web identity through the cluster's own OIDC provider, or the AWS service that
    uses the role in the plan (IAM user guide, "Role trust policies": a service role trusts the service,
    ``Principal: {"Service": ...}``, ``sts:AssumeRole``; ``served``), each optionally with
    ``sts:TagSession``; else why not. Any other service would run code as the role (IAM user guide, "Use
    an IAM role to grant permissions to applications running on Amazon EC2 instances"; review rev35h A3).
    """
    actions = set(strings(statement.get("Action")))
    principal = statement.get("Principal")
    kinds = set(principal) if isinstance(principal, Mapping) else set()
    if "NotAction" in statement or "NotPrincipal" in statement:
        return "NotAction or NotPrincipal admits more than one assumer"
    if kinds == {"Federated"} and _WEB_IDENTITY in actions and actions <= {_WEB_IDENTITY, _TAG_SESSION}:
        return _foreign_provider(statement, issuers)
    if kinds == {"Service"} and _ASSUME_ROLE in actions and actions <= {_ASSUME_ROLE, _TAG_SESSION}:
        unused = [s for s in strings(statement["Principal"]["Service"]) if s not in served]
        if not unused:
            return None
        return (
            f"{', '.join(unused)} does not use this role in the plan; it serves "
            f"{', '.join(sorted(served)) or 'no AWS service'}"
            + (
                f" ({POD_IDENTITY_SERVICE} needs an EKS Pod Identity association naming the role's "
                "service account)"
                if POD_IDENTITY_SERVICE in unused
                else ""
            )
        )
    return "neither the cluster's OIDC provider for a service account nor an AWS service"


def _other_assumers(role: Subject, graph: Graph) -> Iterator[str]:
    """Every role of the stack is a workload's or a service's: assumed only by its service account's web
    identity through the stack's own cluster OIDC provider (EKS user guide, "IAM roles for service
    accounts"), or by the AWS service it serves (the EKS cluster role, the nodes', flow logs', CloudTrail's).
    Any other Allow statement in its trust policy, another account, ``*`` limited by ``aws:PrincipalOrgID``,
    the account root, another OIDC provider (another cluster's, GitHub's), makes more principals that role,
    and so users of the keys its key policies name it for (IAM user guide, "Role trust policies" and "AWS
    JSON policy elements: Principal"; reviews rev35e A4, rev35f A1, A2). The people's roles are the
    adopter's own, named by ARN (``access``), never made by the stack."""
    issuers = _issuers(role, graph)
    served = _served_services(role, graph)
    document = parse_document(role.get("assumeRolePolicy"), "assumeRolePolicy")
    for index, statement in enumerate(statements(document)):
        if statement.get("Effect") != "Allow":
            continue
        why = _documented_assumer(statement, issuers, served)
        if why is None:
            continue
        actions = strings(statement.get("Action"))
        principal = statement.get("Principal")
        who = ", ".join(principals(statement)) or str(statement.get("NotPrincipal") or principal)
        sid = str(statement.get("Sid") or f"Statement[{index}]")
        yield (
            f"trust policy statement {sid} lets {who} {', '.join(actions) or 'NotAction'} the role ({why}), "
            "so they act as it and use its keys (IAM user guide, 'Role trust policies'); trust only the "
            "cluster's OIDC provider for the service account, or the AWS service for a service role"
        )


def _role_identity(role: Subject, graph: Graph) -> Iterator[str]:
    subjects = workload_subjects(role, graph)
    if len(subjects) > 1:
        yield (
            f"one role for {len(subjects)} service accounts ({', '.join(subjects)}); give each role its "
            "own IAM role"
        )
    yield from _other_assumers(role, graph)
    if len(subjects) != 1 or subjects[0] not in WORKLOAD_SETS:
        return
    allowed = WORKLOAD_SETS[subjects[0]]
    for policy in graph.of(ROLE_POLICY):
        if role in graph.linked(policy, "role", [ROLE], identity="name"):
            for statement in statements(parse_document(policy.get("policy"), "policy")):
                yield from _beyond(allowed, statement)
    for attachment in graph.of(ROLE_POLICY_ATTACHMENT):
        if role in graph.linked(attachment, "role", [ROLE], identity="name"):
            yield (
                f"{allowed.role}: managed policy {attachment.get('policyArn')} attached; its grants are "
                "beyond the role's set, write them inline"
            )


def _prefix(resource: str) -> str | None:
    """The first path segment of an S3 object ARN (``arn:aws:s3:::bucket/models/*`` → ``models``), ``""``
    for the whole bucket's objects, None for a bucket ARN."""
    if not resource.startswith("arn:") or ":s3:" not in resource or "/" not in resource:
        return None
    return resource.split("/", 1)[1].split("/", 1)[0].rstrip("*")


def _beyond(allowed: RoleSet, statement: Mapping[str, Any]) -> Iterator[str]:
    if statement.get("Effect") != "Allow":
        return
    actions = strings(statement.get("Action"))
    role = allowed.role
    for action in actions:
        service = action.split(":", 1)[0]
        if action == "*" or action.endswith(":*"):
            yield f"{role}: grants {action}; name the actions the role needs"
        elif service not in allowed.services:
            yield f"{role}: grants {action}; the role's set has no {service} actions"
    if any(a.startswith("kms:") for a in actions) and "kms:ViaService" not in json.dumps(
        statement.get("Condition", {})
    ):
        yield f"{role}: uses the key directly; allow it only through a service (kms:ViaService)"
    object_actions = [a for a in actions if a.startswith("s3:") and a != "s3:ListBucket"]
    writes = [a for a in object_actions if a not in _S3_READS]
    for resource in strings(statement.get("Resource")):
        prefix = _prefix(resource)
        if prefix is None or not object_actions:
            continue
        if prefix not in allowed.reads | allowed.writes:
            yield f"{role}: {', '.join(object_actions)} on {resource}, outside its prefixes"
        elif writes and prefix not in allowed.writes:
            yield f"{role}: {', '.join(writes)} on {resource}, which it only reads"
    if "s3:ListBucket" in actions:
        condition = statement.get("Condition", {}).get("StringLike", {})
        listed = strings(condition.get("s3:prefix")) if isinstance(condition, Mapping) else []
        if not listed:
            yield f"{role}: lists the whole bucket; limit s3:ListBucket to its prefixes (s3:prefix)"
        for value in listed:
            if value.split("/", 1)[0].rstrip("*") not in allowed.reads:
                yield f"{role}: lists {value}, outside its prefixes"


def _azure_identity(identity: Subject, graph: Graph) -> Iterator[str]:
    subjects: list[str] = []
    for federation in graph.of(FEDERATION):
        if identity in graph.linked(federation, "resourceName", [IDENTITY]):
            subjects += [s for s in strings(federation.get("subject")) if s not in subjects]
    if len(subjects) > 1:
        yield (
            f"one identity for {len(subjects)} service accounts ({', '.join(subjects)}); give each role "
            "its own managed identity"
        )
    if len(subjects) != 1 or subjects[0] not in WORKLOAD_SETS:
        return
    allowed = WORKLOAD_SETS[subjects[0]]
    for assignment in role_grants(graph):
        if identity in graph.linked(assignment, "principalId", [IDENTITY]):
            yield from _azure_grant(allowed, assignment, graph)


def _azure_grant(allowed: RoleSet, assignment: Subject, graph: Graph) -> Iterator[str]:
    definition = str(known(assignment.get("roleDefinitionId"), "roleDefinitionId") or "").rsplit("/", 1)[-1]
    containers = [c.get("containerName") for c in graph.linked(assignment, "scope", [BLOB_CONTAINER])]
    role = allowed.role
    records = graph.linked(assignment, "scope", [tokens.STORAGE_ACCOUNT])
    if (
        allowed.record
        and records
        and all(a.tags().get(AZURE_ROLE_TAG) == LIFECYCLE_RECORD_ROLE for a in records)
    ):
        return
    if definition not in (BLOB_DATA_READER, BLOB_DATA_CONTRIBUTOR) or not containers:
        yield (
            f"{role}: role {definition} on {assignment.get('scope')}; its set is Blob data roles on its "
            "containers"
        )
        return
    for container in containers:
        if container not in allowed.reads | allowed.writes:
            yield f"{role}: Blob data access to container {container}, outside its set"
        elif definition == BLOB_DATA_CONTRIBUTOR and container not in allowed.writes:
            yield f"{role}: Storage Blob Data Contributor on {container}, which it only reads; grant Reader"


def registry_users(subject: Subject) -> list[Mapping[str, Any]] | None:
    """The users the MLflow server's launcher creates, or None when the workload sets none."""
    spec = subject.get(tokens.POD_SPEC_PATHS[subject.type])
    for container in elements(spec or {}, "containers"):
        for variable in elements(container, "env") if isinstance(container, Mapping) else ():
            if isinstance(variable, Mapping) and variable.get("name") == _USERS_VARIABLE:
                try:
                    users = json.loads(str(variable.get("value")))
                except json.JSONDecodeError:
                    return []
                return [u for u in users if isinstance(u, Mapping)] if isinstance(users, list) else []
    return None


def _secret_names(spec: Any) -> set[str]:
    """The Secrets a pod spec mounts or reads into its environment."""
    names = {
        (v.get("secret") or {}).get("secretName") for v in elements(spec, "volumes") if isinstance(v, Mapping)
    }
    for container in [*elements(spec, "containers"), *elements(spec, "initContainers")]:
        if not isinstance(container, Mapping):
            continue
        for variable in elements(container, "env"):
            if isinstance(variable, Mapping):
                names.add(((variable.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name"))
        for source in elements(container, "envFrom"):
            if isinstance(source, Mapping):
                names.add((source.get("secretRef") or {}).get("name"))
    return {n for n in names if isinstance(n, str)}


def _registry_identities(subject: Subject, _graph: Graph) -> Iterator[str]:
    spec = subject.get(tokens.POD_SPEC_PATHS[subject.type]) or {}
    server = template_labels(subject).get("app.kubernetes.io/name") == MLFLOW_NAME
    if not server and ADMIN_SECRET in _secret_names(spec):
        yield (
            f"uses the registry's admin password (Secret {ADMIN_SECRET}); only the registry's servers hold "
            "it, every caller has its own registry user"
        )
    users = registry_users(subject)
    if users is None:
        return
    names = [str(u.get("username")) for u in users]
    for name in sorted({n for n in names if names.count(n) > 1}):
        yield f"registry user {name} is listed {names.count(name)} times; give each role its own user"
    for user in users:
        name = str(user.get("username"))
        granted = {**_permissions(user, "grants"), **_permissions(user, "experiments")}
        for target, permission in sorted(granted.items()):
            if permission == _MANAGE:
                yield f"registry user {name}: MANAGE on {target} administers permissions; grant EDIT or READ"
            elif permission != "READ" and (name in _READ_ONLY_USERS or name.startswith(_READ_ONLY_PREFIXES)):
                yield f"registry user {name}: {permission} on {target}; the role only reads"


def _permissions(user: Mapping[str, Any], key: str) -> dict[str, str]:
    value = user.get(key)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def principals(statement: Mapping[str, Any]) -> list[str]:
    principal = statement.get("Principal")
    if principal == "*":
        return ["*"]
    if not isinstance(principal, Mapping):
        return []
    return [p for value in principal.values() for p in strings(value)]


def is_account_root(principal: str) -> bool:
    return (principal.startswith("arn:") and principal.endswith(":root")) or principal.isdigit()


def _is_admin(action: str) -> bool:
    """An administrative action; ``kms:CreateGrant`` is the key users' too, for AWS services attaching
    persistent resources ("Allows key users to use the KMS key": ``kms:GrantIsForAWSResource``)."""
    return action.startswith(_KMS_ADMIN_PREFIXES) and action != "kms:CreateGrant"


def administrative_actions(statement: Mapping[str, Any]) -> list[str]:
    """The administrative actions a statement allows: its ``Action`` patterns that administer, or, with
    ``NotAction``, each administrative action it does not list (review 35 C2)."""
    if "NotAction" in statement:
        return [a for a in _KMS_ADMIN_ACTIONS if allows(statement, a)]
    return [a for a in strings(statement.get("Action")) if _is_admin(a)]


def _granted(statement: Mapping[str, Any]) -> list[str]:
    """A statement's actions as patterns: its ``Action``, or what a ``NotAction`` leaves allowed of the
    administrative and cryptographic ones."""
    if "NotAction" in statement:
        return [*administrative_actions(statement), *crypto_actions(statement)]
    return strings(statement.get("Action"))


# Conditions that name who may use a key the root delegates to IAM: only through the domain's services,
# or as named roles (components/aws/keys.py ``domain_use``).
_USE_CONDITIONS = ("kms:ViaService", "aws:PrincipalArn")
# Conditions that keep a grant to AWS services, read by their operators (review rev35e A1, A2): a grant for
# a resource a service attaches the key to, ``kms:GrantIsForAWSResource`` true under ``Bool`` or
# ``StringEquals`` (AWS KMS developer guide, "kms:GrantIsForAWSResource": a negated operator allows exactly
# the grants a principal makes itself, an ``IfExists`` one requests without the key), or a grant whose
# grantee is a service-linked role of the stack's account, ``kms:GranteePrincipal`` under an ARN or string
# operator, every value such a role ("kms:GranteePrincipal": "only for the specified grantee principal";
# IAM user guide, "Using service-linked roles": path ``/aws-service-role/``).
_GRANT_FOR_AWS_RESOURCE = "kms:GrantIsForAWSResource"
_GRANTEE_PRINCIPAL = "kms:GranteePrincipal"
_TRUE_OPERATORS = ("Bool", "StringEquals")
_GRANTEE_OPERATORS = ("ArnEquals", "ArnLike", "StringEquals", "StringLike")
_CREATE_GRANT = "kms:CreateGrant"


def _listed(value: Any) -> list[Any]:
    """A condition's values: a list, or one value (IAM JSON policy reference, "Condition")."""
    return list(value) if isinstance(value, list) else [value]


def _service_linked_grantee(value: str, account: str | None) -> bool:
    parts = value.split(":", 5)
    return (
        len(parts) == 6
        and parts[0] == "arn"
        and parts[2] == "iam"
        and parts[4].isdigit()
        and (account is None or parts[4] == account)
        and parts[5].startswith("role/aws-service-role/")
    )


def grants_only_to_aws(statement: Mapping[str, Any], account: str | None) -> bool:
    """Whether a statement's conditions keep ``kms:CreateGrant`` to AWS services: for AWS resources, or to
    service-linked roles of ``account`` (any account's where ``None``)."""
    condition = statement.get("Condition")
    if not isinstance(condition, Mapping):
        return False
    for operator, operands in condition.items():
        if not isinstance(operands, Mapping):
            continue
        if operator in _TRUE_OPERATORS and _GRANT_FOR_AWS_RESOURCE in operands:
            values = _listed(operands[_GRANT_FOR_AWS_RESOURCE])
            if values and all(str(v).lower() == "true" for v in values):
                return True
        if operator in _GRANTEE_OPERATORS and _GRANTEE_PRINCIPAL in operands:
            values = _listed(operands[_GRANTEE_PRINCIPAL])
            if values and all(_service_linked_grantee(str(v), account) for v in values):
                return True
    return False


def _covers(granted: list[str], action: str) -> bool:
    return any(fnmatch.fnmatchcase(action, pattern) for pattern in granted)


def _condition_keys(statement: Mapping[str, Any]) -> set[str]:
    condition = statement.get("Condition")
    if not isinstance(condition, Mapping):
        return set()
    return {key for operands in condition.values() if isinstance(operands, Mapping) for key in operands}


def _root_statement(statement: Mapping[str, Any], sid: str) -> Iterator[str]:
    """The account root takes administration through IAM; use only under conditions naming its users, and
    grants only for AWS services, or every IAM policy in the account can grant the key freely."""
    actions = strings(statement.get("Action"))
    conditions = _condition_keys(statement)
    wide = sorted(a for a in actions if a in ("*", "kms:*"))
    if wide:
        yield (
            f"key policy statement {sid} grants {', '.join(wide)} to the account root, so any IAM policy can "
            "grant use of the key; give the root the key administrators' actions and name the key users by "
            "condition (kms:ViaService or aws:PrincipalArn; AWS KMS 'Default key policy', 'Allows key "
            "administrators to administer the KMS key', 'Allows key users to use the KMS key')"
        )
        return
    used = sorted(crypto_actions(statement))
    if used and not conditions & set(_USE_CONDITIONS):
        yield (
            f"key policy statement {sid} lets the account root {', '.join(used)} with no condition naming "
            "the key's users; limit it with kms:ViaService (the domain's services) or aws:PrincipalArn "
            "(the domain's roles)"
        )
    roots = {p if p.isdigit() else p.split(":")[4] for p in principals(statement) if is_account_root(p)}
    account = roots.pop() if len(roots) == 1 else None
    if allows(statement, _CREATE_GRANT) and not grants_only_to_aws(statement, account):
        yield (
            f"key policy statement {sid} lets the account root kms:CreateGrant for grantees other than AWS "
            "services, so a key administrator can grant itself use; limit grants with Bool "
            'kms:GrantIsForAWSResource "true" or ArnLike kms:GranteePrincipal the account\'s '
            "role/aws-service-role/* (AWS KMS developer guide, 'kms:GrantIsForAWSResource', "
            "'kms:GranteePrincipal')"
        )


def _checks_existence(operator: Any) -> bool:
    """Whether a condition operator is ``Null``: its operand is ``true`` or ``false``, whether the key is
    absent, not a value to match (IAM user guide, "IAM JSON policy elements: Condition operators",
    "Condition operator to check existence of condition keys"; review rev35e C2)."""
    return str(operator).rsplit(":", 1)[-1].removesuffix("IfExists") == "Null"


def principal_arns(statement: Mapping[str, Any], *, excluded: bool = False) -> list[str]:
    """The roles a statement's condition names (``aws:PrincipalArn`` under an ARN or string operator), or,
    ``excluded``, those it leaves out (the negated operators: ``ArnNotEquals``, ``ArnNotLike``...).

    An ``...IfExists`` operator names its roles as the plain one does: ``aws:PrincipalArn`` "is included
    in the request context for all signed requests" (IAM user guide, "AWS global condition context
    keys") and KMS takes signed requests only, so the key is always there (review rev35e C1). A ``Null``
    check names no role."""
    condition = statement.get("Condition")
    if not isinstance(condition, Mapping):
        return []
    return [
        arn
        for operator, operands in condition.items()
        if isinstance(operands, Mapping)
        and not _checks_existence(operator)
        and ("Not" in str(operator)) == excluded
        for arn in strings(operands.get("aws:PrincipalArn"))
    ]


# How a finding names a statement with an empty ``aws:PrincipalArn`` list: it names nobody, said so rather
# than looking like an unconditioned grant (review 35b C3).
EMPTY_PRINCIPALS = " (its aws:PrincipalArn list is empty, judged as no condition)"


def empty_principal_list(statement: Mapping[str, Any]) -> bool:
    """Whether a statement's condition names its principals with an empty ``aws:PrincipalArn`` list (a
    domain whose last user was left out): it names nobody, which the pack judges as no condition at all,
    the conservative reading, and says so in its finding (review 35b C3)."""
    condition = statement.get("Condition")
    return isinstance(condition, Mapping) and any(
        isinstance(operands, Mapping)
        and "aws:PrincipalArn" in operands
        and not strings(operands["aws:PrincipalArn"])
        for operands in condition.values()
    )


def allows(statement: Mapping[str, Any], action: str) -> bool:
    """Whether a statement's actions match ``action``: its ``Action`` patterns cover it or, for a statement
    with ``NotAction``, its patterns leave it out (IAM JSON policy reference, "IAM JSON policy elements:
    NotAction": the statement matches every action except those listed; review 35 C2)."""
    if "NotAction" in statement:
        return not _covers(strings(statement.get("NotAction")), action)
    return _covers(strings(statement.get("Action")), action)


def crypto_actions(statement: Mapping[str, Any]) -> list[str]:
    """The cryptographic actions on data a statement allows (``Action`` or ``NotAction``)."""
    return [u for u in _KMS_USE_ACTIONS if allows(statement, u)]


def uses_key(statement: Mapping[str, Any]) -> bool:
    """Whether a key policy statement allows a cryptographic action on data (``Action`` or ``NotAction``)."""
    return bool(crypto_actions(statement))


def allowed_statements(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [s for s in statements(document) if s.get("Effect") == "Allow"]


def key_administrators(document: Mapping[str, Any]) -> list[str]:
    """The key custodians a key policy names: the roles the account root's administrative statement is
    limited to (``aws:PrincipalArn``; components/aws/keys.py ``administered_by_account``), and any other
    principal given administrative actions. None where the root administers unconditioned (IAM decides)."""
    named: list[str] = []
    for statement in allowed_statements(document):
        if not administrative_actions(statement):
            continue
        for principal in principals(statement):
            found = principal_arns(statement) if is_account_root(principal) else [principal]
            named += [arn for arn in found if arn not in named]
    return named


# The services through which the deployer creates a store under its own key rights (components/aws/keys.py
# ``DOMAIN_USERS``: the RDS instance and its managed password, the file systems).
_STORE_CREATING_SERVICES = ("rds.", "secretsmanager.", "elasticfilesystem.", "fsx.")


def through_store_creation(statement: Mapping[str, Any]) -> bool:
    """Whether a use statement takes effect only through the services that create stores with the
    caller's key rights (``kms:ViaService``)."""
    condition = statement.get("Condition")
    via = [
        value
        for operands in (condition.values() if isinstance(condition, Mapping) else [])
        if isinstance(operands, Mapping)
        for value in strings(operands.get("kms:ViaService"))
    ]
    return bool(via) and all(v.startswith(_STORE_CREATING_SERVICES) for v in via)


def _administrators_use(document: Mapping[str, Any]) -> Iterator[str]:
    """A key custodian the policy also lets use the key, by name or by a pattern that matches it; or a use
    statement for the account root that names no users (``aws:PrincipalArn``), so any account principal
    whose IAM policy allows it uses the key, and that leaves in more than one of the key's administrators.
    One administrator stays a user by design, and only through the services that create stores with its
    key rights: the deployer, which writes the key policy on every update and creates the registry
    database and the file systems (components/aws/keys.py ``DOMAIN_USERS``); a second one there, or any
    administrator named a user elsewhere, is a custodian using the key (review 35 A1)."""
    administrators = key_administrators(document)
    creators: dict[str, str] = {}
    for statement in allowed_statements(document):
        if not uses_key(statement):
            continue
        for principal in principals(statement):
            found = principal_arns(statement) if is_account_root(principal) else [principal]
            for administrator in administrators:
                using = [u for u in found if fnmatch.fnmatchcase(administrator, u)]
                if not using:
                    continue
                if through_store_creation(statement):
                    creators.setdefault(administrator, using[0])
                    continue
                yield (
                    f"key policy lets {administrator} administer the key and also use it for data (as "
                    f"{using[0]}); a key custodian never uses the key it administers"
                )
    if len(creators) > 1:
        yield (
            f"key policy lets key administrators {', '.join(sorted(creators))} use the key through the "
            "services that create its stores; only the deployer may, a key custodian never uses the key it "
            "administers"
        )
    for index, statement in enumerate(allowed_statements(document)):
        if not uses_key(statement):
            continue
        if not any(is_account_root(p) for p in principals(statement)) or principal_arns(statement):
            continue
        excluded = principal_arns(statement, excluded=True)
        left = [a for a in administrators if not any(fnmatch.fnmatchcase(a, e) for e in excluded)]
        if len(left) > 1:
            sid = str(statement.get("Sid") or f"Statement[{index}]")
            empty = EMPTY_PRINCIPALS if empty_principal_list(statement) else ""
            yield (
                f"key policy statement {sid}{empty} lets any "
                f"account principal whose IAM policy allows it use the key, key administrators "
                f"{', '.join(left)} included; name the key's users (ArnEquals aws:PrincipalArn), or drop a "
                "statement that has none"
            )


def key_policy(key: Subject, graph: Graph) -> Mapping[str, Any]:
    """A key's policy document: an ``aws:kms/keyPolicy:KeyPolicy`` on the key replaces the policy the key
    declares (pulumi_aws kms/key_policy.py: "Attaches a KMS Key Policy to a KMS Key"; review rev35e A3), so
    the statements of every KeyPolicy the plan attaches to it are judged, else the key's own ``policy``."""
    attached = [p for p in graph.of(KEY_POLICY) if key in graph.linked(p, "keyId", [KMS_KEY], "keyId")]
    if not attached:
        return parse_document(key.get("policy"), "policy")
    documents = [parse_document(p.get("policy"), "policy") for p in attached]
    return {"Version": "2012-10-17", "Statement": [s for d in documents for s in statements(d)]}


def _key_policy(key: Subject, graph: Graph) -> Iterator[str]:
    held: dict[str, set[str]] = {}
    document = key_policy(key, graph)
    for index, statement in enumerate(statements(document)):
        if statement.get("Effect") != "Allow":
            continue
        for principal in principals(statement):
            if is_account_root(principal):
                yield from _root_statement(statement, str(statement.get("Sid") or f"Statement[{index}]"))
                continue
            held.setdefault(principal, set()).update(_granted(statement))
    yield from _administrators_use(document)
    for principal, granted in sorted(held.items()):
        wide = sorted(a for a in granted if a in ("*", "kms:*"))
        if wide:
            yield (
                f"key policy grants {', '.join(wide)} to {principal}; name the administrative or the "
                "cryptographic actions (AWS KMS 'Default key policy')"
            )
        elif any(_is_admin(a) for a in granted) and granted & _KMS_USE:
            yield f"key policy lets {principal} both administer and use the key; split the duties"


def _root_administration_limited(document: Mapping[str, Any]) -> bool:
    """Whether a key policy limits the account root's administration to named roles (``aws:PrincipalArn``;
    components/aws/keys.py ``key_administration``): the stack names key custodians. A principal given
    administrative actions by name is no such naming (``_key_policy`` judges that one's duties)."""
    return any(
        principal_arns(statement)
        for statement in allowed_statements(document)
        if administrative_actions(statement) and any(is_account_root(p) for p in principals(statement))
    )


def _custodians_administer_every_key(graph: Graph) -> Iterator[Finding]:
    """Where the stack names key custodians (a key policy limits the root's administration by
    ``aws:PrincipalArn``), every key's administration is so limited, the image-signing key's too: an
    unconditioned administrative statement for the account root lets any IAM administrator rewrite that
    key's policy (PutKeyPolicy) and give itself its use or ``kms:Sign`` (AWS KMS developer guide, "Default
    key policy", "Allows key administrators to administer the KMS key": they "can give themselves"
    permissions; review 35 A2)."""
    keys = [(key, key_policy(key, graph)) for key in graph.of(KMS_KEY)]
    if not any(_root_administration_limited(document) for _key, document in keys):
        return
    for key, document in keys:
        for index, statement in enumerate(allowed_statements(document)):
            administers = sorted(administrative_actions(statement))
            if not administers or principal_arns(statement):
                continue
            if any(is_account_root(p) for p in principals(statement)):
                sid = str(statement.get("Sid") or f"Statement[{index}]")
                yield (
                    key.urn,
                    f"key policy statement {sid} lets the account root {', '.join(administers)} with no "
                    "aws:PrincipalArn condition, while the stack names key custodians: any IAM administrator "
                    "can rewrite this key's policy and give itself its use; limit administration to the key "
                    "custodians and the deployer (ArnEquals aws:PrincipalArn) as on the other keys",
                )


# The data domains whose keys each identity uses (docs/security.md, "Keys per data domain"), by the
# service-account subject or the AWS service its role trusts: the workloads (the rollout and the drift
# monitor writing the lifecycle record too) the object data (through S3), training the datasets too (the
# datasets bucket's key; review B5),
# the registry its database's password too (through Secrets Manager), the EBS CSI driver the node volumes,
# the EKS cluster role the Secrets. Any other role owns no domain.
KEY_DOMAINS_BY_TRUST: dict[str, frozenset[str]] = {
    "system:serviceaccount:ml-training:trainer": frozenset({"datasets", "object-data"}),
    "system:serviceaccount:ml-inference:inference": frozenset({"object-data"}),
    "system:serviceaccount:ml-inference:rollout": frozenset({"object-data"}),
    "system:serviceaccount:ml-inference:drift-monitor": frozenset({"object-data"}),
    "system:serviceaccount:ml-registry:registry": frozenset({"object-data", "registry-database"}),
    "system:serviceaccount:kube-system:ebs-csi-controller-sa": frozenset({"node-volumes"}),
    "eks.amazonaws.com": frozenset({"kubernetes-secrets"}),
}


def _trusted_services(role: Subject) -> list[str]:
    found: list[str] = []
    for statement in statements(parse_document(role.get("assumeRolePolicy"), "assumeRolePolicy")):
        principal = statement.get("Principal")
        if isinstance(principal, Mapping):
            found += [s for s in strings(principal.get("Service")) if s not in found]
    return found


def _owned_domains(role: Subject, graph: Graph) -> frozenset[str]:
    trusted = [*workload_subjects(role, graph), *_trusted_services(role)]
    return frozenset(d for t in trusted for d in KEY_DOMAINS_BY_TRUST.get(t, frozenset()))


# Why a role owns no domain (review rev35h B1): the service account acting as it is named by its IRSA
# trust or by an EKS Pod Identity association; without either the role is no workload's.
_NO_DOMAIN = (
    "it owns none: no service account of a domain acts as it, neither through its trust's IRSA subject "
    "nor through an EKS Pod Identity association"
)


def _key_use_within_domain(policy: Subject, graph: Graph) -> Iterator[str]:
    """A role policy that lets its role use keys for data names keys of the role's own domains only: the
    keys its ``policy`` document refers to (the engine's property dependencies), by the domains each
    declares (``DATA_DOMAIN_TAG``)."""
    used = sorted(
        {
            action
            for statement in statements(parse_document(policy.get("policy"), "policy"))
            if statement.get("Effect") == "Allow"
            for action in crypto_actions(statement)
        }
    )
    if not used:
        return
    for role in graph.linked(policy, "role", [ROLE], identity="name"):
        owned = _owned_domains(role, graph)
        for key in graph.linked(policy, "policy", [KMS_KEY]):
            foreign = [d for d in declared_domains(key) if d not in owned]
            if foreign:
                yield (
                    f"policy.Resource: role {role.name} may {', '.join(used)} with key {key.name}, a key of "
                    f"{' '.join(foreign)}, a domain the role does not own "
                    f"({', '.join(sorted(owned)) or _NO_DOMAIN}); grant only its own domains' keys"
                )


def _combined(*rules: StackRule) -> StackRule:
    def rule(graph: Graph) -> Iterator[Finding | UnknownValueError]:
        for each in rules:
            yield from each(graph)

    return rule


POLICIES = [
    stack_policy(
        "identity-per-role",
        "Each role has its own identity, within its set: an IRSA role or Azure workload identity trusted by "
        "one service account only; every IAM role of the stack assumed by nothing but its service account "
        "through the cluster's own OIDC provider, or its AWS service; its grants limited to its prefixes or "
        "containers (reading where it only reads), no wildcard actions or managed policies; each registry "
        "user listed once, none with MANAGE, inference and team users read-only.",
        _combined(
            per_node((ROLE,), _role_identity),
            per_node((IDENTITY,), _azure_identity),
            per_node(tokens.WORKLOADS, _registry_identities),
        ),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "key-duties-separated",
        "A KMS key policy gives kms:* to no principal, the account root included, and lets no principal, "
        "named or by the root's aws:PrincipalArn condition, both administer and use the key; where the "
        "stack names key custodians, every key's administration, the signing key's included, is theirs.",
        _combined(per_node((KMS_KEY,), _key_policy), _custodians_administer_every_key),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "key-use-within-domain",
        "An IAM role may use (decrypt, generate data keys with) only the keys of the data domains it owns: "
        "the workloads the object data's key, the registry its database's key too, the EBS CSI driver the "
        "node volumes' key, the EKS cluster role the Secrets key.",
        per_node((ROLE_POLICY,), _key_use_within_domain),
        severity=Severity.HIGH,
    ),
]
