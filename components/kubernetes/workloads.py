"""The stack's workloads as Kubernetes objects: config and handle in, the workloads' own object
functions out. This is the one place that maps stack config onto ``TrainingJobSpec`` and
``InferenceServiceSpec``; what the object functions return is applied unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.config import (
    FabricTestConfig,
    InferenceWorkloadConfig,
    PlatformConfig,
    Priority,
    SecretMaker,
    TrainingWorkloadConfig,
    approval_required,
    follows_registry,
    rollout_plan,
)
from components.handle import (
    MONITOR_USER,
    ROLLOUT_USER,
    WORKLOAD_IDENTITIES,
    ClusterHandle,
    Fabric,
    PoolHandle,
    PoolKind,
)
from components.images import WorkloadImages
from components.kubernetes import kueue, monitoring
from components.kubernetes.objects import Object
from components.kubernetes.registry import (
    CA_SECRET,
    CLIENT_SECRET,
    ROLLOUT_SECRET,
    Permission,
    RegistryCertificate,
    RegistryObjects,
    RegistrySpec,
    RegistryUser,
    registry_objects,
    tracking_uri,
)
from components.kubernetes.storage import VolumeClaim, store_claim
from workloads.delivery.plan import MonitorPolicy
from workloads.fabric_gate import FABRIC_TEST, busbw_floor_gbytes, fabric_test_run_id
from workloads.inference.k8s import (
    InferenceServiceSpec,
    MonitorJob,
    RetrainLaunch,
    RolloutJob,
    inference_objects,
)
from workloads.nccl_transport import EXPECTED_NETWORK
from workloads.registry.lineage import experiment_name
from workloads.training.k8s import TrainingJobSpec, training_job_objects

TRAINING_CLAIM = "training-output"
MODELS_CLAIM = "models"
AUTH_SECRET = "inference-auth"
TLS_SECRET = "inference-tls"
REGISTRY_CLAIM = "registry-store"
# The lifecycle record the drift monitor appends to and decides from (docs/lifecycle.md).
RECORD_CLAIM = "lifecycle-record"


@dataclass
class WorkloadObjects:
    """What the workloads need from the layer around them, beside their own objects."""

    objects: list[Object] = field(default_factory=list)
    # Jobs ``pulumi up`` awaits as acceptance gates (the fabric tests), applied before ``gated``.
    gates: list[Object] = field(default_factory=list)
    # The training run's objects, which wait for the gates: a run starts only on a fabric that passed.
    gated: list[Object] = field(default_factory=list)
    claims: list[VolumeClaim] = field(default_factory=list)
    # Service accounts the layer creates (the inference object function makes its own).
    service_accounts: list[str] = field(default_factory=list)
    # Monitoring objects (ServiceMonitors), applied once the monitoring chart installed their CRDs.
    monitors: list[Object] = field(default_factory=list)
    alert_rules: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # The model registry's objects, its migration Job between them.
    registry: RegistryObjects | None = None


def _queue_labels(config: PlatformConfig, priority: Priority) -> dict[str, str]:
    return {
        **config.labels(),
        **(kueue.job_labels(priority) if kueue.queueing_enabled(config) else {}),
    }


def training_spec(
    handle: ClusterHandle, config: PlatformConfig, training: TrainingWorkloadConfig, images: WorkloadImages
) -> TrainingJobSpec:
    pool = handle.pool(training.pool)
    identity = WORKLOAD_IDENTITIES["training"]
    return TrainingJobSpec(
        name=training.model_name,
        run_id=training.run_id,
        namespace=identity.namespace,
        image=images.for_fabric(pool.fabric),
        pool=pool,
        service_account=identity.service_account,
        output_volume={"persistentVolumeClaim": {"claimName": TRAINING_CLAIM}},
        nodes=training.nodes,
        nproc_per_node=training.nproc_per_node,
        epochs=training.epochs,
        trainer_args=training.trainer_args(),
        cpu=training.cpu,
        memory_gib=training.memory_gib,
        shm_gib=training.shm_gib,
        max_restarts=training.max_restarts,
        dataset_egress_cidrs=training.dataset_egress_cidrs,
        labels=_queue_labels(config, training.priority),
        pod_labels=handle.pod_labels.get("training", {}),
        egress=handle.workload_egress,
        **_registry_caller(config),
    )


def _registry_caller(config: PlatformConfig) -> dict[str, Any]:
    """What a caller of the stack's registry gets: its in-cluster URI and, with basic-auth on, the
    namespace's ``registry-client`` Secret (docs/registry.md, "Access"), with TLS on the ``registry-ca``
    Secret it verifies the servers against (docs/security.md); nothing without a registry.
    (Egress to it is the registry's own ``allow-registry`` policy in each client namespace.)"""
    registry = config.workloads.registry
    if not registry.enabled:
        return {}
    return {
        "registry_uri": tracking_uri(tls=registry.tls),
        "registry_secret": CLIENT_SECRET if registry.auth else None,
        "registry_ca_secret": CA_SECRET if registry.tls else None,
    }


# Nodes the fabric test spans: two are the smallest group whose all-reduce crosses the fabric.
FABRIC_TEST_NODES = 2


def fabric_test_spec(
    handle: ClusterHandle,
    config: PlatformConfig,
    test: FabricTestConfig,
    pool: PoolHandle,
    images: WorkloadImages,
) -> TrainingJobSpec:
    """The fabric test on ``pool`` as the training Job builder runs it: every GPU of two nodes, NCCL's
    network checked against the fabric's, and busbw against the floor where the line rate is sourced."""
    floor = busbw_floor_gbytes(pool, test.floor_fraction)
    identity = WORKLOAD_IDENTITIES["training"]
    return TrainingJobSpec(
        name=FABRIC_TEST,
        run_id=fabric_test_run_id(pool.name, test.run_id),
        namespace=identity.namespace,
        image=images.for_fabric(pool.fabric),
        pool=pool,
        service_account=identity.service_account,
        # The test writes nothing worth keeping: no claim on the training file system.
        output_volume={"emptyDir": {"sizeLimit": "1Gi"}},
        nodes=min(FABRIC_TEST_NODES, config.pool(pool.name).max_size),
        max_restarts=0,
        # One more pod per index: a peer that started long after the other, or a node that failed to
        # join, should not fail the gate (and ``pulumi up``) on its first try (cluster review B2).
        backoff_limit_per_index=1,
        entry=(
            "workloads.fabric_test",
            f"--expect-network={EXPECTED_NETWORK[pool.fabric]}",
            *([f"--floor-gbytes={floor}"] if floor is not None else []),
        ),
        await_seconds=test.timeout_minutes * 60,
        # The gate must be admitted before the run it gates.
        labels=_queue_labels(config, Priority.PRODUCTION),
        pod_labels=handle.pod_labels.get("training", {}),
        egress=handle.workload_egress,
    )


def inference_spec(
    handle: ClusterHandle,
    config: PlatformConfig,
    inference: InferenceWorkloadConfig,
    images: WorkloadImages,
    registry_certificate: RegistryCertificate | None = None,
    retrain: RetrainLaunch | None = None,
) -> InferenceServiceSpec:
    """``registry_certificate``: with registry TLS, the certificate whose CA's SHA-256 the servers carry
    (they verify the registry with a context made once, so a new CA rolls them); ``retrain``: the Job the
    drift monitor launches (``retrain_spec``)."""
    identity = WORKLOAD_IDENTITIES["inference"]
    assert images.inference is not None, "StackImages gives an enabled inference workload its image"
    following = follows_registry(config)
    return InferenceServiceSpec(
        name="inference",
        image=images.inference,
        model_name=inference.model_name,
        model_version=inference.model_version,
        model_volume=(
            None if following else {"persistentVolumeClaim": {"claimName": MODELS_CLAIM, "readOnly": True}}
        ),
        pool=handle.pool(inference.pool),
        namespace=identity.namespace,
        service_account=identity.service_account,
        service_account_annotations=handle.identities.get("inference", {}),
        min_replicas=inference.min_replicas,
        max_replicas=inference.max_replicas,
        cpu_request=inference.cpu,
        cpu_limit=inference.cpu,
        memory_request=inference.memory,
        memory_limit=inference.memory,
        auth_secret=AUTH_SECRET if inference.auth else None,
        tls_secret=TLS_SECRET if inference.tls else None,
        drift_threshold=inference.drift_threshold,
        labels=config.labels(),
        pod_labels=handle.pod_labels.get("inference", {}),
        egress=handle.workload_egress,
        model_cache_size=inference.model_cache,
        poll_interval_s=inference.poll_interval_seconds,
        rollout=rollout_job(config, inference, handle) if following else None,
        monitor=monitor_job(config, inference, handle, retrain)
        if following and inference.drift_monitor
        else None,
        **(_registry_caller(config) if following else {}),
        registry_ca_sha256=(
            registry_certificate.ca_sha256 if following and registry_certificate is not None else None
        ),
    )


def rollout_job(
    config: PlatformConfig, inference: InferenceWorkloadConfig, handle: ClusterHandle
) -> RolloutJob:
    """The rollout's Job template for a service that follows the registry: the stack's plan, its registry
    user with basic-auth on, the servers' CA with TLS on, the stack's lifecycle record with the identity
    that may append to it (AWS: the ``rollout`` IRSA role, put-only; Azure: its federated identity, with the
    record writer role, create-only)."""
    plan = rollout_plan(config)
    if inference.rollout is not None:
        text: str | None = plan.model_dump_json(by_alias=True)
    else:  # the defaults, but for what the stack's rules set (``promote`` where approval is required)
        text = plan.model_dump_json(by_alias=True, exclude_unset=True) if plan.model_fields_set else None
    declared = plan.promote and approval_required(config)  # ``rollout_plan``: only a declared true
    return RolloutJob(
        plan=text,
        pre_approved=(
            "the rollout's gates are this stack's declared pre-approved promotion path"
            " (workloads.inference.rollout.promote: true) in place of an approval"
            " (workloads.registry.promotionApproval)"
            if declared
            else None
        ),
        deadline_s=plan.deadline_seconds,
        registry_secret=ROLLOUT_SECRET if config.workloads.registry.auth else None,
        ca_secret=monitoring.INFERENCE_CA_SECRET if inference.tls else None,
        record=handle.lifecycle_record,
        service_account_annotations=handle.identities.get("rollout", {}),
        pod_labels=handle.pod_labels.get("rollout", {}),
    )


# The retrain's run id: one Job name, so one retrain at a time (the API refuses a second create while the
# last one is kept, recorded as a failed launch), deleted an hour after it ends so the next can start.
RETRAIN_RUN_ID = "retrain"
RETRAIN_TTL_S = 3600


def retrain_spec(
    handle: ClusterHandle, config: PlatformConfig, images: WorkloadImages
) -> TrainingJobSpec | None:
    """The training run the drift monitor launches on a retrain decision: the stack's training run (its
    pool, size, image, registry user: it registers ``@challenger`` as every run does) on the monitor's
    ``dataset`` where the stack names one, created suspended in the namespace's LocalQueue where Kueue
    runs, its output on the pod (the version goes to the registry; a fixed run id on the shared file
    system would meet the last retrain's model there). None where nothing can be launched: no training
    run, no drift monitor, a monitor watching another model than training trains, or no API server."""
    training, inference = config.workloads.training, config.workloads.inference
    if (
        training is None
        or not training.enabled
        or inference is None
        or inference.drift_monitor is None
        or training.model_name != inference.model_name
        or handle.api_server is None
    ):
        return None
    spec = training_spec(handle, config, training, images)
    dataset = inference.drift_monitor.dataset
    return dataclasses.replace(
        spec,
        run_id=RETRAIN_RUN_ID,
        output_volume={"emptyDir": {"sizeLimit": "16Gi"}},
        # The trainer's last --dataset wins (argparse): the monitor's source over the run's own.
        trainer_args=(*spec.trainer_args, *((f"--dataset={dataset}",) if dataset else ())),
        suspend=kueue.queueing_enabled(config),
        ttl_s=RETRAIN_TTL_S,
    )


def monitor_job(
    config: PlatformConfig,
    inference: InferenceWorkloadConfig,
    handle: ClusterHandle,
    retrain: RetrainLaunch | None = None,
) -> MonitorJob:
    """The drift monitor's CronJob for a service that follows the registry: the stack's policy, its own
    registry user with basic-auth on (it rolls back: EDIT on the served model), the servers' CA with TLS
    on, the retrain it launches (``retrain_spec``'s Job), and the lifecycle record: the stack's record
    store with the identity that may only append to it (AWS: the ``drift-monitor`` IRSA role, put-only as
    the rollout's), else a claim on shared storage."""
    policy = inference.drift_monitor
    assert policy is not None
    record = handle.lifecycle_record
    return MonitorJob(
        retrain=retrain,
        record=record,
        service_account_annotations=handle.identities.get("drift-monitor", {}) if record else {},
        pod_labels=handle.pod_labels.get("drift-monitor", {}) if record else {},
        policy=policy.model_dump_json(by_alias=True),
        schedule=policy.schedule,
        registry_secret=MONITOR_SECRET if config.workloads.registry.auth else None,
        record_claim=RECORD_CLAIM if record is None else None,
        ca_secret=monitoring.INFERENCE_CA_SECRET if inference.tls else None,
    )


def registry_clients(config: PlatformConfig) -> tuple[str, ...]:
    """The namespaces whose pods call the registry: the platform's training and inference, the teams'."""
    workloads = config.workloads
    platform = [
        WORKLOAD_IDENTITIES[name].namespace
        for name, workload in (("training", workloads.training), ("inference", workloads.inference))
        if workload is not None
    ]
    return (*platform, *(f"team-{team.name}" for team in config.kubernetes.teams))


MONITOR_SECRET = "registry-drift-monitor"


def registry_users(config: PlatformConfig) -> tuple[RegistryUser, ...]:
    """One registry user per caller namespace, named after it, with the least it needs (docs/registry.md,
    "Access"): training registers versions and moves ``@challenger`` (EDIT on its model) and logs runs in
    the experiment named after the model (EDIT on it: lineage.py ``experiment_name``), inference
    reads (READ on its model), the rollout moves aliases and tags the model (EDIT on the served model);
    a team's user gets no grant: every user reads (``default_permission = READ``) and owns the models
    it creates. None without basic-auth."""
    registry, workloads = config.workloads.registry, config.workloads
    if not (registry.enabled and registry.auth):
        return ()
    users = []
    if workloads.training is not None:
        namespace, model = WORKLOAD_IDENTITIES["training"].namespace, workloads.training.model_name
        users.append(
            RegistryUser(
                namespace,
                namespace,
                grants=((model, Permission.EDIT),),
                experiments=((experiment_name(model), Permission.EDIT),),
            )
        )
    if workloads.inference is not None:
        namespace, model = WORKLOAD_IDENTITIES["inference"].namespace, workloads.inference.model_name
        users += [
            RegistryUser(namespace, namespace, grants=((model, Permission.READ),)),
            RegistryUser(ROLLOUT_USER, namespace, ROLLOUT_SECRET, ((model, Permission.EDIT),)),
        ]
        if follows_registry(config) and workloads.inference.drift_monitor is not None:
            users.append(RegistryUser(MONITOR_USER, namespace, MONITOR_SECRET, ((model, Permission.EDIT),)))
    users += [RegistryUser(f"team-{t.name}", f"team-{t.name}") for t in config.kubernetes.teams]
    return tuple(users)


def promoters(config: PlatformConfig) -> tuple[str, ...]:
    """The promotion identities: the only registry users that may move ``@champion`` and
    ``@previous-champion`` (workloads/registry/server/guard.py, the servers' authorization function). The
    rollout's user where the stack serves a model and its rollout plan promotes (``promote``, the default:
    the gates declared the pre-approved path; with ``promote: false`` it hands a passed version to people
    and needs no promotion; unset, false where approval is required: components/config.py
    ``rollout_plan``), and the approver
    role (``workloads.registry.approvers``: they promote what another approver approved, and only they
    ``--force``: workloads/registry/approval.py). Never training's or a team's user: EDIT, which both need
    to register versions, also moves any alias in MLflow (docs/lifecycle.md); nor the drift monitor's,
    which may only roll back (``restorers``). None without basic-auth."""
    registry, inference = config.workloads.registry, config.workloads.inference
    if not (registry.enabled and registry.auth):
        return ()
    promotes = inference is not None and rollout_plan(config).promote
    return tuple(sorted({*((ROLLOUT_USER,) if promotes else ()), *registry.approvers}))


def restorers(config: PlatformConfig) -> tuple[str, ...]:
    """The users the registry lets only roll ``@champion`` back onto ``@previous-champion``: the drift
    monitor's where the stack runs one (it rolls back on labelled accuracy, workloads/delivery/monitor.py;
    the retrains it launches reach ``@champion`` through the gates and an approval, never through it).
    None without basic-auth."""
    registry, inference = config.workloads.registry, config.workloads.inference
    if not (registry.enabled and registry.auth) or inference is None or not inference.drift_monitor:
        return ()
    return (MONITOR_USER,)


def registry_spec(
    handle: ClusterHandle,
    config: PlatformConfig,
    images: WorkloadImages,
    passwords: Mapping[str, object],
    admin: Mapping[str, object],
    certificate: RegistryCertificate | None = None,
) -> RegistrySpec:
    backend, registry = handle.registry_backend, config.workloads.registry
    if backend is None:
        raise ValueError(f"{handle.name}: the cloud adapter gave the registry no backend (artifact store)")
    assert images.registry is not None, "StackImages gives an enabled registry its image"
    # With auth the registry is the lifecycle record's only writer (guard.py ``record_events``).
    record = handle.lifecycle_record if registry.auth else None
    return RegistrySpec(
        image=images.registry,
        # The first CPU pool: the registry is a small web server, never on GPU nodes.
        pool=next(p for p in handle.pools if p.kind is PoolKind.CPU),
        artifacts_uri=backend.artifacts_uri,
        database=backend.database,
        store_claim=(
            None
            if backend.database is not None
            else store_claim(REGISTRY_CLAIM, handle.storage.shared, WORKLOAD_IDENTITIES["registry"].namespace)
        ),
        client_namespaces=registry_clients(config),
        service_account_annotations=handle.identities.get("registry", {}),
        replicas=registry.replicas,
        cpu=registry.cpu,
        memory=registry.memory,
        auth=registry.auth,
        labels=config.labels(),
        pod_labels=handle.pod_labels.get("registry", {}),
        peers=backend.peers + tuple(p for p in (record.peers if record else ()) if p not in backend.peers),
        environment={**backend.environment, **(record.environment if record else {})},
        tmp_size=transfer_space(config),
        users=registry_users(config),
        promoters=promoters(config),
        restorers=restorers(config),
        approvers=tuple(registry.approvers) if registry.auth else (),
        approval_required=registry.auth and approval_required(config),
        rollout_user=ROLLOUT_USER if registry.auth and config.workloads.inference is not None else None,
        record=record.uri if record else None,
        passwords=passwords,
        credentials_rotation=registry.credentials_rotation,
        admin=admin,
        admin_by_operator=registry.admin_secret is SecretMaker.OPERATOR,
        tls=registry.tls,
        certificate=certificate,
    )


def transfer_space(config: PlatformConfig) -> str:
    """The registry's /tmp: every inference replica fetching a new version at once, plus an upload, each
    as a whole-file copy of a version at most the size of one pod's model cache (which holds two)."""
    inference = config.workloads.inference
    if inference is None or not inference.enabled:
        return RegistrySpec.tmp_size
    # ``model_cache`` is whole Mi or Gi (config validation).
    cache = int(inference.model_cache[:-2]) << (20 if inference.model_cache.endswith("Mi") else 30)
    return f"{max(4 << 30, cache * (inference.max_replicas + 1)) >> 20}Mi"


def _retrain(
    handle: ClusterHandle, config: PlatformConfig, images: WorkloadImages, result: WorkloadObjects
) -> RetrainLaunch | None:
    """The drift monitor's retrain: its rendezvous Service and NetworkPolicy applied with the workloads
    (the monitor may create Jobs only), its Job handed to the monitor as JSON."""
    spec = retrain_spec(handle, config, images)
    if spec is None or handle.api_server is None or not follows_registry(config):
        return None
    service, job, network_policy = training_job_objects(spec)
    result.objects += [service, network_policy]
    return RetrainLaunch(pulumi.Output.json_dumps(job), spec.namespace, handle.api_server)


def workload_objects(
    handle: ClusterHandle,
    config: PlatformConfig,
    images: WorkloadImages,
    registry_passwords: Mapping[str, object] | None = None,
    registry_admin: Mapping[str, object] | None = None,
    registry_certificate: RegistryCertificate | None = None,
) -> WorkloadObjects:
    """``registry_passwords``: each of ``registry_users(config)``'s password; ``registry_admin``: the
    ``registry-admin`` Secret's values with basic-auth; ``registry_certificate``: with registry TLS, the
    servers' certificate (the layer generates all three)."""
    result = WorkloadObjects()
    training, inference = config.workloads.training, config.workloads.inference
    # Config validation guarantees shared storage wherever a workload is enabled.
    if training is not None and training.enabled:
        identity = WORKLOAD_IDENTITIES["training"]
        result.gated += training_job_objects(training_spec(handle, config, training, images))
        if config.workloads.fabric_test.enabled:
            for pool in handle.pools:
                if pool.fabric is not Fabric.NONE:
                    test = fabric_test_spec(handle, config, config.workloads.fabric_test, pool, images)
                    result.gates += training_job_objects(test)
        result.claims.append(VolumeClaim(identity.namespace, TRAINING_CLAIM, read_only=False))
        result.service_accounts.append("training")
    if inference is not None and inference.enabled:
        identity = WORKLOAD_IDENTITIES["inference"]
        spec = inference_spec(
            handle, config, inference, images, registry_certificate, _retrain(handle, config, images, result)
        )
        result.objects += inference_objects(spec)
        if spec.model_volume is not None:
            result.claims.append(VolumeClaim(identity.namespace, MODELS_CLAIM, read_only=True))
        if spec.monitor is not None and spec.monitor.record_claim is not None:
            result.claims.append(VolumeClaim(identity.namespace, spec.monitor.record_claim, read_only=False))
        result.monitors.append(
            monitoring.inference_service_monitor(identity.namespace, spec.name, spec.tls, spec.auth_secret)
        )
        result.alert_rules["inference"] = monitoring.inference_rules(
            inference.drift_threshold, inference.drift_monitor or MonitorPolicy()
        )
    if config.workloads.registry.enabled:
        registry = registry_spec(
            handle, config, images, registry_passwords or {}, registry_admin or {}, registry_certificate
        )
        result.registry = registry_objects(registry)
        if registry.store_claim is not None:
            result.claims.append(VolumeClaim(registry.namespace, registry.store_claim, read_only=False))
    return result
