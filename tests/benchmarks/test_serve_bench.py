"""The serving benchmark's baselines (``--baseline REF``: ours from another commit's tree, in the same
interleaved rounds, a fix's before and after) and which rows are judged against the targets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.serve_bench import (
    REPO,
    TARGET_FP32,
    TARGET_VARIANT,
    BaselineError,
    baseline_commit,
    contenders,
    export_baseline,
    server_command,
    target_for,
)
from benchmarks.serve_compare import OURS


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout


def test_a_baseline_serves_its_commit_s_server_beside_ours(tmp_path: Path) -> None:
    """The baseline imports the ``workloads`` package exactly as committed, ahead of this checkout."""
    commit = baseline_commit("HEAD~1")
    assert commit == git("rev-parse", "--short", "HEAD~1").strip()
    baseline = export_baseline(commit, tmp_path)
    exported = (baseline.tree / "workloads" / "inference" / "warmup.py").read_text()
    assert exported == git("show", f"{commit}:workloads/inference/warmup.py")
    ours, before = contenders(tmp_path / "model", [OURS], {}, [baseline])
    assert (ours.name, before.name) == (OURS, f"{OURS}@{commit}")
    assert server_command(ours, 8000, tmp_path)[1]["PYTHONPATH"] == str(REPO)
    command, env = server_command(before, 8001, tmp_path)
    assert env["PYTHONPATH"] == str(baseline.tree) and command[1:] == ["-m", "workloads.inference"]


def test_a_baseline_is_shown_not_judged() -> None:
    """Targets (issue 30) hold for ours and its published variants; a baseline is the before of a change."""
    assert target_for(OURS, "mlp-50m", 1) == TARGET_FP32
    assert target_for(f"{OURS}[bf16]", "mlp-50m", 1) == TARGET_VARIANT["mlp-50m", 1]
    assert target_for(f"{OURS}@1a2b3c4", "mlp-50m", 1) is None


def test_a_baseline_that_names_no_commit_is_one_line_and_exit_2() -> None:
    """Bad input (the developer guide): one clear line naming the flag, exit 2, nothing run."""
    with pytest.raises(BaselineError, match="--baseline no-such-ref: not a commit"):
        baseline_commit("no-such-ref")
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "serve_bench.py"), "--baseline", "no-such-ref"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: --baseline no-such-ref: not a commit of {REPO}"]
    assert done.stdout == ""
