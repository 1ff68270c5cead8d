"""Shared training storage as Kubernetes sees it: a statically provisioned PersistentVolume per
consumer namespace, pre-bound to its claim, over the file system the cloud adapter created.

Static, not dynamic: the file system (FSx for Lustre, EFS, Azure Files NFS) already exists with its
customer-managed key and network rules; a StorageClass would create new ones outside those controls.

Disks are the other way round: a claim that names no class (a chart's persistence, a team's scratch
volume) gets one from the cluster's default StorageClass, and EKS marks none default since 1.30 (EKS user
guide, "Review release notes for Kubernetes versions on extended support", Kubernetes 1.30: the gp2
class of new clusters no longer carries the default annotation), so such a claim stays Pending. Where the
adapter hands over the stack's key, the layer adds the default class, encrypted under that key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from components.handle import Cloud, ClusterHandle, SharedStorage
from components.kubernetes.objects import MANAGED_BY, Object

if TYPE_CHECKING:
    import pulumi

# The annotation that makes a class the cluster's default (kubernetes.io, "Change the default
# StorageClass"; the DefaultStorageClass admission plugin reads it).
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
DEFAULT_STORAGE_CLASS = "ml-platform-encrypted"


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


def _ebs_disk(key: pulumi.Input[str]) -> tuple[str, dict[str, Any]]:
    """The EBS CSI driver's own name and CreateVolume parameters (kubernetes-sigs/aws-ebs-csi-driver
    docs/parameters.md, the same rows from v1.50.0 to v1.64.0, which covers the add-on pinned for the
    cluster): ``type`` gp3, ``encrypted`` the string "true", ``kmsKeyId`` the key's full ARN. The
    driver's IRSA role may use that key through EC2 only (components/aws/addons.ebs_key_policy)."""
    return "ebs.csi.aws.com", {"type": "gp3", "encrypted": "true", "kmsKeyId": key}


_DISKS = {Cloud.AWS: _ebs_disk}


def default_storage_class(cloud: Cloud, key: pulumi.Input[str]) -> Object:
    """The cluster's default StorageClass: the cloud's disk CSI driver, every volume encrypted under
    the stack's ``key``.

    WaitForFirstConsumer creates a zonal disk in the zone of the node its pod was scheduled to (the EBS
    CSI driver's parameters.md recommends it for dynamic provisioning), and the claim can grow
    (``allowVolumeExpansion``; the driver supports resizing, its README and ``examples/kubernetes/
    resizing``). Delete, the API default, stated: a deleted claim takes its disk with it.
    """
    provisioner, parameters = _DISKS[cloud](key)
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": DEFAULT_STORAGE_CLASS,
            "labels": dict(MANAGED_BY),
            "annotations": {DEFAULT_CLASS_ANNOTATION: "true"},
        },
        "provisioner": provisioner,
        "parameters": parameters,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }


def storage_class_objects(handle: ClusterHandle) -> list[Object]:
    """The default class where the adapter handed over the key for disks; none otherwise."""
    key = handle.storage.volume_key
    return [] if key is None else [default_storage_class(handle.cloud, key)]
