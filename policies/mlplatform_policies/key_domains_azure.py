"""Keys per data domain on Azure (issue 35 item 3): the stores ``keys-per-domain`` reads on an Azure plan
(key_domains.py holds the policy and the AWS stores).

A store's domain follows from what it is; its key is the Key Vault key it names, compared without its
version (a store following the versionless key and one pinned to a version use the same key):

- Kubernetes Secrets: the AKS cluster's ``securityProfile.azureKeyVaultKms.keyId``;
- the registry database: the PostgreSQL flexible server's ``dataEncryption.primaryKeyURI``;
- node volumes: the disk encryption set's ``activeKey.keyUrl``;
- images: the container registry's ``encryption.keyVaultProperties.keyIdentifier``;
- datasets: a Blob encryption scope's ``keyVaultProperties.keyUri`` (the only scope the program makes is
  the ``datasets`` container's default, with overrides denied: components/azure/storage.py); a
  ``datasets`` container with no default scope is under its account's key (a stack made before the
  datasets had a key, which ``storage.onStackKey`` keeps so: the finding records that exception);
- storage accounts, by what the account is: a ``FileStorage`` account (the NFS share) holds training data,
  the lifecycle record's (tagged ``ml-platform.io-role: lifecycle-record``) object data, as AWS's record
  bucket, any other account with immutable storage (the audit archive) logs, any other object data; the
  key is ``encryption.keyVaultProperties.keyVaultUri`` and ``keyName``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pulumi_policy.proxy import UnknownValueError

from .settings import AZURE_ROLE_TAG, LIFECYCLE_RECORD_ROLE
from .subject import Graph, Subject
from .values import known

# Resource type -> (domain, the path of the key URL it names).
STORES: dict[str, tuple[str, str]] = {
    "azure-native:containerservice:ManagedCluster": (
        "kubernetes-secrets",
        "securityProfile.azureKeyVaultKms.keyId",
    ),
    "azure-native:dbforpostgresql:Server": ("registry-database", "dataEncryption.primaryKeyURI"),
    "azure-native:compute:DiskEncryptionSet": ("node-volumes", "activeKey.keyUrl"),
    "azure-native:containerregistry:Registry": ("images", "encryption.keyVaultProperties.keyIdentifier"),
    "azure-native:storage:EncryptionScope": ("datasets", "keyVaultProperties.keyUri"),
}
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
BLOB_CONTAINER = "azure-native:storage:BlobContainer"
DATASETS = "datasets"
# https://<vault>.vault.azure.net/keys/<name>[/<version>]: the key, without its version.
_KEY_URL = re.compile(r"^(https://[^/]+/keys/[^/]+)(/[^/]*)?/?$", re.IGNORECASE)


def key_identity(url: str) -> str:
    matched = _KEY_URL.match(url)
    return (matched.group(1) if matched else url).lower()


def _account_domain(account: Subject) -> str:
    if account.get("kind") == "FileStorage":
        return "training-data"
    if account.tags().get(AZURE_ROLE_TAG) == LIFECYCLE_RECORD_ROLE:
        return "object-data"
    if (account.get("immutableStorageWithVersioning") or {}).get("enabled"):
        return "logs"
    return "object-data"


def _account_key(account: Subject) -> str | None:
    properties = "encryption.keyVaultProperties"
    vault = known(account.get(f"{properties}.keyVaultUri"), f"{properties}.keyVaultUri")
    name = known(account.get(f"{properties}.keyName"), f"{properties}.keyName")
    if not (isinstance(vault, str) and vault and isinstance(name, str) and name):
        return None
    return key_identity(f"{vault.rstrip('/')}/keys/{name}")


def azure_stores(graph: Graph) -> Iterator[tuple[Subject, str, str, str] | UnknownValueError]:
    """(store, its domain, the path naming its key, its key) for each Azure store naming a customer key."""
    for kind, (domain, path) in STORES.items():
        for store in graph.of(kind):
            try:
                url = known(store.get(path), path)
            except UnknownValueError as unknown:
                yield unknown
                continue
            if isinstance(url, str) and url:
                yield store, domain, path, key_identity(url)
    for account in graph.of(STORAGE_ACCOUNT):
        try:
            key = _account_key(account)
        except UnknownValueError as unknown:
            yield unknown
            continue
        if key is not None:
            yield account, _account_domain(account), "encryption.keyVaultProperties", key
    for container in graph.of(BLOB_CONTAINER):
        if container.get("containerName") != DATASETS or container.get("defaultEncryptionScope"):
            continue  # another domain's container, or the datasets under their scope (judged above)
        for account in graph.linked(container, "accountName", (STORAGE_ACCOUNT,), "accountName"):
            try:
                key = _account_key(account)
            except UnknownValueError as unknown:
                yield unknown
                continue
            if key is not None:
                yield container, DATASETS, "accountName (its account's key)", key
