"""``plan --diagram``: the platform a plan creates, drawn as SVG from the plan alone.

What is drawn is read from the planned resources, never from the program's builders: the network (the
VPC's or VNet's range), the cluster, each node pool with its instance type, size range and GPUs (the
stack's ``nodePools`` output, as ``plan`` prints it), the stores and registries, the workloads (the pods
the planned Kubernetes objects create, owner by owner) and the flows between them: the reachability
judge's contract (judges/reachability.contract), less name resolution, which every pod needs.

The SVG is written with the standard library's ElementTree (escaped, well-formed by construction)
rather than Graphviz: ``dot`` is a system binary that ``make setup`` cannot install from PyPI, and the
layout here is fixed (pools, workloads, then what lies outside the cluster, left to right).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from judges.kube import DNS_PORT
from judges.netpol import Endpoint
from judges.reachability import NCCL_PORTS, Cluster, Flow, contract
from mlplatform.errors import exit_with
from mlplatform.graph import Plan, PlannedResource, as_applied
from mlplatform.judging import cluster_network, planned_objects
from mlplatform.summary import Pool, summarize

_CLUSTERS = {"aws:eks/cluster:Cluster": "EKS", "azure-native:containerservice:ManagedCluster": "AKS"}
_REGISTRIES = {
    "aws:ecr/repository:Repository": "ECR repository",
    "azure-native:containerregistry:Registry": "Azure Container Registry",
}
_WIDTH = 1240
_ROW = 44
_BOX_W = 300
_FONT = "font-family:DejaVu Sans,Arial,sans-serif"


@dataclass(frozen=True)
class Picture:
    """What the diagram shows, read from one plan."""

    title: str
    network: str
    cluster: str
    pools: tuple[Pool, ...]
    workloads: tuple[str, ...]
    outside: tuple[str, ...]
    flows: tuple[tuple[str, str, str], ...]  # (from, to, "ports: purposes")


def picture(plan: Plan, label: str) -> Picture:
    """The parts of ``plan`` the diagram draws."""
    summary = summarize(plan, label)
    objects = planned_objects(plan)
    network = cluster_network(plan)
    flows = [f for f in contract(Cluster(objects, network)) if f.port != DNS_PORT]
    ends = [end for f in flows for end in (f.source, f.destination)]
    inside = sorted({_end(e) for e in ends if e.pod is not None})
    beyond = sorted({_end(e) for e in ends if e.pod is None})
    # Every name starts with the stack's: said once, in the title. Sorted: the engine registers resources
    # in an order that varies from run to run.
    stores = (*sorted(summary.storage), *_registries(plan.resources))
    outside = [p.replace(f" {plan.stack}-", " ") for p in stores]
    outside += beyond
    return Picture(
        title=f"{label}: the platform this plan creates",
        network=network,
        cluster=_cluster(plan.resources),
        pools=summary.pools,
        workloads=tuple(inside),
        outside=tuple(outside),
        flows=_grouped(flows),
    )


def _end(endpoint: Endpoint) -> str:
    """A pod by its owner (``namespace/name``); an address range outside the pod network by its name."""
    if endpoint.pod is None:
        return endpoint.name
    return f"{endpoint.pod.owner.namespace}/{endpoint.pod.owner.name}"


def _ports(ports: set[int]) -> str:
    """The ports of one pair, NCCL's ephemeral range (which the contract samples at its two ends) whole."""
    nccl = set(NCCL_PORTS)
    words = [str(p) for p in sorted(ports - nccl if nccl <= ports else ports)]
    return ", ".join(words + ([f"{NCCL_PORTS[0]}-{NCCL_PORTS[1]}"] if nccl <= ports else []))


def _grouped(flows: Sequence[Flow]) -> tuple[tuple[str, str, str], ...]:
    ports: dict[tuple[str, str], set[int]] = {}
    for flow in flows:
        ports.setdefault((_end(flow.source), _end(flow.destination)), set()).add(flow.port)
    return tuple((source, destination, _ports(p)) for (source, destination), p in sorted(ports.items()))


def _cluster(resources: Iterable[PlannedResource]) -> str:
    for resource in resources:
        kind = _CLUSTERS.get(resource.type)
        if kind is not None:
            inputs = as_applied(resource.inputs)
            version = inputs.get("version") or inputs.get("kubernetesVersion") or "?"
            return f"{kind} cluster {resource.name} (Kubernetes {version})"
    return "no cluster"


def _registries(resources: Iterable[PlannedResource]) -> list[str]:
    return sorted(f"{what} {r.name}" for r in resources if (what := _REGISTRIES.get(r.type)))


def _pool_text(pool: Pool) -> tuple[str, str]:
    many = "s" if (pool.gpus_per_node or 0) > 1 else ""
    gpus = f": {pool.gpus_per_node} GPU{many} per node" if pool.gpus_per_node else ""
    spot = ", spot" if pool.spot else ""
    return f"pool {pool.name}{gpus}", f"{pool.instance_type}, {pool.min_size} to {pool.max_size} nodes{spot}"


def render(picture: Picture) -> str:
    """``picture`` as an SVG document."""
    rows = max(len(picture.pools), len(picture.workloads), len(picture.outside), 1)
    body_h = rows * _ROW + 40
    flow_h = 18 * len(picture.flows) + 40
    height = 120 + body_h + flow_h
    svg = ET.Element(
        "svg",
        xmlns="http://www.w3.org/2000/svg",
        width=str(_WIDTH),
        height=str(height),
        viewBox=f"0 0 {_WIDTH} {height}",
        style=_FONT,
    )
    defs = ET.SubElement(svg, "defs")
    marker = ET.SubElement(
        defs, "marker", id="arrow", markerWidth="8", markerHeight="8", refX="7", refY="4", orient="auto"
    )
    ET.SubElement(marker, "path", d="M0,0 L8,4 L0,8 z", fill="#555")
    ET.SubElement(svg, "rect", width=str(_WIDTH), height=str(height), fill="white")
    _text(svg, 20, 30, picture.title, size=18, bold=True)
    _box(svg, 10, 50, 880, body_h + 50, f"network {picture.network}", "#f4f8fb", "#7a9cb8")
    _box(svg, 20, 80, 860, body_h + 10, picture.cluster, "#eef6ee", "#6b9c6b")
    where: dict[str, tuple[float, float]] = {}
    for index, pool in enumerate(picture.pools):
        name, detail = _pool_text(pool)
        _item(svg, 30, 110 + index * _ROW, name, detail, "#fff7e6", "#c9a255")
    for index, workload in enumerate(picture.workloads):
        y = 110 + index * _ROW
        _item(svg, 480, y, workload, "", "#ffffff", "#6b9c6b")
        where[workload] = (480, y + 17)
    for index, part in enumerate(picture.outside):
        y = 110 + index * _ROW
        title, _, detail = part.partition(": ")
        _item(svg, 920, y, title, detail, "#f3eefa", "#8a70b8")
        where[part] = (920, y + 17)
    for number, (source, destination, _) in enumerate(picture.flows, start=1):
        _arrow(svg, where[source], where[destination], number)
    top = 120 + body_h
    _text(svg, 20, top, "flows (the reachability contract, less DNS): from → to : ports", bold=True)
    for number, (source, destination, ports) in enumerate(picture.flows, start=1):
        _text(svg, 20, top + 18 * number, f"{number}. {source} → {destination} : {ports}", size=12)
    ET.indent(svg)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(svg, encoding="unicode") + "\n"


def _text(parent: ET.Element, x: float, y: float, words: str, size: int = 13, bold: bool = False) -> None:
    node = ET.SubElement(parent, "text", {"font-size": str(size)}, x=str(x), y=str(y))
    if bold:
        node.set("font-weight", "bold")
    node.text = words


def _box(
    parent: ET.Element, x: float, y: float, w: float, h: float, title: str, fill: str, line: str
) -> None:
    ET.SubElement(
        parent, "rect", x=str(x), y=str(y), width=str(w), height=str(h), rx="8", fill=fill, stroke=line
    )
    _text(parent, x + 10, y + 20, title, bold=True)


def _item(parent: ET.Element, x: float, y: float, title: str, detail: str, fill: str, line: str) -> None:
    group = ET.SubElement(parent, "g")
    ET.SubElement(
        group, "rect", x=str(x), y=str(y), width=str(_BOX_W), height="36", rx="5", fill=fill, stroke=line
    )
    _text(group, x + 8, y + 15, _fit(title), size=12, bold=True)
    if detail:
        _text(group, x + 8, y + 30, _fit(detail), size=11)


def _fit(words: str, limit: int = 44) -> str:
    return words if len(words) <= limit else words[: limit - 1] + "…"


def _arrow(parent: ET.Element, start: tuple[float, float], end: tuple[float, float], number: int) -> None:
    """A numbered curve between two boxes' left corners given: from the side that faces the other box."""
    (x1, y1), (x2, y2) = start, end
    if start == end:  # pods of one workload with each other: a loop on the box's right
        x1 += _BOX_W
        d = f"M{x1},{y1 - 8} C{x1 + 40},{y1 - 20} {x1 + 40},{y1 + 20} {x1 + 2},{y1 + 8}"
        x2, y2 = x1 + 60, y1 + 6
    elif x1 == x2:  # two workloads: bulge to the right of the column
        x1 += _BOX_W
        x2 += _BOX_W
        bend = x1 + 30 + 8 * (number % 6)
        d = f"M{x1},{y1} C{bend},{y1} {bend},{y2} {x2 + 2},{y2}"
    else:  # across columns: leave by the facing side, arrive at the facing side
        if x1 < x2:
            x1 += _BOX_W
        else:
            x2 += _BOX_W
        middle = (x1 + x2) / 2
        d = f"M{x1},{y1} C{middle},{y1} {middle},{y2} {x2 + (2 if x2 < x1 else -2)},{y2}"
    ET.SubElement(parent, "path", {"marker-end": "url(#arrow)"}, d=d, fill="none", stroke="#555")
    label = ET.SubElement(parent, "text", x=str((x1 + x2) / 2), y=str((y1 + y2) / 2 - 3), fill="#333")
    label.set("font-size", "10")
    label.text = str(number)


def write_diagram(plan: Plan, label: str, path: Path) -> None:
    """The plan's diagram as SVG at ``path``; an unwritable path is one line and exit 2."""
    document = render(picture(plan, label))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(document, encoding="utf-8")
    except OSError as error:
        exit_with([f"--diagram: {path}: cannot write ({error.strerror})"])
