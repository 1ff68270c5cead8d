"""Shared storage is bound statically, one PersistentVolume per consuming namespace, never deleted
with its claim, and read-only where the consumer only reads."""

from __future__ import annotations

import pytest

from components.handle import SharedStorage, SharedStorageKind
from components.kubernetes.storage import VolumeClaim, shared_volume_objects

FSX = SharedStorage(
    SharedStorageKind.FSX_LUSTRE,
    {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": "fs-1",
        "volumeAttributes": {"dnsname": "d", "mountname": "m"},
    },
    1200,
    ("flock",),
)
NFS = SharedStorage(
    SharedStorageKind.AZURE_FILES_NFS, {"driver": "file.csi.azure.com", "volumeHandle": "acct-training"}, 100
)


def test_claim_and_volume_are_pre_bound_and_retained() -> None:
    pv, pvc = shared_volume_objects(
        "stack", FSX, VolumeClaim("ml-training", "training-output", read_only=False)
    )
    assert pv["spec"]["claimRef"] == {"namespace": "ml-training", "name": "training-output"}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["csi"]["volumeAttributes"] == {"dnsname": "d", "mountname": "m"}
    assert pv["spec"]["mountOptions"] == ["flock"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1200Gi"


@pytest.mark.parametrize(("shared", "unique"), [(FSX, False), (NFS, True)])
def test_readers_get_read_only_volumes_and_azure_files_unique_handles(
    shared: SharedStorage, unique: bool
) -> None:
    writer, _ = shared_volume_objects("s", shared, VolumeClaim("ml-training", "out", read_only=False))
    reader, _ = shared_volume_objects("s", shared, VolumeClaim("ml-inference", "models", read_only=True))
    assert reader["spec"]["accessModes"] == ["ReadOnlyMany"] and reader["spec"]["csi"]["readOnly"] is True
    assert writer["metadata"]["name"] != reader["metadata"]["name"]
    handles = {writer["spec"]["csi"]["volumeHandle"], reader["spec"]["csi"]["volumeHandle"]}
    assert len(handles) == (2 if unique else 1)
