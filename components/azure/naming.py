"""Physical names Azure constrains: globally unique accounts and vaults, and AKS agent-pool names.

Storage accounts, Key Vaults and registries share one global namespace each, so their names carry a
suffix hashed from the subscription and the stack: stable across runs (the name never churns and forces a
replacement) and distinct between stacks. Each rule below is checked here, so a bad name fails at
preview with its reason instead of minutes into ``pulumi up``.
"""

from __future__ import annotations

import hashlib
import re

# Storage account: 3-24 characters, lowercase letters and digits only (Azure naming rules,
# learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules#microsoftstorage).
_STORAGE_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
# Key Vault: 3-24 characters, letters, digits and hyphens (REST API vaults/create-or-update pattern
# ^[a-zA-Z0-9-]{3,24}$), starting with a letter.
_KEY_VAULT = re.compile(r"^[a-z][a-z0-9-]{2,23}$")
# Container registry: 5-50 alphanumerics (resource-name-rules#microsoftcontainerregistry).
_REGISTRY = re.compile(r"^[a-z0-9]{5,50}$")
# AKS Linux node pool: 1-12 lowercase letters and digits, starting with a letter
# (learn.microsoft.com/azure/aks/use-system-pools#limitations).
_AGENT_POOL = re.compile(r"^[a-z][a-z0-9]{0,11}$")

_PREFIX = "mlp"
# Random characters added to an unprotected stack's vault name (keys.py): "mlp-kv-" + 10 + "-" + 4 = 22.
KEY_VAULT_UNIQUE_LENGTH = 4
# The vault a registry is created against (keys.RegistryCreationKey): "mlp-acrk-" + 10 + "-" + 4 = 24.
CREATION_VAULT_KIND = "acrk"


def name_suffix(subscription_id: str, project: str, stack: str) -> str:
    """Ten hex characters from the subscription and the stack: unique enough, short enough for 24."""
    return hashlib.sha256(f"{subscription_id}/{project}/{stack}".encode()).hexdigest()[:10]


def _checked(name: str, rule: re.Pattern[str], what: str) -> str:
    if not rule.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid {what} name (must match {rule.pattern})")
    return name


def storage_account_name(purpose: str, suffix: str) -> str:
    return _checked(f"{_PREFIX}{purpose}{suffix}", _STORAGE_ACCOUNT, "storage account")


def key_vault_name(suffix: str, unique: str = "", kind: str = "kv") -> str:
    """``unique`` (random, unprotected stacks) frees the name from a purge-protected predecessor."""
    name = f"{_PREFIX}-{kind}-{suffix}" + (f"-{unique}" if unique else "")
    return _checked(name, _KEY_VAULT, "Key Vault")


def registry_name(suffix: str) -> str:
    return _checked(f"{_PREFIX}acr{suffix}", _REGISTRY, "container registry")


def agent_pool_name(pool: str) -> str:
    """The AKS name of a config pool: config names are DNS labels (``gpu-ib``), AKS wants ``gpuib``.

    The config name stays the pool's identity everywhere else (the ``ml-platform/pool`` label).
    """
    return _checked(pool.replace("-", "")[:12], _AGENT_POOL, "AKS node pool")
