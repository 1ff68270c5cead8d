"""Keys per data domain (issue 35 item 3; review rows E1, A1, B4): one customer key encrypts the stores of
one data domain only, so that revoking or auditing a key is revoking or auditing one domain.

A store's domain follows from what it is (the program's ``KeyDomain``, docs/security.md "Keys per data
domain"), or, where its type does not say it, from the domain it declares (``DATA_DOMAIN_TAG``); its key
is the KMS key it names:

- Kubernetes Secrets: the EKS cluster's ``encryptionConfig.provider.keyArn``;
- the registry database: the RDS instance's ``kmsKeyId`` and ``masterUserSecretKmsKeyId``;
- training data: the shared file system's ``kmsKeyId`` (EFS, FSx for Lustre);
- images: each ECR repository's ``encryptionConfigurations[].kmsKey``;
- node volumes: each launch template's ``blockDeviceMappings[].ebs.kmsKeyId``;
- logs: each CloudWatch log group's ``kmsKeyId``;
- audit: the CloudTrail trail's ``kmsKeyId``, the alert topic's ``kmsMasterKeyId``, and the stores that
  declare it (the trail's bucket and log group): the audit trail never shares a key with the logs it
  audits (separation of duties: whoever may decrypt application logs reads no audit record);
- a bucket: its default encryption's ``rules[].applyServerSideEncryptionByDefault.kmsMasterKeyId``
  (``BucketServerSideEncryptionConfiguration``, linked by ``bucket``), in the domain the bucket declares;
  an encrypted bucket that declares none is refused.

Azure's stores are read by key_domains_azure.py.

Two findings: a key that encrypts the stores of two domains (every store of it is named), and a store
whose key declares domains (``DATA_DOMAIN_TAG`` on the key) that do not include the store's. A store that
names no key (AWS-owned encryption) is ``encryption-at-rest-cmk``'s to refuse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pulumi_policy import Severity
from pulumi_policy.proxy import UnknownValueError

from .factory import Finding, stack_policy
from .key_domains_azure import azure_stores
from .settings import DATA_DOMAIN_TAG
from .subject import Graph, Subject
from .values import at, elements, known

KMS_KEY = "aws:kms/key:Key"
BUCKET = "aws:s3/bucket:Bucket"
BUCKET_ENCRYPTION = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
AUDIT = "audit"

# Resource type -> (its domain, None where the store declares it; the paths of the keys it names, ``[]``
# marking a list).
STORES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "aws:eks/cluster:Cluster": ("kubernetes-secrets", ("encryptionConfig.provider.keyArn",)),
    "aws:rds/instance:Instance": ("registry-database", ("kmsKeyId", "masterUserSecretKmsKeyId")),
    "aws:efs/fileSystem:FileSystem": ("training-data", ("kmsKeyId",)),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("training-data", ("kmsKeyId",)),
    "aws:ecr/repository:Repository": ("images", ("encryptionConfigurations[].kmsKey",)),
    "aws:ec2/launchTemplate:LaunchTemplate": ("node-volumes", ("blockDeviceMappings[].ebs.kmsKeyId",)),
    "aws:cloudwatch/logGroup:LogGroup": ("logs", ("kmsKeyId",)),
    "aws:cloudtrail/trail:Trail": (AUDIT, ("kmsKeyId",)),
    "aws:sns/topic:Topic": (AUDIT, ("kmsMasterKeyId",)),
    BUCKET_ENCRYPTION: (None, ("rules[].applyServerSideEncryptionByDefault.kmsMasterKeyId",)),
}


def declared_domains(subject: Subject) -> list[str]:
    """The domains a key serves or a store declares (``DATA_DOMAIN_TAG``, space-separated)."""
    value = subject.tags().get(DATA_DOMAIN_TAG)
    return value.split() if isinstance(value, str) else []


def _keys(store: Subject, path: str) -> list[str]:
    """The key references at ``path``; ``a[].b`` reads ``b`` in each element of list ``a``."""
    if "[]." not in path:
        value = known(store.get(path), path)
        return [value] if isinstance(value, str) and value else []
    head, tail = path.split("[].", 1)
    found = [known(at(item, tail), f"{head}[].{tail}") for item in elements(store.props, head)]
    return [value for value in found if isinstance(value, str) and value]


@dataclass(frozen=True)
class Store:
    """An encrypted store as judged: the resource findings name, what it is called, its domain (None:
    undeclared) and the keys it names at each path."""

    subject: Subject
    name: str
    domain: str | None
    keys: dict[str, list[str]]


def _store(subject: Subject, graph: Graph) -> Store:
    domain, paths = STORES[subject.type]
    name = subject.name
    if subject.type == BUCKET_ENCRYPTION:
        buckets = graph.linked(subject, "bucket", [BUCKET])
        name = ", ".join(b.name for b in buckets) or name
        declared = sorted({d for b in buckets for d in declared_domains(b)})
    else:
        declared = declared_domains(subject)
    chosen = declared[0] if len(declared) == 1 else domain
    return Store(subject, name, chosen, {path: _keys(subject, path) for path in paths})


def stores(graph: Graph) -> Iterator[Store | UnknownValueError]:
    """Every store that names a customer key: AWS's here, Azure's from key_domains_azure.py (their domain
    follows from what they are)."""
    for subject in graph.of(*STORES):
        try:
            store = _store(subject, graph)
        except UnknownValueError as unknown:
            yield unknown
            continue
        if any(store.keys.values()):
            yield store
    for item in azure_stores(graph):
        if isinstance(item, UnknownValueError):
            yield item
        else:
            subject, domain, path, key = item
            yield Store(subject, subject.name, domain, {path: [key]})


def _judged(graph: Graph) -> Iterator[Finding | UnknownValueError]:
    # key -> domain -> the stores of that domain it encrypts, in plan order.
    served: dict[str, dict[str, list[Store]]] = {}
    for store in stores(graph):
        if isinstance(store, UnknownValueError):
            yield store
            continue
        if store.domain is None:
            yield (
                store.subject.urn,
                f"{store.name} is encrypted under a customer key but declares no data domain; tag the bucket "
                f"{DATA_DOMAIN_TAG} with the domain whose key encrypts it",
            )
            continue
        yield from _against_key_domains(store, graph)
        for key in {key for keys in store.keys.values() for key in keys}:
            served.setdefault(key, {}).setdefault(store.domain, []).append(store)
    for key, domains in served.items():
        if len(domains) < 2:
            continue
        named = "; ".join(
            f"{d}: {', '.join(s.name for s in members)}" for d, members in sorted(domains.items())
        )
        for store in (s for members in domains.values() for s in members):
            paths = ", ".join(path for path, keys in store.keys.items() if key in keys)
            yield (
                store.subject.urn,
                f"{paths}: key {key} encrypts the stores of {len(domains)} data domains ({named}); give "
                "each domain its own key (docs/operations.md, 'Keys per data domain', for a store that "
                "cannot move)",
            )


def _against_key_domains(store: Store, graph: Graph) -> Iterator[Finding]:
    """The keys the store's key paths depend on must serve the store's domain."""
    for path, keys in store.keys.items():
        if not keys:
            continue
        for key in graph.linked(store.subject, path.split(".", 1)[0].split("[", 1)[0], [KMS_KEY]):
            serves = declared_domains(key)
            if serves and store.domain not in serves:
                yield (
                    store.subject.urn,
                    f"{store.name} ({store.domain}): {path} is key {key.name}, which serves "
                    f"{' '.join(serves)}; encrypt it under the {store.domain} key",
                )


POLICIES = [
    stack_policy(
        "keys-per-domain",
        "A customer key encrypts the stores of one data domain only: Kubernetes Secrets, the registry "
        "database, training data, datasets, object data, images, node volumes, logs and the audit trail "
        "each have their own key, and every store (each encrypted bucket too) is under its own domain's key.",
        _judged,
        severity=Severity.HIGH,
    ),
]
