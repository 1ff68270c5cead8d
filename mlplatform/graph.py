"""The planned resource graph, as the engine and a policy pack see it, and the wire form's conventions.

The bottom floor of the CLI: ``plan`` builds these, ``rendering`` adds a chart's objects to them, and
``report``, ``summary``, ``judging`` and ``check`` read them; it imports none of those.
"""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass, field
from typing import Any

# How the engine marks a secret on the wire (a map with this signature key and a "value").
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"
STACK_TYPE = "pulumi:pulumi:Stack"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


@dataclass(frozen=True)
class PlannedResource:
    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    provider: str | None
    inputs: dict[str, Any]
    dependencies: tuple[str, ...] = ()
    # Input property name -> URNs it came from (what AnalyzeStack's graph needs).
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    # The resource option that makes the engine refuse to delete it.
    protect: bool = False
    # Input paths the engine keeps from state instead of the program's value (the ignoreChanges option).
    ignore_changes: tuple[str, ...] = ()
    # The cloud id the engine adopts instead of creating the resource (the import option), if any.
    import_id: str | None = None


def stable_order(resources: list[PlannedResource]) -> list[PlannedResource]:
    """``resources`` in an order that depends on the graph alone: every resource after its parent, its
    provider and what it depends on, as the engine registers them, ties broken by URN (Kahn's algorithm)."""
    by_urn = {r.urn: r for r in resources}
    before: dict[str, set[str]] = {}
    for r in resources:
        edges = {r.parent, *r.dependencies, *(u for us in r.property_dependencies.values() for u in us)}
        if r.provider is not None:
            edges.add(r.provider.rsplit("::", 1)[0])  # a provider reference is "<urn>::<id>"
        before[r.urn] = {u for u in edges if u in by_urn and u != r.urn}
    after: dict[str, list[str]] = {urn: [] for urn in by_urn}
    for urn, earlier in before.items():
        for e in earlier:
            after[e].append(urn)
    ready = [urn for urn, earlier in before.items() if not earlier]
    heapq.heapify(ready)
    ordered: list[PlannedResource] = []
    while ready:
        urn = heapq.heappop(ready)
        ordered.append(by_urn[urn])
        for later in after[urn]:
            before[later].discard(urn)
            if not before[later]:
                heapq.heappush(ready, later)
    # A cycle cannot come from the engine; should one appear, what is left keeps its URN order.
    return ordered + sorted((r for r in resources if before[r.urn]), key=lambda r: r.urn)


@dataclass
class Plan:
    project: str
    stack: str
    resources: list[PlannedResource] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    # What the program logged as warnings (``pulumi.log.warn``), as ``pulumi preview`` shows them.
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The plan as the JSON ``plan --json`` writes: the same bytes for an unchanged stack (the engine
        registers concurrently, so registration order and dependency order vary run to run)."""
        return {
            "project": self.project,
            "stack": self.stack,
            "resources": [
                {
                    "urn": r.urn,
                    "type": r.type,
                    "name": r.name,
                    "parent": r.parent,
                    "custom": r.custom,
                    "provider": r.provider,
                    "inputs": _keys_sorted(r.inputs),
                    "dependencies": sorted(r.dependencies),
                    "propertyDependencies": {
                        k: sorted(v) for k, v in sorted(r.property_dependencies.items())
                    },
                    "protect": r.protect,
                    "ignoreChanges": list(r.ignore_changes),
                    **({"importId": r.import_id} if r.import_id is not None else {}),
                }
                for r in stable_order(self.resources)
            ],
            "outputs": _keys_sorted(self.outputs),
        }

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> Plan:
        """The inverse of ``to_dict``: a plan read back from ``mlplatform plan --json``. A missing key
        raises ``KeyError``, a wrong shape ``TypeError`` or ``AttributeError``."""
        return cls(
            project=str(document["project"]),
            stack=str(document["stack"]),
            resources=[
                PlannedResource(
                    urn=str(r["urn"]),
                    type=str(r["type"]),
                    name=str(r["name"]),
                    parent=r.get("parent"),
                    custom=bool(r["custom"]),
                    provider=r.get("provider"),
                    inputs=dict(r.get("inputs") or {}),
                    dependencies=tuple(r.get("dependencies") or ()),
                    property_dependencies=dict(r.get("propertyDependencies") or {}),
                    protect=bool(r.get("protect", False)),
                    ignore_changes=tuple(r.get("ignoreChanges") or ()),
                    import_id=r.get("importId"),
                )
                for r in document["resources"]
            ],
            outputs=dict(document.get("outputs") or {}),
        )

    def by_type(self, token: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == token]

    def providers(self) -> dict[str, PlannedResource]:
        """Provider reference (``urn::id``) → the provider resource."""
        return {_provider_ref(r): r for r in self.resources if r.type.startswith("pulumi:providers:")}


def _provider_ref(resource: PlannedResource) -> str:
    return f"{resource.urn}::{provider_id(resource.urn)}"


def provider_id(urn: str) -> str:
    """Provider ids are UUIDs in a real deployment; derive a stable one from the URN."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, urn))


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SECRET_SIG) is not None


def as_applied(value: Any) -> Any:
    """Wire form back to the object the provider applies: secrets unwrapped, and whole numbers as
    integers again (the wire carries every number as a float; Kubernetes integer fields reject 10001.0)."""
    if is_secret(value):
        return as_applied(value["value"])
    if isinstance(value, dict):
        return {k: as_applied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_applied(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def masked(value: Any) -> Any:
    """Secrets shown as ``[secret]``, for printing."""
    if is_secret(value):
        return "[secret]"
    if isinstance(value, dict):
        return {k: masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def _keys_sorted(value: Any) -> Any:
    """``value`` with every mapping's keys in sorted order: a program builds some maps (tags, labels)
    from sets and merges, so their key order varies run to run while their content does not."""
    if isinstance(value, dict):
        return {key: _keys_sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_keys_sorted(item) for item in value]
    return value
