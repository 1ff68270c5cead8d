"""Judges that see behaviour: what the API server, the admission chain, the scheduler, Kueue and the
network would do with the planned Kubernetes objects (DESIGN.md, "Judges that see behaviour").

Each judge is a pure function over the objects ``mlplatform plan --manifests`` exports (charts included),
returning ``Finding``s: ``mandatory`` where the cluster would refuse or break what the plan applies,
``advisory`` where it works but says more than the platform means (a flow no contract lists, a rule not
evaluated offline, an object the operator must make). ``JUDGES`` is the one registry: ``mlplatform
check`` runs every judge in it, ``mlplatform judge`` those that need no cloud context, and audit evidence
maps each judge's stable ``name`` and ``policies`` to controls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judges import (
    bootstrap,
    cel,
    disruption,
    immutable,
    kube,
    limits,
    pod_security,
    reachability,
    references,
    runtime,
    scheduling,
    secrets_rbac,
    signatures,
    sqlite,
    storage,
    stores,
    tenancy,
    transport,
    validation,
    webhooks,
)
from judges.findings import Finding, Subject
from judges.reachability import CONTROL_PLANE_NETWORK
from judges.scheduling import NodePool


@dataclass(frozen=True)
class Context:
    """What a judge may read: the objects, the network the API server calls webhooks from, and the node
    pools (``None`` when judging manifests without a plan's cloud resources)."""

    objects: Sequence[Mapping[str, Any]]
    cluster_network: str = CONTROL_PLANE_NETWORK
    pools: Sequence[NodePool] | None = None
    # Namespaces whose objects the judges do not see in full (a Helm release there was not rendered).
    unseen: frozenset[str] = frozenset()
    # The objects the stack's previous plan applied (``check --previous``); ``None``: no day 2 judged.
    previous: Sequence[Mapping[str, Any]] | None = None
    # The managed Kubernetes the plan makes (``eks``, ``aks``): its built-in objects exist; ``None``: not
    # known (plain manifests), every service's built-ins resolve.
    cluster: str | None = None


@dataclass(frozen=True)
class Judge:
    """One judge: a stable ``name``, the policy names its findings carry, and whether it reads the plan's
    cloud resources (``cloud``: the node pools; without them it judges what it can)."""

    name: str
    policies: tuple[str, ...]
    run: Callable[[Context], list[Finding]]
    summary: str
    cloud: bool = False


JUDGES: tuple[Judge, ...] = (
    Judge(
        "cel",
        (cel.CRD_POLICY, cel.VAP_POLICY),
        lambda c: cel.judge_cel(c.objects),
        "CRD x-kubernetes-validations on custom resources; ValidatingAdmissionPolicies on the objects "
        "they select and on the pods the planned workloads create",
    ),
    Judge(
        "reachability",
        reachability.POLICIES,
        lambda c: reachability.judge_reachability(c.objects, c.cluster_network),
        "the platform's flow contract through the NetworkPolicies",
    ),
    Judge(
        "pod-security",
        (pod_security.POLICY, pod_security.NONROOT_POLICY, pod_security.UNGUARDED_POLICY),
        lambda c: pod_security.judge_pod_security(c.objects, c.unseen),
        "Pod Security admission per namespace level; inert capabilities; loose levels nothing guards",
    ),
    Judge(
        "team-isolation",
        (tenancy.POLICY,),
        lambda c: tenancy.judge_tenancy(c.objects),
        "a team namespace's NetworkPolicies, ResourceQuota and LimitRange refused to the team at admission",
    ),
    Judge(
        "limit-ranges",
        (limits.POLICY,),
        lambda c: limits.judge_limit_ranges(c.objects),
        "LimitRange defaulting against requests-only pods",
    ),
    Judge(
        "shared-volume-owners",
        (storage.POLICY,),
        lambda c: storage.judge_shared_volume_owners(c.objects),
        "writers of shared volumes may write their root",
    ),
    Judge(
        "image-signatures",
        (signatures.POLICY, signatures.POLICY_SELF, signatures.POLICY_IDENTITY),
        lambda c: signatures.judge_signatures(c.objects, c.unseen, c.cluster),
        "every image a guarded namespace runs is verified at admission against a signing key, by a "
        "verifier whose pods carry the cloud identity that reads the registry",
    ),
    Judge(
        "hook-jobs",
        (webhooks.POLICY,),
        lambda c: webhooks.judge_hook_jobs(c.objects),
        "Helm hook Jobs behind another release's fail-closed Job webhooks",
    ),
    Judge(
        "rendezvous",
        (runtime.RENDEZVOUS_POLICY,),
        lambda c: runtime.judge_rendezvous(c.objects),
        "c10d rendezvous timeouts against the Job's retries",
    ),
    Judge(
        "disruption-budgets",
        (disruption.POLICY,),
        lambda c: disruption.judge_disruption_budgets(c.objects),
        "PodDisruptionBudgets over pods without a scale",
    ),
    Judge(
        "unhealthy-eviction",
        (disruption.UNHEALTHY_POLICY,),
        lambda c: disruption.judge_unhealthy_eviction(c.objects),
        "PodDisruptionBudgets over pods unready by design let them be evicted (AlwaysAllow)",
    ),
    Judge(
        "bootstrap-secrets",
        (bootstrap.POLICY,),
        lambda c: bootstrap.judge_bootstrap_secrets(c.objects, c.previous),
        "Secrets an awaited workload needs are made by the plan, or by a step that can run before it",
    ),
    Judge(
        "sqlite-openers",
        (sqlite.POLICY,),
        lambda c: sqlite.judge_sqlite_openers(c.objects),
        "a SQLite file has one opener at a time",
    ),
    Judge(
        "store-isolation",
        (stores.POLICY,),
        lambda c: stores.judge_store_isolation(c.objects),
        "no volume another namespace writes reaches a store a workload keeps its database in",
    ),
    Judge(
        "transport",
        (transport.PLAINTEXT,),
        lambda c: transport.judge_transport(c.objects, c.cluster_network),
        "each contract flow is TLS or a named exception (the fabric, cluster DNS, metrics scrapes)",
    ),
    Judge(
        "secrets-rbac",
        (secrets_rbac.POLICY,),
        lambda c: secrets_rbac.judge_secrets_rbac(c.objects),
        "no ServiceAccount but a named operator's reads Secrets cluster-wide (ClusterRoleBindings)",
    ),
    Judge(
        "references",
        (
            references.POLICY,
            references.OPERATOR_POLICY,
            references.SERVICE_POLICY,
            references.GOVERNING_POLICY,
        ),
        lambda c: references.judge_references(c.objects, c.cluster),
        "every Secret, ConfigMap, account, claim, class, role, scale target, Service endpoint and "
        "webhook backend resolves (operator-made objects listed as advisory)",
    ),
    Judge(
        "api-validation",
        (validation.POLICY, validation.PROBE_POLICY),
        lambda c: validation.judge_validation(c.objects),
        "API-server validation the schemas miss: selectors, restart policies, names, labels, ports, "
        "requests against limits; probe ports the kubelet cannot resolve",
    ),
    Judge(
        "immutable-fields",
        (immutable.POLICY, immutable.REPLACED),
        lambda c: immutable.judge_immutable(c.previous, c.objects),
        "day 2, against the previous plan's objects: fields the API server refuses to change on update; "
        "changes pulumi-kubernetes applies by replacement, with their effect (a delete that cannot finish "
        "is mandatory)",
    ),
    Judge(
        "scheduling",
        (scheduling.POLICY, scheduling.KUEUE_POLICY, scheduling.QUOTA_POLICY),
        lambda c: scheduling.judge_scheduling(c.objects, c.pools),
        "node pools (selectors, taints, allocatable after DaemonSets, extended resources); Kueue wiring "
        "and quotas against one run",
        cloud=True,
    ),
    Judge(
        "exit-codes",
        (runtime.POLICY, runtime.NOT_RUN_POLICY),
        lambda c: runtime.judge_exit_codes(c.objects),
        "each FailJob exit code run for real through the Job's command (torchrun; needs torch)",
    ),
)


def judge_all(
    objects: Sequence[Mapping[str, Any]],
    cluster_network: str = CONTROL_PLANE_NETWORK,
    pools: Sequence[NodePool] | None = None,
    *,
    skip: frozenset[str] = frozenset(),
    unseen: frozenset[str] = frozenset(),
    previous: Sequence[Mapping[str, Any]] | None = None,
    cluster: str | None = None,
) -> list[Finding]:
    """Every judge of ``JUDGES`` but those named in ``skip`` (what ``mlplatform check`` runs); without
    ``pools`` the scheduling judge judges Kueue alone; ``unseen`` namespaces hold objects not judged;
    ``previous``, the objects the stack's last plan applied, is what the day-2 judge compares with;
    ``cluster`` (``eks``, ``aks``) names the managed Kubernetes whose built-in objects exist."""
    context = Context([*objects, *kube.carried(objects)], cluster_network, pools, unseen, previous, cluster)
    return [finding for judge in JUDGES if judge.name not in skip for finding in judge.run(context)]


__all__ = ["JUDGES", "Context", "Finding", "Judge", "NodePool", "Subject", "judge_all"]
