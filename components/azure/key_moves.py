"""The Azure upgrade to keys per data domain, refused where it would move a store silently (review of
issue 38, B4; the AWS guard is ``components.aws.keys.refuse_silent_key_moves``).

A stack made before the split has its NFS account, its registry's PostgreSQL server and its audit archive
under the storage key, ``storage-cmk``. Upgraded without ``storage.onStackKey`` listing those domains,
the program gives each store a new key and identity: a flexible server's customer key is set at creation
only (components/azure/registry_database.py), and whether a storage account takes another key in place is
not sourced (docs/operations.md, "Keys per data domain", On Azure). So before anything is registered the
program reads each such store from Resource Manager, as ``az`` would, and refuses the update in one line
naming the stack key when a store exists under ``storage-cmk`` and the config would move it:

- a storage account's key: ``properties.encryption.keyvaultproperties.keyname`` (Storage Resource
  Provider, "Storage Accounts - Get Properties", ``KeyVaultProperties``);
- a flexible server's key: ``properties.dataEncryption.primaryKeyURI``, ``https://<vault>/keys/<name>/…``
  (PostgreSQL flexible server REST API, ``DataEncryption``; Az.PostgreSqlFlexibleServer ``IServer``
  serialized name ``primaryKeyURI``);
- the ``datasets`` container of the objects account (under ``storage-cmk``, the object data's key): its
  ``properties.defaultEncryptionScope`` (Storage Resource Provider, "Blob Containers - Get",
  ``ContainerProperties``; ``$account-encryption-key`` where the container was made without one). A
  container made before the datasets had their own key has not the datasets scope (storage.py), and a
  container's default scope is set at creation only, so moving the datasets to their key replaces it.

A store that does not exist yet (ARM's 404: a new stack) or is under its own key (a stack made since the
split, or one whose domain moved) passes. A read ARM refuses otherwise (no read right) cannot judge the
stack: the program says so in a warning and goes on, as the AWS guard does where it may not list aliases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.azure import naming
from components.azure.arm import ArmReader, ArmReadError, arm_reader
from components.azure.audit import STORAGE_API_VERSION, archive_account_name
from components.azure.keys import KeyPurpose, vault_key_name
from components.azure.registry_database import server_name
from components.azure.storage import DATASETS_CONTAINER, DATASETS_SCOPE, objects_account_name
from components.config import (
    PLATFORM_KEY,
    PROJECT,
    KeyDomain,
    PlatformConfig,
    managed_registry_database,
)
from components.handle import SharedStorageKind

# The key every store of these domains was made under before the split.
STACK_KEY_NAME = vault_key_name(KeyPurpose.STORAGE)
# The API version of pulumi-azure-native's dbforpostgresql.Server (the one the program creates with).
POSTGRES_API_VERSION = "2025-08-01"


def key_name(resource: dict[str, Any]) -> str | None:
    """The name of the Key Vault key a storage account or flexible server is encrypted with, if any."""
    properties = resource.get("properties") or {}
    account_key = ((properties.get("encryption") or {}).get("keyvaultproperties") or {}).get("keyname")
    if account_key:
        return str(account_key)
    uri = str((properties.get("dataEncryption") or {}).get("primaryKeyURI") or "")
    _, found, rest = uri.partition("/keys/")
    return rest.split("/", 1)[0] if found else None


def encrypted_with_stack_key(resource: dict[str, Any]) -> bool:
    """Whether an account or server as ARM reads it is encrypted with ``storage-cmk``."""
    return key_name(resource) == STACK_KEY_NAME


def without_datasets_scope(container: dict[str, Any]) -> bool:
    """Whether the datasets container as ARM reads it is on its account's key (``storage-cmk``): made
    without the datasets scope as its default."""
    return (container.get("properties") or {}).get("defaultEncryptionScope") != DATASETS_SCOPE


@dataclass(frozen=True)
class Store:
    """A store a domain's key encrypts, as Resource Manager addresses it, and how to tell from what ARM
    reads that it is on ``storage-cmk``."""

    domain: KeyDomain
    what: str
    provider_path: str
    api_version: str
    under_stack_key: Callable[[dict[str, Any]], bool] = field(default=encrypted_with_stack_key, compare=False)


def stores(config: PlatformConfig, suffix: str) -> list[Store]:
    """The stores of the domains ``storage.onStackKey`` may keep on ``storage-cmk`` that the stack has."""
    objects = objects_account_name(suffix)
    found = [
        Store(
            KeyDomain.DATASETS,
            f"{DATASETS_CONTAINER} container of {objects}",
            f"Microsoft.Storage/storageAccounts/{objects}/blobServices/default/containers/{DATASETS_CONTAINER}",
            STORAGE_API_VERSION,
            without_datasets_scope,
        )
    ]
    if config.shared_storage is SharedStorageKind.AZURE_FILES_NFS:
        account = naming.storage_account_name("files", suffix)
        found.append(
            Store(
                KeyDomain.TRAINING_DATA,
                f"NFS account {account}",
                f"Microsoft.Storage/storageAccounts/{account}",
                STORAGE_API_VERSION,
            )
        )
    if config.workloads.registry.enabled and managed_registry_database(config.tier, config.cloud):
        server = server_name(suffix)
        found.append(
            Store(
                KeyDomain.REGISTRY_DATABASE,
                f"PostgreSQL server {server}",
                f"Microsoft.DBforPostgreSQL/flexibleServers/{server}",
                POSTGRES_API_VERSION,
            )
        )
    if config.audited:
        account = archive_account_name(suffix)
        found.append(
            Store(
                KeyDomain.LOGS,
                f"audit archive {account}",
                f"Microsoft.Storage/storageAccounts/{account}",
                STORAGE_API_VERSION,
            )
        )
    return found


def moving_stores(config: PlatformConfig, arm: ArmReader, suffix: str) -> tuple[list[Store], list[str]]:
    """The stores under ``storage-cmk`` whose domain the config moves to its own key, and a line for each
    store that could not be read."""
    group = f"/subscriptions/{arm.subscription_id}/resourceGroups/{PROJECT}-{config.stack_name}/providers"
    moving: list[Store] = []
    unread: list[str] = []
    for store in stores(config, suffix):
        if store.domain in config.storage.on_stack_key:
            continue
        try:
            found = arm.get(f"{group}/{store.provider_path}", {"api-version": store.api_version})
        except ArmReadError as exc:
            if exc.status != 404:
                unread.append(f"cannot read the {store.what} to see its key: {exc}")
            continue
        if store.under_stack_key(found):
            moving.append(store)
    return moving, unread


def refuse_silent_key_moves(config: PlatformConfig, parent: pulumi.Resource) -> None:
    """Refuse the update that would give a store made under ``storage-cmk`` a new key and identity."""
    with arm_reader() as arm:
        suffix = naming.name_suffix(arm.subscription_id, pulumi.get_project(), pulumi.get_stack())
        moving, unread = moving_stores(config, arm, suffix)
    for line in unread:
        pulumi.log.warn(f"{PLATFORM_KEY}.storage.onStackKey: {line}", resource=parent)
    if not moving:
        return
    listed = ", ".join(s.domain.value for s in moving)
    replaced = (
        f" (the {DATASETS_CONTAINER} container would be replaced: its encryption scope is set at creation)"
        if any(s.domain is KeyDomain.DATASETS for s in moving)
        else ""
    )
    raise pulumi.RunError(
        f"{PLATFORM_KEY}.storage.onStackKey: stack {config.stack_name} keeps its "
        f"{', '.join(s.what for s in moving)} on {STACK_KEY_NAME} (made before the keys per data domain), "
        f"and this update would give them new keys and identities{replaced}; set storage.onStackKey: "
        f"[{listed}] first (docs/operations.md, 'Keys per data domain', On Azure)"
    )
