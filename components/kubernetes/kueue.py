"""GPU scheduling across teams with Kueue: flavors from the pools, quotas from their full size, one
cohort, a queue per training namespace, priorities — written once for any ClusterHandle.

Why Kueue: a multi-node Job created directly can take half the GPU nodes while another takes the other
half, and both wait for ever. Kueue admits a Job only when its whole quota fits (all workers or none),
and ``waitForPodsReady`` with ``blockAdmission`` requeues a run whose pods do not all start, so a
partially scheduled run does not hold GPUs (kueue.sigs.k8s.io, "Sequential admission with ready pods").

The shape, all Kueue v1beta2 objects (the API version Kueue 0.19.2 stores; its CRDs ship in the chart):

- one ``ResourceFlavor`` per node pool: the pool's label pins admitted pods to it, and the pool's taints
  are ``nodeTaints``, so only Jobs that tolerate them (GPU, spot) get that flavor — a CPU-only Job
  never spills onto GPU nodes, and only a Job that accepts eviction lands on spot capacity;
- one ``ClusterQueue`` for the platform's own runs (``ml-training``) holding the nominal quota of every
  flavor, equal to the pool at its ``maxSize`` (GPUs, CPU, memory and the fabric's devices), and one
  per team with no quota of its own, borrowing what is idle in the cohort up to the team's limit;
- all in one cohort: the platform queue reclaims its quota from borrowers, and a borrowing Job may
  preempt lower-priority work elsewhere in the cohort;
- ``WorkloadPriorityClass`` production > research > opportunistic;
- a ``LocalQueue`` in each queued namespace, named ``QUEUE_NAME``, which Jobs name in their
  ``kueue.x-k8s.io/queue-name`` label; a ValidatingAdmissionPolicy refuses a Job without it there, so
  nobody bypasses the queues with ``kubectl apply``.

Priority is per run (the ``kueue.x-k8s.io/priority-class`` label). Kueue 0.19.2 has no per-queue
default priority (apis/kueue/v1beta2 LocalQueue and ClusterQueue specs), so a team run that names none
gets priority 0, below every class here: the lowest, first to be preempted.

A queued Job is not created suspended: Kueue's webhook suspends it at creation and un-suspends it on
admission (Kueue docs, "Run a Kubernetes Job": "you do not need to create the Job in a suspended
state"). Writing ``suspend: true`` ourselves would make the next ``pulumi up`` (server-side apply)
suspend a running Job again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from components.config import PlatformConfig, Priority, TeamConfig
from components.handle import WORKLOAD_IDENTITIES, ClusterHandle, Fabric, PoolHandle
from components.kubernetes.objects import MANAGED_BY, Object, admission_policy
from workloads.fabric import fabric_profile

API_VERSION = "kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"
RELEASE = "kueue"
COHORT = "ml-platform"
PLATFORM_QUEUE = "platform"
# The controller-manager pods (charts/kueue _helpers.tpl "kueue.selectorLabels" at v0.19.2, release
# name "kueue"), and the ports kube-apiserver calls on them: the webhook Service's targetPort 9443
# (values.yaml webhookService.ports) and the visibility APIService's Service targetPort 8082
# (templates/visibility/service.yaml); manager.yaml names them webhook-server and visibility.
CONTROLLER_SELECTOR = {
    "app.kubernetes.io/name": "kueue",
    "app.kubernetes.io/instance": RELEASE,
    "control-plane": "controller-manager",
}
API_SERVER_PORTS = (9443, 8082)
# Every queued namespace has one LocalQueue of this name: a Job says which queue by its namespace.
QUEUE_NAME = "default"
# Kueue's job labels (pkg/controller/constants/constants.go at v0.19.2).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# On namespaces whose Jobs must go through a queue; the pack refuses an unqueued Job there
# (policies/mlplatform_policies/queueing.py).
QUEUED_NAMESPACE_LABEL = "ml-platform.io/queueing"

PRIORITY_VALUES: dict[Priority, int] = {
    Priority.PRODUCTION: 1000,
    Priority.RESEARCH: 500,
    Priority.OPPORTUNISTIC: 100,
}
_PRIORITY_DESCRIPTIONS: dict[Priority, str] = {
    Priority.PRODUCTION: "Runs that ship models: admitted first, preempt research and opportunistic work",
    Priority.RESEARCH: "Team experiments: may borrow idle quota and preempt opportunistic work",
    Priority.OPPORTUNISTIC: "Backfill on idle capacity: preempted first",
}

# The resources a flavor's quota covers, beside the GPUs and the fabric devices of the pools. Hugepages
# are carved out per node and checked by the scheduler; Kueue does not count them (excluded below), as
# a quota on them would have to guess each instance type's hugepage reservation.
_BASE_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
_FABRIC_RESOURCES = {Fabric.EFA: "vpc.amazonaws.com/efa", Fabric.INFINIBAND: "rdma/shared_ib"}
EXCLUDED_RESOURCE_PREFIXES = ("hugepages-",)

# How long an admitted run may take to get every pod Ready before Kueue evicts and requeues it, and how
# long a running workload may have a pod not Ready (a lost node being replaced) before the same. Kueue
# 0.19.2's default is 30 minutes for the first and the first's value for the second
# (apis/config/v1beta2/defaults.go: DefaultWaitForPodsReadyTimeout = 30 * time.Minute, RecoveryTimeout
# defaulted from Timeout). A scaled-from-zero p5en/ND96 node and a multi-GB CUDA image pull take tens of
# minutes, so neither is shortened; recovery is stated, not inherited.
PODS_READY_TIMEOUT = "30m"
PODS_RECOVERY_TIMEOUT = "30m"


def queueing_enabled(config: PlatformConfig) -> bool:
    """Kueue runs where there are GPUs to share, unless the stack says otherwise."""
    if config.kubernetes.kueue is not None:
        return config.kubernetes.kueue
    return any(pool.kind.value == "gpu" for pool in config.node_pools)


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": dict(MANAGED_BY)}
    if namespace is not None:
        metadata["namespace"] = namespace
    return metadata


def flavor_name(pool: PoolHandle) -> str:
    return f"pool-{pool.name}"


def resource_flavor(pool: PoolHandle) -> Object:
    spec: dict[str, Any] = {"nodeLabels": pool.node_selector}
    if pool.taints:
        spec["nodeTaints"] = [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in pool.taints]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _meta(flavor_name(pool)),
        "spec": spec,
    }


def covered_resources(handle: ClusterHandle) -> list[str]:
    """Every resource a queued pod may request on this cluster: one resource group covers them all, so
    each flavor states a quota for each (zero where its nodes have none)."""
    fabrics = [_FABRIC_RESOURCES[f] for f in (Fabric.EFA, Fabric.INFINIBAND) if f in handle.fabrics]
    return [*_BASE_RESOURCES, *fabrics]


def pool_capacity(pool: PoolHandle, max_size: int) -> dict[str, str]:
    """What the pool holds at full scale, per covered resource."""
    capacity = {
        "cpu": str(pool.vcpus * max_size),
        "memory": f"{pool.memory_gib * max_size}Gi",
        "nvidia.com/gpu": str(pool.gpus_per_node * max_size),
    }
    fabric = _FABRIC_RESOURCES.get(pool.fabric)
    if fabric is not None:
        # In the unit a training pod asks for, one pod per node: EFA interfaces per node, but one
        # ``rdma/shared_ib`` slot (the shared device plugin advertises rdmaHcaMax slots that each expose
        # every HCA; review D7).
        capacity[fabric] = str(int(fabric_profile(pool).resources[fabric]) * max_size)
    return capacity


def queued_pools(handle: ClusterHandle, config: PlatformConfig) -> list[PoolHandle]:
    """The pools queued Jobs run on: every GPU pool and the training run's pool. The system and
    inference pools are not lent: a Job without a nodeSelector would otherwise be placed there by
    Kueue and compete with the add-ons and serving. CPU before GPU and on-demand before spot: Kueue
    tries flavors in this order, so a Job that fits several takes the cheapest that is not evictable."""
    training = config.workloads.training
    names = {p.name for p in handle.pools if p.gpus_per_node > 0}
    if training is not None:
        names.add(training.pool)
    pools = [p for p in handle.pools if p.name in names]
    return sorted(pools, key=lambda p: (p.gpus_per_node > 0, p.spot))


def _resource_group(
    handle: ClusterHandle,
    pools: list[PoolHandle],
    quota: Mapping[str, Mapping[str, str]],
    borrowing_limit: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    resources = covered_resources(handle)
    flavors = []
    for pool in pools:
        flavor_quota = quota.get(pool.name, {})
        entries = []
        for resource in resources:
            entry = {"name": resource, "nominalQuota": flavor_quota.get(resource, "0")}
            if borrowing_limit is not None and resource in borrowing_limit:
                entry["borrowingLimit"] = borrowing_limit[resource]
            entries.append(entry)
        flavors.append({"name": flavor_name(pool), "resources": entries})
    return {"coveredResources": resources, "flavors": flavors}


def _namespace_selector(namespace: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": namespace}}


def platform_cluster_queue(handle: ClusterHandle, config: PlatformConfig) -> Object:
    """The platform's queue owns the cohort's quota: every pool at its maximum size."""
    pools = queued_pools(handle, config)
    quota = {pool.name: pool_capacity(pool, config.pool(pool.name).max_size) for pool in pools}
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _meta(PLATFORM_QUEUE),
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": _namespace_selector(WORKLOAD_IDENTITIES["training"].namespace),
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [_resource_group(handle, pools, quota)],
            "preemption": {
                # Take lent quota back from any borrower, and within the queue let higher priority win.
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "LowerPriority",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            },
        },
    }


def _team_limit(team: TeamConfig) -> dict[str, str] | None:
    return None if team.gpu_borrowing_limit is None else {"nvidia.com/gpu": str(team.gpu_borrowing_limit)}


def team_cluster_queue(handle: ClusterHandle, config: PlatformConfig, team: TeamConfig) -> Object:
    """A team's queue has no quota of its own: it runs on what is idle in the cohort, up to its limit,
    and a borrowing run may preempt only work of lower priority than research.

    ``reclaimWithinCohort`` is not ``Never``: Kueue's CRD refuses ``Never`` together with a
    ``borrowWithinCohort`` policy other than ``Never`` (ClusterQueuePreemption CEL rule, charts/kueue
    CRDs at v0.19.2). With no nominal quota a team has nothing to reclaim, so ``LowerPriority`` changes
    nothing else."""
    pools = queued_pools(handle, config)
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _meta(f"team-{team.name}"),
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": _namespace_selector(f"team-{team.name}"),
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [_resource_group(handle, pools, {}, _team_limit(team))],
            "preemption": {
                "reclaimWithinCohort": "LowerPriority",
                "withinClusterQueue": "LowerPriority",
                "borrowWithinCohort": {
                    "policy": "LowerPriority",
                    "maxPriorityThreshold": PRIORITY_VALUES[Priority.RESEARCH] - 1,
                },
            },
        },
    }


def team_admissible(handle: ClusterHandle, config: PlatformConfig, team: TeamConfig) -> dict[str, int]:
    """The most a team's queue can admit at once, per resource (CPU in cores, memory in GiB, GPUs):
    every queued pool at full size, GPUs capped per flavor by the team's borrowing limit. The team
    namespace's ResourceQuota is this, so it never refuses pods Kueue admitted."""
    limit = team.gpu_borrowing_limit
    total = {"cpu": 0, "memory": 0, "nvidia.com/gpu": 0}
    for pool in queued_pools(handle, config):
        size = config.pool(pool.name).max_size
        gpus = pool.gpus_per_node * size
        total["cpu"] += pool.vcpus * size
        total["memory"] += pool.memory_gib * size
        total["nvidia.com/gpu"] += gpus if limit is None else min(gpus, limit)
    return total


def local_queue(namespace: str, cluster_queue: str) -> Object:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": _meta(QUEUE_NAME, namespace),
        "spec": {"clusterQueue": cluster_queue},
    }


def priority_classes() -> list[Object]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": _meta(priority.value),
            "value": value,
            "description": _PRIORITY_DESCRIPTIONS[priority],
        }
        for priority, value in PRIORITY_VALUES.items()
    ]


def queue_objects(handle: ClusterHandle, config: PlatformConfig) -> list[Object]:
    """Every Kueue object of this cluster; the cluster-scoped ones first, LocalQueues last (they need
    their namespaces and ClusterQueues)."""
    teams = config.kubernetes.teams
    return [
        *priority_classes(),
        *(resource_flavor(pool) for pool in queued_pools(handle, config)),
        platform_cluster_queue(handle, config),
        *(team_cluster_queue(handle, config, team) for team in teams),
        *queue_required_policy(),
        local_queue(WORKLOAD_IDENTITIES["training"].namespace, PLATFORM_QUEUE),
        *(local_queue(f"team-{team.name}", f"team-{team.name}") for team in teams),
    ]


def job_labels(priority: Priority) -> dict[str, str]:
    """What a Job carries to be queued: the namespace's LocalQueue and its priority."""
    return {QUEUE_LABEL: QUEUE_NAME, PRIORITY_LABEL: priority.value}


def manager_config() -> dict[str, Any]:
    """Kueue's Configuration: the chart's default at 0.19.2 (values.yaml ``managerConfig``), plus
    waitForPodsReady, the hugepage exclusion, Job webhooks scoped to the queued namespaces, and only
    the Job integrations the platform uses (the pod, Deployment and StatefulSet integrations add a
    webhook call to every such create in the cluster)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        # apis/config/v1beta2 WaitForPodsReady at v0.19.2: timeout is required; blockAdmission admits
        # the next run only once this one's pods are all Ready, so two big runs cannot deadlock.
        "waitForPodsReady": {
            "timeout": PODS_READY_TIMEOUT,
            "recoveryTimeout": PODS_RECOVERY_TIMEOUT,
            "blockAdmission": True,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffLimitCount": 5,
                "backoffBaseSeconds": 60,
                "backoffMaxSeconds": 3600,
            },
        },
        "manageJobsWithoutQueueName": False,
        # The chart scopes every Job-type webhook to this selector (templates/webhook/manifests.yaml at
        # v0.19.2, else all namespaces but kube-system and its own; values.yaml, Kueue docs "Opt-in
        # namespace management"): only the queued namespaces, so other charts' hook Jobs never wait
        # on Kueue's fail-closed webhook and a Kueue outage blocks Jobs only where Kueue queues them.
        "managedJobsNamespaceSelector": {"matchLabels": {QUEUED_NAMESPACE_LABEL: "required"}},
        "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
        "resources": {"excludeResourcePrefixes": list(EXCLUDED_RESOURCE_PREFIXES)},
    }


def chart_values() -> dict[str, Any]:
    """Values for the kueue chart (values.yaml at 0.19.2): two replicas with a PDB, since its admission
    webhook fails closed and a lone replica being rescheduled blocks every Job create; tolerating
    ``CriticalAddonsOnly`` so it may run on a tainted AKS system pool; our manager configuration."""
    return {
        "controllerManager": {
            "replicas": 2,
            "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
        },
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(), sort_keys=False)},
    }


def queue_required_policy() -> list[Object]:
    """Refuse, on the cluster, a Job or JobSet without a queue name in a queued namespace: the same rule
    the pack applies to the stack (ValidatingAdmissionPolicy, admissionregistration.k8s.io/v1, GA in
    Kubernetes 1.30)."""
    return admission_policy(
        "ml-platform-require-queue",
        [
            {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"]},
            {
                "apiGroups": ["jobset.x-k8s.io"],
                "apiVersions": ["*"],
                "operations": ["CREATE"],
                "resources": ["jobsets"],
            },
        ],
        [
            {
                "expression": f"has(object.metadata.labels) && '{QUEUE_LABEL}' in object.metadata.labels",
                "message": f"Jobs in this namespace go through Kueue: set the label {QUEUE_LABEL}",
            }
        ],
        {QUEUED_NAMESPACE_LABEL: "required"},
    )
