"""Scheduling and queueing feasibility: whether the pods the plan creates can ever run.

Against the plan's node pools (``NodePool``: labels, taints and allocatable, which the caller reads from
the plan's cloud resources):

- ``unschedulable``: no pool matches the pod's ``nodeSelector`` and required node affinity, or none of
  those tolerates the pool's ``NoSchedule``/``NoExecute`` taints, or the pod's requests plus the requests
  of the DaemonSets that land on the pool exceed the pool's allocatable (an extended resource the pool
  does not advertise, ``nvidia.com/gpu``, ``vpc.amazonaws.com/efa``, ``rdma/shared_ib``, is 0). The
  scheduler's ``NodeAffinity``, ``TaintToleration`` and ``NodeResourcesFit`` filters
  (kubernetes.io "Assigning Pods to Nodes", "Taints and Tolerations", "Resource Management for Pods and
  Containers"); a pod no filter passes stays Pending and the cluster autoscaler finds no group to grow.

Without pools (plain manifests), the Kueue wiring alone:

- ``kueue-wiring``: a Job's ``kueue.x-k8s.io/queue-name`` names a LocalQueue of its namespace, the
  LocalQueue's ClusterQueue exists, every flavor the ClusterQueue lists is a ResourceFlavor, and some
  flavor takes the Job's pods: Kueue's flavor assigner admits a pod set on a flavor only if its pods
  tolerate the flavor's ``nodeTaints`` and their node selector agrees with its ``nodeLabels``
  (kueue.sigs.k8s.io "Resource Flavor", "Cluster Queue"); otherwise the LocalQueue or ClusterQueue is
  inactive, or the workload is never admitted;
- ``quota-below-one-run``: a run is admitted whole (all ``parallelism`` pods), so a ClusterQueue whose
  nominal quota plus what it may borrow in its cohort is below one run's requests never admits it; and
  ResourceQuota admission refuses the pod that takes its namespace over ``hard`` (kubernetes.io
  "Resource Quotas"). A namespace that queues onto a flavor is judged with every planned Job queued on
  that flavor: teams submit the platform's run in their own namespace (docs/kubernetes.md, teams).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import Pod, of_kind, pods
from judges.limits import quantity
from judges.validation import container_resource_name

POLICY = "unschedulable"
KUEUE_POLICY = "kueue-wiring"
QUOTA_POLICY = "quota-below-one-run"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_REFUSING = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class NodePool:
    """One pool of identical nodes: the labels and taints each node carries, and what one node offers
    pods (``cpu`` in cores, ``memory`` in bytes, extended resources in units)."""

    name: str
    instance_type: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...] = ()
    allocatable: Mapping[str, Decimal] = field(default_factory=dict)


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, str]) -> bool:
    """``ToleratesTaint`` (k8s.io/api core/v1 toleration.go): effect empty or equal; an empty key with
    ``Exists`` tolerates everything; ``Exists`` ignores the value, ``Equal`` (the default) compares it."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key, operator = toleration.get("key") or "", toleration.get("operator") or "Equal"
        if not key and operator == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if operator == "Exists" or str(toleration.get("value") or "") == str(taint.get("value") or ""):
            return True
    return False


def _untolerated(tolerations: Sequence[Mapping[str, Any]], taints: Sequence[Mapping[str, str]]) -> list[str]:
    return [
        f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
        for t in taints
        if t.get("effect") in _REFUSING and not tolerates(tolerations, t)
    ]


def _expression(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = term.get("key"), term.get("operator"), list(term.get("values") or [])
    present = key in labels
    value = labels.get(str(key), "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in {"Gt", "Lt"} and present and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def selects_node(spec: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """``nodeSelector`` (every pair) and required node affinity (any term, every expression)."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    return any(
        all(_expression(e, labels) for e in term.get("matchExpressions") or [])
        for term in required.get("nodeSelectorTerms") or []
    )


def requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """A pod's effective requests (the scheduler's ``computePodResourceRequest``): the sum over its
    containers, or the largest init container's where that is more. A container that states a limit and
    no request requests its limit (API defaulting)."""

    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, amount in _stated(container).items():
            total[name] = total.get(name, Decimal(0)) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _stated(container).items():
            total[name] = max(total.get(name, Decimal(0)), amount)
    return total


def _stated(container: Mapping[str, Any]) -> dict[str, Decimal]:
    """A container's requests, a limit standing for a missing request; names the API server refuses
    (``validateContainerResourceName``, the api-validation judge's) are left out."""
    resources = container.get("resources") or {}
    stated = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {
        name: quantity(value) for name, value in stated.items() if container_resource_name(str(name)) is None
    }


def _template_path(pod: Pod) -> str:
    return "spec.jobTemplate.spec.template.spec" if pod.owner.kind == "CronJob" else "spec.template.spec"


def _request_fields(pod: Pod, names: Sequence[str]) -> str:
    """Where the pod's effective request of each resource comes from: an init container whose request is
    above the sum over the containers (``initContainers[<name>]``), else the containers."""
    at, spec = _template_path(pod), pod.spec
    fields = []
    for name in names:
        summed = sum((_stated(c).get(name, Decimal(0)) for c in spec.get("containers") or []), Decimal(0))
        init = max(
            (c for c in spec.get("initContainers") or []),
            key=lambda c: _stated(c).get(name, Decimal(0)),
            default=None,
        )
        if init is not None and _stated(init).get(name, Decimal(0)) > summed:
            fields.append(f"{at}.initContainers[{init.get('name')}].resources.requests[{name}]")
        else:
            fields.append(f"{at}.containers[].resources.requests[{name}]")
    return ", ".join(dict.fromkeys(fields))


def _show(name: str, amount: Decimal) -> str:
    if name == "memory" or name.startswith("hugepages-"):
        return f"{amount / 2**30:.1f}Gi"
    return f"{amount.normalize():f}"


# --- Node pools ---------------------------------------------------------------------------------------


def _daemon_overhead(objects: Sequence[Mapping[str, Any]], pool: NodePool) -> dict[str, Decimal]:
    """What the DaemonSets that run on the pool's nodes request there. A DaemonSet pod that fits no node
    of the pool stays Pending and holds nothing (the scheduler's ``NodeResourcesFit`` counts only bound
    pods): it is named once, as a DaemonSet that does not fit, not subtracted from every other pod's
    room (review 37c B5)."""
    overhead: dict[str, Decimal] = {}
    for pod in pods(of_kind(objects, "DaemonSet")):
        if (
            selects_node(pod.spec, pool.labels)
            and not _untolerated(pod.spec.get("tolerations") or [], pool.taints)
            and not _short(pod, pool, {})
        ):
            for name, amount in requests(pod.spec).items():
                overhead[name] = overhead.get(name, Decimal(0)) + amount
    return overhead


def _short(pod: Pod, pool: NodePool, overhead: Mapping[str, Decimal]) -> dict[str, str]:
    """What the pool's nodes lack for the pod, after the DaemonSets that run there: resource → how much."""
    short = {}
    for name, amount in requests(pod.spec).items():
        if amount <= 0 or name == "ephemeral-storage":
            continue
        free = pool.allocatable.get(name, Decimal(0)) - (
            overhead.get(name, Decimal(0)) if pod.owner.kind != "DaemonSet" else 0
        )
        if amount > free:
            short[name] = f"{name} {_show(name, amount)} > {_show(name, max(free, Decimal(0)))}"
    return short


def _pool_findings(objects: Sequence[Mapping[str, Any]], pools: Sequence[NodePool]) -> Iterator[Finding]:
    overheads = {pool.name: _daemon_overhead(objects, pool) for pool in pools}
    for pod in pods(objects):
        selected = [p for p in pools if selects_node(pod.spec, p.labels)]
        daemon = pod.owner.kind == "DaemonSet"
        if not selected:
            if not daemon:
                wanted = pod.spec.get("nodeSelector") or "required node affinity"
                names = ", ".join(p.name for p in pools)
                yield Finding(
                    POLICY,
                    "mandatory",
                    pod.owner,
                    f"{_template_path(pod)}.nodeSelector/affinity {wanted}: no node pool has those labels "
                    f"(pools: {names}); the pods stay Pending",
                )
            continue
        tolerations = pod.spec.get("tolerations") or []
        admitted = [p for p in selected if not _untolerated(tolerations, p.taints)]
        if not admitted:
            if not daemon:
                why = "; ".join(
                    f"{p.name}: {', '.join(_untolerated(tolerations, p.taints))}" for p in selected
                )
                yield Finding(
                    POLICY,
                    "mandatory",
                    pod.owner,
                    f"{_template_path(pod)}.tolerations: every pool its selector allows has a taint the pod "
                    f"does not tolerate ({why}); the pods stay Pending",
                )
            continue
        shortfalls = {p.name: _short(pod, p, overheads[p.name]) for p in admitted}
        fitting = [name for name, short in shortfalls.items() if not short]
        if daemon:
            for name, short in shortfalls.items():
                if short:
                    yield Finding(
                        POLICY,
                        "mandatory",
                        pod.owner,
                        f"{_request_fields(pod, list(short))}: its pods do not fit a node of "
                        f"{name} ({', '.join(short.values())} allocatable)",
                    )
        elif not fitting:
            why = "; ".join(
                f"{name} ({next(p.instance_type for p in admitted if p.name == name)}): "
                f"{', '.join(short.values())}"
                for name, short in shortfalls.items()
            )
            lacking = [resource for short in shortfalls.values() for resource in short]
            yield Finding(
                POLICY,
                "mandatory",
                pod.owner,
                f"{_request_fields(pod, lacking)}: no node of the pools it may run on fits one pod, after "
                f"those pools' DaemonSets (requested > allocatable: {why})",
            )


# --- Kueue --------------------------------------------------------------------------------------------


def _by_name(objects: Sequence[Mapping[str, Any]], kind: str) -> dict[str, Mapping[str, Any]]:
    return {str(o["metadata"]["name"]): o for o in of_kind(objects, kind)}


def _flavors(queue: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(flavor name, flavor quota entry) of a ClusterQueue."""
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            yield str(flavor.get("name")), flavor


@dataclass(frozen=True)
class _Run:
    """A planned Job: its pod, how many pods one run is, and the ClusterQueue it lands in (``None``: not
    queued)."""

    job: Mapping[str, Any]
    pod: Pod
    count: int
    cluster_queue: Mapping[str, Any] | None


def _runs(objects: Sequence[Mapping[str, Any]]) -> tuple[list[_Run], list[Finding]]:
    locals_ = {
        (str(q["metadata"].get("namespace")), str(q["metadata"]["name"])): q
        for q in of_kind(objects, "LocalQueue")
    }
    cluster_queues = _by_name(objects, "ClusterQueue")
    runs, findings = [], []
    jobs = of_kind(objects, "Job")
    for job, pod in zip(jobs, pods(jobs), strict=True):
        spec = job.get("spec") or {}
        parallelism = int(spec.get("parallelism", 1))
        count = max(1, min(parallelism, int(spec.get("completions", parallelism))))
        queue = str((job.get("metadata") or {}).get("labels", {}).get(QUEUE_LABEL) or "")
        local = locals_.get((pod.namespace, queue)) if queue else None
        if queue and local is None:
            findings.append(
                Finding(
                    KUEUE_POLICY,
                    "mandatory",
                    pod.owner,
                    f"metadata.labels[{QUEUE_LABEL}] {queue!r}: no LocalQueue of that name in "
                    f"{pod.namespace}; Kueue never admits the Job",
                )
            )
        target = str((local.get("spec") or {}).get("clusterQueue")) if local is not None else ""
        runs.append(_Run(job, pod, count, cluster_queues.get(target)))
    return runs, findings


def _wiring(objects: Sequence[Mapping[str, Any]]) -> Iterator[Finding]:
    cluster_queues, flavors = _by_name(objects, "ClusterQueue"), _by_name(objects, "ResourceFlavor")
    for local in of_kind(objects, "LocalQueue"):
        target = str((local.get("spec") or {}).get("clusterQueue"))
        if target not in cluster_queues:
            yield Finding(
                KUEUE_POLICY,
                "mandatory",
                Subject.of(local),
                f"spec.clusterQueue {target!r}: no ClusterQueue of that name; the LocalQueue is inactive and "
                "its Jobs are never admitted",
            )
    for name, queue in cluster_queues.items():
        for flavor, _ in _flavors(queue):
            if flavor not in flavors:
                yield Finding(
                    KUEUE_POLICY,
                    "mandatory",
                    Subject.of(queue),
                    f"spec.resourceGroups[].flavors[{flavor}]: no ResourceFlavor of that name; ClusterQueue "
                    f"{name} is inactive",
                )


def _flavor_takes(pod: Pod, flavor: Mapping[str, Any]) -> list[str]:
    """Why Kueue's flavor assigner refuses the pod on this flavor (empty: it takes it)."""
    spec = flavor.get("spec") or {}
    why = [
        f"taint {t} not tolerated"
        for t in _untolerated(pod.spec.get("tolerations") or [], spec.get("nodeTaints") or [])
    ]
    node_labels = spec.get("nodeLabels") or {}
    for key, value in (pod.spec.get("nodeSelector") or {}).items():
        if key in node_labels and node_labels[key] != value:
            why.append(f"nodeSelector {key}={value} against the flavor's {key}={node_labels[key]}")
    return why


def _cohort_nominal(
    cluster_queues: Mapping[str, Mapping[str, Any]], cohort: str, flavor: str
) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for queue in cluster_queues.values():
        if (queue.get("spec") or {}).get("cohortName", (queue.get("spec") or {}).get("cohort")) != cohort:
            continue
        for name, entry in _flavors(queue):
            if name == flavor:
                for resource in entry.get("resources") or []:
                    total[resource["name"]] = total.get(resource["name"], Decimal(0)) + quantity(
                        resource["nominalQuota"]
                    )
    return total


def _queue_capacity(
    queue: Mapping[str, Any],
    flavor: str,
    entry: Mapping[str, Any],
    cluster_queues: Mapping[str, Mapping[str, Any]],
) -> dict[str, Decimal]:
    """What the ClusterQueue can hold on one flavor at most: its nominal quota plus what it may borrow
    (``borrowingLimit``, else every other queue's nominal quota in its cohort)."""
    spec = queue.get("spec") or {}
    cohort = spec.get("cohortName", spec.get("cohort"))
    shared = _cohort_nominal(cluster_queues, str(cohort), flavor) if cohort else {}
    capacity = {}
    for resource in entry.get("resources") or []:
        nominal = quantity(resource["nominalQuota"])
        if "borrowingLimit" in resource:
            borrow = quantity(resource["borrowingLimit"])
        else:
            borrow = shared.get(resource["name"], nominal) - nominal
        capacity[str(resource["name"])] = nominal + borrow
    return capacity


def _admission(objects: Sequence[Mapping[str, Any]], runs: Sequence[_Run]) -> Iterator[Finding]:
    flavors, cluster_queues = _by_name(objects, "ResourceFlavor"), _by_name(objects, "ClusterQueue")
    for run in runs:
        queue = run.cluster_queue
        if queue is None:
            continue
        listed = [(name, entry) for name, entry in _flavors(queue) if name in flavors]
        if not listed:
            continue  # an inactive queue, reported by the wiring
        refusals = {name: _flavor_takes(run.pod, flavors[name]) for name, _ in listed}
        taking = [(name, entry) for name, entry in listed if not refusals[name]]
        if not taking:
            why = "; ".join(f"{name}: {', '.join(r)}" for name, r in refusals.items())
            yield Finding(
                KUEUE_POLICY,
                "mandatory",
                run.pod.owner,
                f"spec.template.spec: no flavor of ClusterQueue {queue['metadata']['name']} takes its pods "
                f"({why}); Kueue never admits the Job",
            )
            continue
        needed = {k: v * run.count for k, v in requests(run.pod.spec).items()}
        shortfalls = []
        for name, entry in taking:
            capacity = _queue_capacity(queue, name, entry, cluster_queues)
            short = [
                f"{r} {_show(r, needed[r])} > {_show(r, capacity[r])}"
                for r in needed
                if r in capacity and needed[r] > capacity[r]
            ]
            if not short:
                break
            shortfalls.append(f"{name}: {', '.join(short)}")
        else:
            yield Finding(
                QUOTA_POLICY,
                "mandatory",
                run.pod.owner,
                f"one run ({run.count} pods) needs more than ClusterQueue {queue['metadata']['name']} can "
                f"ever hold, borrowing included ({'; '.join(shortfalls)}); Kueue never admits it",
            )


def _resource_quotas(objects: Sequence[Mapping[str, Any]], runs: Sequence[_Run]) -> Iterator[Finding]:
    """Each ResourceQuota admits one run of every Job its namespace can hold: the namespace's own Jobs,
    and every queued Job of a flavor the namespace's ClusterQueue offers."""
    locals_ = of_kind(objects, "LocalQueue")
    cluster_queues = _by_name(objects, "ClusterQueue")
    offered: dict[str, set[str]] = {}
    for local in locals_:
        queue = cluster_queues.get(str((local.get("spec") or {}).get("clusterQueue")))
        if queue is not None:
            offered.setdefault(str(local["metadata"].get("namespace")), set()).update(
                n for n, _ in _flavors(queue)
            )
    for quota in of_kind(objects, "ResourceQuota"):
        namespace = str(quota["metadata"].get("namespace"))
        flavors = offered.get(namespace, set())
        candidates = [
            run
            for run in runs
            if run.pod.namespace == namespace
            or (run.cluster_queue is not None and flavors & {n for n, _ in _flavors(run.cluster_queue)})
        ]
        hard = (quota.get("spec") or {}).get("hard") or {}
        for run in candidates:
            used: dict[str, Decimal] = {}
            for name, amount in requests(run.pod.spec).items():
                for key in (f"requests.{name}", name if "/" not in name else ""):
                    if key:
                        used[key] = amount * run.count
            used["pods"] = Decimal(run.count)
            over = [
                f"{key} {_show(key.removeprefix('requests.'), used[key])} > {limit}"
                for key, limit in hard.items()
                if key in used and used[key] > quantity(limit)
            ]
            if over:
                yield Finding(
                    QUOTA_POLICY,
                    "mandatory",
                    Subject.of(quota),
                    f"spec.hard: one run of {run.pod.owner} ({run.count} pods) in {namespace} takes "
                    f"{', '.join(over)}; ResourceQuota admission refuses its pods",
                )


def judge_scheduling(
    objects: Sequence[Mapping[str, Any]], pools: Sequence[NodePool] | None = None
) -> list[Finding]:
    runs, findings = _runs(objects)
    findings += [*_wiring(objects), *_admission(objects, runs), *_resource_quotas(objects, runs)]
    if pools:
        findings += _pool_findings(objects, pools)
    return findings
