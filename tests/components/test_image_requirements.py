"""Each Python image's tag moves exactly when what pip installs in it does (review of issue 38, B1).

The training image copied pyproject.toml and constraints.txt whole, so its content tag (and the context
hash pulumi-docker-build diffs on) moved with a ``pulumi_aws`` pin bump (tag 48c2e222… → 31e046c2…) or a
comment under ``[tool.ruff]`` (→ 60b36901…): a CUDA image rebuilt and the training and fabric-test Jobs
re-run for an IaC edit. It now copies a requirements file resolved from the two
(components/image_requirements.py); the edits below are made on a copy of the tree and the file is
regenerated, as the developer making them would.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from components.build_context import context_files, ignore_file
from components.image_requirements import pin_problems, requirements_text, resolve
from components.images import (
    INSTALLS,
    REPO,
    TRAINING_DOCKERFILE,
    content_tag,
    requirements_file,
)


def test_each_committed_requirements_file_is_what_the_manifests_resolve_to() -> None:
    for dockerfile, extra in INSTALLS.items():
        image = dockerfile.relative_to(REPO).as_posix()
        assert requirements_file(dockerfile).read_text() == requirements_text(REPO, extra, image), image
        assert pin_problems(REPO, extra, requirements_file(dockerfile)) == []


def test_the_training_image_installs_the_cuda_torch_and_no_infrastructure() -> None:
    lines = resolve(REPO, "train")
    assert "torch==2.13.0" in lines, "pyproject's pin (PyPI's CUDA build), not constraints' +cpu build"
    # torch pulls sympy in (Requires-Dist), pinned by constraints.txt.
    assert any(line.startswith("sympy==") for line in lines)
    assert not any(re.match(r"(pulumi|mlflow|boto3|fastapi|pytest|ruff)\b", line) for line in lines)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The files a training build and its regeneration read, copied."""
    needed = [
        TRAINING_DOCKERFILE,
        ignore_file(TRAINING_DOCKERFILE),
        REPO / "pyproject.toml",
        REPO / "constraints.txt",
        *context_files(REPO, TRAINING_DOCKERFILE),
    ]
    for source in needed:
        target = tmp_path / source.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def _regenerated_tag(root: Path) -> str:
    requirements = root / requirements_file(TRAINING_DOCKERFILE).relative_to(REPO)
    requirements.write_text(requirements_text(root, "train", "workloads/training/Dockerfile"))
    return content_tag(root / TRAINING_DOCKERFILE.relative_to(REPO), "efa", root)


def test_an_iac_pin_bump_and_a_linter_comment_keep_the_tag(tree: Path) -> None:
    """The review's two edits: a pulumi_aws pin bump in both manifests, a comment under [tool.ruff]."""
    before = _regenerated_tag(tree)
    _edit(tree / "constraints.txt", "pulumi_aws==7.51.1", "pulumi_aws==7.52.0")
    _edit(tree / "pyproject.toml", '"pulumi-aws==7.51.1"', '"pulumi-aws==7.52.0"')
    _edit(tree / "pyproject.toml", "[tool.ruff]\n", "[tool.ruff]\n# a comment\n")
    assert _regenerated_tag(tree) == before


def test_a_torch_pin_or_a_pin_torch_pulls_in_moves_the_tag(tree: Path) -> None:
    before = _regenerated_tag(tree)
    _edit(tree / "pyproject.toml", '"torch==2.13.0"', '"torch==2.13.1"')
    torch = _regenerated_tag(tree)
    assert torch != before
    _edit(tree / "constraints.txt", "sympy==1.14.0", "sympy==1.14.1")
    assert _regenerated_tag(tree) != torch


def test_a_pin_changed_without_regenerating_is_refused_before_a_build(tree: Path) -> None:
    """`pulumi up` runs without the train extra installed, so it checks the file against the two
    manifests (components.images.stale_build_files): a pin edited there and not regenerated is named."""
    requirements = tree / requirements_file(TRAINING_DOCKERFILE).relative_to(REPO)
    _edit(tree / "pyproject.toml", '"torch==2.13.0"', '"torch==2.13.1"')
    _edit(tree / "constraints.txt", "sympy==1.14.0", "sympy==1.14.1")
    assert pin_problems(tree, "train", requirements) == [
        "workloads/training/requirements.txt: sympy==1.14.0 but constraints.txt pins sympy==1.14.1",
        "workloads/training/requirements.txt: torch==2.13.0 but pyproject.toml pins torch==2.13.1",
    ]
    _edit(tree / "pyproject.toml", '    "onnx==1.23.2",\n', "")
    _edit(tree / "constraints.txt", "onnx==1.23.2\n", "")
    neither = "onnx==1.23.2 is pinned by neither pyproject.toml nor constraints.txt"
    assert f"workloads/training/requirements.txt: {neither}" in pin_problems(tree, "train", requirements)
