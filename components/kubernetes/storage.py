"""Shared training storage as Kubernetes sees it: a statically provisioned PersistentVolume per
consumer namespace, pre-bound to its claim, over the file system the cloud adapter created.

Static, not dynamic: the file system (FSx for Lustre, EFS, Azure Files NFS) already exists with its
customer-managed key and network rules; a StorageClass would create new ones outside those controls.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.handle import SharedStorage
from components.kubernetes.objects import MANAGED_BY, Object


@dataclass(frozen=True)
class VolumeClaim:
    namespace: str
    claim: str
    read_only: bool


def shared_volume_objects(prefix: str, shared: SharedStorage, claim: VolumeClaim) -> list[Object]:
    """A PersistentVolume for ``claim`` and the claim itself, bound to each other by name."""
    volume = f"{prefix}-{claim.namespace}-{claim.claim}"
    access = "ReadOnlyMany" if claim.read_only else "ReadWriteMany"
    size = f"{shared.capacity_gib}Gi"
    pv: Object = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume, "labels": dict(MANAGED_BY)},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": [access],
            # Retain: deleting the claim never deletes checkpoints or models.
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "csi": {**shared.csi_for(claim.namespace), "readOnly": claim.read_only},
            "claimRef": {"namespace": claim.namespace, "name": claim.claim},
            **({"mountOptions": list(shared.mount_options)} if shared.mount_options else {}),
        },
    }
    pvc: Object = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim.claim, "namespace": claim.namespace, "labels": dict(MANAGED_BY)},
        "spec": {
            "accessModes": [access],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": size}},
        },
    }
    return [pv, pvc]
