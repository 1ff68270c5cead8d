"""The inference service as Kubernetes objects: ``inference_objects(spec) -> list[dict]``, no Pulumi.

One Deployment behind one Service, its HorizontalPodAutoscaler, a PodDisruptionBudget, a NetworkPolicy
and the ServiceAccount it runs as.

The pods are locked down as the CIS/checkov baselines ask: non-root high UID, read-only root file system
(``/tmp`` an emptyDir), no capabilities, no privilege escalation, seccomp RuntimeDefault, no service
account token. The model comes either from shared storage, mounted read-only, by pinned version, or
from the model registry (``registry_uri``): every pod serves ``models:/<name>@champion``, downloading into
its own model cache (an emptyDir) and following the alias as it moves (workloads/inference/follow.py),
so a promotion or a rollback needs no ``pulumi up``. Either way the server verifies the files against
their recorded hashes before it opens a socket. The pod's own egress is only what ``egress`` adds; the
registry's ``allow-registry`` policy in the namespace lets it reach the registry's servers. Ingress on
the service port only.

Progressive delivery (issue 29, docs/delivery.md) happens inside each server: following the registry,
every pod also loads ``@challenger`` while the model's split or shadow tag is above 0 and routes that
exact share itself (workloads/delivery/contract.py), whatever the replica count. What the cluster adds
(``rollout``) is the rollout's own room: a suspended CronJob of the inference image running
``python -m workloads.delivery``, started by hand (``kubectl create job --from=cronjob/...``); a headless
Service whose DNS name lists every ready server, so the rollout reads each one's ``/metrics`` without
any Kubernetes API right; its ServiceAccount (no token) and its NetworkPolicy. A pinned ``model_version``
has no challenger and no split. The drift monitor (``monitor``, issue 40, docs/lifecycle.md) gets the
same room on a schedule: a CronJob running ``python -m workloads.delivery.monitor``, one window per run,
through the same headless Service, with its own ServiceAccount (no token) and NetworkPolicy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from components.handle import WORKLOAD_IDENTITIES, Peer, PoolHandle, PoolKind, RecordStore
from components.kubernetes.objects import (
    MANAGED_BY,
    SKIP_AWAIT,
    disruption_budget,
    peer_annotations,
    peer_egress,
    restricted_container,
    restricted_container_security,
    restricted_pod_security,
    service_account,
)
from workloads.artifacts import model_version_dir
from workloads.delivery.contract import MONITOR_ENV, SERVICE_ACCOUNT_DIR
from workloads.inference.config import ENV_PREFIX
from workloads.registry.client import TRACKING_URI_ENV, ModelRef
from workloads.registry.k8s import (
    ca_env,
    ca_mount,
    ca_volume,
    credential_env,
    credential_mount,
    credential_volume,
)
from workloads.registry.record import RECORD_ENV
from workloads.registry.rollout import CHAMPION

Object = dict[str, Any]

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The Deployment's selector keeps the track label it was created with: apps/v1 makes a Deployment's
# label selector immutable after creation (kubernetes.io "Deployments", label selector updates), so
# dropping it would make the next ``pulumi up`` replace the Deployment instead of updating it.
TRACK_LABEL = "ml-platform/track"
STABLE_TRACK = "stable"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The headless Service listing every ready server, and the rollout's objects, named after the service.
PODS_SUFFIX = "-pods"
ROLLOUT_SUFFIX = "-rollout"
ROLLOUT_COMPONENT = "rollout"
# A CronJob's name has at most 52 characters: its controller appends 11 to name each Job
# (kubernetes.io "CronJob", writing a CronJob spec).
MAX_CRONJOB_NAME = 52
INSTANCE_LABEL = "app.kubernetes.io/instance"
# The registry CA's SHA-256 on the servers' pods (``registry_ca_sha256``): a new CA rolls them.
REGISTRY_CA_ANNOTATION = "ml-platform.io/registry-ca-sha256"
SECRETS_DIR = PurePosixPath("/var/run/secrets/ml-platform")
# kubelet waits this long before SIGTERM, while the endpoint controller takes the pod out of the Service;
# then the server drains (readiness false, 503 to newcomers, in-flight requests finish).
PRE_STOP_SLEEP_S = 5
DRAIN_TIMEOUT_S = 25
# After the drain, uvicorn's own shutdown (close connections, stop the batcher) is bounded by this; the
# pod's grace period covers pre-stop sleep + drain + shutdown with a margin, so the kubelet never SIGKILLs
# a server that is still answering accepted requests.
SHUTDOWN_TIMEOUT_S = 5
GRACE_MARGIN_S = 5


# Where the rollout (workloads/delivery) reads its settings: the names it and these objects agree on.
ROLLOUT_MODEL_ENV = "ROLLOUT_MODEL"
ROLLOUT_METRICS_DNS_ENV = "ROLLOUT_METRICS_DNS"
ROLLOUT_METRICS_PORT_ENV = "ROLLOUT_METRICS_PORT"
ROLLOUT_METRICS_SCHEME_ENV = "ROLLOUT_METRICS_SCHEME"
ROLLOUT_SERVICE_URL_ENV = "ROLLOUT_SERVICE_URL"
ROLLOUT_TOKEN_FILE_ENV = "ROLLOUT_TOKEN_FILE"
ROLLOUT_CA_FILE_ENV = "ROLLOUT_CA_FILE"
ROLLOUT_TLS_SERVER_NAME_ENV = "ROLLOUT_TLS_SERVER_NAME"
ROLLOUT_PLAN_ENV = "ROLLOUT_PLAN"
# The declared pre-approved promotion path, as an exemption with its written reason (docs/lifecycle.md).
PRE_APPROVED_REASON = "policy.ml-platform.io/promotion-approval-reason"
ROLLOUT_ENTRY = ("python", "-m", "workloads.delivery")
# A CronJob needs a schedule even when suspended (batch/v1 CronJobSpec: ``schedule`` is required). This
# one is a valid date, once a year, not a never-matching one such as "0 0 31 2 *": the CronJob controller
# reads two schedules that coincide as an invalid schedule and reports an error on every sync
# (kubernetes/kubernetes pkg/controller/cronjob/utils.go ``mostRecentScheduleTime``). ``suspend: true``
# keeps it from ever firing; the CronJob is only the template ``kubectl create job --from`` copies.
ROLLOUT_SCHEDULE = "0 0 1 1 *"
# Jobs the CronJob controller keeps, counting those made by hand with ``kubectl create job --from`` (it
# owns them): it deletes the oldest finished beyond these on every sync, suspended or not, before their
# ttl (kubernetes.io "CronJob", jobs history limits: 3 successful and 1 failed by default;
# kubernetes/kubernetes pkg/controller/cronjob/cronjob_controllerv2.go ``cleanupFinishedJobs``).
ROLLOUT_JOBS_KEPT = 10
# SIGTERM to SIGKILL: the rollout sends the traffic back (two registry writes), records why (four) and
# clears its lock (two) when it is stopped; round trips of well under a second each on the cluster, with
# room for the registry client's retries (0.5 s, then 1 s).
ROLLOUT_GRACE_S = 60
# The cluster autoscaler evicts no pod carrying this when it scales a node down (cluster-autoscaler FAQ,
# "What types of pods can prevent CA from removing a node?"): a rollout is not moved mid-step.
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"


@dataclass(frozen=True)
class RolloutJob:
    """The rollout's Job template: what ``python -m workloads.delivery`` gets on the cluster."""

    # The stack's plan (``inference.rollout``) as JSON; None: the rollout's own defaults.
    plan: str | None
    # The Job's activeDeadlineSeconds: every step's window, the bake period and a margin (the caller
    # sizes it from the plan).
    deadline_s: int
    # The rollout's registry credentials (keys ``username``, ``password``); None without basic-auth.
    registry_secret: str | None
    # The CA that signed the servers' certificate (key ``ca.crt``), with TLS on.
    ca_secret: str | None = None
    service_account: str = "rollout"
    # The lifecycle record it appends every window and decision to (``$MLPLATFORM_RECORD``), what it
    # reaches to write there and its client's environment; None: none.
    record: RecordStore | None = None
    # Its ServiceAccount's annotations: the cloud identity that may append to ``record`` (AWS: IRSA), and
    # the labels its pod needs for that identity (Azure: ``azure.workload.identity/use``).
    service_account_annotations: Mapping[str, Any] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    cpu: str = "250m"
    memory: str = "256Mi"
    # A finished Job (and its pod's log, the record of each gate) is kept this long, then deleted.
    ttl_s: int = 7 * 24 * 3600
    # Where the stack requires a promotion approval and its plan declares ``promote: true``: why the gates
    # promote without one, on the CronJob as ``PRE_APPROVED_REASON`` (the evidence pack's exceptions
    # register lists every such annotation: mlplatform/evidence.py ``documented_exemptions``).
    pre_approved: str | None = None

    def problems(self) -> list[str]:
        problems = []
        if self.deadline_s < 60:
            problems.append("the rollout's deadline_s must be at least 60")
        if self.plan is not None:
            try:
                json.loads(self.plan)
            except ValueError:
                problems.append("the rollout's plan must be JSON")
        if not _DNS_LABEL.match(self.service_account):
            problems.append("the rollout's service_account must be a DNS label")
        return problems


# The drift monitor's objects (docs/lifecycle.md), named after the service; its Job runs this.
MONITOR_SUFFIX = "-drift-monitor"
MONITOR_COMPONENT = "drift-monitor"
MONITOR_ENTRY = ("python", "-m", "workloads.delivery.monitor")
# Where the monitor's pods mount the lifecycle record (its only state: windows, decisions, retrains).
RECORD_MOUNT = PurePosixPath("/var/lib/ml-platform/record")
# A run that could not start within this of its time is skipped (batch/v1 CronJobSpec
# ``startingDeadlineSeconds``): the next run reads a fresh window, and a controller that was down long
# does not start a burst of stale ones. Without it, a CronJob that missed more than 100 schedules is
# never started again (kubernetes.io "CronJob", CronJob limitations).
MONITOR_STARTING_DEADLINE_S = 300
# One window reads every server and the registry, and sends the labelled set: minutes at most. A hung run
# is ended before the next one is due under ``concurrencyPolicy: Forbid``.
MONITOR_DEADLINE_S = 600
MONITOR_JOBS_KEPT = 3


# A ConfigMap carrying an object a workload creates at run time (the monitor's retrain Job), under
# ``CARRIED_KEY`` as JSON: labelled so the judges judge the object it carries as if it were applied
# (judges/kube.py ``carried``).
CARRIED_LABEL = "ml-platform.io/carries"
CARRIED_KEY = "object.json"
# Where the monitor's pods read the retrain Job.
RETRAIN_MOUNT = PurePosixPath("/etc/ml-platform/retrain")
RETRAIN_SUFFIX = "-retrain"
# The projected token's lifetime: the kubelet renews it at 80 % (kubernetes.io, "Service account token
# volume projection"); an hour is the API server's own default for a bound token.
API_TOKEN_S = 3600


@dataclass(frozen=True)
class RetrainLaunch:
    """The training Job the monitor creates on a retrain decision, and what creating it needs."""

    # The Job as JSON (the training run's own builder, components/kubernetes/workloads.py
    # ``retrain_job``); a deploy-time value where its image is one.
    job: object
    # The training namespace, where the monitor's Role allows ``create`` on Jobs and nothing else.
    namespace: str
    # Where the monitor's pods reach the API server (ClusterHandle.api_server).
    api_server: Peer


@dataclass(frozen=True)
class MonitorJob:
    """The drift monitor's CronJob: what ``python -m workloads.delivery.monitor`` gets on the cluster."""

    # The stack's ``driftMonitor`` as JSON (camelCase keys) and its schedule (a cron expression).
    policy: str
    schedule: str
    # The monitor's registry credentials (keys ``username``, ``password``); None without basic-auth.
    registry_secret: str | None
    # The claim holding the lifecycle record (read-write, shared storage), where the stack keeps no
    # ``record`` store; one of the two.
    record_claim: str | None
    # The CA that signed the servers' certificate (key ``ca.crt``), with TLS on.
    ca_secret: str | None = None
    # The stack's lifecycle record store (AWS: the Object-Locked bucket, as the rollout's) and its
    # ServiceAccount's annotations: the cloud identity that may only append to it (AWS: IRSA), and the
    # labels its pod needs for that identity (Azure: ``azure.workload.identity/use``).
    record: RecordStore | None = None
    service_account_annotations: Mapping[str, Any] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    service_account: str = "drift-monitor"
    cpu: str = "250m"
    memory: str = "512Mi"
    ttl_s: int = 24 * 3600
    # The retrain it launches in the cluster; None: a retrain decision is recorded, not launched.
    retrain: RetrainLaunch | None = None

    def problems(self) -> list[str]:
        problems = []
        if self.retrain is not None and not _DNS_LABEL.match(self.retrain.namespace):
            problems.append("the drift monitor's retrain namespace must be a DNS label")
        try:
            json.loads(self.policy)
        except ValueError:
            problems.append("the drift monitor's policy must be JSON")
        if not _DNS_LABEL.match(self.service_account):
            problems.append("the drift monitor's service_account must be a DNS label")
        if (self.record is None) == (self.record_claim is None):
            problems.append(
                "the drift monitor keeps its record in a record store or on a claim, one of the two"
            )
        if self.record_claim is not None and not _DNS_LABEL.match(self.record_claim):
            problems.append("the drift monitor's record_claim must be a DNS label")
        return problems


# The cache a registry-served pod downloads versions into; TMPDIR too, so the per-process caches of
# several server workers (workloads/inference/server.py) land on the same sized volume, not on /tmp.
MODEL_CACHE_DIR = PurePosixPath("/var/cache/models")


@dataclass(frozen=True)
class InferenceServiceSpec:
    name: str
    # A pinned reference, or a deploy-time value resolving to one (the stack's image resource's ``ref``).
    image: object
    model_name: str
    # The pinned version on ``model_volume``; both None when serving from the registry.
    model_version: str | None
    model_volume: Mapping[str, Any] | None
    pool: PoolHandle
    namespace: str = WORKLOAD_IDENTITIES["inference"].namespace
    service_account: str = WORKLOAD_IDENTITIES["inference"].service_account
    # From ClusterHandle.identities["inference"]: IRSA role ARN / workload identity client id (may be
    # pulumi Outputs; this function only places them).
    service_account_annotations: Mapping[str, Any] = field(default_factory=dict)
    model_mount_path: str = "/mnt/artifacts"
    min_replicas: int = 2
    max_replicas: int = 6
    # Requests equal limits: Guaranteed QoS, so the pod is the last evicted under node pressure and, with
    # the static CPU manager policy, gets whole cores; ONNX Runtime's threads follow the CPU request.
    cpu_request: str = "2"
    cpu_limit: str = "2"
    memory_request: str = "2Gi"
    memory_limit: str = "2Gi"
    # Server processes per pod (``SERVE_WORKERS``): 1 unless the model is cheaper than its HTTP
    # handling; each gets a whole CPU of the request, ONNX Runtime the request divided between them.
    workers: int = 1
    port: int = 8080
    auth_secret: str | None = None
    tls_secret: str | None = None
    drift_threshold: float = 0.2
    max_batch_size: int = 32
    max_wait_ms: float = 2.0
    target_cpu_utilization: int = 70
    # Namespaces allowed to call the service; empty: any pod or address, still only on the service port.
    ingress_namespaces: tuple[str, ...] = ()
    # The platform's labels (project, environment, tier, data-classification, owner, cost-center).
    labels: Mapping[str, str] = field(default_factory=dict)
    # Labels on the pods only (the cloud's workload identity, ClusterHandle.pod_labels).
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    # Further NetworkPolicy egress rules (the cloud's identity and storage endpoints).
    egress: tuple[Mapping[str, Any], ...] = ()
    run_as_user: int = 10001
    # The model registry's URI (MLflow): set, the pods serve the model's aliases (see the module's
    # docstring); ``registry_secret`` the Secret with the registry user's name and password (basic-auth).
    registry_uri: object | None = None
    registry_secret: str | None = None
    # The Secret with the CA the registry's certificate is verified against (an https registry_uri), for
    # the servers and the rollout Job alike.
    registry_ca_secret: str | None = None
    # That CA's SHA-256, on the servers' pods: they verify the registry with a context made once at start
    # (workloads/registry/client.py), so a new CA rolls them.
    registry_ca_sha256: object | None = None
    # The model cache's size (emptyDir ``sizeLimit``) and how often the alias is checked.
    model_cache_size: str = "1Gi"
    poll_interval_s: int = 30
    # The rollout's Job template and what it reads the servers through (registry only).
    rollout: RolloutJob | None = None
    # The drift monitor's CronJob (registry only).
    monitor: MonitorJob | None = None

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise ValueError(f"inference service {self.name!r}: " + "; ".join(problems))

    @property
    def tls(self) -> bool:
        return self.tls_secret is not None


def _problems(spec: InferenceServiceSpec) -> list[str]:
    """Everything wrong with a spec at once, so a user fixes a stack in one pass."""
    problems = []
    longest = MAX_CRONJOB_NAME - len(MONITOR_SUFFIX if spec.monitor is not None else ROLLOUT_SUFFIX)
    if not _DNS_LABEL.match(spec.name) or len(spec.name) > longest:
        problems.append(f"name must be a DNS label of at most {longest} characters")
    if spec.namespace == "default" or not _DNS_LABEL.match(spec.namespace):
        problems.append("namespace must be a DNS label other than 'default'")
    if isinstance(spec.image, str) and "@sha256:" not in spec.image:
        problems.append(f"image {spec.image!r} must be pinned by digest (name@sha256:...)")
    if not 1 <= spec.min_replicas <= spec.max_replicas:
        problems.append("replicas need 1 <= min_replicas <= max_replicas")
    if not 1024 <= spec.port <= 65535:
        problems.append("port must be 1024-65535 (the server runs without privileges)")
    problems += _model_source_problems(spec)
    if spec.pool.kind is not PoolKind.CPU:
        problems.append(
            f"pool {spec.pool.name!r} is a {spec.pool.kind} pool; this is the CPU inference service"
        )
    if (spec.cpu_request, spec.memory_request) != (spec.cpu_limit, spec.memory_limit):
        problems.append("CPU and memory requests must equal their limits (Guaranteed QoS)")
    if _cpus(spec.cpu_request) is None:
        problems.append(f"cpu_request {spec.cpu_request!r} is not a CPU quantity such as '2' or '1500m'")
    elif not 1 <= spec.workers <= _whole_cpus(spec):
        problems.append(
            f"workers must be 1..{_whole_cpus(spec)}, one per whole CPU of cpu_request {spec.cpu_request!r}"
        )
    if spec.run_as_user < 10000:
        problems.append("run_as_user must be >= 10000 (clear of host users)")
    if spec.drift_threshold <= 0 or not 1 <= spec.target_cpu_utilization <= 100:
        problems.append("drift_threshold must be > 0 and target_cpu_utilization 1-100")
    if spec.rollout is not None:
        problems += spec.rollout.problems()
        if spec.registry_uri is None:
            problems.append("the rollout moves registry aliases: it needs registry_uri")
    if spec.monitor is not None:
        problems += spec.monitor.problems()
        if spec.registry_uri is None:
            problems.append("the drift monitor reads the registry's @champion: it needs registry_uri")
    return problems


def _model_source_problems(spec: InferenceServiceSpec) -> list[str]:
    if spec.registry_uri is not None:
        if (spec.model_version, spec.model_volume) != (None, None):
            return ["with registry_uri the pods follow @champion: no model_version or model_volume"]
        if spec.poll_interval_s < 1:
            return ["poll_interval_s must be at least 1"]
        return []
    problems = []
    if spec.registry_secret is not None:
        problems.append("registry_secret needs registry_uri")
    if spec.registry_ca_secret is not None:
        problems.append("registry_ca_secret needs registry_uri")
    if spec.registry_ca_sha256 is not None:
        problems.append("registry_ca_sha256 needs registry_uri")
    if spec.model_version is None or spec.model_volume is None or len(spec.model_volume) != 1:
        problems.append(
            "without registry_uri: model_version, and model_volume as one Kubernetes volume source, "
            "e.g. {'persistentVolumeClaim': ...}"
        )
    return problems


def _served_version(spec: InferenceServiceSpec) -> str:
    """The pinned version, or the registry alias the pods follow."""
    version = CHAMPION if spec.registry_uri is not None else spec.model_version
    assert version is not None  # (_model_source_problems)
    return version


def _labels(spec: InferenceServiceSpec) -> dict[str, str]:
    return {
        **spec.labels,
        **MANAGED_BY,
        "app.kubernetes.io/name": "inference",
        "app.kubernetes.io/component": "inference",
        INSTANCE_LABEL: spec.name,
    }


def _cpus(quantity: str) -> float | None:
    """CPUs in a Kubernetes CPU quantity ('2', '1.5', '1500m'); None if it is not one."""
    try:
        cpus = float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
    except ValueError:
        return None
    return cpus if cpus > 0 else None


def _whole_cpus(spec: InferenceServiceSpec) -> int:
    return max(1, int(_cpus(spec.cpu_request) or 1))


def ort_threads(spec: InferenceServiceSpec) -> int:
    """ONNX Runtime's intra-op threads per worker: the whole CPUs requested shared between the workers,
    at least one (a thread beyond the quota only gets throttled; the server would read the same from the
    cgroup, this makes it explicit)."""
    return max(1, _whole_cpus(spec) // spec.workers)


def _metadata(spec: InferenceServiceSpec, name: str, **extra: Any) -> Object:
    return {"name": name, "namespace": spec.namespace, "labels": _labels(spec), **extra}


def _model_settings(spec: InferenceServiceSpec, version: str) -> dict[str, object]:
    """Where the model comes from: the registry alias the pods follow, or the pinned directory."""
    if spec.registry_uri is None:
        return {"model_dir": model_version_dir(Path(spec.model_mount_path), spec.model_name, version)}
    return {
        "model_uri": str(ModelRef(spec.model_name, alias=version)),
        "model_cache_dir": MODEL_CACHE_DIR,
        "poll_interval_s": spec.poll_interval_s,
    }


def _registry_env(spec: InferenceServiceSpec) -> list[Object]:
    """The registry's URI (what the server reads, ``ServeConfig.from_env``), the cache as TMPDIR, and the
    credentials' files."""
    if spec.registry_uri is None:
        return []
    env: dict[str, object] = {TRACKING_URI_ENV: spec.registry_uri, "TMPDIR": str(MODEL_CACHE_DIR)}
    if spec.registry_secret is not None:
        env |= credential_env()
    if spec.registry_ca_secret is not None:
        env |= ca_env()
    return [{"name": k, "value": v} for k, v in env.items()]


def _env(spec: InferenceServiceSpec, version: str) -> list[Object]:
    settings: dict[str, object] = {
        **_model_settings(spec, version),
        "host": "0.0.0.0",
        "port": spec.port,
        "max_batch_size": spec.max_batch_size,
        "max_wait_ms": spec.max_wait_ms,
        "drift_threshold": spec.drift_threshold,
        "drain_timeout_s": DRAIN_TIMEOUT_S,
        "shutdown_timeout_s": SHUTDOWN_TIMEOUT_S,
        "threads": ort_threads(spec),
        "workers": spec.workers,
    }
    if spec.auth_secret is not None:
        settings["auth_token_file"] = SECRETS_DIR / "auth" / "token"
    if spec.tls:
        settings["tls_cert_file"] = SECRETS_DIR / "tls" / "tls.crt"
        settings["tls_key_file"] = SECRETS_DIR / "tls" / "tls.key"
    serve = [{"name": f"{ENV_PREFIX}{k.upper()}", "value": str(v)} for k, v in settings.items()]
    return serve + _registry_env(spec)


def _volumes(spec: InferenceServiceSpec) -> tuple[list[Object], list[Object]]:
    """Pod volumes and the container's mounts: the model (pinned: the models volume, read-only; from the
    registry: the model cache), /tmp, and the secrets in use."""
    if spec.model_volume is not None:
        volumes: list[Object] = [{"name": "model", **spec.model_volume}]
        mounts: list[Object] = [{"name": "model", "mountPath": spec.model_mount_path, "readOnly": True}]
    else:
        # Versions download here: the serving one and the one swapping in, per server process.
        volumes = [{"name": "model-cache", "emptyDir": {"sizeLimit": spec.model_cache_size}}]
        mounts = [{"name": "model-cache", "mountPath": str(MODEL_CACHE_DIR)}]
    volumes.append({"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    if spec.registry_secret is not None:
        volumes.append(credential_volume(spec.registry_secret))
        mounts.append(credential_mount())
    if spec.registry_ca_secret is not None:
        volumes.append(ca_volume(spec.registry_ca_secret))
        mounts.append(ca_mount())
    for name, secret in (("auth", spec.auth_secret), ("tls", spec.tls_secret)):
        if secret is not None:
            volumes.append({"name": name, "secret": {"secretName": secret, "defaultMode": 0o440}})
            mounts.append({"name": name, "mountPath": str(SECRETS_DIR / name), "readOnly": True})
    return volumes, mounts


def _probe(spec: InferenceServiceSpec, path: str, period: int, failures: int) -> Object:
    scheme = "HTTPS" if spec.tls else "HTTP"
    return {
        "httpGet": {"path": path, "port": "http", "scheme": scheme},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def _container(spec: InferenceServiceSpec, version: str, mounts: list[Object]) -> Object:
    return {
        "name": "server",
        "image": spec.image,
        "imagePullPolicy": "Always",
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "env": _env(spec, version),
        "resources": {
            "requests": {"cpu": spec.cpu_request, "memory": spec.memory_request},
            "limits": {"cpu": spec.cpu_limit, "memory": spec.memory_limit},
        },
        # Startup covers hashing and loading a large model; liveness then only restarts a wedged process.
        "startupProbe": _probe(spec, "/healthz", period=2, failures=60),
        "livenessProbe": _probe(spec, "/healthz", period=10, failures=3),
        # Three misses, not one: a single slow answer under CPU load must not drop a busy pod from the
        # Service and push its load onto the others (cluster review D6). Draining is not delayed by
        # this: a terminating pod leaves the endpoints at once, whatever its readiness.
        "readinessProbe": _probe(spec, "/readyz", period=2, failures=3),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_S}}},
        "securityContext": restricted_container_security(spec.run_as_user),
        "volumeMounts": mounts,
    }


def _pod_labels(spec: InferenceServiceSpec) -> dict[str, str]:
    return {
        **_labels(spec),
        **spec.pod_labels,
        TRACK_LABEL: STABLE_TRACK,
        "app.kubernetes.io/version": _served_version(spec),
    }


def _deployment(spec: InferenceServiceSpec) -> Object:
    selector = {INSTANCE_LABEL: spec.name, TRACK_LABEL: STABLE_TRACK}
    volumes, mounts = _volumes(spec)
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
        for key in ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
    ]
    pod_spec = {
        "serviceAccountName": spec.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": PRE_STOP_SLEEP_S
        + DRAIN_TIMEOUT_S
        + SHUTDOWN_TIMEOUT_S
        + GRACE_MARGIN_S,
        "securityContext": restricted_pod_security(spec.run_as_user),
        "nodeSelector": spec.pool.node_selector,
        "tolerations": spec.pool.tolerations(),
        "topologySpreadConstraints": spread,
        "containers": [_container(spec, _served_version(spec), mounts)],
        "volumes": volumes,
    }
    annotations: dict[str, object] = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.port),
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": "https" if spec.tls else "http",
    }
    if spec.registry_ca_sha256 is not None:
        annotations[REGISTRY_CA_ANNOTATION] = spec.registry_ca_sha256
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        # Following an alias, which version serves is the registry's call, outside ``pulumi up``: on a
        # fresh stack no version has the alias and the pods wait unready for the first promotion
        # (server.prepare), so ``pulumi up`` must not wait for them. A pinned version is awaited.
        "metadata": _metadata(
            spec, spec.name, **({"annotations": SKIP_AWAIT} if spec.registry_uri is not None else {})
        ),
        # No ``replicas``: the HPA owns it. With it set, each server-side apply after the HPA
        # scaled would reset or conflict on .spec.replicas (kubernetes.io, "Horizontal Pod Autoscaling":
        # remove spec.replicas from manifests of HPA-scaled workloads; pulumi/pulumi-kubernetes#2491).
        # The API server defaults it to 1 on create and the HPA raises it to minReplicas.
        "spec": {
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": _pod_labels(spec), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def _autoscaler(spec: InferenceServiceSpec) -> Object:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(spec, spec.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name},
            "minReplicas": spec.min_replicas,
            "maxReplicas": spec.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": spec.target_cpu_utilization},
                    },
                }
            ],
        },
    }


def _service(spec: InferenceServiceSpec) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, spec.name),
        "spec": {
            "type": "ClusterIP",
            "selector": {INSTANCE_LABEL: spec.name},
            "ports": _service_ports(spec),
        },
    }


def _service_ports(spec: InferenceServiceSpec) -> list[Object]:
    return [
        {"name": "https" if spec.tls else "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}
    ]


def _disruption_budget(spec: InferenceServiceSpec) -> Object:
    """One pod at a time may be evicted, so a node drain never empties the service."""
    return disruption_budget(_metadata(spec, spec.name), {INSTANCE_LABEL: spec.name})


def _network_policy(spec: InferenceServiceSpec) -> Object:
    """The servers: in on the service port (from the allowed namespaces and the rollout's pods, or from
    anywhere); out only to what ``egress`` adds."""
    rule: Object = {"ports": [{"port": spec.port, "protocol": "TCP"}]}
    if spec.ingress_namespaces:
        rule["from"] = [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
            for ns in spec.ingress_namespaces
        ]
        if spec.rollout is not None:
            rule["from"].append({"podSelector": {"matchLabels": _rollout_selector(spec)}})
        if spec.monitor is not None:
            rule["from"].append({"podSelector": {"matchLabels": _monitor_selector(spec)}})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(spec, spec.name),
        "spec": {
            "podSelector": {"matchLabels": {INSTANCE_LABEL: spec.name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [rule],
            "egress": [dict(extra) for extra in spec.egress],
        },
    }


def _pods_service(spec: InferenceServiceSpec) -> Object:
    """Headless (``clusterIP: None``): its DNS name resolves to the address of every ready server, not to a
    virtual IP (kubernetes.io "Service", headless Services; "DNS for Services and Pods": A/AAAA records for
    each ready endpoint), so the rollout reads each pod's ``/metrics`` with DNS alone, no API rights.
    ``publishNotReadyAddresses: false``: a pod that is starting or draining is not listed. Its instance
    label is its own, so the ServiceMonitor selecting the service's label does not scrape each pod twice."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            **_metadata(spec, spec.name + PODS_SUFFIX),
            "labels": {**_labels(spec), INSTANCE_LABEL: spec.name + PODS_SUFFIX},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": False,
            "selector": {INSTANCE_LABEL: spec.name},
            "ports": _service_ports(spec),
        },
    }


def _rollout_name(spec: InferenceServiceSpec) -> str:
    return spec.name + ROLLOUT_SUFFIX


def _rollout_selector(spec: InferenceServiceSpec) -> dict[str, str]:
    return {INSTANCE_LABEL: _rollout_name(spec), COMPONENT_LABEL: ROLLOUT_COMPONENT}


def _rollout_labels(spec: InferenceServiceSpec) -> dict[str, str]:
    """Its own instance and component: the servers' Service, PDB and NetworkPolicy never select it."""
    return {**_labels(spec), **_rollout_selector(spec)}


def _rollout_env(spec: InferenceServiceSpec, rollout: RolloutJob) -> list[Object]:
    scheme = "https" if spec.tls else "http"
    service = f"{spec.name}.{spec.namespace}.svc"
    env: dict[str, object] = {
        TRACKING_URI_ENV: spec.registry_uri,
        ROLLOUT_MODEL_ENV: spec.model_name,
        ROLLOUT_METRICS_DNS_ENV: f"{spec.name}{PODS_SUFFIX}.{spec.namespace}.svc.cluster.local",
        ROLLOUT_METRICS_PORT_ENV: str(spec.port),
        ROLLOUT_METRICS_SCHEME_ENV: scheme,
        ROLLOUT_SERVICE_URL_ENV: f"{scheme}://{service}.cluster.local:{spec.port}",
        "HOME": "/tmp",
    }
    if rollout.registry_secret is not None:
        env |= credential_env()
    if spec.registry_ca_secret is not None:
        env |= ca_env()
    if spec.auth_secret is not None:
        env[ROLLOUT_TOKEN_FILE_ENV] = str(SECRETS_DIR / "auth" / "token")
    if spec.tls:
        env[ROLLOUT_CA_FILE_ENV] = str(SECRETS_DIR / "ca" / "ca.crt")
        # The servers' certificate names the Service (as the ServiceMonitor verifies it), also when the
        # rollout connects to a pod's own address.
        env[ROLLOUT_TLS_SERVER_NAME_ENV] = service
    if rollout.plan is not None:
        env[ROLLOUT_PLAN_ENV] = rollout.plan
    if rollout.record is not None:
        env |= rollout.record.environment
        env[RECORD_ENV] = rollout.record.uri
    return [{"name": k, "value": v} for k, v in env.items()]


def _caller_volumes(
    spec: InferenceServiceSpec, registry_secret: str | None, ca_secret: str | None
) -> tuple[list[Object], list[Object]]:
    """A Job calling the registry (its credentials, the registry's CA) and the servers (their token, the
    CA of their certificate): the rollout's and the drift monitor's."""
    volumes: list[Object] = [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    mounts: list[Object] = [{"name": "tmp", "mountPath": "/tmp"}]
    if registry_secret is not None:
        volumes.append(credential_volume(registry_secret))
        mounts.append(credential_mount())
    if spec.registry_ca_secret is not None:
        volumes.append(ca_volume(spec.registry_ca_secret))
        mounts.append(ca_mount())
    secrets = (("auth", spec.auth_secret), ("ca", ca_secret if spec.tls else None))
    for name, secret in secrets:
        if secret is not None:
            volumes.append({"name": name, "secret": {"secretName": secret, "defaultMode": 0o440}})
            mounts.append({"name": name, "mountPath": str(SECRETS_DIR / name), "readOnly": True})
    return volumes, mounts


def _rollout_cron_job(spec: InferenceServiceSpec, rollout: RolloutJob) -> Object:
    """The rollout's Job template: suspended, so it never runs on its own; a user starts one with
    ``kubectl create job --from=cronjob/<name> <job>``. One try (``backoffLimit: 0``): a rollout that failed
    half-way has already moved traffic, and running it again from its first step must be a person's
    decision, not the Job controller's."""
    volumes, mounts = _caller_volumes(spec, rollout.registry_secret, rollout.ca_secret)
    container = restricted_container(
        "rollout",
        spec.image,
        uid=spec.run_as_user,
        cpu=rollout.cpu,
        memory=rollout.memory,
        env=_rollout_env(spec, rollout),
        mounts=mounts,
        command=list(ROLLOUT_ENTRY),
    )
    pod = {
        "serviceAccountName": rollout.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": ROLLOUT_GRACE_S,
        "securityContext": restricted_pod_security(spec.run_as_user),
        "nodeSelector": spec.pool.node_selector,
        "tolerations": spec.pool.tolerations(),
        "containers": [container],
        "volumes": volumes,
    }
    # The rollout's own identity labels, not ``spec.pod_labels`` (the servers' identity).
    reaches = peer_annotations(rollout.record.peers) if rollout.record is not None else {}
    template = {
        "labels": {**_rollout_labels(spec), **rollout.pod_labels},
        "annotations": {SAFE_TO_EVICT: "false", **reaches},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _metadata(
            spec,
            _rollout_name(spec),
            labels=_rollout_labels(spec),
            **({"annotations": {PRE_APPROVED_REASON: rollout.pre_approved}} if rollout.pre_approved else {}),
        ),
        "spec": {
            "schedule": ROLLOUT_SCHEDULE,
            "suspend": True,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": ROLLOUT_JOBS_KEPT,
            "failedJobsHistoryLimit": ROLLOUT_JOBS_KEPT,
            "jobTemplate": {
                "metadata": {"labels": _rollout_labels(spec)},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": rollout.deadline_s,
                    "ttlSecondsAfterFinished": rollout.ttl_s,
                    "template": {"metadata": template, "spec": pod},
                },
            },
        },
    }


def _rollout_network_policy(spec: InferenceServiceSpec, rollout: RolloutJob) -> Object:
    """The rollout's pods: nothing in; out to the servers' port (``/metrics`` of each pod, the labelled
    set through the Service) and, with a record, to what writing it reaches (the cloud's identity and
    storage endpoints). DNS and the registry: the namespace's ``allow-dns`` and ``allow-registry``."""
    to_record = [peer_egress(p) for p in rollout.record.peers] if rollout.record is not None else []
    return _servers_reader_policy(spec, _rollout_name(spec), _rollout_selector(spec), to_record)


def _servers_reader_policy(
    spec: InferenceServiceSpec, name: str, selector: Mapping[str, str], more: Sequence[Object] = ()
) -> Object:
    """A NetworkPolicy for pods that read the servers: nothing in; out to the servers' port, and ``more``."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(spec, name),
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [
                {
                    "to": [{"podSelector": {"matchLabels": {INSTANCE_LABEL: spec.name}}}],
                    "ports": [{"port": spec.port, "protocol": "TCP"}],
                },
                *more,
            ],
        },
    }


def _rollout_objects(spec: InferenceServiceSpec) -> list[Object]:
    if spec.rollout is None:
        return []
    return [
        service_account(
            _metadata(spec, spec.rollout.service_account), spec.rollout.service_account_annotations
        ),
        _pods_service(spec),
        _rollout_network_policy(spec, spec.rollout),
        _rollout_cron_job(spec, spec.rollout),
    ]


def _monitor_name(spec: InferenceServiceSpec) -> str:
    return spec.name + MONITOR_SUFFIX


def _monitor_selector(spec: InferenceServiceSpec) -> dict[str, str]:
    return {INSTANCE_LABEL: _monitor_name(spec), COMPONENT_LABEL: MONITOR_COMPONENT}


def _monitor_labels(spec: InferenceServiceSpec) -> dict[str, str]:
    """Its own instance and component: the servers' Service, PDB and NetworkPolicy never select it."""
    return {**_labels(spec), **_monitor_selector(spec)}


def _monitor_env(spec: InferenceServiceSpec, monitor: MonitorJob) -> list[Object]:
    """workloads/delivery/monitor.py's variables: the servers as the rollout reads them (every ready pod
    through the headless Service) and, with a retrain, the Job it creates (a file of its ConfigMap)."""
    scheme = "https" if spec.tls else "http"
    service = f"{spec.name}.{spec.namespace}.svc"
    record = monitor.record
    env: dict[str, object] = {
        TRACKING_URI_ENV: spec.registry_uri,
        **(record.environment if record is not None else {}),
        RECORD_ENV: record.uri if record is not None else str(RECORD_MOUNT),
        MONITOR_ENV["model"]: spec.model_name,
        MONITOR_ENV["metrics_dns"]: f"{spec.name}{PODS_SUFFIX}.{spec.namespace}.svc.cluster.local",
        MONITOR_ENV["metrics_port"]: str(spec.port),
        MONITOR_ENV["metrics_scheme"]: scheme,
        MONITOR_ENV["service_url"]: f"{scheme}://{service}.cluster.local:{spec.port}",
        MONITOR_ENV["policy"]: monitor.policy,
        "HOME": "/tmp",
    }
    if monitor.registry_secret is not None:
        env |= credential_env()
    if spec.registry_ca_secret is not None:
        env |= ca_env()
    if spec.auth_secret is not None:
        env[MONITOR_ENV["token_file"]] = str(SECRETS_DIR / "auth" / "token")
    if spec.tls:
        env[MONITOR_ENV["ca_file"]] = str(SECRETS_DIR / "ca" / "ca.crt")
        env[MONITOR_ENV["tls_server_name"]] = service
    if monitor.retrain is not None:
        env[MONITOR_ENV["retrain_job"]] = str(RETRAIN_MOUNT / CARRIED_KEY)
    return [{"name": k, "value": v} for k, v in env.items()]


def _retrain_name(spec: InferenceServiceSpec) -> str:
    return _monitor_name(spec) + RETRAIN_SUFFIX


def _retrain_volumes(spec: InferenceServiceSpec) -> tuple[list[Object], list[Object]]:
    """The retrain Job (its ConfigMap) and the API credentials: the ServiceAccount's token projected for
    the API server's audience, the cluster's CA (the ``kube-root-ca.crt`` ConfigMap every namespace
    gets) and the namespace, where the kubelet would automount them (kubernetes.io, "Configure Service
    Accounts for Pods"): only this pod gets a token, not every pod of the ServiceAccount."""
    api = {
        "name": "kube-api-access",
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": API_TOKEN_S}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                    }
                },
            ],
        },
    }
    job = {"name": "retrain", "configMap": {"name": _retrain_name(spec), "defaultMode": 0o444}}
    mounts = [
        {"name": "kube-api-access", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True},
        {"name": "retrain", "mountPath": str(RETRAIN_MOUNT), "readOnly": True},
    ]
    return [api, job], mounts


def _monitor_cron_job(spec: InferenceServiceSpec, monitor: MonitorJob) -> Object:
    """One window per run on the policy's schedule. ``concurrencyPolicy: Forbid``: two runs at once would
    both read the record before either appends, and could both decide to retrain. One try
    (``backoffLimit: 0``): a failed window is recorded by the next run's, not retried with stale
    counters."""
    volumes, mounts = _caller_volumes(spec, monitor.registry_secret, monitor.ca_secret)
    if monitor.record_claim is not None:
        volumes.append({"name": "record", "persistentVolumeClaim": {"claimName": monitor.record_claim}})
        mounts.append({"name": "record", "mountPath": str(RECORD_MOUNT)})
    if monitor.retrain is not None:
        more_volumes, more_mounts = _retrain_volumes(spec)
        volumes += more_volumes
        mounts += more_mounts
    container = restricted_container(
        "drift-monitor",
        spec.image,
        uid=spec.run_as_user,
        cpu=monitor.cpu,
        memory=monitor.memory,
        env=_monitor_env(spec, monitor),
        mounts=mounts,
        command=list(MONITOR_ENTRY),
    )
    pod = {
        "serviceAccountName": monitor.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "securityContext": restricted_pod_security(spec.run_as_user),
        "nodeSelector": spec.pool.node_selector,
        "tolerations": spec.pool.tolerations(),
        "containers": [container],
        "volumes": volumes,
    }
    reaches = peer_annotations(_monitor_peers(monitor))
    template = {
        "labels": {**_monitor_labels(spec), **monitor.pod_labels},
        **({"annotations": reaches} if reaches else {}),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": _metadata(spec, _monitor_name(spec), labels=_monitor_labels(spec)),
        "spec": {
            "schedule": monitor.schedule,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": MONITOR_STARTING_DEADLINE_S,
            "successfulJobsHistoryLimit": MONITOR_JOBS_KEPT,
            "failedJobsHistoryLimit": MONITOR_JOBS_KEPT,
            "jobTemplate": {
                "metadata": {"labels": _monitor_labels(spec)},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": MONITOR_DEADLINE_S,
                    "ttlSecondsAfterFinished": monitor.ttl_s,
                    "template": {"metadata": template, "spec": pod},
                },
            },
        },
    }


def _monitor_network_policy(spec: InferenceServiceSpec, monitor: MonitorJob) -> Object:
    """The monitor's pods: nothing in; out to the servers' port (each pod's ``/metrics``, the labelled
    set through the Service), to the record store where it is one, and, launching retrains, to the API
    server. DNS and the registry: the namespace's ``allow-dns`` and ``allow-registry``."""
    more = [peer_egress(p) for p in _monitor_peers(monitor)]
    return _servers_reader_policy(spec, _monitor_name(spec), _monitor_selector(spec), more)


def _monitor_peers(monitor: MonitorJob) -> list[Peer]:
    """What the monitor reaches outside the pod network: the record store, the API server."""
    record = list(monitor.record.peers) if monitor.record is not None else []
    return [*record, *([monitor.retrain.api_server] if monitor.retrain is not None else [])]


def _retrain_objects(spec: InferenceServiceSpec, monitor: MonitorJob, retrain: RetrainLaunch) -> list[Object]:
    """The retrain Job, carried in a ConfigMap the monitor mounts, and the monitor's one Kubernetes right:
    ``create`` on batch Jobs in the training namespace (a Role there, bound to its ServiceAccount). No
    get, list, watch, update, patch or delete: it can start a run, never read, change or stop one, and
    no other kind (not Pods: a pod it made would bypass Kueue and the Job's own limits). RBAC cannot narrow
    ``create`` by name (kubernetes.io "Using RBAC Authorization", referring to resources: resourceNames
    do not restrict create), so the Job's namespace is the bound: there, the queue-name admission policy
    (components/kubernetes/kueue.py) refuses a Job Kueue does not queue."""
    name = _retrain_name(spec)
    labels = _monitor_labels(spec)
    carried = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": {**labels, CARRIED_LABEL: "Job"}},
        "data": {CARRIED_KEY: retrain.job},
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": retrain.namespace, "labels": labels},
        "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": retrain.namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": monitor.service_account, "namespace": spec.namespace}
        ],
    }
    return [carried, role, binding]


def _monitor_objects(spec: InferenceServiceSpec) -> list[Object]:
    """Its ServiceAccount (no token automounted: it reads the servers through DNS), what launching a
    retrain needs (``_retrain_objects``), its NetworkPolicy and its CronJob; the headless Service it reads
    through is the rollout's."""
    if spec.monitor is None:
        return []
    pods = [] if spec.rollout is not None else [_pods_service(spec)]
    retrain = spec.monitor.retrain
    launch = _retrain_objects(spec, spec.monitor, retrain) if retrain is not None else []
    return [
        service_account(
            _metadata(spec, spec.monitor.service_account), spec.monitor.service_account_annotations
        ),
        *pods,
        *launch,
        _monitor_network_policy(spec, spec.monitor),
        _monitor_cron_job(spec, spec.monitor),
    ]


def inference_objects(spec: InferenceServiceSpec) -> list[Object]:
    """The service's objects in apply order: identity first, then workloads, then what points at them."""
    return [
        service_account(_metadata(spec, spec.service_account), spec.service_account_annotations),
        _deployment(spec),
        _service(spec),
        _autoscaler(spec),
        _disruption_budget(spec),
        _network_policy(spec),
        *_rollout_objects(spec),
        *_monitor_objects(spec),
    ]
