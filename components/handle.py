"""The contract between a cloud adapter and everything Kubernetes-side.

A cloud adapter (components/aws, components/azure) turns config into cloud resources and hands back a
``ClusterHandle``. The Kubernetes layer and the workloads read only this: they never import a cloud SDK.
Values that the cloud decides at deploy time (a file system id, a role ARN) are ``pulumi.Input`` so the
pure object builders can embed them and Pulumi resolves them when it applies the objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

# Annotations only: the training image imports this module (Fabric, PoolHandle) without the Pulumi SDK,
# which only the infra extra installs (tests/workloads/test_image_imports.py).
if TYPE_CHECKING:
    import pulumi

    from components.driver_images import NodeOs


class Cloud(StrEnum):
    AWS = "aws"
    AZURE = "azure"


class PoolKind(StrEnum):
    GPU = "gpu"
    CPU = "cpu"


class Fabric(StrEnum):
    """The RDMA fabric a pool's nodes share: none, AWS Elastic Fabric Adapter or Azure InfiniBand."""

    NONE = "none"
    EFA = "efa"
    INFINIBAND = "infiniband"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


# The GPU taint key is the same on both clouds; its value differs (AWS "true", AKS "present"), which is
# why tolerations match on the key with operator Exists.
GPU_TAINT_KEY = "nvidia.com/gpu"
POOL_LABEL = "ml-platform/pool"


@dataclass(frozen=True)
class WorkloadIdentity:
    """Where a workload runs in every cluster: the cloud adapter trusts exactly this service account
    (IRSA trust policy / federated credential subject) and the Kubernetes layer creates it there."""

    namespace: str
    service_account: str

    @property
    def subject(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


WORKLOAD_IDENTITIES: dict[str, WorkloadIdentity] = {
    "training": WorkloadIdentity("ml-training", "trainer"),
    "inference": WorkloadIdentity("ml-inference", "inference"),
    # The model registry (MLflow): the only holder of rights on the registry's artifact store.
    "registry": WorkloadIdentity("ml-registry", "registry"),
}
# The lifecycle record's writers in the cluster (docs/lifecycle.md, "The record"): the rollout's Job and the
# drift monitor's CronJob (workloads/inference/k8s.py ``RolloutJob``/``MonitorJob.service_account``). The
# adapters give each an identity that may only append to the record, under ``identities[<key>]``.
RECORD_WRITERS: dict[str, WorkloadIdentity] = {
    "rollout": WorkloadIdentity(WORKLOAD_IDENTITIES["inference"].namespace, "rollout"),
    "drift-monitor": WorkloadIdentity(WORKLOAD_IDENTITIES["inference"].namespace, "drift-monitor"),
}
# The workloads' own registry users besides the callers' (named after their namespaces): the rollout's
# (progressive delivery, Secret ``registry-rollout`` in the inference namespace) and the drift monitor's
# (Secret ``registry-drift-monitor``: it rolls back). components/kubernetes/workloads.py creates them.
ROLLOUT_USER = "ml-inference-rollout"
MONITOR_USER = "ml-inference-drift-monitor"
# The admission verifier's webhook (Sigstore policy-controller, components/kubernetes/image_verification.py):
# it reads the public half of the stack's image signing key through the cloud's key service, so the
# adapters give this account a cloud identity, under ``identities[IMAGE_VERIFIER_KEY]``. The account is
# the one the chart names for release ``policy-controller`` (its full name and ``-webhook``).
IMAGE_VERIFIER_KEY = "image-verifier"
IMAGE_VERIFIER = WorkloadIdentity("cosign-system", "policy-controller-webhook")


@dataclass(frozen=True)
class PoolHandle:
    """One node pool as Kubernetes sees it: how to land on it and what each node offers."""

    name: str
    kind: PoolKind
    instance_type: str
    gpus_per_node: int
    fabric: Fabric
    fabric_devices_per_node: int
    vcpus: int
    memory_gib: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    # Spot capacity: nodes may be reclaimed at any time (Kueue gives spot pools their own flavor).
    spot: bool = False

    @property
    def node_selector(self) -> dict[str, str]:
        """The one label that pins a pod to this pool, on any cloud."""
        return {POOL_LABEL: self.labels.get(POOL_LABEL, self.name)}

    def tolerations(self) -> list[dict[str, str]]:
        """Tolerations for this pool's taints, by key with ``Exists``: taint values differ per cloud."""
        return [{"key": t.key, "operator": "Exists", "effect": t.effect.value} for t in self.taints]


class SharedStorageKind(StrEnum):
    """What a stack asks for (``storage.shared``); a handle's SharedStorage is never NONE (its
    ``storage.shared`` is None instead)."""

    NONE = "none"
    EFS = "efs"
    FSX_LUSTRE = "fsx-lustre"
    AZURE_FILES_NFS = "azure-files-nfs"


# The user and group every workload container runs as (unless a fabric needs root), clear of host users
# (checkov CKV_K8S_40: UID >= 10000); shared storage is made writable for exactly this owner.
WORKLOAD_UID = 10001


@dataclass(frozen=True)
class PosixOwner:
    """Owner, group and mode of a directory as the platform creates it."""

    uid: int
    gid: int
    mode: int


# The directory below a shared file system's root that the platform's consumers mount (an EFS access
# point's root directory, the FSx for Lustre fileset mounted as ``mountname/<directory>``).
SHARED_DIRECTORY = "ml-platform"

# The directory below the file system's root that holds the model registry's SQLite store (SMB), reached
# only through the registry's own volume: no other consumer's volume reaches it (AWS review N3).
REGISTRY_DIRECTORY = "ml-registry"

# A new file system's root: only root may write (EFS user guide, "Working with users, groups, and
# permissions at the NFS level": "by default only the root user (UID 0) has read, write, and execute
# permissions" on the root directory).
FRESH_ROOT = PosixOwner(0, 0, 0o755)


@dataclass(frozen=True)
class Store:
    """A workload's own directory on the shared file system: its path below the root and the CSI source
    that mounts exactly it."""

    directory: str
    csi: Mapping[str, Any]


@dataclass(frozen=True)
class SharedStorage:
    """A POSIX file system every training pod mounts read-write (checkpoints need rename, which object
    storage mounts lack).

    ``csi`` is a Kubernetes ``CSIPersistentVolumeSource`` (driver, volumeHandle, volumeAttributes) for a
    statically provisioned PersistentVolume bound to the cloud file system the adapter created.
    """

    kind: SharedStorageKind
    csi: Mapping[str, Any]
    capacity_gib: int
    mount_options: tuple[str, ...] = ()
    # The directory every consumer mounts, as the platform leaves it (an EFS access point's creation
    # info, the preparation Job below, the Azure Files driver's mountPermissions).
    owner: PosixOwner = FRESH_ROOT
    # Where the file system offers no access point (FSx for Lustre): the CSI source of the file system's
    # root, where a one-shot Job creates ``SHARED_DIRECTORY`` (the directory ``csi`` mounts), owned as
    # ``owner`` says, before any consumer mounts it.
    prepare: Mapping[str, Any] | None = None
    # Stores one workload owns alone, by its namespace: the CSI source of a directory (an EFS access
    # point, an FSx fileset, an Azure Files share) that no other consumer's source reaches, so another
    # identity's pods cannot write it (the SQLite registry's models, aliases and users; AWS review N3).
    stores: Mapping[str, Store] = field(default_factory=dict)
    # Which revision of the volumes' CSI source this is, "" for the first. A volume's source cannot change
    # in place (pulumi-kubernetes replaces it, and pv-protection holds the delete while its claim is
    # bound: judges/immutable.py), so a changed source gets volumes (and store claims) named anew with
    # the revision: the update makes the new pair, moves the workloads and deletes the old pair last.
    source_revision: str = ""

    def csi_for(self, consumer: str) -> dict[str, Any]:
        """The CSI source of one consumer's PersistentVolume (one per namespace mounting the share): the
        consumer's own store where it has one, else the shared directory.

        The Azure Files driver stages volumes by ``volumeHandle``, which must be unique in the cluster
        (azurefile-csi-driver static provisioning docs), so each consumer gets its own; the EFS and FSx
        drivers mount per pod and take the file system id as the handle.
        """
        store = self.stores.get(consumer)
        csi = store.csi if store is not None else self.csi
        if self.kind is SharedStorageKind.AZURE_FILES_NFS:
            # Also per revision: kubelet stages a CSI volume at a path derived from its handle, so a new
            # volume sharing the old one's handle would reuse the old mount on a node that holds it.
            revision = f"-{self.source_revision}" if self.source_revision else ""
            return {**csi, "volumeHandle": f"{csi['volumeHandle']}-{consumer}{revision}"}
        return dict(csi)


@dataclass(frozen=True)
class StorageHandle:
    """Where data lives: the object store for datasets and model artifacts, the shared file system, and
    the key that seals the disks the cluster provisions for claims that name no storage class."""

    bucket_uri: pulumi.Input[str]
    shared: SharedStorage | None = None
    # The stack's key for dynamically provisioned disks (AWS: the KMS key ARN, EBS CSI ``kmsKeyId``).
    # Where set, the Kubernetes layer makes an encrypted class under it the cluster's default
    # (components/kubernetes/storage.py); None leaves the cluster's own default class alone.
    volume_key: pulumi.Input[str] | None = None


@dataclass(frozen=True)
class RegistryDatabase:
    """The model registry's managed PostgreSQL, as its pods reach it. The password is never a literal:
    either a Secrets Manager secret the registry's identity reads for each connection (AWS,
    RDS-managed), or, with ``entra``, a Microsoft Entra token for the registry's workload identity
    (Azure: the server accepts no password)."""

    host: pulumi.Input[str]
    port: int
    database: str
    username: pulumi.Input[str]
    password_secret_arn: pulumi.Input[str] | None = None
    entra: bool = False


# A peer's network standing for public addresses (everything outside RFC 1918).
PUBLIC_NETWORK = "0.0.0.0/0"
# The Kubernetes API server as a ``Peer`` (``ClusterHandle.api_server``): its HTTPS port on both clouds.
API_SERVER_PEER, API_SERVER_PORT = "kubernetes-api", 443
PRIVATE_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


@dataclass(frozen=True)
class Peer:
    """Something outside the pod network a workload must reach: a name, an address range (a CIDR, or
    ``PUBLIC_NETWORK`` for public addresses a policy cannot name more narrowly) and a TCP port."""

    name: str
    network: str
    port: int


@dataclass(frozen=True)
class RecordStore:
    """The model lifecycle record (workloads/registry/record.py, docs/lifecycle.md): where the workloads
    that move a model's aliases append (``$MLPLATFORM_RECORD``: AWS ``s3://BUCKET/PREFIX``, Azure
    ``azblob://ACCOUNT/CONTAINER``), what a writer must reach, and the environment its client needs. The
    writers' cloud identities are ``identities``'s ``RECORD_WRITERS`` keys."""

    uri: pulumi.Input[str]
    peers: tuple[Peer, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RegistryBackend:
    """Where the model registry keeps artifacts and metadata (the cloud adapter decides).

    ``artifacts_uri``: the server's ``--artifacts-destination`` in the stack's encrypted store (s3:// or
    wasbs://), written only through the registry. ``database`` None: SQLite on the shared file system
    (the cost-first backend). ``peers``: the database, the store's endpoints and the cloud identity's.
    """

    artifacts_uri: pulumi.Input[str]
    database: RegistryDatabase | None = None
    peers: tuple[Peer, ...] = ()
    # Environment the cloud's SDKs need in the server (the AWS region for boto3's S3 and STS clients).
    environment: Mapping[str, str] = field(default_factory=dict)
    # What must exist before the schema migration connects: the database itself and its login where
    # the server's hostname alone does not carry them (Azure's database and Entra administrator).
    ready: tuple[pulumi.Resource, ...] = ()


@dataclass(frozen=True)
class ImageSigning:
    """The key the stack signs what it builds with, as cosign names a KMS key (``awskms:///<key ARN>``,
    ``azurekms://<vault>.vault.azure.net/<key>``; sigstore docs "Signing with KMS"), and the resources a
    signature must wait for (the key, the deployer's right to sign with it)."""

    key: pulumi.Input[str]
    ready: tuple[pulumi.Resource, ...] = ()


@dataclass(frozen=True)
class RegistryLogin:
    """How ``pulumi up`` pushes the images it builds to the stack's registry: docker credentials from the
    cloud (ECR authorization token / ACR token for the deployer's login), and the resources a push must
    wait for (the repositories, the registry)."""

    address: pulumi.Input[str]
    username: pulumi.Input[str]
    # A secret Output: a short-lived token, read again on every run.
    password: pulumi.Input[str]
    ready: tuple[pulumi.Resource, ...] = ()
    # The stack's signing key; every image pushed with this login is attested and signed with it.
    signing: ImageSigning | None = None
    # A shell command printing a fresh password, for steps that run as a Command: the password itself
    # changes on every run, and as a Command input it would rerun the step on every `pulumi up`.
    password_command: pulumi.Input[str] | None = None


@dataclass(frozen=True)
class ClusterHandle:
    """What a cloud adapter returns: everything the Kubernetes layer needs, nothing cloud-specific."""

    cloud: Cloud
    name: str
    kubeconfig: pulumi.Output[str]
    kubernetes_version: str
    pools: tuple[PoolHandle, ...]
    storage: StorageHandle
    # Registry host that workload images are pulled from (ECR / ACR login server), known before
    # deployment; the stack's images are pushed below it (components/images.py).
    registry: str
    # None where the adapter cannot push (the offline tests' hand-built handles).
    registry_login: RegistryLogin | None = None
    # workload name ("training", "inference") -> service-account annotations binding it to a cloud
    # identity (IRSA role ARN on AWS, workload-identity client id on Azure).
    identities: Mapping[str, Mapping[str, pulumi.Input[str]]] = field(default_factory=dict)
    # The resources that bring up the nodes add-on pods run on (system and CPU pools): Helm releases wait
    # for them, or an install from nothing times out before any node is Ready.
    node_pools: tuple[pulumi.Resource, ...] = ()
    # workload name -> labels its pod templates must carry for the cloud's identity to reach them (AKS
    # workload identity mutates only pods labelled ``azure.workload.identity/use: "true"``).
    pod_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # NetworkPolicy egress rules workload pods need for their cloud identity and storage endpoints
    # (their namespaces deny egress by default).
    workload_egress: tuple[Mapping[str, Any], ...] = ()
    # The model registry's stores; None where the adapter provides none (the registry is then refused
    # at config time or not planned).
    registry_backend: RegistryBackend | None = None
    # The model lifecycle record; None where the stack keeps none (an unaudited stack).
    lifecycle_record: RecordStore | None = None
    # The GPU nodes' OS and architecture, where the NVIDIA operators install the drivers and name their
    # images by it (components/driver_images.py); None where the node image has the drivers (EKS).
    gpu_node_os: NodeOs | None = None
    # Where a pod reaches the Kubernetes API server (the drift monitor creating its retrain Job): the
    # private endpoint in the cluster's network, or the public one; None where the adapter gives none.
    api_server: Peer | None = None

    def pool(self, name: str) -> PoolHandle:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(f"no node pool named {name!r}; pools: {', '.join(p.name for p in self.pools)}")

    @property
    def has_gpus(self) -> bool:
        return any(p.kind is PoolKind.GPU for p in self.pools)

    @property
    def fabrics(self) -> frozenset[Fabric]:
        return frozenset(p.fabric for p in self.pools if p.fabric is not Fabric.NONE)
