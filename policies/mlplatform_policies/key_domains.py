"""Keys per data domain (issue 35 item 3; review row E1): one customer key encrypts the stores of one
data domain only, so that revoking or auditing a key is revoking or auditing one domain.

A store's domain follows from what it is (the program's ``KeyDomain``, docs/security.md "Keys per data
domain"); its key is the KMS key it names:

- Kubernetes Secrets: the EKS cluster's ``encryptionConfig.provider.keyArn``;
- the registry database: the RDS instance's ``kmsKeyId`` and ``masterUserSecretKmsKeyId``;
- training data: the shared file system's ``kmsKeyId`` (EFS, FSx for Lustre);
- images: each ECR repository's ``encryptionConfigurations[].kmsKey``;
- node volumes: each launch template's ``blockDeviceMappings[].ebs.kmsKeyId``;
- logs: each CloudWatch log group's ``kmsKeyId``, the CloudTrail trail's ``kmsKeyId``, the alert topic's
  ``kmsMasterKeyId``.

Azure's stores are read by key_domains_azure.py. S3 default encryption names a bucket by its generated
name only, so the bucket's domain is not read
here; the identities that use the bucket's key are judged by ``identity-per-role``. A store that names
no key (AWS-owned encryption) is ``encryption-at-rest-cmk``'s to refuse.
"""

from __future__ import annotations

from collections.abc import Iterator

from pulumi_policy import Severity
from pulumi_policy.proxy import UnknownValueError

from .factory import Finding, stack_policy
from .key_domains_azure import azure_stores
from .subject import Graph, Subject
from .values import at, elements, known

# Resource type -> (domain, the paths of the keys it names; ``[]`` marks a list).
STORES: dict[str, tuple[str, tuple[str, ...]]] = {
    "aws:eks/cluster:Cluster": ("kubernetes-secrets", ("encryptionConfig.provider.keyArn",)),
    "aws:rds/instance:Instance": ("registry-database", ("kmsKeyId", "masterUserSecretKmsKeyId")),
    "aws:efs/fileSystem:FileSystem": ("training-data", ("kmsKeyId",)),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("training-data", ("kmsKeyId",)),
    "aws:ecr/repository:Repository": ("images", ("encryptionConfigurations[].kmsKey",)),
    "aws:ec2/launchTemplate:LaunchTemplate": ("node-volumes", ("blockDeviceMappings[].ebs.kmsKeyId",)),
    "aws:cloudwatch/logGroup:LogGroup": ("logs", ("kmsKeyId",)),
    "aws:cloudtrail/trail:Trail": ("logs", ("kmsKeyId",)),
    "aws:sns/topic:Topic": ("logs", ("kmsMasterKeyId",)),
}


def _keys(store: Subject, path: str) -> list[str]:
    """The key references at ``path``; ``a[].b`` reads ``b`` in each element of list ``a``."""
    if "[]." not in path:
        value = known(store.get(path), path)
        return [value] if isinstance(value, str) and value else []
    head, tail = path.split("[].", 1)
    found = [known(at(item, tail), f"{head}[].{tail}") for item in elements(store.props, head)]
    return [value for value in found if isinstance(value, str) and value]


def _merged(graph: Graph) -> Iterator[Finding | UnknownValueError]:
    # key -> domain -> the stores of that domain it encrypts, in plan order.
    served: dict[str, dict[str, list[Subject]]] = {}
    for kind, (domain, paths) in STORES.items():
        for store in graph.of(kind):
            try:
                keys = {key for path in paths for key in _keys(store, path)}
            except UnknownValueError as unknown:
                yield unknown
                continue
            for key in keys:
                served.setdefault(key, {}).setdefault(domain, []).append(store)
    for item in azure_stores(graph):
        if isinstance(item, UnknownValueError):
            yield item
        else:
            store, domain, key = item
            served.setdefault(key, {}).setdefault(domain, []).append(store)
    for key, domains in served.items():
        if len(domains) < 2:
            continue
        named = "; ".join(
            f"{d}: {', '.join(s.name for s in stores)}" for d, stores in sorted(domains.items())
        )
        for store in (s for stores in domains.values() for s in stores):
            yield (
                store.urn,
                f"key {key} encrypts the stores of {len(domains)} data domains ({named}); give each domain "
                "its own key (docs/operations.md, 'Keys per data domain', for a store that cannot move)",
            )


POLICIES = [
    stack_policy(
        "keys-per-domain",
        "A customer key encrypts the stores of one data domain only: Kubernetes Secrets, the registry "
        "database, training data, images, node volumes and logs each have their own key.",
        _merged,
        severity=Severity.HIGH,
    ),
]
