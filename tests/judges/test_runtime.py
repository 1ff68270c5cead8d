"""The run-time judge: a Job's command run for real with a child that exits with each code its
podFailurePolicy's FailJob rule names (review cluster.md B1: ``exec torchrun`` turns the trainer's exit 2
into 1)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from judges.runtime import POLICY, RENDEZVOUS_POLICY, exit_cases, judge_exit_codes, judge_rendezvous

TORCHRUN = (
    "torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=job-0.job.ns.svc:29400 "
    "--rdzv-id=job --max-restarts=0 --rdzv-conf=is_host=1 -m planted.trainer --flag=1"
)


def job(script: str, codes: list[int], env: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "job", "namespace": "ns"},
        "spec": {
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {"containerName": "trainer", "operator": "In", "values": codes},
                    },
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                ]
            },
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "command": ["/bin/sh", "-c", script],
                            "env": [
                                {"name": name, "value": value}
                                for name, value in {"PYTHONUNBUFFERED": "1", **(env or {})}.items()
                            ],
                        },
                    ]
                }
            },
        },
    }


def test_cases_are_the_fail_job_codes_of_torchrun_containers() -> None:
    [case] = exit_cases([job(f"exec {TORCHRUN}", [2]), job("exec python -m app", [2])])
    assert (case.container, case.code) == ("trainer", 2)


@pytest.mark.slow
def test_exec_torchrun_hides_the_childs_exit_code() -> None:
    [finding] = judge_exit_codes([job(f"exec {TORCHRUN}", [2])])
    assert finding.policy == POLICY and "the command exits 1" in finding.message
    # The user sees why: the end of torchrun's report of the failed child.
    assert "exitcode  : 2" in finding.message


@pytest.mark.slow
def test_a_command_that_passes_the_code_on_satisfies_the_rule() -> None:
    assert judge_exit_codes([job(f"{TORCHRUN} || exit 2", [2])]) == []


def test_a_zero_retry_rendezvous_at_torchs_default_timeouts_is_caught() -> None:
    """Review cluster.md B2: the gate's ``backoffLimitPerIndex: 0`` with torch's 60 s store wait."""
    gate = job(f"exec {TORCHRUN}", [2])
    gate["spec"]["backoffLimitPerIndex"] = 0
    [finding] = judge_rendezvous([gate])
    assert finding.policy == RENDEZVOUS_POLICY and "read_timeout or join_timeout" in finding.message
    bounded = job(
        f"exec {TORCHRUN.replace('is_host=1', 'is_host=1,read_timeout=900,join_timeout=1800')}", [2]
    )
    bounded["spec"]["backoffLimitPerIndex"] = 0
    assert judge_rendezvous([bounded]) == []
    retried = job(f"exec {TORCHRUN}", [2])
    retried["spec"]["backoffLimitPerIndex"] = 2
    assert judge_rendezvous([retried]) == []


@pytest.fixture
def host_record() -> Iterator[Path]:
    """A file in this machine's /tmp, where the Jobs' fatal record lies in the pod's own /tmp (tmp_path
    may lie elsewhere)."""
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="ml-platform-fatal-") as record:
        yield Path(record.name)


@pytest.mark.slow
def test_each_run_has_its_own_tmp_as_each_pod_does(host_record: Path) -> None:
    """The project's wiring (workloads/training/k8s.py): the shell clears the fatal record in the pod's
    /tmp, torchrun runs, and a record left there turns torchrun's 1 into 2. Run on this machine's shared
    /tmp, a concurrent run's clearing deleted another's record before its shell read it back (the judge
    reported "the command exits 1" on Jobs that pass; 4 runs side by side and other processes). Here the
    file another run owns at that path must be neither deleted nor read."""
    host_record.write_text("another run's record\n")
    wired = (
        f'rm -f "$ML_PLATFORM_FATAL_FILE"; {TORCHRUN} & pid=$!; wait "$pid"; rc=$?; '
        'if [ -f "$ML_PLATFORM_FATAL_FILE" ]; then exit 2; fi; exit $rc'
    )
    assert judge_exit_codes([job(wired, [2], {"ML_PLATFORM_FATAL_FILE": str(host_record)})]) == []
    assert host_record.read_text() == "another run's record\n"
