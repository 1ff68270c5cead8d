"""The in-cluster layer, written once for any ClusterHandle: add-ons, tenancy, storage, monitoring and
the two workloads, in an order ``pulumi up`` can apply.

Order: namespaces first; Helm releases after their namespaces, the node pools their pods run on and
the releases whose CRDs they use; objects of a chart's CRDs (PrometheusRule, NicClusterPolicy) after
that chart; workloads after their namespace's guardrails, service accounts and volume claims.
Everything goes through one kubernetes Provider bound to the handle's kubeconfig.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pulumi
import pulumi_kubernetes as k8s
import pulumi_kubernetes.helm.v3 as helm
import pulumi_random

from components.config import PlatformConfig, SecretMaker, TeamConfig
from components.handle import WORKLOAD_IDENTITIES, Cloud, ClusterHandle, Fabric
from components.image_mirror import MirrorLock, load_lock
from components.images import WorkloadImages
from components.kubernetes import image_verification, kueue, monitoring
from components.kubernetes.addons import (
    MONITORING_NAMESPACE,
    NETWORK_OPERATOR,
    Chart,
    addon_charts,
    addon_network_policies,
    kueue_chart,
    nic_cluster_policy,
    operator_namespaces,
    verifier_chart,
)
from components.kubernetes.certificates import registry_certificate
from components.kubernetes.chart_images import mirrored_values
from components.kubernetes.image_admission import image_admission_policy
from components.kubernetes.objects import Object, apply_objects
from components.kubernetes.storage import (
    preparation_namespace,
    preparation_objects,
    shared_volume_objects,
    storage_class_objects,
)
from components.kubernetes.tenancy import (
    POD_SECURITY_EXCEPTION_LABEL,
    TEAM_LABEL,
    NamespaceSpec,
    PodSecurity,
    ipc_lock_exception_policy,
    ipc_lock_namespace,
    namespace_objects,
    service_account,
    tenancy_guard_policy,
)
from components.kubernetes.workloads import WorkloadObjects, registry_users, workload_objects


class KubernetesLayer(pulumi.ComponentResource):
    """Everything Kubernetes-side of one platform, on the cluster the handle describes."""

    def __init__(
        self,
        name: str,
        handle: ClusterHandle,
        config: PlatformConfig,
        images: WorkloadImages,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("ml-platform:kubernetes:Layer", name, None, opts)
        self._name = name
        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=handle.kubeconfig,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        registry = config.workloads.registry
        certificate = (
            registry_certificate(name, WORKLOAD_IDENTITIES["registry"].namespace, registry, self)
            if registry.enabled and registry.tls
            else None
        )
        workloads = workload_objects(
            handle,
            config,
            images,
            self._registry_passwords(config),
            self._registry_admin(config),
            certificate,
        )
        # The lock names each copy below the stack's registry: rooted at the one the objects name.
        lock = (
            load_lock(config.kubernetes.image_lock).under(handle.registry)
            if config.kubernetes.image_lock
            else None
        )
        self.image_lock = lock
        specs = tenancy_specs(handle, config, workloads, lock)
        # Each pod depends on its namespace, so the admission policies are in place before any pod.
        namespaces = self._apply(
            [o for spec in specs for o in namespace_objects(spec)]
            + admission_policies(handle, specs)
            + team_guard(handle, config)
        )
        charts = layer_charts(handle, config, lock)
        queueing = kueue.queueing_enabled(config)
        unguarded = [spec.name for spec in specs if not spec.guarded]
        self._apply(addon_network_policies(charts, unguarded), namespaces)
        # Before any release: a chart's claim that names no class is given the default when created.
        classes = self._apply(storage_class_objects(handle))
        releases: dict[str, helm.Release] = {}
        for chart in charts:
            after = [releases[name] for name in chart.after if name in releases]
            releases[chart.release] = self._release(
                chart, [*namespaces, *classes, *handle.node_pools, *after]
            )
        if NETWORK_OPERATOR in releases:
            self._apply([nic_cluster_policy(handle, lock)], [releases[NETWORK_OPERATOR]])
        # The verifier's policy needs its CRD (the release); it precedes every workload below.
        signatures = self._apply(
            [image_verification.signature_policy(handle.registry, _signing_key(handle))],
            [releases[image_verification.RELEASE]],
        )
        identities = self._apply(identity_objects(handle, workloads), namespaces)
        # The shared directory exists, owned by the workload user, before any consumer mounts it.
        volumes = self._apply(volume_objects(handle, workloads), namespaces)
        volumes += self._apply(preparation(handle, workloads, images), namespaces)
        if config.monitoring:
            rules = {"gpu": monitoring.GPU_RULES if handle.has_gpus else [], **workloads.alert_rules}
            # Config validation guarantees a receiver wherever monitoring is on (kubernetes.alerting).
            assert config.kubernetes.alerting is not None
            self._apply(
                [
                    monitoring.alert_rules(rules),
                    monitoring.alert_routing(config.kubernetes.alerting),
                    *workloads.monitors,
                ],
                [releases[monitoring.RELEASE], *namespaces],
            )
        # Kueue's objects need its CRDs and webhook (the release) and their namespaces; a queued Job
        # needs its LocalQueue, or Kueue's webhook refuses it.
        queues = (
            self._apply(kueue.queue_objects(handle, config), [releases[kueue.RELEASE], *namespaces])
            if queueing
            else []
        )
        ready = [*namespaces, *identities, *volumes, *queues, *signatures]
        if workloads.registry is not None:
            # The callers' registry credentials, CA and egress to it, and the servers' certificate,
            # before any pod that mounts them or calls the registry.
            ready += self._apply([*workloads.registry.secrets, *workloads.registry.egress], namespaces)
            if workloads.registry.admin is not None:
                # Its values are the stack's at creation only: the admin rotation (docs/registry.md)
                # patches the Secret, and the next update must not put the first values back.
                ready += apply_objects(
                    [workloads.registry.admin], self.provider, self, namespaces, ignore_changes=["stringData"]
                )
        gates = self._apply(workloads.gates, ready)
        # Only the training run waits for the fabric gates; serving does not (a slow or failed GPU gate
        # must not hold back a CPU inference rollout).
        gated = self._apply(workloads.gated, [*ready, *gates])
        self.workloads = gates + gated + self._apply(workloads.objects, ready)
        if workloads.registry is not None:
            # The migration Job is awaited (pulumi-kubernetes waits for a Job to complete), so the
            # servers roll only onto a migrated schema; on SQLite the servers' pod migrates first.
            before = self._apply(workloads.registry.before, ready)
            backend = handle.registry_backend
            gate = [*ready, *before, *(backend.ready if backend is not None else ())]
            job = workloads.registry.migration
            migration = self._apply([job], gate) if job is not None else []
            self.workloads += before + migration + self._apply(workloads.registry.after, migration or gate)
        self.releases = sorted(releases)
        self.register_outputs({"releases": self.releases})

    def _registry_passwords(self, config: PlatformConfig) -> dict[str, object]:
        """A password per registry user, kept in the stack's state (the same on every ``pulumi up``)
        until ``workloads.registry.credentialsRotation`` changes: pulumi_random replaces a resource whose
        ``keepers`` change. 32 letters and digits: MLflow wants at least 12 (mlflow/utils/validation.py)."""
        keepers = {"rotation": str(config.workloads.registry.credentials_rotation)}
        return {
            user.username: pulumi_random.RandomPassword(
                f"{self._name}-registry-{user.username}",
                length=32,
                special=False,
                keepers=keepers,
                opts=pulumi.ResourceOptions(parent=self),
            ).result.apply(pulumi.Output.secret)
            for user in registry_users(config)
        }

    def _registry_admin(self, config: PlatformConfig) -> dict[str, object]:
        """With basic-auth, the ``registry-admin`` Secret's values, kept in the stack's state: the admin's
        password (32 letters and digits, as the users') and MLflow's CSRF key (64). Generated once, so
        the Secret exists before the servers that mount it, on the update that creates the namespace
        (cluster review B-N1)."""
        registry = config.workloads.registry
        if not registry.auth or registry.admin_secret is SecretMaker.OPERATOR:
            return {}
        return {
            key: pulumi_random.RandomPassword(
                f"{self._name}-registry-admin-{key}",
                length=length,
                special=False,
                opts=pulumi.ResourceOptions(parent=self),
            ).result.apply(pulumi.Output.secret)
            for key, length in (("password", 32), ("flask-secret-key", 64))
        }

    def _apply(
        self, objects: list[Object], depends_on: Sequence[pulumi.Resource] = ()
    ) -> list[pulumi.CustomResource]:
        return apply_objects(objects, self.provider, self, depends_on)

    def _release(self, chart: Chart, depends_on: Sequence[pulumi.Resource]) -> helm.Release:
        return helm.Release(
            f"{self._name}-{chart.release}",
            helm.ReleaseArgs(
                name=chart.release,
                chart=chart.pin.reference,
                version=chart.pin.version,
                repository_opts=None if chart.pin.oci else helm.RepositoryOptsArgs(repo=chart.pin.repo),
                namespace=chart.namespace,
                values=chart.values,
                atomic=True,
                cleanup_on_fail=True,
            ),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=list(depends_on)),
        )


def _pool_quota(handle: ClusterHandle, config: PlatformConfig, pool_name: str) -> dict[str, str]:
    """A namespace may request at most what its pool holds at full scale. Requests only: a quota on
    ``limits.*`` makes every container state that limit (ResourceQuota admission refuses a pod without
    it, kubernetes.io "Resource Quotas"), which only a LimitRange ``default`` could supply (B1)."""
    pool, size = handle.pool(pool_name), config.pool(pool_name).max_size
    quota = {
        "requests.cpu": str(pool.vcpus * size),
        "requests.memory": f"{pool.memory_gib * size}Gi",
    }
    if pool.gpus_per_node:
        quota["requests.nvidia.com/gpu"] = str(pool.gpus_per_node * size)
    return quota


def tenancy_specs(
    handle: ClusterHandle, config: PlatformConfig, workloads: WorkloadObjects, lock: MirrorLock | None
) -> list[NamespaceSpec]:
    """The namespaces of this cluster: operators, workloads and teams, each at the least privilege. With
    the stack's mirror ``lock``, every namespace runs third-party images from the mirror; and where the
    lock says the stack's key signed every copy, each but the verifier's own is held to that key."""
    specs = operator_namespaces(handle, config.kubernetes.gpu_operator)
    if config.monitoring:
        specs.append(
            NamespaceSpec(
                MONITORING_NAMESPACE,
                PodSecurity.PRIVILEGED,
                "node-exporter reads host metrics through hostPID/hostNetwork and host path mounts",
                guarded=False,
            )
        )
    training = config.workloads.training
    if training is not None:
        name, quota = WORKLOAD_IDENTITIES["training"].namespace, _pool_quota(handle, config, training.pool)
        if handle.pool(training.pool).fabric is Fabric.INFINIBAND:
            specs.append(ipc_lock_namespace(name, quota))
        else:
            specs.append(NamespaceSpec(name, quota=quota))
    inference = config.workloads.inference
    if inference is not None:
        specs.append(
            NamespaceSpec(
                WORKLOAD_IDENTITIES["inference"].namespace,
                quota=_pool_quota(handle, config, inference.pool),
            )
        )
    if config.workloads.registry.enabled:
        specs.append(registry_namespace(config))
    specs += [team_namespace(handle, config, team) for team in config.kubernetes.teams]
    shared = handle.storage.shared
    if workloads.claims and shared is not None and shared.prepare is not None:
        specs.append(preparation_namespace())
    if kueue.queueing_enabled(config):
        queued = {
            WORKLOAD_IDENTITIES["training"].namespace,
            *(f"team-{t.name}" for t in config.kubernetes.teams),
        }
        specs = [
            replace(spec, labels={**spec.labels, kueue.QUEUED_NAMESPACE_LABEL: "required"})
            if spec.name in queued
            else spec
            for spec in specs
        ]
        specs.append(NamespaceSpec(kueue.NAMESPACE, guarded=False))
    specs.append(NamespaceSpec(image_verification.NAMESPACE, guarded=False))
    if lock is not None:
        specs = [
            replace(spec, mirrored=True, verified=lock.signed and image_verification.verifiable(spec.name))
            for spec in specs
        ]
    return specs


def layer_charts(handle: ClusterHandle, config: PlatformConfig, lock: MirrorLock | None) -> list[Chart]:
    """Every release of the layer; with a mirror lock, each chart's images from the stack's mirror by
    digest (``LockError`` names an image the lock lacks: a chart bump names new images, mirror them
    first)."""
    charts = addon_charts(handle, config.region, config.kubernetes.gpu_operator)
    if config.monitoring:
        scrape_jobs = [monitoring.gpu_scrape_job()] if handle.has_gpus else []
        charts.append(monitoring.prometheus_chart(handle, scrape_jobs))
    if kueue.queueing_enabled(config):
        charts.append(kueue_chart(handle))
    charts.append(verifier_chart(handle))
    if lock is None:
        return charts
    return [
        replace(
            chart,
            values=mirrored_values(
                chart.pin.chart, chart.pin.version, chart.values, lock, handle.gpu_node_os
            ),
        )
        for chart in charts
    ]


def _signing_key(handle: ClusterHandle) -> pulumi.Input[str]:
    """The key the verifier holds images to: the one the stack signs its images with."""
    login = handle.registry_login
    if login is None or login.signing is None:
        raise ValueError(f"{handle.name}: the cloud adapter gave no image signing key to verify against")
    return login.signing.key


def admission_policies(handle: ClusterHandle, specs: Sequence[NamespaceSpec]) -> list[Object]:
    """What admits pods into these namespaces beyond Pod Security: the stack's registry by digest
    everywhere; and, where a namespace's Pod Security label says "privileged" only for IPC_LOCK, the
    rest of "restricted"."""
    policies = image_admission_policy(handle.registry, any(spec.mirrored for spec in specs))
    if any(POD_SECURITY_EXCEPTION_LABEL in spec.labels for spec in specs):
        policies += ipc_lock_exception_policy()
    return policies


def team_guard(handle: ClusterHandle, config: PlatformConfig) -> list[Object]:
    """The tenancy guard (``tenancy_guard_policy``) against every team's ML engineers as the API server
    authenticates them: on EKS the user an access entry makes of their IAM role (``arn:aws:sts::<account>:
    assumed-role/<role name>/{{SessionName}}``, the role's path dropped: EKS user guide, "Create access
    entries", https://docs.aws.amazon.com/eks/latest/userguide/creating-access-entries.html), on AKS
    their Entra group's object id in the user's groups (AKS-managed Entra ID puts the groups claim's
    object ids there: https://learn.microsoft.com/azure/aks/azure-ad-rbac). None where there are no teams."""
    if not config.kubernetes.teams:
        return []
    engineers = [p for principals in config.access.ml_engineers.values() for p in principals]
    if handle.cloud is Cloud.AWS:
        return tenancy_guard_policy([_assumed_role_user(arn) for arn in engineers], [])
    return tenancy_guard_policy([], engineers)


def _assumed_role_user(role_arn: str) -> str:
    _, partition, _, _, account, resource = role_arn.split(":", 5)
    return f"arn:{partition}:sts::{account}:assumed-role/{resource.rsplit('/', 1)[-1]}/"


def registry_namespace(config: PlatformConfig) -> NamespaceSpec:
    """Restricted, with a quota for its servers, one surge pod and the migration Job."""
    registry = config.workloads.registry
    pods = registry.replicas + 2
    cpu = int(registry.cpu[:-1]) / 1000 if registry.cpu.endswith("m") else int(registry.cpu)
    memory, unit = int(registry.memory[:-2]), registry.memory[-2:]
    return NamespaceSpec(
        WORKLOAD_IDENTITIES["registry"].namespace,
        quota={
            "requests.cpu": f"{cpu * pods:g}",
            "requests.memory": f"{memory * pods}{unit}",
            "limits.memory": f"{memory * pods}{unit}",
        },
    )


def team_namespace(handle: ClusterHandle, config: PlatformConfig, team: TeamConfig) -> NamespaceSpec:
    """A team's namespace: a quota of what its queue may admit (so the quota never refuses pods Kueue
    admitted: ResourceQuota admission refuses a pod that would exceed ``hard``, kubernetes.io "Resource
    Quotas"), its runs' pods reaching each other, and, where it may borrow an InfiniBand pool, the same
    narrow Pod Security exception as the platform's training namespace."""
    admissible = kueue.team_admissible(handle, config, team)
    quota = {
        "requests.cpu": str(admissible["cpu"]),
        "requests.memory": f"{admissible['memory']}Gi",
        "requests.nvidia.com/gpu": str(admissible["nvidia.com/gpu"]),
    }
    name = f"team-{team.name}"
    if any(p.fabric is Fabric.INFINIBAND for p in kueue.queued_pools(handle, config)):
        spec = ipc_lock_namespace(name, quota, job_peers=True)
    else:
        spec = NamespaceSpec(name, quota=quota, job_peers=True)
    return replace(spec, labels={**spec.labels, TEAM_LABEL: "true"})


def identity_objects(handle: ClusterHandle, workloads: WorkloadObjects) -> list[Object]:
    """One service account per deployed workload, annotated with its cloud identity."""
    return [
        service_account(
            WORKLOAD_IDENTITIES[name].namespace,
            WORKLOAD_IDENTITIES[name].service_account,
            handle.identities.get(name, {}),
        )
        for name in workloads.service_accounts
    ]


def volume_objects(handle: ClusterHandle, workloads: WorkloadObjects) -> list[Object]:
    shared = handle.storage.shared
    if shared is None:
        return []
    return [o for claim in workloads.claims for o in shared_volume_objects(handle.name, shared, claim)]


def preparation(handle: ClusterHandle, workloads: WorkloadObjects, images: WorkloadImages) -> list[Object]:
    """The Job that creates the shared directory where the file system has no access points, run with
    any of the stack's images (each has the Python interpreter the Job's script needs)."""
    shared = handle.storage.shared
    if shared is None or not workloads.claims:
        return []
    image = images.inference if images.inference is not None else next(iter(images.training.values()))
    return preparation_objects(handle.name, shared, image)
