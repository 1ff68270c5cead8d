"""Rules that need the whole graph: what is attached to a bucket, where a replica goes, which namespace
has a NetworkPolicy, what an NFS share's account requires of its clients.

A secure bucket is several resources (the bucket, its public access block, its encryption configuration,
its policy); each attachment names its bucket in a ``bucket`` input, and the engine's dependencies link
the two (``Graph.linked``). Namespaces are matched by name, or by the Namespace resource an object's
metadata depends on when the name is only known after deployment.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from datetime import date
from typing import Any

from pulumi_policy import Severity, StackValidationPolicy
from pulumi_policy.proxy import UnknownValueError

from . import tokens
from .encryption import S3_DEFAULT_ENCRYPTION
from .factory import Finding, per_node, stack_policy
from .kubernetes import namespace_of
from .residency import REGION_SETTINGS, aws_region_problem, azure_location_problem
from .settings import ACCESS_LOGS_ROLE, POD_SECURITY_ENFORCE, PRIVILEGED_REASON, ROLE_TAG
from .subject import Graph, Subject, names
from .values import at, describe, elements, is_unknown, known, parse_document, statements


def _attached(graph: Graph, types: Iterable[str]) -> dict[str, list[Subject]]:
    """Bucket URN → the resources of ``types`` attached to it through their ``bucket`` input."""
    attached: dict[str, list[Subject]] = defaultdict(list)
    for attachment in graph.of(*types):
        for bucket in graph.linked(attachment, "bucket", tokens.S3_BUCKETS, identity="bucket"):
            attached[bucket.urn].append(attachment)
    return attached


def _public_access_blocked(bucket: Subject, graph: Graph) -> Iterator[str]:
    if graph.of(tokens.S3_ACCOUNT_PUBLIC_ACCESS_BLOCK):
        return
    if not _attached(graph, (tokens.S3_PUBLIC_ACCESS_BLOCK,)).get(bucket.urn):
        yield f"bucket has no {tokens.S3_PUBLIC_ACCESS_BLOCK} attached; add one with all four flags true"


def _default_encryption(bucket: Subject, graph: Graph) -> Iterator[str]:
    inline = bucket.get("serverSideEncryptionConfiguration.rule")
    if isinstance(inline, Mapping):
        yield from (f"serverSideEncryptionConfiguration.rule.{m}" for m in S3_DEFAULT_ENCRYPTION(inline))
    elif not _attached(graph, tokens.S3_ENCRYPTION).get(bucket.urn):
        yield "bucket has no default encryption configuration attached; add one: SSE-KMS with a customer key"


def _encryption_settings(config: Subject, graph: Graph) -> Iterator[str]:
    """What an attached configuration says: SSE-KMS under a customer key, except SSE-S3 on a bucket
    whose role is access-log target (settings.py, exception contract)."""
    buckets = graph.linked(config, "bucket", tokens.S3_BUCKETS, identity="bucket")
    log_target = bool(buckets) and all(b.tags().get(ROLE_TAG) == ACCESS_LOGS_ROLE for b in buckets)
    for index, rule in enumerate(elements(config.props, "rules")):
        algorithm = at(rule, "applyServerSideEncryptionByDefault.sseAlgorithm")
        if log_target and algorithm == "AES256":
            continue
        yield from (f"rules[{index}].{m}" for m in S3_DEFAULT_ENCRYPTION(rule))


def _default_encryption_everywhere(graph: Graph) -> Iterator[Finding | UnknownValueError]:
    yield from per_node(tokens.S3_BUCKETS, _default_encryption)(graph)
    yield from per_node(tokens.S3_ENCRYPTION, _encryption_settings)(graph)


def _everyone(principal: Any) -> bool:
    return principal == "*" or (isinstance(principal, Mapping) and principal.get("AWS") in ("*", ["*"]))


def _denies_plain_http(document: Mapping[str, Any]) -> bool:
    """A ``Deny`` of every S3 action to everyone when ``aws:SecureTransport`` is false."""
    for statement in statements(document):
        actions = statement.get("Action")
        actions = actions if isinstance(actions, list) else [actions]
        condition = at(statement, "Condition.Bool.aws:SecureTransport")
        insecure = condition if isinstance(condition, list) else [condition]
        if (
            statement.get("Effect") == "Deny"
            and _everyone(statement.get("Principal"))
            and any(action in ("s3:*", "*") for action in actions)
            and any(str(value).lower() == "false" for value in insecure)
        ):
            return True
    return False


def _tls_only(bucket: Subject, graph: Graph) -> Iterator[str]:
    policies = [bucket, *_attached(graph, (tokens.S3_POLICY,)).get(bucket.urn, [])]
    if not any(_denies_plain_http(parse_document(policy.get("policy"), "policy")) for policy in policies):
        yield (
            "no bucket policy denies requests with aws:SecureTransport false; attach a policy that denies "
            "s3:* to everyone over plain HTTP"
        )


# An Azure Files account's file service requiring encryption in transit for NFS:
# ``protocolSettings.nfs.encryptionInTransit.required``, from storage API 2025-01-01 (Azure/bicep-types-az
# generated/storage/microsoft.storage/2025-01-01/types.md ``ProtocolSettings.nfs`` → ``NfsSetting`` →
# ``EncryptionInTransit.required: bool``; Azure/azure-rest-api-specs Microsoft.Storage stable/2025-01-01
# examples/FileServicesPut_EncryptionInTransitRequired.json). pulumi-azure-native 3.29.0's typed file
# service is 2024-01-01, without it, so a stack sets it in an ARM template deployment, which this reads.
#
# A PUT of ``fileServices/default`` sets its whole properties object, and ARM's Incremental mode reapplies
# every property of a resource it redeploys (learn.microsoft.com/azure/azure-resource-manager/templates/
# deployment-modes): the last writer wins, so the account's file service must have exactly one writer in
# the plan. Only a resource ARM certainly deploys counts: a ``condition`` may be false, a ``copy`` count 0,
# an ``existing`` resource is a reference (templates/conditional-resource-deployment, copy-resources,
# resource-declaration), an expression or a parameter is ARM's to evaluate, a nested deployment or a
# ``templateLink`` is not in the plan. The program's template is plain literal data, so a deployment is
# judged only in exactly that shape; any other cannot be judged, and may write the file service.
_FILE_SERVICE = "microsoft.storage/storageaccounts/fileservices"
_NESTED_DEPLOYMENT = "microsoft.resources/deployments"
_STORAGE_ACCOUNT = "microsoft.storage/storageaccounts"
_NFS_TLS_API = date(2025, 1, 1)
_NFS_TLS_REQUIRED = "properties.protocolSettings.nfs.encryptionInTransit.required"
# Every template deployment token (resource group, ``AtScope``, ``AtSubscriptionScope``, management group,
# tenant; any API version module) and every typed file service token.
_TEMPLATE_DEPLOYMENTS = re.compile(r"azure-native:resources(/\w+)?:Deployment\w*")
_TYPED_FILE_SERVICES = re.compile(r"azure-native:storage(/\w+)?:FileServiceProperties")
# Resources that may PUT any ARM resource, the file service included, in a form the plan does not show
# (review rev35h A5): a generic ``resources:Resource`` (pulumi-azure-native ``resources/resource.py``: any
# provider namespace, parent path, resource type and API version, its properties free-form) and a
# deployment script (``AzureCliScript``, ``AzurePowerShellScript``: Azure Resource Manager,
# "Use deployment scripts in ARM templates", a script run with an identity's rights, ``az rest`` included).
_OPAQUE_WRITERS = re.compile(r"azure-native:resources(/\w+)?:(Resource|AzureCliScript|AzurePowerShellScript)")
_PLAIN_PROPERTIES = frozenset({"mode", "template"})
_PLAIN_TEMPLATE = frozenset({"$schema", "contentVersion", "resources"})
_PLAIN_RESOURCE = frozenset(
    {"type", "apiVersion", "name", "properties", "location", "tags", "sku", "kind", "dependsOn", "comments"}
)
# A stable ARM API version is a date; ``-preview`` versions are refused.
_API_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_GROUP_SCOPE = re.compile(r"/subscriptions/[^/]+/resourcegroups/([^/]+)", re.IGNORECASE)


def _expression(value: str) -> bool:
    """An ARM template expression: a string in brackets, where ``[[`` starts a literal instead (templates/
    template-expressions, "Escape characters")."""
    return value.startswith("[") and value.endswith("]") and not value.startswith("[[")


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            yield str(key)
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)


def _plain_resources(deployment: Subject) -> tuple[list[Mapping[str, Any]], str | None]:
    """The resources of ``deployment``'s template when it is plain literal data in mode Incremental, else
    no resources and why it cannot be judged."""
    properties = known(deployment.get("properties"), "properties")
    if not isinstance(properties, Mapping):
        return [], "it has no properties"
    if extra := sorted(set(properties) - _PLAIN_PROPERTIES):
        return [], f"it sets properties.{', properties.'.join(extra)}"
    mode = known(properties.get("mode"), "properties.mode")
    if mode != "Incremental":
        return [], f"its mode is {describe(mode)}, not Incremental: Complete deletes the rest of the group"
    template = parse_document(properties.get("template"), "properties.template")
    if extra := sorted(set(template) - _PLAIN_TEMPLATE):
        return [], f"its template has {', '.join(extra)}"
    resources = template.get("resources")
    if not isinstance(resources, list) or not all(isinstance(r, Mapping) for r in resources):
        return [], "its template's resources are not a list of resources"
    for index, resource in enumerate(resources):
        if extra := sorted(set(resource) - _PLAIN_RESOURCE):
            return [], f"its template's resources[{index}] has {', '.join(extra)}"
        if str(resource.get("type")).lower() == _NESTED_DEPLOYMENT:
            return [], f"its template's resources[{index}] is a nested deployment"
    expression = next((s for s in _strings(template) if _expression(s)), None)
    if expression is not None:
        return [], f"its template has the expression {expression}"
    return resources, None


def _deployment_group(deployment: Subject) -> str | None:
    """The resource group a deployment deploys to, when it is one: ``None`` for wider scopes."""
    if "resourceGroupName" in deployment.props:
        return str(known(deployment.get("resourceGroupName"), "resourceGroupName")).lower()
    scope = _GROUP_SCOPE.fullmatch(str(known(deployment.get("scope"), "scope")))
    return scope.group(1).lower() if scope else None


def _api_problem(version: Any) -> str | None:
    """What is wrong with a file service's API version for the NFS setting, compared as a date."""
    try:
        published = date.fromisoformat(version) if _API_DATE.fullmatch(str(version)) else None
    except ValueError:
        published = None
    if published is None:
        return f"apiVersion {describe(version)} is not a stable API version (YYYY-MM-DD)"
    if published < _NFS_TLS_API:
        return f"apiVersion {version} predates {_NFS_TLS_API}, which has protocolSettings.nfs"
    return None


def _writer_problems(
    deployment: Subject, resource: Mapping[str, Any], group: str, deployed_to: str | None
) -> Iterator[str]:
    if deployed_to != group:
        yield f"deployment {deployment.name} does not deploy to resource group {group}"
    if deployment.type != tokens.TEMPLATE_DEPLOYMENT:
        yield f"deployment {deployment.name} is a {deployment.type}, not a {tokens.TEMPLATE_DEPLOYMENT}"
    problem = _api_problem(resource.get("apiVersion"))
    if problem:
        yield f"deployment {deployment.name}: {problem}"
    required = known(at(resource, _NFS_TLS_REQUIRED), _NFS_TLS_REQUIRED)
    if required is not True:
        yield (
            f"deployment {deployment.name} sets {_NFS_TLS_REQUIRED} {describe(required)}, not the JSON "
            "boolean true (ARM's EncryptionInTransit.required is a bool)"
        )


def _file_service_writers(account: Subject, graph: Graph) -> Iterator[str]:
    """Problems with the writers of ``account``'s file service: exactly one, a plain Incremental
    deployment to the account's group requiring NFS encryption in transit."""
    name = str(known(account.get("accountName"), "accountName"))
    group = str(known(account.get("resourceGroupName"), "resourceGroupName")).lower()
    writers: list[tuple[str, list[str]]] = []
    for subject in graph.subjects:
        if _TEMPLATE_DEPLOYMENTS.fullmatch(subject.type):
            resources, why = _plain_resources(subject)
            if why is not None:
                yield (
                    f"deployment {subject.name} cannot be judged ({why}), so it may write account {name}'s "
                    "file service; deploy plain literal data in mode Incremental"
                )
            deployed_to = _deployment_group(subject)
            for resource in resources:
                kind = str(resource.get("type")).lower()
                named = str(resource.get("name")).lower().split("/")[0] == name.lower()
                if kind == _FILE_SERVICE and named and deployed_to in (group, None):
                    writers.append(
                        (subject.name, list(_writer_problems(subject, resource, group, deployed_to)))
                    )
                elif kind == _STORAGE_ACCOUNT and named and deployed_to in (group, None):
                    yield (
                        f"deployment {subject.name} writes account {name} itself, its secure transfer "
                        "included: the stack's StorageAccount is its one writer"
                    )
        elif _OPAQUE_WRITERS.fullmatch(subject.type):
            yield (
                f"{subject.type} {subject.name} cannot be judged (it may PUT any ARM resource), so it may "
                f"write account {name}'s file service; set the file service in the stack's one template "
                "deployment, and run no generic resource or deployment script beside an NFS account"
            )
        elif _TYPED_FILE_SERVICES.fullmatch(subject.type):
            value = subject.get("accountName")
            if (
                is_unknown(value)
                or (isinstance(value, str) and value.lower() == name.lower())
                or account in graph.linked(subject, "accountName", (tokens.STORAGE_ACCOUNT,), "accountName")
            ):
                problem = f"{subject.type} {subject.name} writes it without protocolSettings.nfs"
                writers.append((subject.name, [problem]))
    if len(writers) > 1:
        yield (
            f"account {name}'s file service has {len(writers)} writers ({', '.join(w for w, _ in writers)}); "
            "each PUT sets its whole properties and the last one wins: keep exactly one"
        )
    for _, problems in writers:
        yield from (f"account {name}'s file service: {problem}" for problem in problems)
    if not writers:
        yield (
            f"account {name} serves NFS but nothing sets its file service to require encryption in "
            f"transit: deploy, in mode Incremental to resource group {group}, a template setting "
            f"Microsoft.Storage/storageAccounts/fileServices {name}/default (apiVersion {_NFS_TLS_API} or "
            "later) with protocolSettings.nfs.encryptionInTransit.required true"
        )


def _nfs_shares(account: Subject, graph: Graph) -> list[Subject]:
    return [
        share
        for share in graph.of(tokens.FILE_SHARE)
        if str(known(share.get("enabledProtocols"), "enabledProtocols")).upper() == "NFS"
        and account in graph.linked(share, "accountName", (tokens.STORAGE_ACCOUNT,), identity="accountName")
    ]


def _nfs_server_tls(subject: Subject, graph: Graph) -> Iterator[str]:
    """An account with an NFS share refuses clear mounts whatever a client asks (the clients' side:
    ``encryption-in-transit``): secure transfer required, and its file service requiring NFS encryption in
    transit. An NFS share on an account the stack does not make cannot be judged."""
    if subject.type == tokens.FILE_SHARE:
        nfs = str(known(subject.get("enabledProtocols"), "enabledProtocols")).upper() == "NFS"
        if nfs and not graph.linked(subject, "accountName", (tokens.STORAGE_ACCOUNT,), "accountName"):
            yield (
                f"NFS share {subject.get('shareName')} is on account {describe(subject.get('accountName'))}, "
                "which this stack does not make: whether it refuses clear mounts cannot be judged; make the "
                "account in this stack"
            )
        return
    if not _nfs_shares(subject, graph):
        return
    if subject.get("enableHttpsTrafficOnly") is not True:
        yield (
            f"enableHttpsTrafficOnly is {describe(subject.get('enableHttpsTrafficOnly'))}: an NFS account "
            "requires secure transfer, which refuses every NFS mount without encryption in transit"
        )
    yield from _file_service_writers(subject, graph)


def _judge_buckets(buckets: Iterable[Subject], where: str) -> Iterator[str]:
    for bucket in buckets:
        problem = aws_region_problem(
            bucket.aws_region(), bucket, f"{where}: destination bucket {bucket.name} region"
        )
        if problem:
            yield problem


def _s3_destinations(
    subject: Subject, graph: Graph, rules_path: str, sources: list[Subject]
) -> Iterator[str]:
    """Every replication destination must be a bucket of this stack in an allowed region."""
    source_urns = {source.urn for source in sources}
    candidates = [
        b
        for b in graph.linked(subject, rules_path.split(".", maxsplit=1)[0], tokens.S3_BUCKETS)
        if b.urn not in source_urns
    ]
    for index, rule in enumerate(elements(subject.props, rules_path)):
        where = f"{rules_path}[{index}].destination.bucket"
        destination = known(at(rule, "destination.bucket"), where)
        named = [
            b
            for b in graph.of(*tokens.S3_BUCKETS)
            if isinstance(destination, str) and names(destination, b.get("bucket"))
        ]
        if named or candidates:
            yield from _judge_buckets(named or candidates, where)
        else:
            yield f"{where} {destination} is not a bucket of this stack; its region cannot be proven"


def _replication_destinations(subject: Subject, graph: Graph) -> Iterator[str]:
    if subject.type == tokens.S3_REPLICATION:
        yield from _s3_destinations(
            subject, graph, "rules", _sources(subject, graph, "bucket", tokens.S3_BUCKETS)
        )
    elif subject.type in tokens.S3_BUCKETS:
        yield from _s3_destinations(subject, graph, "replicationConfiguration.rules", [subject])
    else:
        yield from _object_replication(subject, graph)


def _sources(subject: Subject, graph: Graph, prop: str, types: tuple[str, ...]) -> list[Subject]:
    """The replication source, when the engine's property dependencies tell it apart from the destination.

    Without them (a plan that records whole-resource dependencies only) every linked resource is judged
    as a possible destination, which can only add findings.
    """
    return graph.linked(subject, prop, types) if subject.property_dependencies else []


def _object_replication(subject: Subject, graph: Graph) -> Iterator[str]:
    sources = {a.urn for a in _sources(subject, graph, "sourceAccount", (tokens.STORAGE_ACCOUNT,))}
    linked = graph.linked(subject, "destinationAccount", (tokens.STORAGE_ACCOUNT,), "accountName")
    accounts = [account for account in linked if account.urn not in sources]
    if not accounts:
        destination = known(subject.get("destinationAccount"), "destinationAccount")
        yield f"destinationAccount {destination} is not an account of this stack; its location is unproven"
    for account in accounts:
        problem = azure_location_problem(
            account.azure_location(), account, f"destination account {account.name} location"
        )
        if problem:
            yield problem


def namespace_key(subject: Subject, graph: Graph) -> str:
    """A namespace's identity: its name when known, else the URN of the Namespace resource it names."""
    if subject.type == tokens.NAMESPACE:
        name = subject.get("metadata.name")
        return name if isinstance(name, str) and not is_unknown(name) else subject.urn
    own = namespace_of(subject)
    if isinstance(own, str) and not is_unknown(own):
        return own
    linked = graph.linked(subject, "metadata", (tokens.NAMESPACE,))
    return namespace_key(linked[0], graph) if linked else "<unknown namespace>"


def _display(key: str, graph: Graph) -> str:
    found = graph.find(key)
    return found.name if found is not None else key


def _privileged_exceptions(graph: Graph) -> Iterator[Finding | UnknownValueError]:
    reasoned: set[str] = set()
    for namespace in graph.of(tokens.NAMESPACE):
        if namespace.labels().get(POD_SECURITY_ENFORCE) != "privileged":
            continue
        if namespace.reason(PRIVILEGED_REASON):
            reasoned.add(namespace_key(namespace, graph))
        else:
            yield (
                namespace.urn,
                f"labelled {POD_SECURITY_ENFORCE}=privileged without a written {PRIVILEGED_REASON}",
            )
    for workload in graph.of(*tokens.WORKLOADS):
        key = namespace_key(workload, graph)
        if workload.reason(PRIVILEGED_REASON) and key not in reasoned:
            yield (
                workload.urn,
                (
                    f"carries {PRIVILEGED_REASON}, but its namespace {_display(key, graph)} is not labelled "
                    f"{POD_SECURITY_ENFORCE}=privileged with a written reason"
                ),
            )


def _network_policies(graph: Graph) -> Iterator[Finding | UnknownValueError]:
    running: dict[str, list[Subject]] = defaultdict(list)
    for workload in graph.of(*tokens.WORKLOADS):
        running[namespace_key(workload, graph)].append(workload)
    covered = {namespace_key(policy, graph) for policy in graph.of(tokens.NETWORK_POLICY)}
    namespaces = {namespace_key(namespace, graph): namespace for namespace in graph.of(tokens.NAMESPACE)}
    for key, workloads in running.items():
        if key not in covered:
            where = namespaces.get(key) or workloads[0]
            yield (
                where.urn,
                (
                    f"namespace {_display(key, graph)} runs {', '.join(w.name for w in workloads)} but has "
                    "no NetworkPolicy; add a default-deny policy and allow only what the workloads need"
                ),
            )


POLICIES: list[StackValidationPolicy] = [
    stack_policy(
        "s3-public-access-block",
        "Every S3 bucket has a public access block attached (or the account has one).",
        per_node(tokens.S3_BUCKETS, _public_access_blocked),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "s3-default-encryption-kms",
        "Every S3 bucket has default encryption configured, SSE-KMS under a customer key; a bucket tagged "
        "ml-platform.io/role: access-logs may use SSE-S3, since S3 server access logs cannot be delivered "
        "to an SSE-KMS default-encrypted target (S3 user guide, server access logging).",
        _default_encryption_everywhere,
        severity=Severity.HIGH,
    ),
    stack_policy(
        "s3-tls-only",
        "Every S3 bucket's policy denies requests that do not use TLS (aws:SecureTransport false).",
        per_node(tokens.S3_BUCKETS, _tls_only),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "azure-files-nfs-tls-required",
        "Every Azure storage account with an NFS share requires encryption in transit on its file service "
        "(protocolSettings.nfs.encryptionInTransit.required, storage API 2025-01-01), set by exactly one "
        "writer, a plain Incremental ARM template deployment, and requires secure transfer "
        "(enableHttpsTrafficOnly), so the server refuses clear NFS mounts; an NFS share on an account the "
        "stack does not make cannot be judged.",
        per_node((tokens.STORAGE_ACCOUNT, tokens.FILE_SHARE), _nfs_server_tls),
        severity=Severity.HIGH,
    ),
    stack_policy(
        "uae-replication-destinations",
        "S3 and Azure object replication go only to buckets and storage accounts of this stack in the UAE.",
        per_node(
            (tokens.S3_REPLICATION, *tokens.S3_BUCKETS, tokens.OBJECT_REPLICATION), _replication_destinations
        ),
        severity=Severity.CRITICAL,
        settings=REGION_SETTINGS,
    ),
    stack_policy(
        "k8s-privileged-exceptions",
        "A namespace labelled pod-security privileged states why; workloads waived from the privilege "
        "checks run only in such a namespace.",
        _privileged_exceptions,
        severity=Severity.HIGH,
    ),
    stack_policy(
        "k8s-namespace-network-policy",
        "Every namespace that runs workloads has a NetworkPolicy.",
        _network_policies,
        severity=Severity.MEDIUM,
    ),
]
