"""A registry caller's credentials on Kubernetes: the Secret ``registry-client`` of its namespace (keys
``username`` and ``password``, docs/registry.md) mounted read-only as files, and the variables that name
them to the client (``workloads.registry.client``). Files, not environment variables: checkov CKV_K8S_35
("Prefer using secrets as files over secrets as environment variables"), and the kubelet updates mounted
files when the Secret changes, which the client reads again after a 401 (rotation without a restart)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from workloads.registry.client import PASSWORD_FILE_ENV, USERNAME_FILE_ENV

CLIENT_SECRET_DIR = PurePosixPath("/var/run/secrets/registry-client")
VOLUME = "registry-client"


def credential_volume(secret: str) -> dict[str, Any]:
    return {"name": VOLUME, "secret": {"secretName": secret, "defaultMode": 0o440}}


def credential_mount() -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": str(CLIENT_SECRET_DIR), "readOnly": True}


def credential_env() -> dict[str, str]:
    return {
        USERNAME_FILE_ENV: str(CLIENT_SECRET_DIR / "username"),
        PASSWORD_FILE_ENV: str(CLIENT_SECRET_DIR / "password"),
    }
