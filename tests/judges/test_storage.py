"""The shared-volume owner judge on planted pods (review wt-cluster2 A1): a writer the volume's root does
not admit is a finding; a reader, root, the owner and a member of the owning group are not."""

from __future__ import annotations

from typing import Any

import pytest

from components.handle import PosixOwner, SharedStorage, SharedStorageKind
from components.kubernetes.storage import VolumeClaim, shared_volume_objects
from judges import judge_all
from judges.storage import POLICY, judge_shared_volume_owners

SHARE = SharedStorage(SharedStorageKind.EFS, {"driver": "efs.csi.aws.com", "volumeHandle": "fs-1"}, 100)


def _job(context: dict[str, Any], *, read_only: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "run", "namespace": "ml-training"},
        "spec": {
            "template": {
                "spec": {
                    "securityContext": context,
                    "containers": [
                        {"name": "trainer", "volumeMounts": [{"name": "out", "mountPath": "/mnt/output"}]}
                    ],
                    "volumes": [
                        {
                            "name": "out",
                            "persistentVolumeClaim": {"claimName": "training-output", "readOnly": read_only},
                        }
                    ],
                }
            }
        },
    }


def _judge(owner: PosixOwner | None, job: dict[str, Any]) -> list[str]:
    share = SHARE if owner is None else SharedStorage(SHARE.kind, SHARE.csi, 100, owner=owner)
    volumes = shared_volume_objects("s", share, VolumeClaim("ml-training", "training-output", False))
    return [f.message for f in judge_shared_volume_owners([*volumes, job]) if f.policy == POLICY]


NONROOT = {"runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001}


def test_a_non_root_writer_of_a_fresh_root_is_refused_and_named() -> None:
    """The AWS plan before the fix: UID 10001 on the root of a new EFS/FSx file system (root 0755)."""
    (message,) = _judge(None, _job(NONROOT))
    assert "UID 10001" in message and "0:0 0755" in message and "training-output" in message


def test_the_finding_is_part_of_what_check_runs() -> None:
    objects = [*shared_volume_objects("s", SHARE, VolumeClaim("ml-training", "training-output", False))]
    assert any(f.policy == POLICY for f in judge_all([*objects, _job(NONROOT)]))


@pytest.mark.parametrize(
    ("owner", "context"),
    [
        (PosixOwner(10001, 10001, 0o750), NONROOT),  # the owner
        (PosixOwner(0, 10001, 0o770), {"runAsUser": 20000, "fsGroup": 10001}),  # fsGroup in the group
        (PosixOwner(0, 0, 0o777), NONROOT),  # Azure Files' mountPermissions
        (None, {"runAsUser": 0}),  # root
    ],
)
def test_writers_the_root_admits_pass(owner: PosixOwner | None, context: dict[str, Any]) -> None:
    assert _judge(owner, _job(context)) == []


@pytest.mark.parametrize(
    ("owner", "context"),
    [
        (PosixOwner(10001, 10001, 0o550), NONROOT),  # owner without write
        (PosixOwner(0, 10001, 0o750), {"runAsUser": 20000, "fsGroup": 10001}),  # group without write
        (PosixOwner(10001, 10001, 0o750), {}),  # the image decides the user: unknown
    ],
)
def test_writers_the_root_refuses_fail(owner: PosixOwner, context: dict[str, Any]) -> None:
    assert len(_judge(owner, _job(context))) == 1


def test_read_only_mounts_are_not_judged() -> None:
    assert _judge(None, _job(NONROOT, read_only=True)) == []
