"""No shared writable volume between a workload and a store another identity owns (AWS review N3).

On SMB stacks the registry's SQLite file (models, aliases, basic-auth users) sat on the same EFS access
point the training Job mounts read-write. An access point maps every request to its POSIX user (EFS user
guide, "Working with Amazon EFS access points"), so file modes cannot tell the two namespaces apart: any
code the trainer runs could rewrite the registry past its grants.

A store is a claim a pod keeps a database in (an environment variable ending in ``SQLITE_PATH`` below
one of its mounts); its owner is that pod's namespace. Mandatory: a PersistentVolume bound in another
namespace, not read-only, whose CSI source reaches the store's directory or a directory above it. Where a
source points, read from the manifests:

- EFS (``efs.csi.aws.com``): ``<fs-id>:<subpath>:<access-point-id>`` (aws-efs-csi-driver README,
  "volumeHandle"); an access point confines its clients to its root directory, so two access points are
  two directories, and a handle without one reaches the whole file system;
- FSx for Lustre (``fsx.csi.aws.com``): the file system id and the fileset ``mountname/<directory>``;
- Azure Files (``file.csi.azure.com``): the account and the share; ``volumeHandle`` is only a name the
  driver stages by (azurefile-csi-driver static provisioning docs), so it is not compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import of_kind, pods

POLICY = "store-isolation"


@dataclass(frozen=True)
class Location:
    """A directory a CSI source reaches: its file system and its path below that file system's root."""

    file_system: tuple[str, ...]
    path: tuple[str, ...]

    def overlaps(self, other: Location) -> bool:
        """Whether one of the two directories holds the other."""
        shorter = min(len(self.path), len(other.path))
        return self.file_system == other.file_system and self.path[:shorter] == other.path[:shorter]


def _parts(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)


def location(csi: Mapping[str, Any]) -> Location:
    driver, handle = str(csi.get("driver")), str(csi.get("volumeHandle", ""))
    attributes = csi.get("volumeAttributes") or {}
    if driver == "efs.csi.aws.com":
        file_system, subpath, access_point = [*handle.split(":"), "", ""][:3]
        root = (f"access-point:{access_point}",) if access_point else ()
        return Location((driver, file_system), root + _parts(subpath))
    if driver == "fsx.csi.aws.com":
        return Location((driver, handle), _parts(str(attributes.get("mountname", "")))[1:])
    if driver == "file.csi.azure.com":
        share = (driver, str(attributes.get("storageAccount")), str(attributes.get("shareName")))
        return Location(share, _parts(str(attributes.get("subDir", ""))))
    return Location((driver, handle), ())


@dataclass(frozen=True)
class _Store:
    owner: Subject
    namespace: str
    database: str
    volume: str


def _stores(objects: Sequence[Mapping[str, Any]], bound: Mapping[tuple[str, str], str]) -> list[_Store]:
    """Each (pod owner, database path) with the PersistentVolume the path lies on, once (a server and
    its migrating init container name the same database)."""
    found: set[_Store] = set()
    for pod in pods(objects):
        claims = {
            v["name"]: str(v["persistentVolumeClaim"]["claimName"])
            for v in pod.spec.get("volumes") or []
            if "persistentVolumeClaim" in v
        }
        for container in pod.containers():
            databases = [
                str(env["value"])
                for env in container.get("env") or []
                if str(env.get("name", "")).endswith("SQLITE_PATH") and "value" in env
            ]
            for mount in container.get("volumeMounts") or []:
                claim = claims.get(mount.get("name"))
                volume = bound.get((pod.namespace, claim or ""))
                root = str(mount.get("mountPath", "")).rstrip("/") + "/"
                for database in databases:
                    if volume is not None and database.startswith(root):
                        found.add(_Store(pod.owner, pod.namespace, database, volume))
    return sorted(found, key=lambda store: (str(store.owner), store.database))


def judge_store_isolation(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    volumes = {str(pv["metadata"]["name"]): pv for pv in of_kind(objects, "PersistentVolume")}
    bound = {
        (str(c["metadata"].get("namespace", "")), str(c["metadata"]["name"])): str(
            (c.get("spec") or {}).get("volumeName", "")
        )
        for c in of_kind(objects, "PersistentVolumeClaim")
    }
    findings = []
    for store in _stores(objects, bound):
        where = location((volumes[store.volume].get("spec") or {}).get("csi") or {})
        for name, pv in sorted(volumes.items()):
            spec = pv.get("spec") or {}
            csi, claim = spec.get("csi"), spec.get("claimRef") or {}
            if name == store.volume or not csi or csi.get("readOnly"):
                continue
            if claim.get("namespace") == store.namespace or not location(csi).overlaps(where):
                continue
            findings.append(
                Finding(
                    POLICY,
                    "mandatory",
                    Subject.of(pv),
                    f"mounts the directory of {store.owner}'s store {store.database} (PersistentVolume "
                    f"{store.volume}) read-write for namespace {claim.get('namespace')}: its pods can "
                    "rewrite the store past the owner's grants; give the store a directory of its own "
                    "(an access point, fileset or share) that no other volume reaches",
                )
            )
    return findings
