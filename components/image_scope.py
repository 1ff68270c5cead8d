"""What an image runs against what its tag hashes (review aws.md N2).

``components.images.content_tag`` hashes every file of a Dockerfile's build context, as pulumi-docker-build
diffs it (``build_context.context_files``); a changed hash is a rebuild, a push, and a new image on every
Job and Deployment that runs it (a Job's pod template is immutable, so a replaced Job: a re-run). A file in
the context that no program of the image loads (README.md, the IaC code) rebuilds the image for nothing;
a module a program imports that is not in the context is a ModuleNotFoundError when the pod starts.

The programs of an image are its ``python -m`` entry points. Their closure is read from the source, as
Python would load it: each module's imports outside ``TYPE_CHECKING`` blocks, ``from package import name``
read as the submodule where one exists, and every package ``__init__`` on the way. Only the repository's
own packages are followed; third-party modules come from the dependency manifests the image installs.
Standard library only: the checks run without the Pulumi SDK.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from components.build_context import context_files

# The repository's top-level packages (pyproject.toml ``tool.setuptools.packages.find``).
LOCAL_PACKAGES = frozenset({"components", "judges", "mlplatform", "workloads"})


def module_file(module: str, root: Path) -> Path | None:
    """The repository file Python loads for ``module`` (a package: its ``__init__.py``)."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(path: Path, root: Path) -> set[str]:
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
    return {m for m in found if m.split(".")[0] in LOCAL_PACKAGES and module_file(m, root) is not None}


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def closure(entries: Iterable[str], root: Path) -> set[Path]:
    """Every repository file ``python -m <entry>`` loads, for each entry."""
    files: set[Path] = set()
    todo: list[Path] = []
    for entry in entries:
        main = module_file(f"{entry}.__main__", root) or module_file(entry, root)
        if main is None:
            raise ValueError(f"python -m {entry}: no module in {root}")
        todo += [main, *(f for m in _with_parents(entry) if (f := module_file(m, root)))]
    while todo:
        path = todo.pop()
        if path in files:
            continue
        files.add(path)
        for module in _imported(path, root):
            todo += [f for m in _with_parents(module) if (f := module_file(m, root))]
    return files


def scope_problems(
    dockerfile: Path, entries: Iterable[str], declared: Iterable[str], root: Path
) -> list[str]:
    """Each file the tag hashes that no entry loads and ``declared`` (dependency manifests, data the
    build reads) does not name, and each file an entry loads that the context lacks."""
    hashed = {f.relative_to(root).as_posix() for f in context_files(root, dockerfile)}
    loaded = {f.relative_to(root).as_posix() for f in closure(entries, root)}
    name = dockerfile.relative_to(root).as_posix()
    unread = sorted(hashed - loaded - set(declared))
    missing = sorted(loaded - hashed)
    return [
        *(f"{name}: {path} is hashed into the tag but no program of the image loads it" for path in unread),
        *(
            f"{name}: {path} is imported by the image's programs but not in its build context"
            for path in missing
        ),
    ]
