"""Rules that need the whole graph: what is attached to a bucket, where a replica goes, which namespace
has a NetworkPolicy, what an NFS share's account requires of its clients.

A secure bucket is several resources (the bucket, its public access block, its encryption configuration,
its policy); each attachment names its bucket in a ``bucket`` input, and the engine's dependencies link
the two (``Graph.linked``). Namespaces are matched by name, or by the Namespace resource an object's
metadata depends on when the name is only known after deployment.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
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
from .values import at, elements, is_unknown, known, parse_document, statements


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
_FILE_SERVICE = "microsoft.storage/storageaccounts/fileservices"
_NFS_TLS_API = "2025-01-01"
_NFS_TLS_REQUIRED = "properties.protocolSettings.nfs.encryptionInTransit.required"


def _template_resources(deployment: Subject) -> list[Any]:
    """The resources of an Incremental deployment's inline template: a list, or (template language 2.0)
    a map of symbolic names. A Complete deployment deletes what else the group holds: not counted."""
    if known(deployment.get("properties.mode"), "properties.mode") != "Incremental":
        return []
    listed = parse_document(deployment.get("properties.template"), "properties.template").get("resources")
    if isinstance(listed, Mapping):
        return list(listed.values())
    return listed if isinstance(listed, list) else []


def _requires_nfs_tls(deployment: Subject, account: str, group: str) -> bool:
    """Whether ``deployment`` sets ``account``'s file service, in ``group``, to require NFS encryption in
    transit (the name literal ``<account>/default``: an expression cannot be judged from the plan)."""
    if str(known(deployment.get("resourceGroupName"), "resourceGroupName")).lower() != group.lower():
        return False
    return any(
        isinstance(resource, Mapping)
        and str(resource.get("type")).lower() == _FILE_SERVICE
        and str(resource.get("name")).lower() == f"{account}/default".lower()
        and str(resource.get("apiVersion"))[:10] >= _NFS_TLS_API
        and at(resource, _NFS_TLS_REQUIRED) is True
        for resource in _template_resources(deployment)
    )


def _nfs_server_tls(account: Subject, graph: Graph) -> Iterator[str]:
    """An account with an NFS share requires encryption in transit server-side, so no clear mount of its
    shares succeeds whatever a client asks (the clients' side: ``encryption-in-transit``)."""
    shares = [
        share
        for share in graph.of(tokens.FILE_SHARE)
        if account in graph.linked(share, "accountName", (tokens.STORAGE_ACCOUNT,), identity="accountName")
        and str(known(share.get("enabledProtocols"), "enabledProtocols")).upper() == "NFS"
    ]
    if not shares:
        return
    name = str(known(account.get("accountName"), "accountName"))
    group = str(known(account.get("resourceGroupName"), "resourceGroupName"))
    if not any(_requires_nfs_tls(d, name, group) for d in graph.of(tokens.TEMPLATE_DEPLOYMENT)):
        yield (
            f"account {name} serves NFS ({', '.join(sorted(str(s.get('shareName')) for s in shares))}) but "
            "does not require encryption in transit, so it accepts clear NFS mounts: deploy, in mode "
            f"Incremental to resource group {group}, a template setting Microsoft.Storage/storageAccounts/"
            f"fileServices {name}/default (apiVersion {_NFS_TLS_API} or later) with "
            "protocolSettings.nfs.encryptionInTransit.required true"
        )


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
        "(protocolSettings.nfs.encryptionInTransit.required, storage API 2025-01-01, set by an Incremental "
        "ARM template deployment), so the server refuses clear NFS mounts.",
        per_node((tokens.STORAGE_ACCOUNT,), _nfs_server_tls),
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
