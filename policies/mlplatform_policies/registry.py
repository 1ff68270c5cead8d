"""The model registry's stores and server (issue 28): its database encrypted under the customer key and
not public, deletion-protected in prod, its backups and replicas kept in the UAE; and no anonymous
access to an enterprise registry.

Databases, as the engine sees them:
- RDS (``aws:rds/instance:Instance``, ``aws:rds/cluster:Cluster``; pulumi-aws 7 docstrings):
  ``storageEncrypted`` with ``kmsKeyId``; an RDS-managed master password (``manageMasterUserPassword``)
  encrypted with ``masterUserSecretKmsKeyId`` (without it Secrets Manager uses the AWS managed key);
  ``publiclyAccessible`` never true; automated backups on (``backupRetentionPeriod`` not 0); prod
  (``environment`` tag): ``deletionProtection`` and a final
  snapshot (``skipFinalSnapshot`` false). Automated backups replicated to another region
  (``aws:rds/instanceAutomatedBackupsReplication``) leave the UAE: me-central-1 is its only AWS region
  (REFERENCE.md "UAE data residency").
- Azure Database for PostgreSQL flexible server (``azure-native:dbforpostgresql:Server``):
  ``network.publicNetworkAccess`` Disabled, ``dataEncryption.type`` AzureKeyVault with a
  ``primaryKeyURI``; geo-redundant backups go to the region's pair, which for uaenorth and uaecentral is
  the other one (Azure region pairs; REFERENCE.md), so they are allowed only there.

The registry server: a workload whose pod template is labelled ``app.kubernetes.io/name: mlflow`` and
whose own labels say ``tier: enterprise`` (or carry no tier: the stricter one) must run MLflow's
basic-auth app (``--app-name basic-auth`` in its arguments, or ``REGISTRY_AUTH=true`` for the platform's
launcher, workloads/registry/server/launch.py), and no container may carry a password or secret key as a
literal environment value.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import ResourceValidationPolicy, Severity

from . import tokens
from .factory import by_type, resource_policy
from .subject import Subject
from .values import elements, is_true

RDS_INSTANCE = "aws:rds/instance:Instance"
RDS_CLUSTER = "aws:rds/cluster:Cluster"
RDS_BACKUP_REPLICATION = "aws:rds/instanceAutomatedBackupsReplication:InstanceAutomatedBackupsReplication"
POSTGRES_FLEXIBLE = "azure-native:dbforpostgresql:Server"
# Azure regions whose pair is in the UAE too (Azure region pairs: uaenorth ↔ uaecentral).
_UAE_PAIRED = ("uaenorth", "uaecentral")
MLFLOW_NAME = "mlflow"
_SECRET_WORDS = ("PASSWORD", "SECRET_KEY", "TOKEN")


def _is_prod(subject: Subject) -> bool:
    return subject.tags().get("environment") == "prod"


def _rds(subject: Subject) -> Iterator[str]:
    if not is_true(subject.get("storageEncrypted")):
        yield "storageEncrypted is not true; encrypt the database"
    if not subject.get("kmsKeyId"):
        yield "kmsKeyId is not set; encrypt under the stack's customer-managed KMS key"
    if is_true(subject.get("publiclyAccessible")):
        yield "publiclyAccessible is true; keep the database in private subnets only"
    if subject.get("backupRetentionPeriod") == 0:
        # RDS API reference, CreateDBInstance BackupRetentionPeriod: "Setting this parameter to 0
        # disables automated backups" (unset, RDS keeps 1 day).
        yield "backupRetentionPeriod is 0, which disables automated backups; keep them (7 days or more)"
    if is_true(subject.get("manageMasterUserPassword")) and not subject.get("masterUserSecretKmsKeyId"):
        yield "masterUserSecretKmsKeyId is not set; encrypt the managed master password with the customer key"
    if _is_prod(subject):
        if not is_true(subject.get("deletionProtection")):
            yield "prod database without deletionProtection; set it true"
        if subject.get("skipFinalSnapshot") is not False:
            yield "prod database skips its final snapshot; set skipFinalSnapshot false with an identifier"


def _backup_replication(_subject: Subject) -> Iterator[str]:
    yield (
        "replicates automated backups to another region, out of the UAE (me-central-1 is its only AWS "
        "region); keep backups in the database's region"
    )


def _flexible_server(subject: Subject) -> Iterator[str]:
    if subject.get("network.publicNetworkAccess") != "Disabled":
        yield "network.publicNetworkAccess is not Disabled; use private access (a delegated subnet)"
    encryption = subject.get("dataEncryption.type"), subject.get("dataEncryption.primaryKeyURI")
    if encryption[0] != "AzureKeyVault" or not encryption[1]:
        yield "dataEncryption is not AzureKeyVault with a primaryKeyURI; encrypt under the customer key"
    geo = subject.get("backup.geoRedundantBackup") == "Enabled"
    if geo and subject.azure_location() not in _UAE_PAIRED:
        yield "geo-redundant backups go to the region's pair, outside the UAE here; disable them"
    if _is_prod(subject) and subject.get("highAvailability.mode") not in ("ZoneRedundant", "SameZone"):
        yield "prod database without high availability; set highAvailability.mode ZoneRedundant"


DATABASES = {
    RDS_INSTANCE: _rds,
    RDS_CLUSTER: _rds,
    RDS_BACKUP_REPLICATION: _backup_replication,
    POSTGRES_FLEXIBLE: _flexible_server,
}


def template_labels(subject: Subject) -> Mapping[str, Any]:
    path = tokens.POD_SPEC_PATHS[subject.type].removesuffix(".spec") + ".metadata.labels"
    labels = subject.get(path)
    return labels if isinstance(labels, Mapping) else {}


def _authenticated(container: Mapping[str, Any]) -> bool:
    words = [str(w) for w in [*elements(container, "command"), *elements(container, "args")]]
    app = (
        any(
            word == "--app-name" and following == "basic-auth"
            for word, following in itertools.pairwise(words)
        )
        or "--app-name=basic-auth" in words
    )
    launcher = any(
        isinstance(v, Mapping) and v.get("name") == "REGISTRY_AUTH" and v.get("value") == "true"
        for v in elements(container, "env")
    )
    return app or launcher


def _registry_server(subject: Subject) -> Iterator[str]:
    if template_labels(subject).get("app.kubernetes.io/name") != MLFLOW_NAME:
        return
    spec = subject.get(tokens.POD_SPEC_PATHS[subject.type])
    containers = [c for c in elements(spec or {}, "containers") if isinstance(c, Mapping)]
    for container in containers:
        for variable in elements(container, "env"):
            name = str(variable.get("name", "")) if isinstance(variable, Mapping) else ""
            if any(word in name for word in _SECRET_WORDS) and "value" in variable:
                yield f"{container.get('name')}: {name} is a literal value; take it from a Secret (valueFrom)"
    tier = subject.labels().get("tier", "enterprise")
    deployment = subject.type == "kubernetes:apps/v1:Deployment"
    if deployment and tier == "enterprise" and not any(_authenticated(c) for c in containers):
        yield (
            "an enterprise model registry serves anonymous requests; run MLflow's basic-auth app "
            "(--app-name basic-auth, or REGISTRY_AUTH=true for the platform's launcher)"
        )


POLICIES: list[ResourceValidationPolicy] = [
    resource_policy(
        "registry-database-protected",
        "The model registry's database (RDS, Azure Database for PostgreSQL flexible server) is encrypted "
        "under the customer key, not public, deletion-protected with a final snapshot (or highly "
        "available) in prod, and its backups and replicas stay in the UAE.",
        by_type(DATABASES),
        severity=Severity.HIGH,
    ),
    resource_policy(
        "registry-no-anonymous-access",
        "An enterprise model registry (MLflow) authenticates every request, and no registry container "
        "carries a password, secret key or token as a literal value.",
        by_type(dict.fromkeys(tokens.WORKLOADS, _registry_server)),
        severity=Severity.HIGH,
    ),
]
