"""The SQLite judge (cluster review B-N2): the SMB registry's objects pass; the migration Job as it was
(a second opener beside the server), two replicas or a rolling update are found."""

from __future__ import annotations

import copy

from components.kubernetes.registry import _migration_job
from judges.sqlite import POLICY, judge_sqlite_openers
from tests.components.kubernetes.test_registry import SQLITE, _all, _spec


def test_the_sqlite_registry_has_one_opener_and_the_old_migration_job_is_found() -> None:
    spec = _spec(**SQLITE)
    objects = _all(spec)
    assert judge_sqlite_openers(objects) == []
    (finding,) = judge_sqlite_openers([*objects, _migration_job(spec)])
    assert finding.policy == POLICY and "Job registry-migrate-" in finding.message


def test_a_server_that_can_run_twice_is_found() -> None:
    objects = _all(_spec(**SQLITE))
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    for change in ({"replicas": 2}, {"strategy": {"type": "RollingUpdate"}}):
        planted = copy.deepcopy(deployment)
        planted["spec"].update(change)
        others = [o for o in objects if o is not deployment]
        assert [f.policy for f in judge_sqlite_openers([*others, planted])] == [POLICY]
