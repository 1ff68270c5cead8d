"""The training image's Dockerfile passes hadolint and keeps the properties the Job relies on."""

from __future__ import annotations

from pathlib import Path

from tests.linters import hadolint, needs_hadolint

DOCKERFILE = Path(__file__).resolve().parents[3] / "workloads" / "training" / "Dockerfile"


@needs_hadolint
def test_hadolint_is_clean() -> None:
    done = hadolint(DOCKERFILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_multi_stage_non_root_pinned_and_installs_the_workloads_extra() -> None:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    froms = [line for line in lines if line.startswith("FROM ")]
    assert len(froms) == 2 and froms[0].endswith(" AS build"), "build tools stay in the build stage"
    assert "ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm" in lines
    assert any("'.[train]'" in line for line in lines)
    final_stage = lines[lines.index(froms[1]) :]
    assert "USER 10001:10001" in final_stage
    assert not any("pip install" in line for line in final_stage)
