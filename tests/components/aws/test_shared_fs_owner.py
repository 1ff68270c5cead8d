"""The owner each AWS PersistentVolume declares is the one the platform really creates (review
wt-cluster2 A1): EFS through an access point's creation info and POSIX user (EFS user guide, "Working
with Amazon EFS access points"; static volumeHandle ``<fs-id>::<fsap-id>``, aws-efs-csi-driver
examples/kubernetes/access_points), FSx for Lustre through the preparation Job on the root and the
fileset ``mountname/<directory>`` (FSx for Lustre user guide, "Mounting specific filesets")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.handle import REGISTRY_DIRECTORY, SHARED_DIRECTORY
from components.kubernetes.storage import MODE_ANNOTATION, OWNER_ANNOTATION, PREPARE_JOB
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects


def _volumes(plan: Plan) -> dict[str, dict[str, Any]]:
    return {
        o["spec"]["claimRef"]["namespace"]: o
        for o in kubernetes_objects(plan)
        if o["kind"] == "PersistentVolume"
    }


def test_efs_consumers_mount_the_access_point_that_creates_their_owner(
    planned: Callable[[str], Plan],
) -> None:
    """Training writes its runs on the workloads' access point; the SMB registry keeps its SQLite database
    (models, aliases, users) on an access point of its own, rooted in a directory the trainer's does not
    reach (AWS review N3: both mounted one access point); inference follows the registry's alias, so it
    mounts no volume."""
    plan = planned("aws-smb-dev")
    points = {
        r.inputs["rootDirectory"]["path"]: r
        for r in plan.resources
        if r.type == "aws:efs/accessPoint:AccessPoint"
    }
    assert set(points) == {f"/{SHARED_DIRECTORY}", f"/{REGISTRY_DIRECTORY}"}
    volumes = _volumes(plan)
    assert set(volumes) == {"ml-training", "ml-registry"}
    for namespace, directory in (("ml-training", SHARED_DIRECTORY), ("ml-registry", REGISTRY_DIRECTORY)):
        point, pv = points[f"/{directory}"], volumes[namespace]
        creation = point.inputs["rootDirectory"]["creationInfo"]
        annotations = pv["metadata"]["annotations"]
        assert annotations[OWNER_ANNOTATION] == f"{creation['ownerUid']:.0f}:{creation['ownerGid']:.0f}"
        assert annotations[MODE_ANNOTATION] == creation["permissions"]
        file_system, access_point = pv["spec"]["csi"]["volumeHandle"].split("::")
        assert file_system == point.inputs["fileSystemId"] and access_point.startswith(f"{point.name}-")
        # Every request through the access point is made as the owner, whatever the pod's user.
        assert point.inputs["posixUser"] == {"uid": creation["ownerUid"], "gid": creation["ownerGid"]}


def test_fsx_consumers_mount_the_directory_the_preparation_job_creates(
    planned: Callable[[str], Plan],
) -> None:
    objects = kubernetes_objects(planned("aws-enterprise-dev"))
    volumes = {o["spec"]["claimRef"]["namespace"]: o for o in objects if o["kind"] == "PersistentVolume"}
    (job,) = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == PREPARE_JOB]
    container = job["spec"]["template"]["spec"]["containers"][0]
    mount = container["volumeMounts"][0]["mountPath"]
    uid, gid, mode, *paths = container["command"][3:]
    root = volumes[job["metadata"]["namespace"]]["spec"]["csi"]["volumeAttributes"]
    # The enterprise registry is on PostgreSQL: no store of its own on the file system.
    assert paths == [f"{mount}/{SHARED_DIRECTORY}"]
    consumers = {n: pv for n, pv in volumes.items() if n != job["metadata"]["namespace"]}
    assert "ml-training" in consumers
    for pv in consumers.values():
        assert pv["spec"]["csi"]["volumeAttributes"]["mountname"] == f"{root['mountname']}/{SHARED_DIRECTORY}"
        assert pv["metadata"]["annotations"] == {OWNER_ANNOTATION: f"{uid}:{gid}", MODE_ANNOTATION: mode}
