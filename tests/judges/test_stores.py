"""The store-isolation judge (AWS review N3: on SMB the registry's SQLite file sat on the EFS access point
the training Job mounts read-write): the shipped SMB stacks give the registry its own directory on both
clouds; a writable volume of another namespace over that directory is a mandatory finding, on the real
plans and on planted volumes of each driver."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from components.handle import (
    REGISTRY_DIRECTORY,
    SHARED_DIRECTORY,
    SharedStorage,
    SharedStorageKind,
    Store,
)
from components.kubernetes.storage import VolumeClaim, shared_volume_objects
from judges import judge_all
from judges.stores import POLICY, judge_store_isolation

from .conftest import Judged

SMB = ["aws-smb-dev", "azure-smb-dev"]


def _volume(objects: list[dict[str, Any]], namespace: str) -> dict[str, Any]:
    (pv,) = [
        o
        for o in objects
        if o["kind"] == "PersistentVolume" and o["spec"]["claimRef"]["namespace"] == namespace
    ]
    return pv


@pytest.mark.parametrize("stack", SMB)
def test_the_smb_registry_store_is_its_own_directory_and_sharing_the_trainers_is_found(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    objects = judged(stack).objects
    assert judge_store_isolation(objects) == []
    registry, training = _volume(objects, "ml-registry"), _volume(objects, "ml-training")
    assert registry["spec"]["csi"]["volumeHandle"] != training["spec"]["csi"]["volumeHandle"]
    # Planted: the registry's volume over the trainer's directory, as the stacks had it before.
    planted = copy.deepcopy(objects)
    shared_csi = {**training["spec"]["csi"]}
    if shared_csi["driver"] == "file.csi.azure.com":  # the handle differs per consumer on Azure Files
        shared_csi["volumeHandle"] = registry["spec"]["csi"]["volumeHandle"]
    _volume(planted, "ml-registry")["spec"]["csi"] = shared_csi
    (finding,) = [f for f in judge_all(planted) if f.policy == POLICY]
    assert finding.mandatory and finding.subject.name == training["metadata"]["name"]
    assert "Deployment ml-registry/registry" in finding.message and "mlflow.db" in finding.message


def _server(claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "registry", "namespace": "ml-registry"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "env": [{"name": "REGISTRY_SQLITE_PATH", "value": "/var/lib/registry/r/db"}],
                            "volumeMounts": [{"name": "store", "mountPath": "/var/lib/registry"}],
                        }
                    ],
                    "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": claim}}],
                }
            }
        },
    }


def _fsx(directory: str) -> dict[str, Any]:
    return {"driver": "fsx.csi.aws.com", "volumeHandle": "fs-1", "volumeAttributes": {"mountname": directory}}


def _azure(share: str) -> dict[str, Any]:
    attributes = {"storageAccount": "acct", "shareName": share, "protocol": "nfs"}
    return {"driver": "file.csi.azure.com", "volumeHandle": f"acct-{share}", "volumeAttributes": attributes}


CASES = {
    # driver: (the trainer's source, the registry's own, one that reaches the registry's directory)
    "efs": (
        {"driver": "efs.csi.aws.com", "volumeHandle": "fs-1::fsap-workloads"},
        {"driver": "efs.csi.aws.com", "volumeHandle": "fs-1::fsap-registry"},
        {"driver": "efs.csi.aws.com", "volumeHandle": "fs-1"},  # no access point: the whole file system
    ),
    "fsx": (
        _fsx(f"mn/{SHARED_DIRECTORY}"),
        _fsx(f"mn/{REGISTRY_DIRECTORY}"),
        _fsx("mn"),  # the root, as the preparation Job mounts it
    ),
    "azure-files": (_azure("training"), _azure(REGISTRY_DIRECTORY), _azure(REGISTRY_DIRECTORY)),
}


def _objects(
    trainer: dict[str, Any], store: dict[str, Any], *, read_only: bool = False
) -> list[dict[str, Any]]:
    kind = SharedStorageKind.EFS
    share = SharedStorage(kind, trainer, 100, stores={"ml-registry": Store(REGISTRY_DIRECTORY, store)})
    return [
        *shared_volume_objects("s", share, VolumeClaim("ml-training", "training-output", read_only)),
        *shared_volume_objects("s", share, VolumeClaim("ml-registry", "registry-store", False)),
        _server("registry-store"),
    ]


@pytest.mark.parametrize("driver", CASES)
def test_a_writable_volume_reaching_the_store_is_found_and_a_separate_directory_is_not(driver: str) -> None:
    trainer, own, reaching = CASES[driver]
    assert judge_store_isolation(_objects(trainer, own)) == []
    (finding,) = judge_store_isolation(_objects(reaching, own))
    assert finding.policy == POLICY and finding.subject.name == "s-ml-training-training-output"
    # Read-only reaches it without being able to rewrite it.
    assert judge_store_isolation(_objects(reaching, own, read_only=True)) == []
