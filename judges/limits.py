"""LimitRanger, offline (review wt-cluster2 B1): a container that states requests but no limits gets
each missing limit from its namespace's LimitRange ``default``, and the pod is then refused if a request
exceeds that limit ("must be less than or equal to cpu limit"; kubernetes.io, "Limit Ranges": default
vs defaultRequest, and the example of a request larger than the default limit). A missing request is
set to the container's own limit when it has one (API defaulting, before admission), else to
``defaultRequest``.

The judge admits a probe per guarded namespace: one container requesting what the namespace's
ResourceQuota admits in full (the largest pod the namespace can hold), with no limits, as a team
writes a GPU Job; and every planned pod.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import of_kind, pods

POLICY = "limit-range-defaults"
# apimachinery resource.Quantity suffixes: decimal SI and binary.
_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    **{s: Decimal(1000) ** (n + 1) for n, s in enumerate("kMGTPE")},
    **{f"{s}i": Decimal(1024) ** (n + 1) for n, s in enumerate("KMGTPE")},
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(value: Any) -> Decimal:
    """A resource.Quantity ("1500m", "256Mi", "2") as a number."""
    match = _QUANTITY.match(str(value))
    if match is None or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]


def admit(container: Mapping[str, Any], limit_ranges: Sequence[Mapping[str, Any]]) -> list[str]:
    """LimitRanger's defaulting, then ``ValidateResourceRequirements`` (k8s.io/kubernetes
    ``pkg/apis/core/validation``: a request "must be less than or equal to" its limit) on one container:
    the problems the API server reports, each naming the field and where the limit came from."""
    resources = container.get("resources") or {}
    stated = dict(resources.get("limits") or {})
    limits = dict(stated)
    requests = {**limits, **(resources.get("requests") or {})}
    for limit_range in limit_ranges:
        for item in (limit_range.get("spec") or {}).get("limits") or []:
            if item.get("type") != "Container":
                continue
            for name, value in (item.get("default") or {}).items():
                limits.setdefault(name, value)
            for name, value in (item.get("defaultRequest") or {}).items():
                requests.setdefault(name, value)
    return [
        f"resources.requests[{name}] {requests[name]}: must be less than or equal to {name} limit {limit} "
        f"({'its own limit' if name in stated else 'the LimitRange default'}; ValidateResourceRequirements)"
        for name, limit in limits.items()
        if name in requests and quantity(requests[name]) > quantity(limit)
    ]


def _probe(quota: Mapping[str, Any]) -> dict[str, Any]:
    hard = (quota.get("spec") or {}).get("hard") or {}
    requests = {r: hard[f"requests.{r}"] for r in ("cpu", "memory") if f"requests.{r}" in hard}
    return {"name": "probe", "resources": {"requests": requests}}


def judge_limit_ranges(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    ranges: dict[str, list[Mapping[str, Any]]] = {}
    for limit_range in of_kind(objects, "LimitRange"):
        ranges.setdefault(str(limit_range["metadata"].get("namespace", "")), []).append(limit_range)
    candidates: list[tuple[Subject, str, str, Mapping[str, Any]]] = [
        (
            Subject.of(quota),
            str(quota["metadata"].get("namespace", "")),
            "spec.hard: a container requesting all of it, no limits:",
            _probe(quota),
        )
        for quota in of_kind(objects, "ResourceQuota")
    ]
    for pod in pods(objects):
        at = "spec.jobTemplate.spec.template.spec" if pod.owner.kind == "CronJob" else "spec.template.spec"
        for key in ("initContainers", "containers", "ephemeralContainers"):
            for container in pod.spec.get(key) or []:
                where = f"{at}.{key}[{container.get('name')}]."
                candidates.append((pod.owner, pod.namespace, where, container))
    return [
        Finding(POLICY, "mandatory", subject, f"{where}{problem}")
        for subject, namespace, where, container in candidates
        for problem in admit(container, ranges.get(namespace, []))
    ]
