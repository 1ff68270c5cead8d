"""Shared storage is bound statically, one PersistentVolume per consuming namespace, never deleted
with its claim, and read-only where the consumer only reads."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from components.handle import SHARED_DIRECTORY, PosixOwner, SharedStorage, SharedStorageKind
from components.kubernetes.storage import (
    MODE_ANNOTATION,
    OWNER_ANNOTATION,
    PREPARE_NAMESPACE,
    VolumeClaim,
    preparation_namespace,
    preparation_objects,
    shared_volume_objects,
)
from components.kubernetes.tenancy import PodSecurity

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


# Review wt-cluster2 A1: a new file system's root is root's (EFS user guide, "Working with users, groups,
# and permissions at the NFS level"); the workloads mount a directory the platform owns for them.
OWNED = PosixOwner(10001, 10001, 0o750)
PREPARED = replace(
    FSX,
    csi={**FSX.csi, "volumeAttributes": {"dnsname": "d", "mountname": "m/ml-platform"}},
    owner=OWNED,
    prepare=FSX.csi,
)


def test_every_volume_says_who_owns_its_root() -> None:
    owned, _ = shared_volume_objects("s", PREPARED, VolumeClaim("ml-training", "out", read_only=False))
    fresh, _ = shared_volume_objects("s", NFS, VolumeClaim("ml-training", "out", read_only=False))
    assert owned["metadata"]["annotations"] == {OWNER_ANNOTATION: "10001:10001", MODE_ANNOTATION: "0750"}
    assert fresh["metadata"]["annotations"] == {OWNER_ANNOTATION: "0:0", MODE_ANNOTATION: "0755"}


def test_no_preparation_where_the_adapter_owns_the_directory_already() -> None:
    assert preparation_objects("s", FSX, "img") == []


def test_the_preparation_job_mounts_the_root_as_root_with_chown_and_fowner_only() -> None:
    pv, pvc, job = preparation_objects("s", PREPARED, "img")
    assert pv["spec"]["csi"]["volumeAttributes"]["mountname"] == "m"
    assert pv["metadata"]["annotations"][OWNER_ANNOTATION] == "0:0"
    assert pvc["metadata"]["namespace"] == job["metadata"]["namespace"] == PREPARE_NAMESPACE
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsUser"] == 0
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert preparation_namespace().pod_security is PodSecurity.BASELINE


def test_the_preparation_script_creates_the_directory_with_its_owner_and_mode(tmp_path: Path) -> None:
    """The Job's own command, run here: as its owner (a non-root user may chown to itself), twice, as a
    second ``pulumi up`` would re-run it after a replace."""
    owner = PosixOwner(os.getuid(), os.getgid(), 0o750)
    (_, _, job) = preparation_objects("s", replace(PREPARED, owner=owner), "img")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    mount = job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    assert command[0] == "python" and command[3] == f"{mount}/{SHARED_DIRECTORY}"
    target = tmp_path / SHARED_DIRECTORY
    for _ in range(2):
        subprocess.run([sys.executable, *command[1:3], str(target), *command[4:]], check=True)
    status = target.stat()
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (owner.uid, owner.gid, 0o750)
