"""The deployer's kubeconfig for the Kubernetes provider, converted for a non-interactive login.

AKS hands out ``exec`` kubeconfigs that call ``kubelogin get-token --login devicecode``: under
``pulumi up`` (CI above all) that prints a device code and waits for a human. ``kubelogin
convert-kubeconfig -l <mode>`` rewrites the exec plugin for another login; this module does the same
rewrite in the program, for the mode in ``azure.deployerLogin``, so the kubeconfig works as it comes
out of ``pulumi up``. The deployer's machine or runner needs ``kubelogin`` on its PATH (README.md
"Prerequisites").

What the rewrite produces is kubelogin's own (Azure/kubelogin ``pkg/internal/converter/convert.go``):
``get-token --login <mode> --server-id <id>`` for every mode; ``spn`` keeps ``--client-id`` and
``--tenant-id`` (both required) and ``--environment``; ``azurecli``, ``msi`` and ``workloadidentity``
take the rest from the environment (``az login``, the VM's identity, ``AZURE_CLIENT_ID`` and
``AZURE_FEDERATED_TOKEN_FILE``; for ``spn``, ``AAD_SERVICE_PRINCIPAL_CLIENT_ID`` and
``AAD_SERVICE_PRINCIPAL_CLIENT_SECRET``, kubelogin README).
"""

from __future__ import annotations

from typing import Any

import yaml

from components.config import KubeloginMode

EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"
_INSTALL_HINT = "kubelogin is required to connect to an Entra ID cluster: https://azure.github.io/kubelogin/"


def _arg(args: list[str], flag: str) -> str | None:
    """The value after ``flag`` in an exec plugin's arguments (kubelogin's getExecArg)."""
    for index, arg in enumerate(args[:-1]):
        if arg == flag:
            return args[index + 1]
    return None


def _required(args: list[str], flag: str) -> str:
    value = _arg(args, flag)
    if value is None:
        raise ValueError(f"the cluster's kubeconfig has no {flag} in its kubelogin exec arguments")
    return value


def login_args(args: list[str], mode: KubeloginMode) -> list[str]:
    """kubelogin ``get-token`` arguments for ``mode``, from the ones AKS issued."""
    converted = ["get-token", "--login", mode.value, "--server-id", _required(args, "--server-id")]
    if mode is KubeloginMode.SPN:
        converted += [
            "--client-id",
            _required(args, "--client-id"),
            "--tenant-id",
            _required(args, "--tenant-id"),
        ]
        environment = _arg(args, "--environment")
        if environment is not None:
            converted += ["--environment", environment]
    return converted


def convert_kubeconfig(kubeconfig: str, mode: KubeloginMode) -> str:
    """Rewrite every kubelogin exec user of ``kubeconfig`` to log in with ``mode``."""
    document: dict[str, Any] = yaml.safe_load(kubeconfig)
    for user in document.get("users") or []:
        plugin = (user.get("user") or {}).get("exec")
        if not plugin or "kubelogin" not in str(plugin.get("command", "")).lower():
            continue
        user["user"]["exec"] = {
            "apiVersion": EXEC_API_VERSION,
            "command": "kubelogin",
            "args": login_args(list(plugin.get("args") or []), mode),
            "installHint": plugin.get("installHint") or _INSTALL_HINT,
        }
    return yaml.safe_dump(document, sort_keys=False)
