"""How a plan is shown and written: the resource tree, counts by type, outputs, JSON and manifests."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from mlplatform.errors import exit_with
from mlplatform.graph import HELM_RELEASE, STACK_TYPE, Plan, PlannedResource, as_applied, masked
from mlplatform.rendering import chart_label

# HELM_RELEASE and as_applied live in mlplatform.graph; they are this module's vocabulary too.
__all__ = [
    "HELM_RELEASE",
    "as_applied",
    "helm_releases",
    "kubernetes_objects",
    "output_problems",
    "print_tree",
    "short_type",
    "write_document",
    "write_json",
    "write_manifests",
]


def kubernetes_objects(plan: Plan) -> list[dict[str, Any]]:
    """Every Kubernetes object the program applies, rebuilt from its resource's inputs.

    A resource of type ``kubernetes:<group/version>:<Kind>`` carries the object's own top-level fields
    as inputs, the objects a Helm release renders included (mlplatform.rendering); a release itself is
    not an object.
    """
    return [
        as_applied(r.inputs)
        for r in plan.resources
        if r.custom and r.type.startswith("kubernetes:") and r.type != HELM_RELEASE
    ]


def helm_releases(plan: Plan) -> list[PlannedResource]:
    return plan.by_type(HELM_RELEASE)


def write_manifests(plan: Plan, directory: Path) -> list[Path]:
    """One YAML file per object, in a folder per namespace (``_cluster`` for cluster-scoped ones)."""
    written: list[Path] = []
    for obj in kubernetes_objects(plan):
        metadata = obj.get("metadata", {})
        folder = directory / (metadata.get("namespace") or "_cluster")
        path = folder / f"{obj['kind'].lower()}-{metadata['name']}.yaml"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(obj, sort_keys=False), encoding="utf-8")
        except OSError as error:
            exit_with([f"{path}: cannot write ({error.strerror})"])
        written.append(path)
    return written


def output_problems(files: dict[str, Path | None], folders: dict[str, Path | None]) -> list[str]:
    """Why each output path (flag → path) could not be written, found before any work is done: a file
    where a folder is wanted or the other way round, or a place this user may not write."""
    problems = []
    for flag, path in files.items():
        if path is not None:
            if path.is_dir():
                problems.append(f"{flag} {path}: is a folder; name a file")
            else:
                problems += _place_problems(flag, path, path.parent)
    for flag, path in folders.items():
        if path is not None:
            if path.exists() and not path.is_dir():
                problems.append(f"{flag} {path}: is a file; name a folder")
            else:
                problems += _place_problems(flag, path, path)
    return problems


def _place_problems(flag: str, path: Path, folder: Path) -> list[str]:
    """``folder`` (to hold or be ``path``) exists or can be made, and this user may write in it."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return [f"{flag} {path}: {existing} is a file, not a folder"]
    target = path if path.exists() else existing
    if not os.access(target, os.W_OK) or (target.is_dir() and not os.access(target, os.X_OK)):
        return [f"{flag} {path}: {target} is not writable"]
    return []


def write_document(path: Path, document: Any) -> None:
    """Write JSON, creating its folder; an unwritable path is bad input (exit 2), not a traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        exit_with([f"{path}: cannot write ({error.strerror})"])


def write_json(plan: Plan, path: Path) -> None:
    write_document(path, plan.to_dict())


def print_tree(plan: Plan, console: Console) -> None:
    """The resource tree (parents above children), a count by type, and the stack outputs. A Helm
    release shows what its chart renders as a count by kind (``--manifests`` writes each object)."""
    releases = {r.urn for r in plan.by_type(HELM_RELEASE)}
    children: dict[str | None, list[PlannedResource]] = {}
    for resource in plan.resources:
        children.setdefault(resource.parent, []).append(resource)

    def add(node: Tree, resource: PlannedResource, parent: str = "") -> None:
        # Children are named f"{parent}-...": under their parent, the rest of the name says it all.
        name = resource.name.removeprefix(f"{parent}-") if parent else resource.name
        label = Text.assemble((name or resource.name, "bold"), " ", (short_type(resource.type), "dim"))
        if resource.urn in releases:
            chart = chart_label(resource)
            kinds = Counter(r.type.rsplit(":", 1)[-1] for r in children.get(resource.urn, []))
            rendered = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
            label.append(f" (chart {chart}: {rendered or 'not rendered'})", "yellow")
        branch = node.add(_unbroken(label))
        if resource.urn in releases:
            return
        # Registration order is the engine's (concurrent, so it varies run to run); names read better.
        for child in sorted(children.get(resource.urn, []), key=lambda r: (r.name, r.type)):
            add(branch, child, resource.name if resource.type != STACK_TYPE else "")

    tree = Tree(Text.assemble((plan.project, "bold"), " / ", (plan.stack, "bold")))
    for root in children.get(None, []):
        add(tree, root)
    console.print(tree)

    counts = Counter(r.type for r in plan.resources)
    # No box: more of the width for the type tokens, so they stay whole at 80 columns.
    table = Table(title=f"{len(plan.resources)} resources by type", title_justify="left", box=None)
    table.add_column("count", justify="right", no_wrap=True, min_width=5)
    table.add_column("type")
    for token, count in sorted(counts.items()):
        table.add_row(str(count), _unbroken(Text(short_type(token))))
    console.print(table)

    console.print(Text("stack outputs", style="italic"))
    for name, shown in _flat(masked(plan.outputs)):
        line = Text.assemble((name, "bold"), " ", shown if isinstance(shown, str) else json.dumps(shown))
        if len(line) > console.width:  # the value on lines of its own: URLs and ARNs stay whole
            console.print(Text(name, style="bold"))
            line = Text(line.plain[len(name) + 1 :])
        console.print(Padding(_unbroken(line), (0, 0, 0, 1), expand=False))


def _flat(outputs: dict[str, Any]) -> list[tuple[str, Any]]:
    """A map of outputs one line per key (``identities.training``), so each value gets a line."""
    return [
        (f"{name}.{key}", inner) if isinstance(value, dict) else (name, value)
        for name, value in outputs.items()
        for key, inner in (value.items() if isinstance(value, dict) else [("", value)])
    ]


def short_type(token: str) -> str:
    """A type token as a person reads it at 80 columns: ``aws:s3:BucketPolicy`` for
    ``aws:s3/bucketPolicy:BucketPolicy`` (the SDK's module), ``Deployment (apps/v1)`` for
    ``kubernetes:apps/v1:Deployment``; the full token is in --json."""
    package, _, rest = token.partition(":")
    module, _, kind = rest.rpartition(":")
    if not module:
        return token
    if package == "kubernetes":
        return f"{kind} ({module})"
    return f"{package}:{module.split('/', 1)[0]}:{kind}"


def _unbroken(text: Text) -> Text:
    """Wrapped at spaces only: a word longer than the line ends in an ellipsis instead of breaking in
    two (the whole of it is in --json and --manifests)."""
    text.overflow = "ellipsis"
    return text
