"""The inference image's Dockerfile passes hadolint, and keeps the properties the Deployment relies on."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from components.images import copy_sources
from tests.linters import hadolint, needs_hadolint
from workloads.inference.k8s import ROLLOUT_ENTRY

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "workloads" / "inference" / "Dockerfile"


@needs_hadolint
def test_hadolint_is_clean() -> None:
    done = hadolint(DOCKERFILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_multi_stage_pinned_and_non_root() -> None:
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert len(stages) == 2 and set(stages) == {"${PYTHON_IMAGE}"}
    assert re.search(r"^ARG PYTHON_IMAGE=python:\d+\.\d+\.\d+-slim-\w+$", text, flags=re.MULTILINE)
    final = text.split("\nFROM ")[-1]
    assert re.search(r"^USER 10001:10001$", final, flags=re.MULTILINE)
    assert "pip install" not in final and "apt-get" not in final, "no installing in the runtime stage"
    assert 'ENTRYPOINT ["python", "-m", "workloads.inference"]' in final


def _module_file(module: str) -> Path | None:
    """The repository file Python loads for ``module`` (a package: its ``__init__.py``)."""
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(path: Path) -> set[str]:
    """The ``workloads.*`` modules a file imports when it runs (``TYPE_CHECKING`` blocks left out), with
    ``from package import name`` read as the submodule where one exists."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m.split(".")[0] == "workloads" and _module_file(m) is not None}


def _closure(entry: str) -> set[Path]:
    """Every repository file ``python -m entry`` loads: the entry's ``__main__``, each module it imports,
    and every package ``__init__`` on their way."""
    main = REPO.joinpath(*entry.split(".")) / "__main__.py"
    assert main.is_file(), f"python -m {entry}: no {main.relative_to(REPO)}"
    files: set[Path] = set()
    todo = [main, *(f for m in _parents(entry) if (f := _module_file(m)))]
    while todo:
        path = todo.pop()
        if path in files:
            continue
        files.add(path)
        for module in _imported(path):
            todo += [f for m in (*_parents(module), module) if (f := _module_file(m))]
    return files


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts) - 1)] or [module]


def _in_image(path: Path) -> bool:
    relative = path.relative_to(REPO).as_posix()
    return any(
        relative == source or (source.endswith("/") and relative.startswith(source))
        for source in copy_sources(DOCKERFILE)
    )


@pytest.mark.parametrize("entry", ["workloads.inference", ROLLOUT_ENTRY[-1]])
def test_the_image_holds_every_module_its_entry_points_import(entry: str) -> None:
    """The image copies parts of ``workloads/`` only: a module its programs import that no COPY line
    brings in is a ModuleNotFoundError when the pod starts, found by no test that runs from the tree.
    The server (ENTRYPOINT) and the rollout Job's command (workloads/inference/k8s.py ``ROLLOUT_ENTRY``)
    run in it. ``workloads.delivery`` has its ``__main__`` from the rollout's branch (issue 29)."""
    missing = sorted(p.relative_to(REPO).as_posix() for p in _closure(entry) if not _in_image(p))
    assert missing == [], f"python -m {entry} in the inference image imports files it lacks: {missing}"
