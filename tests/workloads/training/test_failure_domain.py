"""Losing the rendezvous host: two torchrun agents on this machine play the Job's two pods.

Each agent runs with the Job's own torchrun flags (``torchrun_flags``) and trainer argv, in its own
session; killing it and every process under it (its workers run in sessions of their own:
``process_tree``) is what losing a pod does to them. Agent 0 hosts the c10d store, as
pod 0 does. After it is SIGKILLed the surviving agent must fail (its store is gone) rather than hang, and
relaunching both, as the Job controller recreates failed indexes under ``backoffLimitPerIndex``, must
finish the run from the last checkpoint.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from components.handle import Fabric, PoolHandle, PoolKind
from mlplatform.train_cmd import available_cpus
from tests.workloads.training.process_tree import kill_tree
from workloads.artifacts import load_metadata, model_version_dir
from workloads.training.checkpoint import list_checkpoints
from workloads.training.k8s import TrainingJobSpec, torchrun_flags

pytestmark = pytest.mark.slow

CPU_POOL = PoolHandle("cpu", PoolKind.CPU, "m7i.xlarge", 0, Fabric.NONE, 0, 4, 16)
REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spec(output: Path) -> TrainingJobSpec:
    return TrainingJobSpec(
        name="digits",
        run_id="r1",
        namespace="ml-training",
        image="registry.example.com/trainer:1",
        pool=CPU_POOL,
        service_account="trainer",
        output_volume={"emptyDir": {}},
        output_mount_path=str(output),
        nodes=2,
        # Long enough (240 steps) that the kill after the first checkpoint (step 10) lands mid-run even when
        # the two workers starve this test's polling of both cores: CI once saw 3 epochs end before it.
        epochs=12,
        max_restarts=1,
        trainer_args=("--batch-size=32", "--checkpoint-every=10"),
    )


def _agent(spec: TrainingJobSpec, index: int, port: int, log: Path) -> subprocess.Popen[bytes]:
    """One pod's agent: the Job's torchrun flags, endpoint 127.0.0.1 instead of pod 0's DNS name.

    Each pod's workers get ``OMP_NUM_THREADS`` as the Job's container sets it, its CPUs over its ranks
    (``workloads/training/k8s.py``), here its share of this machine's: left unset, each worker's torch
    runs one intra-op thread per core, and the two pods' threads spin against each other on two cores
    (a step took 0.4 s instead of 20 ms, 40 CPU-s a run instead of 23)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", *torchrun_flags(spec, f"127.0.0.1:{port}")]
    cmd += [f"--rdzv-conf=is_host={int(index == 0)}", "-m", "workloads.training", *spec.trainer_argv()]
    threads = max(1, available_cpus() // (spec.nodes * spec.processes_per_node))
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "PYTHONPATH": str(REPO)}
    env["OMP_NUM_THREADS"] = str(threads)
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _events(logs: list[Path]) -> list[dict[str, Any]]:
    lines = [line for log in logs for line in log.read_text().splitlines()]
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_killing_the_rendezvous_host_restarts_the_group_from_its_checkpoint(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    logs = [tmp_path / "agent0.log", tmp_path / "agent1.log"]
    port = _free_port()
    agents = [_agent(spec, i, port, logs[i]) for i in (0, 1)]
    try:
        deadline = time.monotonic() + 90
        checkpoints = tmp_path / "checkpoints" / "digits" / "r1"
        while not list_checkpoints(checkpoints):
            assert time.monotonic() < deadline and agents[1].poll() is None, "no checkpoint in 90 s"
            time.sleep(0.05)
        kill_tree(agents[0].pid)  # pod 0 lost: agent, workers and the c10d store
        assert agents[1].wait(timeout=90) != 0, "the surviving agent fails instead of hanging"
        agents[0].wait(timeout=10)
        # The Job controller recreates both failed indexes; pod 0 keeps its name, so the endpoint holds.
        port = _free_port()
        agents = [_agent(spec, i, port, logs[i]) for i in (0, 1)]
        assert [a.wait(timeout=180) for a in agents] == [0, 0], logs[0].read_text()[-3000:]
    finally:
        for agent in agents:
            if agent.poll() is None:
                kill_tree(agent.pid)
    events = _events(logs)
    (resumed,) = [e for e in events if e["event"] == "resumed"]
    (written,) = [e for e in events if e["event"] == "model_written"]
    print(f"resumed from step {resumed['step']}; finished at step {written['metrics']['steps']}")
    assert resumed["step"] >= 10
    assert written["metrics"]["resumed_from_step"] == resumed["step"]
    assert load_metadata(model_version_dir(tmp_path, "digits", "r1")).world_size == 2
