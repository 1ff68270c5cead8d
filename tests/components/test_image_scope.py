"""Each image's tag hashes exactly what its programs load (review aws.md N2).

The training image copied README.md, components/ and mlplatform/ wholesale, so a doc or IaC edit changed
its content tag: pulumi-docker-build rebuilt and pushed the CUDA image, and the training and fabric-test
Jobs (immutable pod templates) were replaced, re-running both. ``scope_problems`` compares the files the
tag hashes (the build context, ``components.build_context.context_files``) with the closure of the
image's ``python -m`` programs plus its declared dependency manifests, both ways
(tests/components/test_build_context.py edits a copy of the tree: README and IaC edits keep the tag).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from components.image_scope import scope_problems
from components.images import (
    INFERENCE_DOCKERFILE,
    REGISTRY_DOCKERFILE,
    REPO,
    TRAINING_DOCKERFILE,
)
from workloads.inference.k8s import MONITOR_ENTRY, ROLLOUT_ENTRY

# Each image: its programs (the ENTRYPOINT, the Jobs' ``python -m`` commands, what the build runs) and
# the files it reads that are not Python modules.
IMAGES = {
    TRAINING_DOCKERFILE: (
        # workloads/training/k8s.py: the trainer, its preflight and the fabric test's entry
        # (components/kubernetes/workloads.py); the efa target runs the installer at build time.
        (
            "workloads.training",
            "workloads.training.preflight",
            "workloads.fabric_test",
            "workloads.training.efa_installer",
        ),
        # What pip installs, resolved from pyproject.toml and constraints.txt (review of issue 38, B1).
        ("workloads/training/requirements.txt",),
    ),
    INFERENCE_DOCKERFILE: (
        ("workloads.inference", ROLLOUT_ENTRY[-1], MONITOR_ENTRY[-1]),
        ("workloads/inference/requirements.txt",),
    ),
    # A script image: requirements, the launcher, its authorization function, its sitecustomize and the RDS
    # roots the launcher verifies the database with (launch.py ``database_ca``), and the lifecycle record's
    # writer the authorization function appends with (guard.py ``record_events``) and the promotion rule it
    # decides alias moves with (guard.py ``move_decision``: approval.py, lock.py) are all it copies.
    REGISTRY_DOCKERFILE: (
        ("workloads.registry.record", "workloads.registry.approval", "workloads.registry.lock"),
        (
            "workloads/registry/server/requirements.txt",
            "workloads/registry/server/launch.py",
            "workloads/registry/server/guard.py",
            "workloads/registry/server/sitecustomize.py",
            "workloads/registry/server/rds-ca-me-central-1.pem",
        ),
    ),
}


@pytest.mark.parametrize("dockerfile", list(IMAGES), ids=lambda d: d.parent.name)
def test_each_image_hashes_exactly_what_its_programs_load(dockerfile: Path) -> None:
    entries, declared = IMAGES[dockerfile]
    assert scope_problems(dockerfile, entries, declared, REPO) == []


def test_a_wholesale_copy_and_a_missing_module_are_found(tmp_path: Path) -> None:
    """The planted defects: the COPY lines as they were (README.md and whole folders) hash files no
    program loads; a COPY line that leaves out a module the program imports is found too."""
    (tmp_path / "workloads" / "app").mkdir(parents=True)
    (tmp_path / "workloads" / "__init__.py").write_text("")
    (tmp_path / "workloads" / "app" / "__init__.py").write_text("")
    (tmp_path / "workloads" / "app" / "__main__.py").write_text("import workloads.lib\n")
    (tmp_path / "workloads" / "app" / "k8s.py").write_text("")
    (tmp_path / "workloads" / "lib.py").write_text("")
    (tmp_path / "README.md").write_text("docs\n")
    dockerfile = tmp_path / "workloads" / "app" / "Dockerfile"
    dockerfile.write_text("FROM scratch\nCOPY README.md ./\nCOPY workloads/ /app/workloads/\n")
    dockerfile.with_name("Dockerfile.dockerignore").write_text("*\n!README.md\n!workloads/\n")
    problems = scope_problems(dockerfile, ["workloads.app"], [], tmp_path)
    unread = {
        "README.md",
        "workloads/app/k8s.py",
        "workloads/app/Dockerfile",
        "workloads/app/Dockerfile.dockerignore",
    }
    assert {p.split(": ")[1].split(" ")[0] for p in problems} == unread
    assert all("no program of the image loads it" in p for p in problems)
    dockerfile.with_name("Dockerfile.dockerignore").write_text(
        "*\n!workloads/app/__init__.py\n!workloads/app/__main__.py\n"
    )
    missing = " is imported by the image's programs but not in its build context"
    assert scope_problems(dockerfile, ["workloads.app"], [], tmp_path) == [
        f"workloads/app/Dockerfile: workloads/{name}{missing}" for name in ("__init__.py", "lib.py")
    ]


def test_a_dependency_manifest_copied_whole_is_found(tmp_path: Path) -> None:
    """The planted defect of review 38 B1: an image that copies pyproject.toml and constraints.txt whole
    hashes every IaC pin and linter setting; what it installs is its requirements file."""
    (tmp_path / "workloads" / "app").mkdir(parents=True)
    for name in ("workloads/__init__.py", "workloads/app/__init__.py", "workloads/app/__main__.py"):
        (tmp_path / name).write_text("")
    for name in ("pyproject.toml", "constraints.txt", "workloads/app/requirements.txt"):
        (tmp_path / name).write_text("pydantic==2.13.4\n")
    dockerfile = tmp_path / "workloads" / "app" / "Dockerfile"
    copies = "workloads/__init__.py workloads/app/__init__.py workloads/app/__main__.py"
    dockerfile.write_text(f"FROM scratch\nCOPY constraints.txt pyproject.toml ./\nCOPY {copies} /app/\n")
    ignore = "*\n!constraints.txt\n!pyproject.toml\n" + "".join(f"!{c}\n" for c in copies.split())
    dockerfile.with_name("Dockerfile.dockerignore").write_text(ignore)
    declared = ["workloads/app/requirements.txt"]
    unread = " is hashed into the tag but no program of the image loads it"
    assert scope_problems(dockerfile, ["workloads.app"], declared, tmp_path) == [
        f"workloads/app/Dockerfile: {name}{unread}" for name in ("constraints.txt", "pyproject.toml")
    ]
    dockerfile.write_text(f"FROM scratch\nCOPY workloads/app/requirements.txt ./\nCOPY {copies} /app/\n")
    ignore = "*\n!workloads/app/requirements.txt\n" + "".join(f"!{c}\n" for c in copies.split())
    dockerfile.with_name("Dockerfile.dockerignore").write_text(ignore)
    assert scope_problems(dockerfile, ["workloads.app"], declared, tmp_path) == []
