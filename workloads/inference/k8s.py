"""The inference service as Kubernetes objects: ``inference_objects(spec) -> list[dict]``, no Pulumi.

One Deployment per model version (a stable one and, optionally, a canary taking a share of the
replicas) behind one Service; each with its HorizontalPodAutoscaler; one PodDisruptionBudget and one
NetworkPolicy over all of them; the ServiceAccount they run as.

The pods are locked down as the CIS/checkov baselines ask: non-root high UID, read-only root file system
(``/tmp`` an emptyDir), no capabilities, no privilege escalation, seccomp RuntimeDefault, no service
account token. The model comes either from shared storage, mounted read-only, by pinned version, or
from the model registry (``registry_uri``): the stable track serves ``models:/<name>@champion`` and the
canary ``models:/<name>@challenger``, each pod downloading into its own model cache (an emptyDir) and
following the alias as it moves (workloads/inference/follow.py), so a promotion or a rollback needs no
``pulumi up``. Either way the server verifies the files against their recorded hashes before it opens a
socket. The pod's own egress is only what ``egress`` adds; the registry's ``allow-registry`` policy in
the namespace lets it reach the registry's servers. Ingress on the service port only.

A canary splits traffic by replica count (the Service balances over the pods of both versions); exact
percentages would need a mesh or gateway, which this platform does not assume.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from components.handle import WORKLOAD_IDENTITIES, PoolHandle, PoolKind
from components.kubernetes.objects import (
    MANAGED_BY,
    SKIP_AWAIT,
    restricted_container_security,
    restricted_pod_security,
    service_account,
)
from workloads.artifacts import model_version_dir
from workloads.inference.config import ENV_PREFIX
from workloads.registry.client import TRACKING_URI_ENV, ModelRef
from workloads.registry.k8s import credential_env, credential_mount, credential_volume
from workloads.registry.rollout import CHALLENGER, CHAMPION

Object = dict[str, Any]

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
CANARY_SUFFIX = "-canary"
TRACK_LABEL = "ml-platform/track"
INSTANCE_LABEL = "app.kubernetes.io/instance"
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


@dataclass(frozen=True)
class Canary:
    """A second model version taking ``share`` of the replicas (and so roughly of the traffic): a pinned
    ``version``, or None when serving follows the registry (the canary follows ``@challenger``)."""

    version: str | None
    share: float


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
    canary: Canary | None = None
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
    # The model cache's size (emptyDir ``sizeLimit``) and how often the alias is checked.
    model_cache_size: str = "1Gi"
    poll_interval_s: int = 30

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
    if not _DNS_LABEL.match(spec.name) or len(spec.name) > 63 - len(CANARY_SUFFIX):
        problems.append(f"name must be a DNS label of at most {63 - len(CANARY_SUFFIX)} characters")
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
    if spec.canary is not None:
        if not 0 < spec.canary.share < 1:
            problems.append("canary share must lie strictly between 0 and 1")
        if spec.max_replicas < 2:
            problems.append("a canary needs max_replicas >= 2 (one replica per track at least)")
        elif 0 < spec.canary.share < 1 and 1 <= spec.min_replicas <= spec.max_replicas:
            problem = canary_share_problem(spec.min_replicas, spec.max_replicas, spec.canary.share)
            if problem:
                problems.append(problem)
    return problems


def _model_source_problems(spec: InferenceServiceSpec) -> list[str]:
    canary = spec.canary.version if spec.canary is not None else None
    if spec.registry_uri is not None:
        if (spec.model_version, spec.model_volume, canary) != (None, None, None):
            return [
                "with registry_uri the tracks follow aliases: no model_version, model_volume, canary version"
            ]
        if spec.poll_interval_s < 1:
            return ["poll_interval_s must be at least 1"]
        return []
    problems = []
    if spec.registry_secret is not None:
        problems.append("registry_secret needs registry_uri")
    if spec.model_version is None or spec.model_volume is None or len(spec.model_volume) != 1:
        problems.append(
            "without registry_uri: model_version, and model_volume as one Kubernetes volume source, "
            "e.g. {'persistentVolumeClaim': ...}"
        )
    if spec.canary is not None and canary is None:
        problems.append("a pinned canary needs its version")
    elif canary is not None and canary == spec.model_version:
        problems.append("canary version must differ from model_version")
    return problems


@dataclass(frozen=True)
class _Track:
    """One Deployment: which version, under which name, with how many replicas."""

    name: str
    track: str
    # The pinned version, or the registry alias the track follows.
    version: str
    min_replicas: int
    max_replicas: int


def split_replicas(min_replicas: int, max_replicas: int, share: float) -> tuple[int, int, int, int]:
    """(stable min, stable max, canary min, canary max): the replica range split by the canary's
    share, each track at least one replica."""
    canary_min = max(1, round(min_replicas * share))
    canary_max = max(canary_min, math.floor(max_replicas * share), 1)
    stable_min = max(1, min_replicas - canary_min)
    stable_max = max(stable_min, max_replicas - canary_max)
    return stable_min, stable_max, canary_min, canary_max


# How far the canary's real share of replicas may stray from the configured one, as a fraction of it.
CANARY_SHARE_TOLERANCE = 0.5


def canary_share_problem(min_replicas: int, max_replicas: int, share: float) -> str | None:
    """The Service balances connections over pods, so the canary's traffic share is its share of the
    replicas; the two HPAs scale each track on its own, so the share at both ends of the range counts.
    One line when either strays more than ``CANARY_SHARE_TOLERANCE`` from ``share`` (cluster review B7:
    10 % configured, 1 of 3 replicas served)."""
    stable_min, stable_max, canary_min, canary_max = split_replicas(min_replicas, max_replicas, share)
    for where, canary, stable in (
        ("minReplicas", canary_min, stable_min),
        ("maxReplicas", canary_max, stable_max),
    ):
        actual = canary / (canary + stable)
        if abs(actual - share) > share * CANARY_SHARE_TOLERANCE:
            return (
                f"the canary would get {canary} of {canary + stable} replicas ({actual:.0%}) at {where}, "
                f"not {share:.0%}; raise minReplicas to at least {math.ceil(1 / share)} or the percent"
            )
    return None


def _tracks(spec: InferenceServiceSpec) -> list[_Track]:
    """Split the replica range between stable and canary by the canary's share, each at least one."""
    following = spec.registry_uri is not None
    stable = CHAMPION if following else spec.model_version
    assert stable is not None  # (_model_source_problems)
    if spec.canary is None:
        return [_Track(spec.name, "stable", stable, spec.min_replicas, spec.max_replicas)]
    canary = CHALLENGER if following else spec.canary.version
    assert canary is not None
    stable_min, stable_max, canary_min, canary_max = split_replicas(
        spec.min_replicas, spec.max_replicas, spec.canary.share
    )
    return [
        _Track(spec.name, "stable", stable, stable_min, stable_max),
        _Track(spec.name + CANARY_SUFFIX, "canary", canary, canary_min, canary_max),
    ]


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
    """Where the track's model comes from: the registry alias it follows, or the pinned directory."""
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


def _pod_labels(spec: InferenceServiceSpec, track: _Track) -> dict[str, str]:
    return {
        **_labels(spec),
        **spec.pod_labels,
        TRACK_LABEL: track.track,
        "app.kubernetes.io/version": track.version,
    }


def _deployment(spec: InferenceServiceSpec, track: _Track) -> Object:
    selector = {INSTANCE_LABEL: spec.name, TRACK_LABEL: track.track}
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
        "containers": [_container(spec, track.version, mounts)],
        "volumes": volumes,
    }
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.port),
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": "https" if spec.tls else "http",
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        # Following an alias, which version serves is the registry's call, outside ``pulumi up``: on a
        # fresh stack no version has the alias and the pods wait unready for the first promotion
        # (server.prepare), so ``pulumi up`` must not wait for them. A pinned version is awaited.
        "metadata": _metadata(
            spec, track.name, **({"annotations": SKIP_AWAIT} if spec.registry_uri is not None else {})
        ),
        # No ``replicas``: the track's HPA owns it. With it set, each server-side apply after the HPA
        # scaled would reset or conflict on .spec.replicas (kubernetes.io, "Horizontal Pod Autoscaling":
        # remove spec.replicas from manifests of HPA-scaled workloads; pulumi/pulumi-kubernetes#2491).
        # The API server defaults it to 1 on create and the HPA raises it to minReplicas.
        "spec": {
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": _pod_labels(spec, track), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def _autoscaler(spec: InferenceServiceSpec, track: _Track) -> Object:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(spec, track.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": track.name},
            "minReplicas": track.min_replicas,
            "maxReplicas": track.max_replicas,
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
            "ports": [
                {
                    "name": "https" if spec.tls else "http",
                    "port": spec.port,
                    "targetPort": "http",
                    "protocol": "TCP",
                }
            ],
        },
    }


def _disruption_budget(spec: InferenceServiceSpec) -> Object:
    """One pod at a time may be evicted across both tracks, so a node drain never empties the service."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(spec, spec.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {INSTANCE_LABEL: spec.name}}},
    }


def _network_policy(spec: InferenceServiceSpec) -> Object:
    rule: Object = {"ports": [{"port": spec.port, "protocol": "TCP"}]}
    if spec.ingress_namespaces:
        rule["from"] = [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
            for ns in spec.ingress_namespaces
        ]
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


def inference_objects(spec: InferenceServiceSpec) -> list[Object]:
    """The service's objects in apply order: identity first, then workloads, then what points at them."""
    tracks = _tracks(spec)
    return [
        service_account(_metadata(spec, spec.service_account), spec.service_account_annotations),
        *(_deployment(spec, t) for t in tracks),
        _service(spec),
        *(_autoscaler(spec, t) for t in tracks),
        _disruption_budget(spec),
        _network_policy(spec),
    ]
