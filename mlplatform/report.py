"""How a plan is shown and written: the resource tree, counts by type, outputs, JSON and manifests."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from mlplatform.errors import exit_with
from mlplatform.plan import SECRET_SIG, STACK_TYPE, Plan, PlannedResource

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def _is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SECRET_SIG) is not None


def as_applied(value: Any) -> Any:
    """Wire form back to the object the provider applies: secrets unwrapped, and whole numbers as
    integers again (the wire carries every number as a float; Kubernetes integer fields reject 10001.0)."""
    if _is_secret(value):
        return as_applied(value["value"])
    if isinstance(value, dict):
        return {k: as_applied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_applied(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _mask(value: Any) -> Any:
    if _is_secret(value):
        return "[secret]"
    if isinstance(value, dict):
        return {k: _mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return value


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
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{obj['kind'].lower()}-{metadata['name']}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        written.append(path)
    return written


def write_document(path: Path, document: Any) -> None:
    """Write JSON, creating its folder; an unwritable path is bad input (exit 2), not a traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        exit_with([f"{path}: cannot write ({error.strerror})"])


def write_json(plan: Plan, path: Path) -> None:
    write_document(path, plan.to_dict())


def print_plan(plan: Plan, console: Console) -> None:
    """The resource tree (parents above children), a count by type, and the stack outputs."""
    children: dict[str | None, list[PlannedResource]] = {}
    for resource in plan.resources:
        children.setdefault(resource.parent, []).append(resource)

    def add(node: Tree, resource: PlannedResource, parent: str = "") -> None:
        # Children are named f"{parent}-...": under their parent, the rest of the name says it all.
        name = resource.name.removeprefix(f"{parent}-") if parent else resource.name
        label = f"[bold]{escape(name or resource.name)}[/] [dim]{escape(resource.type)}[/]"
        if resource.type == HELM_RELEASE:
            chart = f"{resource.inputs.get('chart', '?')} {resource.inputs.get('version', '')}"
            label += f" [yellow](chart {escape(chart)})[/]"
        branch = node.add(label)
        # Registration order is the engine's (concurrent, so it varies run to run); names read better.
        for child in sorted(children.get(resource.urn, []), key=lambda r: (r.name, r.type)):
            add(branch, child, resource.name if resource.type != STACK_TYPE else "")

    tree = Tree(f"[bold]{escape(plan.project)}[/] / [bold]{escape(plan.stack)}[/]")
    for root in children.get(None, []):
        add(tree, root)
    console.print(tree)

    counts = Counter(r.type for r in plan.resources)
    # No box: more of the width for the type tokens, so they stay whole at 80 columns.
    table = Table(title=f"{len(plan.resources)} resources by type", title_justify="left", box=None)
    table.add_column("count", justify="right")
    table.add_column("type", overflow="fold")
    for token, count in sorted(counts.items()):
        table.add_row(str(count), token)
    console.print(table)

    outputs = Table(title="stack outputs")
    outputs.add_column("name")
    outputs.add_column("value", overflow="fold")
    for name, value in plan.outputs.items():
        masked = _mask(value)
        outputs.add_row(name, Text(masked if isinstance(masked, str) else json.dumps(masked)))
    console.print(outputs)
