"""The model registry's stores on Azure: artifacts in the stack's CMK-encrypted blob account, in a
container of their own that only the registry's workload identity may touch (granted in platform.py);
metadata in an Azure Database for PostgreSQL flexible server on enterprise stacks
(registry_database.py; components/config.py ``MANAGED_REGISTRY_DATABASE``), else in SQLite on the Azure
Files NFS share (the Kubernetes layer's claim), one server.

MLflow reads ``wasbs://<container>@<account>.blob.core.windows.net/<path>`` with azure-storage-blob and,
with no connection string or access key in its environment, ``DefaultAzureCredential``
(mlflow/store/artifact/azure_blob_artifact_repo.py, 3.17.2), which takes the workload identity's
projected token (the AKS webhook's AZURE_* variables).
"""

from __future__ import annotations

import pulumi

from components.azure.network import subnet_plan
from components.handle import PUBLIC_NETWORK, Peer, RegistryBackend, RegistryDatabase

REGISTRY_CONTAINER = "registry"


def registry_backend(
    account_name: str,
    vnet_cidr: str,
    database: RegistryDatabase | None = None,
    ready: tuple[pulumi.Resource, ...] = (),
) -> RegistryBackend:
    """Artifacts through the blob private endpoint (in the endpoints' subnet), public HTTPS for the
    token exchange with Entra ID, a non-regional service the workload identity must reach (AKS workload
    identity docs; no customer data goes there), and PostgreSQL in the delegated subnet when there is a
    database."""
    plan = subnet_plan(vnet_cidr)
    peers = [Peer("blob-private-endpoint", plan.endpoints, 443), Peer("entra-id", PUBLIC_NETWORK, 443)]
    if database is not None:
        peers.append(Peer("database", plan.database, database.port))
    return RegistryBackend(
        artifacts_uri=f"wasbs://{REGISTRY_CONTAINER}@{account_name}.blob.core.windows.net/mlflow",
        database=database,
        peers=tuple(peers),
        ready=ready,
    )
