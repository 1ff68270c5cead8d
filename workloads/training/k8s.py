"""The training run as Kubernetes objects: an Indexed Job of torchrun agents, a headless Service for
their c10d rendezvous, and a NetworkPolicy letting the run's pods (and only them) reach each other.

Pure: ``TrainingJobSpec -> list[dict]``, no Pulumi resources and no cloud SDK, so the objects are unit
tested, validated with kubernetes-validate and scanned with checkov exactly as they are applied. One pod
per node runs ``torchrun --nproc-per-node``; pod 0 hosts the rendezvous store (``is_host``), the others
find it by its stable DNS name ``<job>-0.<service>``. Fabric specifics come from ``fabric_profile``, pod
size from ``sizing.pod_size``.

Failure domain. A worker process that crashes is restarted in place by its torchrun agent
(``--max-restarts``), and the whole group re-forms and resumes from the last checkpoint. A lost pod is
the Job controller's: every agent that loses a peer (and, when pod 0 dies, the rendezvous store with it)
exits non-zero, and ``backoffLimitPerIndex`` recreates each failed index under its own budget, so one
incident costs each index one restart instead of draining a Job-wide ``backoffLimit`` once per pod. A
recreated pod 0 keeps its hostname, so the rendezvous endpoint ``<job>-0.<job>`` (a record of the Job's
headless Service) is stable across restarts and the new agents meet there; the checkpoint on shared
storage carries the run. ``maxFailedIndexes: 0`` fails the Job once any index has spent its budget, and
exit code 2 (bad input, a changed recipe on resume: a retry cannot help) fails it at once. The node count
is fixed (``--nnodes=N``, not ``min:max``): the resume guard pins world size into the recipe, and a
smaller group would change the global batch. A JobSet would give the same group restart, but needs a
controller this platform does not install; the Job API does it natively (GA in Kubernetes 1.33).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from components.handle import Fabric, PoolHandle
from components.kubernetes.objects import SKIP_AWAIT
from workloads.fabric import FabricProfile, fabric_profile
from workloads.fatal import EXIT_FATAL, FATAL_FILE_ENV
from workloads.nccl_transport import EXPECTED_NETWORK
from workloads.registry.client import TRACKING_URI_ENV
from workloads.registry.k8s import (
    ca_env,
    ca_mount,
    ca_volume,
    credential_env,
    credential_mount,
    credential_volume,
)
from workloads.registry.lineage import IMAGE_ENV
from workloads.training.config import parse_args
from workloads.training.sizing import PodSize, pod_size

RENDEZVOUS_PORT = 29400
CONTAINER = "trainer"
# The image's non-root user (workloads/training/Dockerfile); >= 10000 so it maps to no host account.
RUN_AS = 10001
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Room for "-<index>" in pod hostnames, which must stay DNS labels (<= 63 characters).
MAX_JOB_NAME = 52
_PINNED_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# Where a worker records a failure no retry can fix (workloads/fatal.py), on the pod's own /tmp.
FATAL_FILE = "/tmp/ml-platform-fatal"
# The variables torchrun needs under a read-only root filesystem and the gloo restart fix (REFERENCE.md).
_BASE_ENV = {
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "HOME": "/tmp",
    FATAL_FILE_ENV: FATAL_FILE,
}
# Rendezvous timeouts (--rdzv-conf; torch/distributed/elastic/rendezvous at 2.13). A non-host agent
# waits ``read_timeout`` for pod 0's TCPStore (c10d_rendezvous_backend._create_tcp_store, default 60 s):
# pod 0 may start many minutes after its peers (a multi-GB image pulled on a node just scaled up), and
# an agent that gives up fails its pod. ``join_timeout`` (dynamic_rendezvous, default 600 s) bounds how
# long a recreated pod waits for its peers, which first sit in NCCL until the process-group timeout
# (10 minutes by default) after losing a node: it must outlast that, with room for their pods'
# recreation. Kueue's waitForPodsReady (30 minutes, components/kubernetes/kueue.py) bounds both.
RDZV_READ_TIMEOUT_S = 900
# /tmp (cluster review D10): compile caches of a GPU run take gigabytes, where 1 GiB was too little.
TMP_SIZE = "16Gi"
RDZV_JOIN_TIMEOUT_S = 1800


def _image_is_pinned(image: str) -> bool:
    """A digest, or a tag other than ``latest`` (a mutable tag can change under a running Job)."""
    if _PINNED_DIGEST.search(image):
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.rsplit(":", 1)[1] not in ("", "latest")


@dataclass(frozen=True)
class TrainingJobSpec:
    """One training run. A new ``run_id`` is a new Job (Job specs are immutable) and a new model version."""

    name: str
    run_id: str
    namespace: str
    # A pinned reference, or a deploy-time value resolving to one (the stack's image resource's ``ref``,
    # components/images.py), which the object carries unchanged for Pulumi to resolve.
    image: object
    pool: PoolHandle
    service_account: str
    # A Kubernetes volume source for the shared output file system, e.g.
    # {"persistentVolumeClaim": {"claimName": "training-output"}}; checkpoints need rename, so POSIX.
    output_volume: Mapping[str, Any]
    output_mount_path: str = "/mnt/output"
    nodes: int = 1
    # None: one process per GPU (one on a CPU pool).
    nproc_per_node: int | None = None
    epochs: int = 20
    trainer_args: tuple[str, ...] = ()
    # None: derived from the pool's instance type (``sizing.pod_size``).
    cpu: int | None = None
    memory_gib: int | None = None
    shm_gib: int | None = None
    max_restarts: int = 3
    # How often the Job recreates a failed pod, per index; None: ``max_restarts``.
    backoff_limit_per_index: int | None = None
    # Where a dataset hook downloads from (object storage endpoints), opened for HTTPS only. A
    # NetworkPolicy cannot name a host, so these are address ranges (docs/training.md).
    dataset_egress_cidrs: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Labels on the pods only (the cloud's workload identity, ClusterHandle.pod_labels).
    pod_labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Further NetworkPolicy egress rules (the cloud's identity and storage endpoints).
    egress: tuple[Mapping[str, Any], ...] = ()
    # Another torchrun program (``module``, its flags...) run instead of the trainer, e.g. the fabric
    # test; its flags are its own, so the trainer's are neither added nor checked.
    entry: tuple[str, ...] = ()
    # None: ``pulumi up`` does not wait for the Job (``pulumi.com/skipAwait``). Seconds: it waits up to
    # this long for the Job to complete and fails the update if the Job fails (an acceptance gate).
    await_seconds: int | None = None
    # The model registry's in-cluster URI (MLflow); set, the trainer logs the run and registers the model
    # there as ``challenger`` (workloads/registry/lineage.py). Egress to it comes with ``egress``.
    registry_uri: object | None = None
    # The Secret holding the registry user's name and password (registry with basic-auth), mounted as
    # files (workloads/registry/k8s.py); None: the registry admits callers without credentials.
    registry_secret: str | None = None
    # The Secret with the CA the registry's certificate is verified against (an https registry_uri).
    registry_ca_secret: str | None = None
    # Created suspended, for Kueue to admit (a Job created through the API by the drift monitor's retrain,
    # workloads/delivery/monitor.py): should its namespace's admission webhook be down, it waits rather
    # than run unqueued.
    suspend: bool = False
    # A finished Job is deleted this long after it ends (``ttlSecondsAfterFinished``); None: kept.
    ttl_s: int | None = None

    def __post_init__(self) -> None:
        problems = [
            *(
                f"{what} {value!r} is not a DNS label"
                for what, value in self._dns_fields()
                if not _DNS_LABEL.match(value)
            ),
            *self._sizing_problems(),
        ]
        if len(self.job_name) > MAX_JOB_NAME:
            problems.append(f"job name {self.job_name!r} is longer than {MAX_JOB_NAME} characters")
        if not self.output_mount_path.startswith("/"):
            problems.append(f"output_mount_path {self.output_mount_path!r} must be absolute")
        if self.namespace == "default":
            problems.append("namespace must not be 'default'")
        if isinstance(self.image, str) and not _image_is_pinned(self.image):
            problems.append(f"image {self.image!r} must be pinned by digest or a tag other than latest")
        if self.ttl_s is not None and self.ttl_s < 0:
            problems.append("ttl_s must not be negative")
        if self.await_seconds is not None and self.await_seconds < 1:
            problems.append("await_seconds must be at least 1")
        if self.registry_secret is not None and self.registry_uri is None:
            problems.append("registry_secret needs registry_uri (credentials for which registry?)")
        if self.registry_ca_secret is not None and self.registry_uri is None:
            problems.append("registry_ca_secret needs registry_uri (the CA of which registry?)")
        if problems:
            raise ValueError("; ".join(problems))
        if not self.entry:
            parse_args(self.trainer_argv())  # ConfigError (a ValueError) on bad trainer flags

    def _dns_fields(self) -> list[tuple[str, str]]:
        return [("name", self.name), ("run_id", self.run_id), ("namespace", self.namespace)]

    def _sizing_problems(self) -> list[str]:
        size, nproc = self.size, self.processes_per_node
        problems = [
            f"{what} must be at least 1"
            for what, value in (("nodes", self.nodes), ("nproc_per_node", nproc), ("cpu", size.cpu))
            if value < 1
        ]
        if size.shm_gib < 1 or size.shm_gib >= size.memory_gib:
            problems.append(
                "shm_gib must be at least 1 and below memory_gib (/dev/shm counts against memory)"
            )
        if self.pool.gpus_per_node and nproc > self.pool.gpus_per_node:
            problems.append(f"nproc_per_node {nproc} exceeds the pool's {self.pool.gpus_per_node} GPUs")
        if size.cpu > self.pool.vcpus or size.memory_gib > self.pool.memory_gib:
            problems.append(
                f"{size.cpu} CPUs / {size.memory_gib} GiB per pod cannot fit a {self.pool.instance_type}"
                f" node ({self.pool.vcpus} vCPUs, {self.pool.memory_gib} GiB)"
            )
        if self.max_restarts < 0 or self.pod_retries < 0:
            problems.append("max_restarts and backoff_limit_per_index must not be negative")
        return problems

    @property
    def pod_retries(self) -> int:
        return self.max_restarts if self.backoff_limit_per_index is None else self.backoff_limit_per_index

    @property
    def processes_per_node(self) -> int:
        if self.nproc_per_node is not None:
            return self.nproc_per_node
        return max(self.pool.gpus_per_node, 1)

    @property
    def size(self) -> PodSize:
        """The pool-derived size with the spec's overrides applied."""
        derived = pod_size(self.pool, _hugepages_mib(fabric_profile(self.pool)))
        overrides = {"cpu": self.cpu, "memory_gib": self.memory_gib, "shm_gib": self.shm_gib}
        return dataclasses.replace(derived, **{k: v for k, v in overrides.items() if v is not None})

    @property
    def job_name(self) -> str:
        return f"{self.name}-{self.run_id}"

    def trainer_argv(self) -> list[str]:
        """Trainer flags; the run's own output, version and epochs come last so they win. On a fabric
        pool the trainer refuses to train over NCCL's socket fallback."""
        fabric = self.pool.fabric
        network = [] if fabric is Fabric.NONE else [f"--expect-network={EXPECTED_NETWORK[fabric]}"]
        return [
            *self.trainer_args,
            *network,
            f"--output={self.output_mount_path}",
            f"--model-name={self.name}",
            f"--model-version={self.run_id}",
            f"--epochs={self.epochs}",
            "--log-format=json",
        ]


def _hugepages_mib(fabric: FabricProfile) -> int:
    """Huge pages the fabric requests (``hugepages-2Mi: 5120Mi``), which node memory no longer offers."""
    return sum(int(v.removesuffix("Mi")) for k, v in fabric.resources.items() if k.startswith("hugepages-"))


def _labels(spec: TrainingJobSpec) -> dict[str, str]:
    return {
        **spec.labels,
        "app.kubernetes.io/name": spec.name,
        "app.kubernetes.io/instance": spec.job_name,
        "app.kubernetes.io/component": "training",
        "app.kubernetes.io/part-of": "ml-platform",
        "ml-platform/run-id": spec.run_id,
    }


def _selector(spec: TrainingJobSpec) -> dict[str, str]:
    return {"app.kubernetes.io/instance": spec.job_name}


def _metadata(spec: TrainingJobSpec, annotations: Mapping[str, str]) -> dict[str, Any]:
    return {
        "name": spec.job_name,
        "namespace": spec.namespace,
        "labels": _labels(spec),
        "annotations": dict(annotations),
    }


def torchrun_flags(spec: TrainingJobSpec, endpoint: str) -> list[str]:
    """The agent's flags (is_host apart): a fixed group of ``nodes`` meeting at ``endpoint``."""
    return [
        f"--nnodes={spec.nodes}",
        f"--nproc-per-node={spec.processes_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={spec.run_id}",
        f"--max-restarts={spec.max_restarts}",
    ]


def torchrun_script(spec: TrainingJobSpec) -> str:
    """The container's shell line: pod 0 hosts the c10d store, every pod joins it by DNS name.

    torchrun runs as the shell's child, not ``exec``: torchrun exits 1 whatever code its worker failed
    with (``ChildFailedError``, torch/distributed/run.py), so the shell turns it into 2 when a worker
    recorded a failure no retry can fix (workloads/fatal.py) — the exit code the Job's
    ``podFailurePolicy`` fails the Job on. The shell forwards SIGTERM (pod deletion, preemption) to
    torchrun and waits for it, so the agent still stops its workers gracefully."""
    endpoint = f"{spec.job_name}-0.{spec.job_name}.{spec.namespace}.svc:{RENDEZVOUS_PORT}"
    torchrun = ["torchrun", *torchrun_flags(spec, endpoint)]
    program = ["-m", *spec.entry] if spec.entry else ["-m", "workloads.training", *spec.trainer_argv()]
    timeouts = f"read_timeout={RDZV_READ_TIMEOUT_S},join_timeout={RDZV_JOIN_TIMEOUT_S}"
    conf = f"--rdzv-conf=is_host=$IS_HOST,{timeouts}"
    fatal = f'"${FATAL_FILE_ENV}"'
    # The trainer's own checks run once before torchrun: a bad flag or recipe costs no restarts.
    checks = (
        []
        if spec.entry
        else [f"python -m workloads.training.preflight {shlex.join(spec.trainer_argv())} || exit $?"]
    )
    return "; ".join(
        [
            'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then IS_HOST=1; else IS_HOST=0; fi',
            f"rm -f {fatal}",
            *checks,
            f"{shlex.join(torchrun)} {conf} {shlex.join(program)} & pid=$!",
            "trap 'kill -TERM \"$pid\" 2>/dev/null' TERM INT",
            'wait "$pid"; rc=$?',
            'while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done',
            f"if [ -f {fatal} ]; then exit {EXIT_FATAL}; fi",
            "exit $rc",
        ]
    )


def _user(fabric: FabricProfile) -> dict[str, Any]:
    """The image's non-root user, or root where the fabric's capability needs it (``run_as_root``)."""
    uid = 0 if fabric.run_as_root else RUN_AS
    return {"runAsNonRoot": not fabric.run_as_root, "runAsUser": uid, "runAsGroup": uid}


def _container(spec: TrainingJobSpec, fabric: FabricProfile) -> dict[str, Any]:
    size = spec.size
    resources = {"cpu": str(size.cpu), "memory": f"{size.memory_gib}Gi", **fabric.resources}
    threads = str(max(1, size.cpu // spec.processes_per_node))
    # The image reference (pinned by digest) is recorded in the run's lineage (``IMAGE_ENV``).
    registry: dict[str, object] = (
        {TRACKING_URI_ENV: spec.registry_uri} if spec.registry_uri is not None else {}
    )
    if spec.registry_secret is not None:
        registry |= credential_env()
    if spec.registry_ca_secret is not None:
        registry |= ca_env()
    env = {**_BASE_ENV, "OMP_NUM_THREADS": threads, IMAGE_ENV: spec.image, **registry, **fabric.env}
    return {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": "Always",
        "command": ["/bin/sh", "-c", torchrun_script(spec)],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT, "protocol": "TCP"}],
        "resources": {"requests": resources, "limits": dict(resources)},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            **_user(fabric),
            "capabilities": {
                "drop": ["ALL"],
                **({"add": list(fabric.capabilities)} if fabric.capabilities else {}),
            },
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "output", "mountPath": spec.output_mount_path},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "tmp", "mountPath": "/tmp"},
            *([credential_mount()] if spec.registry_secret is not None else []),
            *([ca_mount()] if spec.registry_ca_secret is not None else []),
            *(dict(m) for m in fabric.volume_mounts),
        ],
    }


def _pod_spec(spec: TrainingJobSpec, fabric: FabricProfile) -> dict[str, Any]:
    return {
        "serviceAccountName": spec.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "subdomain": spec.job_name,
        "nodeSelector": spec.pool.node_selector,
        "tolerations": spec.pool.tolerations(),
        "securityContext": {
            **_user(fabric),
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(spec, fabric)],
        "volumes": [
            {"name": "output", **spec.output_volume},
            # NCCL and DataLoader workers share tensors through /dev/shm; the runtime's default is 64Mi.
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{spec.size.shm_gib}Gi"}},
            # HOME, the inductor and Triton caches and eight ranks' NCCL logs live here. Going over the
            # limit is a kubelet eviction, which the podFailurePolicy ignores (DisruptionTarget), so a
            # small /tmp becomes a recreate loop that spends no budget: size it for the caches.
            {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
            *([credential_volume(spec.registry_secret)] if spec.registry_secret is not None else []),
            *([ca_volume(spec.registry_ca_secret)] if spec.registry_ca_secret is not None else []),
            *(dict(v) for v in fabric.volumes),
        ],
    }


def _await(spec: TrainingJobSpec) -> dict[str, str]:
    """pulumi-kubernetes waits for a Job to complete unless told to skip (REFERENCE.md). An awaited Job
    gets its own timeout, read from ``pulumi.com/timeoutSeconds`` (pulumi-kubernetes ``pkg/metadata``
    ``TimeoutDuration``; the default of 10 minutes is shorter than a scale-up), and
    ``pulumi.com/replaceUnready``: a Job that failed is replaced, so it runs again, at the next update
    instead of failing it unchanged (the pulumi-kubernetes Job docstring)."""
    if spec.await_seconds is None:
        return SKIP_AWAIT
    return {"pulumi.com/timeoutSeconds": str(spec.await_seconds), "pulumi.com/replaceUnready": "true"}


def _job(spec: TrainingJobSpec, fabric: FabricProfile) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(spec, {**_await(spec), **fabric.annotations}),
        "spec": {
            **({"suspend": True} if spec.suspend else {}),
            **({"ttlSecondsAfterFinished": spec.ttl_s} if spec.ttl_s is not None else {}),
            "completionMode": "Indexed",
            "completions": spec.nodes,
            "parallelism": spec.nodes,
            # Each index (node) restarts on its own budget; the first index out of budget fails the Job.
            "backoffLimitPerIndex": spec.pod_retries,
            "maxFailedIndexes": 0,
            "podFailurePolicy": {
                "rules": [
                    # Bad input or a changed recipe on resume (the trainer's exit 2): retrying cannot help.
                    {
                        "action": "FailJob",
                        "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": [EXIT_FATAL]},
                    },
                    # A preempted or drained node is not the run's fault: don't spend the budget on it.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                ]
            },
            "template": {
                "metadata": {"labels": {**_labels(spec), **spec.pod_labels}},
                "spec": _pod_spec(spec, fabric),
            },
        },
    }


def _service(spec: TrainingJobSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, SKIP_AWAIT),
        "spec": {
            "clusterIP": "None",
            # Agents must resolve pod 0 while the group forms, before any readiness is known.
            "publishNotReadyAddresses": True,
            "selector": _selector(spec),
            "ports": [
                {
                    "name": "rendezvous",
                    "port": RENDEZVOUS_PORT,
                    "targetPort": RENDEZVOUS_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


def _network_policy(spec: TrainingJobSpec) -> dict[str, Any]:
    """Peers talk on any port (rendezvous, gloo/NCCL pick theirs); egress otherwise only to DNS, and to
    the dataset's object storage over HTTPS where the stack names its address ranges."""
    peers = [{"podSelector": {"matchLabels": _selector(spec)}}]
    dns_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}
    dns_ports = [{"protocol": proto, "port": 53} for proto in ("UDP", "TCP")]
    https = [{"protocol": "TCP", "port": 443}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(spec, {}),
        "spec": {
            "podSelector": {"matchLabels": _selector(spec)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": peers}],
            "egress": [
                {"to": peers},
                {"to": [dns_peer], "ports": dns_ports},
                *(dict(extra) for extra in spec.egress),
                *(
                    [{"to": [{"ipBlock": {"cidr": c}} for c in spec.dataset_egress_cidrs], "ports": https}]
                    if spec.dataset_egress_cidrs
                    else []
                ),
            ],
        },
    }


def training_job_objects(spec: TrainingJobSpec) -> list[dict[str, Any]]:
    """Service first (the rendezvous name must exist), then the Job, then its NetworkPolicy."""
    fabric = fabric_profile(spec.pool)
    return [_service(spec), _job(spec, fabric), _network_policy(spec)]
