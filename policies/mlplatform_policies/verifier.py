"""The admission signature verifier can read the registry it verifies (issue 36; review compliance.md V3).

Sigstore policy-controller (the platform's verifier, chart 0.10.6, app v0.13.1) checks each image a
``ClusterImagePolicy`` glob matches by reading the image's signature from its registry, with its pod's
own cloud identity: its keychain (pkg/webhook/registryauth/registryauth.go) asks the pod's pull secrets,
the Docker config, amazon-ecr-credential-helper (the AWS SDK's default credentials: the IRSA role of its
service account) and its ACR helper (azidentity's default credential: the workload identity, exchanged
for a registry token; registryauth/azure/acrhelper.go). Without the right to read, every signature
lookup fails and the fail-closed webhook refuses every pod it guards. So, for each glob of a
``ClusterImagePolicy`` (``policy.sigstore.dev``), the verifier's identity, the one trusted by its
service account ``VERIFIER_SUBJECT``, must hold:

- ECR (``<account>.dkr.ecr.<region>.amazonaws.com/<path>``): ``ecr:GetAuthorizationToken``, which has no
  resource type (Resource ``*``), and ``ecr:BatchGetImage`` and ``ecr:GetDownloadUrlForLayer`` on the
  glob's repositories, ``arn:<partition>:ecr:<region>:<account>:repository/<path>`` (AWS Service
  Authorization Reference, "Actions, resources, and condition keys for Amazon Elastic Container
  Registry"), in an inline policy of its IAM role;
- ACR (``<name>.azurecr.io``): AcrPull on that registry (``RoleAssignment`` scoped to the
  ``containerregistry:Registry`` named so; Azure built-in roles, AcrPull).

A glob's repositories are judged by one of them, the glob with each wildcard a path segment; a grant on
part of the namespace only fails it. Globs of other registries are not the stack's to grant.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import Severity
from pulumi_policy.proxy import UnknownValueError

from .azure_rbac import ROLE_ASSIGNMENT
from .factory import Finding, stack_policy
from .separation import (
    FEDERATION,
    IDENTITY,
    ROLE,
    ROLE_POLICY,
    strings,
    trusted_subjects,
)
from .subject import Graph, Subject
from .values import elements, known, parse_document, statements

IMAGE_POLICY = "kubernetes:policy.sigstore.dev/v1beta1:ClusterImagePolicy"
REGISTRY = "azure-native:containerregistry:Registry"
# The chart's webhook account (``<release>-webhook``) in the platform's verifier namespace
# (components/handle.py IMAGE_VERIFIER), as its federated credential or IRSA trust names it.
VERIFIER_SUBJECT = "system:serviceaccount:cosign-system:policy-controller-webhook"
# Azure built-in roles (learn.microsoft.com/azure/role-based-access-control/built-in-roles/containers).
ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
_ECR_HOST = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
_ACR_HOST = re.compile(r"^([a-zA-Z0-9]+)\.azurecr\.io$")
LOGIN = "ecr:GetAuthorizationToken"
PULL = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")


def _globs(graph: Graph) -> list[tuple[Subject, str]]:
    return [
        (policy, str(image.get("glob")))
        for policy in graph.of(IMAGE_POLICY)
        for image in elements(known(policy.get("spec"), "spec") or {}, "images")
        if isinstance(image, Mapping) and isinstance(image.get("glob"), str)
    ]


def _sample(path: str) -> str:
    """One repository the glob's path matches: each wildcard a path segment."""
    return re.sub(r"\*+", "x", path).rstrip("/") or "x"


def _allows(granted: list[Mapping[str, Any]], action: str, resource: str) -> bool:
    return any(
        statement.get("Effect") == "Allow"
        and any(fnmatch.fnmatchcase(action, pattern) for pattern in strings(statement.get("Action")))
        and any(fnmatch.fnmatchcase(resource, pattern) for pattern in strings(statement.get("Resource")))
        for statement in granted
    )


def _ecr_grants(graph: Graph) -> list[Mapping[str, Any]] | None:
    """The statements of the verifier's IAM role's inline policies; None where no role trusts it."""
    roles = [r for r in graph.of(ROLE) if VERIFIER_SUBJECT in trusted_subjects(r)]
    if not roles:
        return None
    return [
        statement
        for policy in graph.of(ROLE_POLICY)
        if any(role in graph.linked(policy, "role", [ROLE], identity="name") for role in roles)
        for statement in statements(parse_document(policy.get("policy"), "policy"))
    ]


def _ecr(glob: str, host: re.Match[str], path: str, graph: Graph) -> Iterator[str]:
    account, region, china = host.groups()
    partition = "aws-cn" if china else "aws"
    granted = _ecr_grants(graph)
    if granted is None:
        yield (
            f"glob {glob}: no IAM role trusts the verifier's account {VERIFIER_SUBJECT}; it cannot log in "
            "to ECR"
        )
        return
    repository = f"arn:{partition}:ecr:{region}:{account}:repository/{_sample(path)}"
    missing = [a for a in PULL if not _allows(granted, a, repository)]
    if not _allows(granted, LOGIN, "*"):
        missing.insert(0, f"{LOGIN} on *")
    if missing:
        yield (
            f"glob {glob}: the verifier's role may not {', '.join(missing)} ({repository}); it cannot read "
            "the signatures it verifies and refuses every pod it guards: grant ecr:GetAuthorizationToken on "
            "* and ecr:BatchGetImage, ecr:GetDownloadUrlForLayer on the stack's repositories"
        )


def _acr(glob: str, name: str, graph: Graph) -> Iterator[str]:
    registries = {r.urn for r in graph.of(REGISTRY) if r.get("registryName") == name}
    if not registries:
        return  # not the stack's registry
    identities = {
        identity.urn
        for federation in graph.of(FEDERATION)
        if VERIFIER_SUBJECT in strings(federation.get("subject"))
        for identity in graph.linked(federation, "resourceName", [IDENTITY])
    }
    pulls = [
        assignment
        for assignment in graph.of(ROLE_ASSIGNMENT)
        if str(known(assignment.get("roleDefinitionId"), "roleDefinitionId")).rsplit("/", 1)[-1] == ACR_PULL
        and {i.urn for i in graph.linked(assignment, "principalId", [IDENTITY])} & identities
        and {r.urn for r in graph.linked(assignment, "scope", [REGISTRY])} & registries
    ]
    if not pulls:
        yield (
            f"glob {glob}: the verifier's identity (federated to {VERIFIER_SUBJECT}) has no AcrPull on "
            f"registry {name}; it cannot read the signatures it verifies and refuses every pod it guards"
        )


def _verifier_reads(graph: Graph) -> Iterator[Finding | UnknownValueError]:
    try:
        for policy, glob in _globs(graph):
            host, _, path = glob.partition("/")
            ecr, acr = _ECR_HOST.match(host), _ACR_HOST.match(host)
            found = _ecr(glob, ecr, path, graph) if ecr else _acr(glob, acr.group(1), graph) if acr else ()
            for message in found:
                yield policy.urn, message
    except UnknownValueError as unknown:
        yield unknown


POLICIES = [
    stack_policy(
        "image-verifier-reads-registry",
        "The admission signature verifier (policy-controller) can read the signatures of every image its "
        "ClusterImagePolicies match in the stack's registry: on ECR its role may get a login token and "
        "pull the repositories, on ACR its workload identity holds AcrPull on the registry.",
        _verifier_reads,
        severity=Severity.HIGH,
    ),
]
