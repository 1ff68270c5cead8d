"""A registry caller's credentials on Kubernetes: the Secret ``registry-client`` of its namespace (keys
``username`` and ``password``, docs/registry.md) mounted read-only as files, and the variables that name
them to the client (``workloads.registry.client``). Files, not environment variables: checkov CKV_K8S_35
("Prefer using secrets as files over secrets as environment variables"), and the kubelet updates mounted
files when the Secret changes, which the client reads again after a 401 (rotation without a restart).

With the registry on TLS, the CA that signed its certificate: the Secret ``registry-ca`` of the caller's
namespace (key ``ca.crt``), mounted read-only and named by ``MLFLOW_TRACKING_SERVER_CERT_PATH``, the
variable MLflow's own client reads and ``workloads.registry.client`` verifies against."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from workloads.registry.client import CA_BUNDLE_ENV, PASSWORD_FILE_ENV, USERNAME_FILE_ENV

CLIENT_SECRET_DIR = PurePosixPath("/var/run/secrets/registry-client")
VOLUME = "registry-client"
CA_DIR = PurePosixPath("/var/run/secrets/registry-ca")
CA_VOLUME = "registry-ca"


def credential_volume(secret: str) -> dict[str, Any]:
    return {"name": VOLUME, "secret": {"secretName": secret, "defaultMode": 0o440}}


def credential_mount() -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": str(CLIENT_SECRET_DIR), "readOnly": True}


def credential_env() -> dict[str, str]:
    return {
        USERNAME_FILE_ENV: str(CLIENT_SECRET_DIR / "username"),
        PASSWORD_FILE_ENV: str(CLIENT_SECRET_DIR / "password"),
    }


def ca_volume(secret: str) -> dict[str, Any]:
    return {"name": CA_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o444}}


def ca_mount() -> dict[str, Any]:
    return {"name": CA_VOLUME, "mountPath": str(CA_DIR), "readOnly": True}


def ca_env() -> dict[str, str]:
    return {CA_BUNDLE_ENV: str(CA_DIR / "ca.crt")}
