"""Shared storage, offline: every pod that mounts a PersistentVolume read-write can write to it as the
user it runs as (review wt-cluster2 A1: on AWS the trainer, UID 10001, mounted the root of a new EFS or
FSx file system, which only root may write, so every run failed its preflight with exit 2).

The volume's root is owned as its PersistentVolume says (``storage.ml-platform.io/owner`` "<uid>:<gid>"
and ``storage.ml-platform.io/mode``, written by components/kubernetes/storage.py from the cloud adapter's
``SharedStorage.owner``); a volume that says nothing is a new file system's root, root-owned 0755 (EFS
user guide, "Working with users, groups, and permissions at the NFS level"). fsGroup does not change it:
kubelet applies fsGroup ownership only to volumes with an fsType under the CSIDriver default
``fsGroupPolicy: ReadWriteOnceWithFSType`` (kubernetes.io, "Configure a Security Context for a Pod");
it does add the group to the process's supplementary groups, which the group bits then admit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judges.findings import Finding
from judges.kube import Pod, of_kind, pods

POLICY = "shared-volume-owner"
OWNER_ANNOTATION = "storage.ml-platform.io/owner"
MODE_ANNOTATION = "storage.ml-platform.io/mode"


@dataclass(frozen=True)
class Owner:
    uid: int
    gid: int
    mode: int

    def admits_writer(self, uid: int, groups: frozenset[int]) -> bool:
        """Whether a process may create entries in the directory: write and search permission in the one
        class that applies to it, owner, else group, else other (POSIX); UID 0 passes, none of the
        platform's file systems squashing root (EFS policy grants ClientRootAccess, Azure Files
        NoRootSquash)."""
        if uid == 0:
            return True
        if uid == self.uid:
            return self.mode & 0o300 == 0o300
        if self.gid in groups:
            return self.mode & 0o030 == 0o030
        return self.mode & 0o003 == 0o003


_FRESH_ROOT = Owner(0, 0, 0o755)


def volume_owner(pv: Mapping[str, Any]) -> Owner:
    annotations = (pv.get("metadata") or {}).get("annotations") or {}
    if OWNER_ANNOTATION not in annotations:
        return _FRESH_ROOT
    uid, gid = (int(part) for part in str(annotations[OWNER_ANNOTATION]).split(":"))
    return Owner(uid, gid, int(str(annotations.get(MODE_ANNOTATION, "0755")), 8))


def _writable_claims(pod: Pod, container: Mapping[str, Any]) -> Iterator[str]:
    """The claims ``container`` mounts read-write."""
    claims = {
        v["name"]: v["persistentVolumeClaim"]
        for v in pod.spec.get("volumes") or []
        if "persistentVolumeClaim" in v
    }
    for mount in container.get("volumeMounts") or []:
        claim = claims.get(mount.get("name"))
        if claim is not None and not claim.get("readOnly") and not mount.get("readOnly"):
            yield str(claim["claimName"])


def _identity(pod: Pod, container: Mapping[str, Any]) -> tuple[int | None, frozenset[int]]:
    """The container's UID (None where only the image decides) and every group its process holds."""
    pod_context = pod.spec.get("securityContext") or {}
    context = {**pod_context, **(container.get("securityContext") or {})}
    groups = {
        context.get("runAsGroup"),
        pod_context.get("fsGroup"),
        *pod_context.get("supplementalGroups", []),
    }
    uid = context.get("runAsUser")
    return (None if uid is None else int(uid)), frozenset(int(g) for g in groups if g is not None)


def judge_shared_volume_owners(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    volumes = {str(pv["metadata"]["name"]): pv for pv in of_kind(objects, "PersistentVolume")}
    claims = {
        (str(c["metadata"].get("namespace", "")), str(c["metadata"]["name"])): c
        for c in of_kind(objects, "PersistentVolumeClaim")
    }
    findings = []
    for pod in pods(objects):
        for container in pod.containers():
            for claim_name in _writable_claims(pod, container):
                claim = claims.get((pod.namespace, claim_name))
                pv = volumes.get(str((claim or {}).get("spec", {}).get("volumeName", "")))
                if pv is None:
                    continue  # a claim the plan does not bind statically: provisioned by a StorageClass
                owner, (uid, groups) = volume_owner(pv), _identity(pod, container)
                if uid is not None and owner.admits_writer(uid, groups):
                    continue
                who = "the image's user" if uid is None else f"UID {uid}, groups {sorted(groups)}"
                findings.append(
                    Finding(
                        POLICY,
                        "mandatory",
                        pod.owner,
                        f"container {container.get('name')} writes claim {claim_name} as {who}, but "
                        f"PersistentVolume {pv['metadata']['name']}'s root is {owner.uid}:{owner.gid} "
                        f"{owner.mode:04o}",
                    )
                )
    return findings
