"""What a person wants from a plan, in a screen: the node pools with their GPUs, the endpoints, the storage
and how many resources of which kind. Read from the plan itself (its resources and stack outputs), so it
says what the program registers, not what the config meant; ``plan --tree`` and ``--json`` keep the rest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from mlplatform.graph import HELM_RELEASE, Plan, PlannedResource, as_applied


@dataclass(frozen=True)
class Pool:
    """One node pool as the stack's ``nodePools`` output gives it."""

    name: str
    instance_type: str
    gpus_per_node: int | None
    spot: bool
    min_size: int
    max_size: int

    @property
    def always_on_gpus(self) -> int | None:
        """GPUs that run (and bill) even when idle: the pool's floor of nodes times GPUs per node."""
        return None if self.gpus_per_node is None else self.gpus_per_node * self.min_size


@dataclass(frozen=True)
class Summary:
    label: str
    pools: tuple[Pool, ...]
    endpoints: tuple[str, ...]
    storage: tuple[str, ...]
    counts: tuple[str, ...]


def summarize(plan: Plan, label: str) -> Summary:
    applied = [(r, as_applied(r.inputs)) for r in plan.resources]
    return Summary(
        label=label,
        pools=tuple(_pools(as_applied(plan.outputs.get("nodePools")))),
        endpoints=tuple(line for r, inputs in applied if (line := _endpoint(r, inputs, plan))),
        storage=tuple(line for r, inputs in applied if (line := _storage(r, inputs))),
        counts=_counts(plan.resources),
    )


def _pools(value: Any) -> Iterable[Pool]:
    for pool in value if isinstance(value, list) else []:
        if not isinstance(pool, Mapping):
            continue
        gpus = pool.get("gpusPerNode")
        yield Pool(
            name=str(pool.get("name", "?")),
            instance_type=str(pool.get("instanceType") or pool.get("vmSize") or "?"),
            gpus_per_node=int(gpus) if isinstance(gpus, int | float) else None,
            spot=bool(pool.get("spot")),
            min_size=int(pool.get("minSize") or 0),
            max_size=int(pool.get("maxSize") or 0),
        )


def _chart_objects(plan: Plan) -> set[str]:
    releases = {r.urn for r in plan.by_type(HELM_RELEASE)}
    return {r.urn for r in plan.resources if r.parent in releases}


def _endpoint(resource: PlannedResource, inputs: Mapping[str, Any], plan: Plan) -> str | None:
    """The Kubernetes API's reach, and every Service of the program's own that is not headless (a
    chart's Services are its plumbing; a headless one is a training run's rendezvous)."""
    if resource.type == "aws:eks/cluster:Cluster":
        vpc = inputs.get("vpcConfig") or {}
        if not vpc.get("endpointPublicAccess"):
            return "Kubernetes API: private (inside the VPC)"
        return f"Kubernetes API: public, from {', '.join(vpc.get('publicAccessCidrs') or ['anywhere'])}"
    if resource.type == "azure-native:containerservice:ManagedCluster":
        access = inputs.get("apiServerAccessProfile") or {}
        if access.get("enablePrivateCluster"):
            return "Kubernetes API: private (inside the VNet)"
        return f"Kubernetes API: public, from {', '.join(access.get('authorizedIPRanges') or ['anywhere'])}"
    if resource.type != "kubernetes:core/v1:Service" or resource.urn in _chart_objects(plan):
        return None
    spec = inputs.get("spec") or {}
    if spec.get("clusterIP") == "None":
        return None
    metadata = inputs.get("metadata") or {}
    ports = ", ".join(f"{p.get('name', 'port')} {p.get('port')}" for p in spec.get("ports") or [])
    where = f"{metadata.get('namespace', 'default')}/{metadata.get('name', resource.name)}"
    return f"Service {where}: {ports} ({spec.get('type', 'ClusterIP')})"


def _gib(field: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda inputs: f"{inputs.get(field, '?')} GiB"


# Resource type → what it is, and what to say of its size or kind.
_STORAGE: dict[str, tuple[str, Callable[[Mapping[str, Any]], str]]] = {
    "aws:s3/bucket:Bucket": ("S3 bucket", lambda inputs: ""),
    "aws:fsx/lustreFileSystem:LustreFileSystem": (
        "FSx for Lustre",
        lambda inputs: f"{inputs.get('deploymentType', '?')}, {inputs.get('storageCapacity', '?')} GiB",
    ),
    "aws:efs/fileSystem:FileSystem": ("EFS file system", lambda inputs: ""),
    "azure-native:storage:BlobContainer": ("blob container", lambda inputs: str(inputs.get("containerName"))),
    "azure-native:storage:FileShare": (
        "Azure Files share",
        lambda inputs: f"{inputs.get('enabledProtocols', 'SMB')}, {_gib('shareQuota')(inputs)}",
    ),
}


def _storage(resource: PlannedResource, inputs: Mapping[str, Any]) -> str | None:
    known = _STORAGE.get(resource.type)
    if known is None:
        return None
    what, detail = known
    said = detail(inputs)
    return f"{what} {resource.name}" + (f": {said}" if said else "")


def _counts(resources: list[PlannedResource]) -> tuple[str, ...]:
    """Resources by who creates them: each provider package, the Kubernetes objects charts render, and
    the components that only group others."""
    releases = {r.urn for r in resources if r.type == HELM_RELEASE}
    charted = sum(r.parent in releases for r in resources)
    packages = Counter(
        r.type.split(":", 1)[0]
        for r in resources
        if r.custom and r.parent not in releases and not r.type.startswith("pulumi:providers:")
    )
    components = sum(not r.custom for r in resources)
    parts = [f"{count} {package}" for package, count in sorted(packages.items(), key=lambda kv: -kv[1])]
    if charted:
        parts.append(f"{charted} Kubernetes objects from {len(releases)} Helm charts")
    parts.append(f"{components} components")
    return (f"{len(resources)} in all: {', '.join(parts)}",)


def print_summary(summary: Summary, console: Console) -> None:
    """Each part under its heading; tables without boxes and cells that never wrap mid-word."""
    console.print(Text(summary.label, style="bold"))
    if summary.pools:
        table = Table(box=None, padding=(0, 1), pad_edge=False, title_justify="left")
        for column, justify in (
            ("pool", "left"),
            ("instance type", "left"),
            ("GPUs/node", "right"),
            ("spot", "left"),
            ("min-max", "right"),
            ("always-on GPUs", "right"),
        ):
            table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        for pool in summary.pools:
            gpus = _number(pool.gpus_per_node)
            always_on = _number(pool.always_on_gpus)
            table.add_row(
                pool.name,
                pool.instance_type,
                gpus,
                "yes" if pool.spot else "no",
                f"{pool.min_size}-{pool.max_size}",
                always_on,
            )
        known = [p.always_on_gpus for p in summary.pools if p.always_on_gpus is not None]
        if len(summary.pools) > 1 and any(known):
            table.add_row("all", "", "", "", "", str(sum(known)), style="bold")
        console.print(Text("node pools", style="bold"))
        console.print(table)
    for heading, lines in (
        ("endpoints", summary.endpoints),
        ("storage", summary.storage),
        ("resources", summary.counts),
    ):
        if lines:
            console.print(Text(heading, style="bold"))
            for line in lines:
                # Wrapped at spaces; a word longer than the line ends in an ellipsis, never breaks.
                console.print(Padding(Text(line, overflow="ellipsis"), (0, 0, 0, 2), expand=False))


def _number(value: int | None) -> str:
    """A count for the table: unknown as "?", none as "-" (a CPU pool's GPUs)."""
    return "?" if value is None else str(value) if value else "-"
