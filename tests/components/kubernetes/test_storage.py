"""Shared storage is bound statically, one PersistentVolume per consuming namespace, never deleted
with its claim, and read-only where the consumer only reads; a claim naming no class gets an encrypted
disk under the stack's key from the layer's default StorageClass."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from components.handle import (
    REGISTRY_DIRECTORY,
    SHARED_DIRECTORY,
    Cloud,
    PosixOwner,
    SharedStorage,
    SharedStorageKind,
    Store,
)
from components.kubernetes.storage import (
    DEFAULT_CLASS_ANNOTATION,
    MODE_ANNOTATION,
    OWNER_ANNOTATION,
    PREPARE_NAMESPACE,
    VolumeClaim,
    default_storage_class,
    preparation_namespace,
    preparation_objects,
    shared_volume_objects,
    store_claim,
)
from components.kubernetes.tenancy import PodSecurity
from mlplatform.plan import Plan

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


KEY = "arn:aws:kms:me-central-1:123456789012:key/11111111-2222-3333-4444-555555555555"
# kubernetes-sigs/aws-ebs-csi-driver docs/parameters.md, "Supported Parameters" (the rows are the same in
# every release v1.50.0..v1.64.0, so in the add-on pinned for 1.35): parameter -> documented values
# (None: free-form). Parameter names are case-insensitive there; we use the documented spelling.
EBS_PARAMETERS: dict[str, frozenset[str] | None] = {
    "csi.storage.k8s.io/fstype": frozenset({"xfs", "ext3", "ext4"}),
    "type": frozenset({"io1", "io2", "gp2", "gp3", "sc1", "st1", "standard"}),
    "encrypted": frozenset({"true", "false"}),
    "kmsKeyId": None,
}


def test_the_default_class_encrypts_every_ebs_volume_under_the_stack_key() -> None:
    """Review D6: EKS >= 1.30 marks no class default (EKS user guide, Kubernetes 1.30 release notes), so
    a claim without a class stays Pending; the layer's class is the default (kubernetes.io, "Change the
    default StorageClass") and every parameter is one the EBS CSI driver documents, with a documented
    value: gp3, encrypted "true" (a string: StorageClass parameters are strings), the key's full ARN."""
    storage_class = default_storage_class(Cloud.AWS, KEY)
    assert storage_class["apiVersion"] == "storage.k8s.io/v1" and storage_class["kind"] == "StorageClass"
    assert storage_class["metadata"]["annotations"] == {DEFAULT_CLASS_ANNOTATION: "true"}
    assert storage_class["provisioner"] == "ebs.csi.aws.com"
    parameters = storage_class["parameters"]
    assert parameters == {"type": "gp3", "encrypted": "true", "kmsKeyId": KEY}
    for name, value in parameters.items():
        allowed = EBS_PARAMETERS[name]
        assert allowed is None or value in allowed, (name, value)
    # The driver's parameters.md recommends WaitForFirstConsumer: the disk is made in the zone the pod
    # was scheduled to; the driver resizes volumes (its README, "Volume Resizing").
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    assert storage_class["allowVolumeExpansion"] is True
    assert storage_class["reclaimPolicy"] == "Delete"


def test_aks_keeps_its_own_default_class_which_uses_the_clusters_disk_encryption_set(
    planned: Callable[[str], Plan],
) -> None:
    """Review D6 on Azure: AKS marks its managed-csi class default, and "if you have already provided a
    disk encryption set during cluster creation, encrypting data disks with the same disk encryption set
    is the default option" (AKS docs, "Bring your own keys (BYOK) with Azure managed disks", "Encrypt
    your AKS cluster data disk"). So the layer adds no second default class there (two defaults leave the
    choice to creation order), and the cluster names the stack's disk encryption set."""
    plan = planned("azure-smb-dev")
    assert plan.by_type("kubernetes:storage.k8s.io/v1:StorageClass") == []
    (cluster,) = plan.by_type("azure-native:containerservice:ManagedCluster")
    (des,) = plan.by_type("azure-native:compute:DiskEncryptionSet")
    assert des.urn in cluster.property_dependencies["diskEncryptionSetID"]


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


def test_the_preparation_script_creates_each_directory_with_its_owner_and_mode(tmp_path: Path) -> None:
    """The Job's own command, run here: as its owner (a non-root user may chown to itself), twice, as a
    second ``pulumi up`` would re-run it after a replace; the shared directory and each store's (AWS
    review N3: the registry's store is a fileset of its own)."""
    owner = PosixOwner(os.getuid(), os.getgid(), 0o750)
    store = Store(
        REGISTRY_DIRECTORY, {**FSX.csi, "volumeAttributes": {"mountname": f"m/{REGISTRY_DIRECTORY}"}}
    )
    shared = replace(PREPARED, owner=owner, stores={"ml-registry": store})
    (_, _, job) = preparation_objects("s", shared, "img")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    mount = job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    directories = [SHARED_DIRECTORY, REGISTRY_DIRECTORY]
    assert command[0] == "python" and command[6:] == [f"{mount}/{d}" for d in directories]
    for _ in range(2):
        subprocess.run([sys.executable, *command[1:6], *(str(tmp_path / d) for d in directories)], check=True)
    for directory in directories:
        status = (tmp_path / directory).stat()
        assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (owner.uid, owner.gid, 0o750)


def test_a_store_is_mounted_from_its_own_source_and_every_other_consumer_from_the_shared_one() -> None:
    store = Store(REGISTRY_DIRECTORY, {"driver": "file.csi.azure.com", "volumeHandle": "acct-ml-registry"})
    shared = replace(NFS, stores={"ml-registry": store})
    assert shared.csi_for("ml-registry")["volumeHandle"] == "acct-ml-registry-ml-registry"
    assert shared.csi_for("ml-training")["volumeHandle"] == "acct-training-ml-training"


def test_a_stores_claim_and_volume_are_named_after_the_store() -> None:
    """Review 38 A2: a volume's source cannot change in place (pulumi-kubernetes replaces it, deleting it
    first, which pv-protection holds while its claim is bound), so a workload's own store names its claim,
    and so its volume, after the store's directory: a store that moves is a new pair. A consumer of the
    shared directory keeps its name."""
    store = Store(REGISTRY_DIRECTORY, {"driver": "file.csi.azure.com", "volumeHandle": "acct-ml-registry"})
    shared = replace(NFS, stores={"ml-registry": store})
    claim = store_claim("registry-store", shared, "ml-registry")
    assert claim == f"registry-store-{hashlib.sha256(REGISTRY_DIRECTORY.encode()).hexdigest()[:8]}"
    moved = replace(NFS, stores={"ml-registry": replace(store, directory="ml-registry-2")})
    assert store_claim("registry-store", moved, "ml-registry") != claim
    assert store_claim("training-output", shared, "ml-training") == "training-output"
    assert store_claim("registry-store", None, "ml-registry") == "registry-store"
    pv, pvc = shared_volume_objects("s", shared, VolumeClaim("ml-registry", claim, read_only=False))
    assert (
        pv["metadata"]["name"] == f"s-ml-registry-{claim}"
        and pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    )


def test_a_new_source_revision_names_new_volumes_claims_and_handles() -> None:
    """A volume's CSI source cannot change in place: pulumi-kubernetes replaces it, deleting first, and
    pv-protection holds the delete while its claim is bound (judges/immutable.py, review 38 A2). A new
    ``source_revision`` (Azure's volumes moving to the TLS tunnel) names a new volume, a new store claim
    (the workload moves to it; the old pair goes last) and, on Azure, a new handle (kubelet stages a CSI
    volume by its handle, so a shared handle would reuse the old clear mount); the first revision keeps
    every name as it was."""
    store = Store("registry", {"driver": "file.csi.azure.com", "volumeHandle": "acct-registry"})
    first = replace(NFS, stores={"ml-registry": store})
    tunnelled = replace(first, source_revision="tls")
    claim = VolumeClaim("ml-training", "training-output", read_only=False)
    (old_pv, old_pvc), (new_pv, new_pvc) = (shared_volume_objects("s", s, claim) for s in (first, tunnelled))
    assert old_pv["metadata"]["name"] == "s-ml-training-training-output"
    assert new_pv["metadata"]["name"] == "s-ml-training-training-output-tls"
    assert old_pv["spec"]["csi"]["volumeHandle"] == "acct-training-ml-training"
    assert new_pv["spec"]["csi"]["volumeHandle"] == "acct-training-ml-training-tls"
    # The training claim keeps its name (Jobs name it); it is bound to the new volume.
    assert old_pvc["metadata"]["name"] == new_pvc["metadata"]["name"] == "training-output"
    assert new_pvc["spec"]["volumeName"] == new_pv["metadata"]["name"]
    digest = hashlib.sha256(b"registry").hexdigest()[:8]
    assert store_claim("registry-store", first, "ml-registry") == f"registry-store-{digest}"
    assert store_claim("registry-store", tunnelled, "ml-registry") == f"registry-store-{digest}-tls"
    assert store_claim("registry-store", tunnelled, "ml-training") == "registry-store"
    # The store's volume is named after its claim once, revision included (review rev35d C2: not -tls-tls).
    store_claim_name = store_claim("registry-store", tunnelled, "ml-registry")
    store_pv, _ = shared_volume_objects("s", tunnelled, VolumeClaim("ml-registry", store_claim_name, False))
    assert store_pv["metadata"]["name"] == f"s-ml-registry-registry-store-{digest}-tls"
