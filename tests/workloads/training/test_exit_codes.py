"""The container's command ends with the exit code the Job's ``podFailurePolicy`` expects (cluster
review B1): a worker that exits 2 (bad input, no retry can help) fails the Job at once.

torchrun 2.13 reports any worker failure as its own exit 1 (``torch/distributed/run.py``: ``main`` is
``@record``-ed, ``ChildFailedError``), so an ``exec torchrun`` container exits 1 and the ``FailJob`` rule
on exit code 2 never fires. These tests run the Job's real shell line with the real torchrun (gloo,
one local node: a stand-in on PATH only points the rendezvous at this machine) and a worker that exits 2.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.workloads.training.test_k8s import by_kind, make_spec, trainer
from workloads.training.k8s import training_job_objects

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_container(
    job: dict[str, Any], tmp_path: Path, *, preflight: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the trainer container's command as pod 0, with the real torchrun on one local node; without
    ``preflight``, the shell's one-off preflight step is a stand-in that passes, so the failure reaches
    the worker under torchrun."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n' if preflight else "#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    wrapper = tmp_path / "torchrun"
    port = _free_port()
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "rewrite = {'--nnodes': '1', '--nproc-per-node': '1', '--rdzv-endpoint': '127.0.0.1:%d'}\n"
        "args = [a if a.split('=')[0] not in rewrite else a.split('=')[0] + '=' + rewrite[a.split('=')[0]]"
        " for a in sys.argv[1:]]\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'torch.distributed.run', *args])\n" % port
    )
    wrapper.chmod(0o755)
    container = trainer(job)
    env = {e["name"]: e["value"] for e in container["env"]}
    env.update(
        PATH=f"{tmp_path}:{os.environ['PATH']}",
        PYTHONPATH=str(REPO),
        JOB_COMPLETION_INDEX="0",
        ML_PLATFORM_FATAL_FILE=str(tmp_path / "fatal"),
        HOME=str(tmp_path),
    )
    return subprocess.run(
        container["command"], capture_output=True, text=True, env=env, timeout=240, check=False
    )


def _exit_code_that_fails_the_job(job: dict[str, Any]) -> int:
    [rule] = [r for r in job["spec"]["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    [code] = rule["onExitCodes"]["values"]
    return int(code)


def _bad_output_job(tmp_path: Path) -> dict[str, Any]:
    # --output names a file: the trainer's preflight refuses it with exit 2 (ConfigError).
    output = tmp_path / "not-a-directory"
    output.write_text("")
    spec = make_spec("cpu", output_mount_path=str(output), max_restarts=1)
    return by_kind(training_job_objects(spec))["Job"]


def test_a_trainer_that_exits_2_fails_the_job_through_torchrun(tmp_path: Path) -> None:
    job = _bad_output_job(tmp_path)
    done = run_container(job, tmp_path, preflight=False)
    assert "is not a directory" in done.stderr, done.stderr[-2000:]
    assert "torch.distributed.elastic" in done.stderr or "ChildFailedError" in done.stderr
    assert done.returncode == _exit_code_that_fails_the_job(job) == 2, done.stderr[-2000:]


def test_bad_trainer_input_fails_before_torchrun_starts(tmp_path: Path) -> None:
    """The preflight runs once before torchrun, so exit 2 costs no in-pod restarts."""
    job = _bad_output_job(tmp_path)
    done = run_container(job, tmp_path)
    assert "is not a directory" in done.stderr
    assert "ChildFailedError" not in done.stderr and "torch.distributed" not in done.stderr
    assert done.returncode == 2


def test_the_fabric_test_exiting_2_fails_its_gate_through_torchrun(tmp_path: Path) -> None:
    job = by_kind(
        training_job_objects(make_spec("cpu", entry=("workloads.fabric_test", "--iters=0"), max_restarts=0))
    )["Job"]
    done = run_container(job, tmp_path)
    assert "--iters must be at least 1" in done.stderr, done.stderr[-2000:]
    assert done.returncode == _exit_code_that_fails_the_job(job) == 2


def test_any_other_failure_keeps_its_exit_code_and_is_retried(tmp_path: Path) -> None:
    """A worker failing with 1 (a crash: retrying may help) stays 1, which the Job retries."""
    job = by_kind(
        training_job_objects(
            make_spec(
                "cpu",
                entry=(
                    "workloads.fabric_test",
                    "--floor-gbytes=1e12",
                    "--max-bytes=4096",
                    "--min-bytes=4096",
                    "--iters=1",
                    "--warmup=0",
                ),
                max_restarts=0,
            )
        )
    )["Job"]
    done = run_container(job, tmp_path)
    assert "below the fabric's floor" in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1
