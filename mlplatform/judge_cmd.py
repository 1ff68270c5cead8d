"""``mlplatform judge``: the behaviour judges on plain Kubernetes YAML, written anywhere.

Every judge of ``judges.JUDGES`` runs; the scheduling judge without node pools (no cloud context: it
judges the Kueue wiring and quotas alone), and reachability with the platform's flow contract, which
speaks only of the objects it finds. Exit 0 with no mandatory finding, 1 with one, 2 on a path or
document that is not Kubernetes YAML.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.text import Text

from judges import JUDGES, judge_all
from mlplatform.errors import EXIT_FINDING, exit_with
from mlplatform.judging import skipped_judges

_SUFFIXES = (".yaml", ".yml", ".json")


def judge(
    paths: Annotated[
        list[Path], typer.Argument(help="YAML files or directories of them (searched recursively).")
    ],
    skip: Annotated[
        list[str] | None,
        typer.Option("--skip", help="A judge not to run (repeatable), by its name.", show_default=False),
    ] = None,
) -> None:
    """Judge Kubernetes YAML with the judges; exit 1 on any mandatory finding."""
    skipped = skipped_judges(skip or [])
    problems: list[str] = []
    objects = [obj for path in paths for obj in _objects(path, problems)]
    if problems:
        exit_with(problems)
    if not objects:
        exit_with([f"{', '.join(map(str, paths))}: no Kubernetes objects found"])
    findings = judge_all(objects, skip=skipped)
    console = Console(highlight=False, soft_wrap=True)
    for finding in sorted(findings, key=lambda f: (not f.mandatory, f.policy, str(f.subject))):
        style = "bold red" if finding.mandatory else "yellow"
        text = Text.assemble((finding.level, style), " ", (finding.policy, "bold"), f": {finding.subject}: ")
        console.print(text.append(finding.message))
    mandatory = sum(f.mandatory for f in findings)
    console.print(
        f"{len(objects)} objects, {len(JUDGES) - len(skipped)} judges: "
        f"{mandatory} mandatory, {len(findings) - mandatory} advisory"
    )
    if mandatory:
        raise typer.Exit(EXIT_FINDING)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in _SUFFIXES)
    return [path]


def _objects(path: Path, problems: list[str]) -> Iterator[dict[str, Any]]:
    """Each object of each document (a ``kind: List`` contributes its items), or a problem naming the
    file and document."""
    if not path.exists():
        problems.append(f"{path}: no such file or directory")
        return
    for file in _files(path):
        try:
            documents = list(yaml.safe_load_all(file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            problems.append(f"{file}: not readable as YAML ({' '.join(str(error).split())})")
            continue
        for number, document in enumerate(documents, 1):
            if document is None:
                continue
            items = (
                document.get("items")
                if isinstance(document, dict) and document.get("kind") == "List"
                else None
            )
            for obj in items if isinstance(items, list) else [document]:
                if not isinstance(obj, dict) or not obj.get("kind") or not obj.get("apiVersion"):
                    problems.append(
                        f"{file}: document {number} is not a Kubernetes object (no kind/apiVersion)"
                    )
                    continue
                if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
                    problems.append(f"{file}: document {number} ({obj['kind']}) has no metadata.name")
                    continue
                yield obj
