"""Day 2: what an update does to each object the last plan applied. The judge compares each object a plan
applies with the same object (group, kind, namespace, name) in the plan applied before it. Two outcomes
are not an ordinary update:

**Replaced.** pulumi-kubernetes never sends some changes to the API server: its diff marks them
``forceNew`` and the engine replaces the object, deleting it first where, as here, its name is fixed
(``provider/pkg/provider/diff.go`` ``forceNew`` and ``forceNewProperties``; ``provider.go`` ``Diff``:
``deleteBeforeReplace`` when the object is named and keeps its name). Read at pulumi/pulumi-kubernetes
94977969d (2026-07-01, after v4.32.0; diff.go unchanged since 2026-02-18), the newest commit at hand: the
pinned 4.34.2 is later and its copy was not read. With the provider's defaults (the program
sets neither ``enableSecretMutable`` nor ``enableConfigMapMutable``) a Secret's ``type``, ``data`` and
``stringData`` and a ConfigMap's ``data`` and ``binaryData`` are replaced too. ``REPLACED`` names what the
replacement does (``_EFFECTS``): a Job runs again; a StorageClass's existing volumes keep the old
parameters; a workload's pods stop before the new ones start. It is mandatory where the delete cannot
finish (Kubernetes "Persistent Volumes", Storage Object in Use Protection): a PersistentVolume bound to a
claim that stays (``kubernetes.io/pv-protection``: "PV removal is postponed until the PV is no longer bound
to a PVC"), a claim mounted by the running pods of a workload of the previous plan
(``kubernetes.io/pvc-protection``: "PVC removal is postponed until the PVC is no longer actively used by
any Pods"; review 38 A2). A Job's pods are not counted: the claim is held only while one runs.

**Refused.** Where nothing is replaced, the update reaches the API server, and ``POLICY`` names each field
whose change the update validation of k8s.io/kubernetes (1.35, the clusters' minor version) refuses and the
provider does not replace (mandatory: the update fails, and the only way on is to delete and recreate the
object by hand):

- ``pkg/registry/apps/replicaset/strategy.go`` ``ValidateUpdate``: a ReplicaSet's ``spec.selector`` ("field
  is immutable"; a Deployment's and a DaemonSet's are replaced);
- ``pkg/apis/batch/validation`` ``ValidateJobSpecUpdate``: ``completionMode``, ``podFailurePolicy``,
  ``backoffLimitPerIndex`` (its ``completions``, ``selector`` and ``template`` are replaced, and
  ``parallelism`` too, which the API server would let change; a CronJob's ``jobTemplate`` is neither);
- ``pkg/apis/core/validation``: ``ValidateServiceUpdate`` (a set ``clusterIPs`` changes only to or from
  ``ExternalName``; ``clusterIP`` is replaced), ``ValidatePersistentVolumeClaimUpdate`` (the spec but
  ``resources.requests`` and ``volumeAttributesClassName``, the replaced ``accessModes``, ``selector``,
  ``storageClassName`` and ``volumeName`` aside; storage never below the applied request; growth only
  through a StorageClass with ``allowVolumeExpansion``: ``plugin/pkg/admission/storage/persistentvolume/
  resize`` ``Validate``), ``ValidatePersistentVolumeUpdate`` (``volumeMode``; the volume source is
  replaced), ``ValidateSecretUpdate`` and ``ValidateConfigMapUpdate`` (an ``immutable: true`` flag unset);
- ``pkg/apis/storage/validation`` ``ValidateStorageClassUpdate`` (``reclaimPolicy``, ``volumeBindingMode``;
  ``parameters`` and ``provisioner`` are replaced), ``ValidateCSIDriverUpdate`` (``attachRequired``,
  ``volumeLifecycleModes``);
- ``pkg/apis/networking/validation`` ``ValidateIngressClassUpdate`` (``spec.controller``);
- ``pkg/apis/scheduling/validation`` ``ValidatePriorityClassUpdate`` (``value``, ``preemptionPolicy``).

Every field ``ValidateStatefulSetUpdate`` and the bindings' ``roleRef`` rule refuse is replaced by the
provider, so neither has a refusal rule here.

A Helm hook (annotation ``helm.sh/hook``) is never updated: Helm creates it at its event, after deleting
the one before under the ``before-hook-creation`` policy, the default where a chart names none (Helm
docs, "Chart Hooks", "Hook deletion policies"; helm pkg/action/hooks.go ``execHook``). A hook Job whose
image moves (a chart bump, the stack's mirror lock) is a new Job: neither a refused update nor a
replacement by the provider.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judges.findings import Finding, Level, Subject
from judges.kube import pods
from judges.limits import quantity

POLICY = "immutable-field-changed"
REPLACED = "replaced-on-update"
_HOOK = "helm.sh/hook"

# pulumi-kubernetes ``forceNew`` (diff.go): apiVersion -> kind -> the paths whose change replaces the
# object (a path covers everything below it; ``[*]`` every item of a list). ``.metadata.name`` and
# ``.metadata.namespace`` are there too: they are the object's identity here, a new object.
_POD_SPEC = (
    "affinity",
    "automountServiceAccountToken",
    "dnsConfig",
    "dnsPolicy",
    "enableServiceLinks",
    "hostAliases",
    "hostIPC",
    "hostNetwork",
    "hostPID",
    "hostname",
    "imagePullSecrets",
    "nodeName",
    "nodeSelector",
    "overhead",
    "preemptionPolicy",
    "priority",
    "priorityClassName",
    "readinessGates",
    "restartPolicy",
    "runtimeClassName",
    "schedulerName",
    "securityContext",
    "serviceAccount",
    "serviceAccountName",
    "shareProcessNamespace",
    "subdomain",
    "terminationGracePeriodSeconds",
    "volumes",
)
_CONTAINER = (
    "args",
    "command",
    "env",
    "image",
    "imagePullPolicy",
    "lifecycle",
    "livenessProbe",
    "ports",
    "readinessProbe",
    "resources",
    "securityContext",
    "stdin",
    "stdinOnce",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "tty",
    "volumeDevices",
    "volumeMounts",
    "workingDir",
)
_VOLUME_SOURCES = tuple(
    f"spec.{source}"
    for source in (
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "csi",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "glusterfs",
        "hostPath",
        "iscsi",
        "local",
        "nfs",
        "photonPersistentDisk",
        "portworxVolume",
        "quobyte",
        "rbd",
        "scaleIO",
        "storageos",
        "vsphereVolume",
    )
)
_WORKLOAD: tuple[str, ...] = ("spec.selector",)
_STATEFULSET = (
    "spec.podManagementPolicy",
    "spec.revisionHistoryLimit",
    "spec.selector",
    "spec.serviceName",
    "spec.volumeClaimTemplates",
)
_JOB = ("spec.completions", "spec.parallelism", "spec.selector", "spec.template")
_BINDING: tuple[str, ...] = ("roleRef",)
_CORE: dict[str, tuple[str, ...]] = {
    "PersistentVolume": _VOLUME_SOURCES,
    "PersistentVolumeClaim": (
        "spec.accessModes",
        "spec.selector",
        "spec.storageClassName",
        "spec.volumeName",
    ),
    "Pod": (
        *(f"spec.{key}" for key in _POD_SPEC),
        *(f"spec.{c}[*].{key}" for c in ("containers", "initContainers") for key in _CONTAINER),
    ),
    "ResourceQuota": ("spec.scopes",),
    "Service": ("spec.clusterIP",),
    # Without enableSecretMutable (the default, which the program keeps) every Secret's data is forceNew
    # (forceNewProperties: ``clients.IsSecret``), and so is a ConfigMap's without enableConfigMapMutable.
    "Secret": ("type", "stringData", "data"),
    "ConfigMap": ("binaryData", "data"),
}
_APPS: dict[str, tuple[str, ...]] = {
    "DaemonSet": _WORKLOAD,
    "Deployment": _WORKLOAD,
    "StatefulSet": _STATEFULSET,
}
_RBAC: dict[str, tuple[str, ...]] = {"ClusterRoleBinding": _BINDING, "RoleBinding": _BINDING}
FORCE_NEW: dict[str, dict[str, tuple[str, ...]]] = {
    "apps/v1beta1": {"StatefulSet": _STATEFULSET},
    "apps/v1beta2": _APPS,
    "apps/v1": _APPS,
    "v1": _CORE,
    "policy/v1beta1": {"PodDisruptionBudget": ("spec",)},
    "rbac.authorization.k8s.io/v1alpha1": _RBAC,
    "rbac.authorization.k8s.io/v1beta1": _RBAC,
    "rbac.authorization.k8s.io/v1": _RBAC,
    "storage.k8s.io/v1": {"StorageClass": ("parameters", "provisioner")},
    "batch/v1beta1": {"Job": _JOB},
    "batch/v1": {"Job": _JOB},
    "batch/v2alpha1": {"Job": _JOB},
}

_PV_MUTABLE = frozenset(
    {
        "capacity",
        "accessModes",
        "claimRef",
        "persistentVolumeReclaimPolicy",
        "mountOptions",
        "storageClassName",
        "nodeAffinity",
        "volumeAttributesClassName",
    }
)
# Workloads whose pods run until stopped, so hold the claims they mount (a Job's only while it runs).
_RUNNING = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController"})

Rule = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Mapping[str, Any]]], Iterator[str]]


def _get(obj: Mapping[str, Any], path: str) -> Any:
    """The value at ``path`` (``[*]``: the list of each item's value); an empty map or list reads as absent
    (a plan may write either)."""
    node: Any = obj
    head, star, rest = path.partition("[*].")
    for key in head.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    if star:
        return [_get(item, rest) for item in node] if isinstance(node, list) else None
    return None if node in ({}, []) else node


def replaced_paths(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The ``forceNew`` paths whose value changes from ``old`` to ``new``: pulumi-kubernetes replaces the
    object when there is any."""
    paths = FORCE_NEW.get(str(new.get("apiVersion")), {}).get(str(new.get("kind")), ())
    return [path for path in paths if _get(old, path) != _get(new, path)]


def _fields(*paths: str, function: str) -> Rule:
    def rule(
        old: Mapping[str, Any], new: Mapping[str, Any], _: Mapping[str, Mapping[str, Any]]
    ) -> Iterator[str]:
        for path in paths:
            if _get(old, path) != _get(new, path):
                yield f"{path}: field is immutable ({function})"

    return rule


def _job(old: Mapping[str, Any], new: Mapping[str, Any], _: Any) -> Iterator[str]:
    before, after = old.get("spec") or {}, new.get("spec") or {}
    for key in ("completionMode", "podFailurePolicy", "backoffLimitPerIndex"):
        if before.get(key) != after.get(key):
            yield f"spec.{key}: field is immutable (ValidateJobSpecUpdate)"


def _service(old: Mapping[str, Any], new: Mapping[str, Any], _: Any) -> Iterator[str]:
    before, after = old.get("spec") or {}, new.get("spec") or {}
    if "ExternalName" in {before.get("type"), after.get("type")}:
        return
    if before.get("clusterIPs") and before.get("clusterIPs") != after.get("clusterIPs"):
        yield "spec.clusterIPs: field is immutable (ValidateServiceUpdate)"


def _claim(
    old: Mapping[str, Any], new: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]
) -> Iterator[str]:
    before, after = dict(old.get("spec") or {}), dict(new.get("spec") or {})
    for key in sorted((set(before) | set(after)) - {"resources", "volumeAttributesClassName"}):
        if before.get(key) != after.get(key):
            yield (
                f"spec.{key}: spec is immutable after creation except resources.requests and "
                "volumeAttributesClassName (ValidatePersistentVolumeClaimUpdate)"
            )
    was = _get(before, "resources.requests.storage")
    now = _get(after, "resources.requests.storage")
    if was is None or now is None or quantity(now) == quantity(was):
        return
    if quantity(now) < quantity(was):
        yield (
            f"spec.resources.requests.storage: {now} is less than the applied {was}; a claim cannot shrink "
            "(ValidatePersistentVolumeClaimUpdate)"
        )
        return
    storage_class = classes.get(str(after.get("storageClassName")))
    if storage_class is not None and not storage_class.get("allowVolumeExpansion"):
        yield (
            f"spec.resources.requests.storage: {was} → {now}, but StorageClass "
            f"{after.get('storageClassName')} does not set allowVolumeExpansion "
            "(admission plugin PersistentVolumeClaimResize)"
        )


def _volume(old: Mapping[str, Any], new: Mapping[str, Any], _: Any) -> Iterator[str]:
    before, after = old.get("spec") or {}, new.get("spec") or {}
    for key in sorted((set(before) | set(after)) - _PV_MUTABLE):
        if before.get(key) != after.get(key):
            yield f"spec.{key}: field is immutable (ValidatePersistentVolumeUpdate)"


def _immutable_flag(function: str) -> Rule:
    def rule(old: Mapping[str, Any], new: Mapping[str, Any], _: Any) -> Iterator[str]:
        if old.get("immutable") and not new.get("immutable"):
            yield f"immutable: field is immutable when `immutable` is set ({function})"

    return rule


_RULES: dict[str, Rule] = {
    "ReplicaSet": _fields("spec.selector", function="replicaset strategy ValidateUpdate"),
    "Job": _job,
    "Service": _service,
    "PersistentVolumeClaim": _claim,
    "PersistentVolume": _volume,
    "Secret": _immutable_flag("ValidateSecretUpdate"),
    "ConfigMap": _immutable_flag("ValidateConfigMapUpdate"),
    "StorageClass": _fields("reclaimPolicy", "volumeBindingMode", function="ValidateStorageClassUpdate"),
    "CSIDriver": _fields(
        "spec.attachRequired", "spec.volumeLifecycleModes", function="ValidateCSIDriverUpdate"
    ),
    "IngressClass": _fields("spec.controller", function="ValidateIngressClassUpdate"),
    "PriorityClass": _fields("value", "preemptionPolicy", function="ValidatePriorityClassUpdate"),
}


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    subject = Subject.of(obj)
    return group, subject.kind, subject.namespace, subject.name


@dataclass(frozen=True)
class _Day2:
    """What a replacement's effect depends on: the objects before and after, by identity."""

    applied: Mapping[tuple[str, str, str, str], Mapping[str, Any]]
    planned: Mapping[tuple[str, str, str, str], Mapping[str, Any]]
    # (namespace, claim) -> the running workloads of the previous plan that mount it.
    mounted: Mapping[tuple[str, str], list[Subject]]

    @classmethod
    def of(cls, previous: Sequence[Mapping[str, Any]], objects: Sequence[Mapping[str, Any]]) -> _Day2:
        mounted: dict[tuple[str, str], list[Subject]] = {}
        for pod in pods(previous):
            if pod.owner.kind not in _RUNNING or (_replicas(previous, pod.owner) == 0):
                continue
            for volume in pod.spec.get("volumes") or []:
                claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                if claim:
                    mounted.setdefault((pod.namespace, str(claim)), []).append(pod.owner)
        return cls({_identity(o): o for o in previous}, {_identity(o): o for o in objects}, mounted)

    def replaced(self, obj: Mapping[str, Any]) -> bool:
        old = self.applied.get(_identity(obj))
        return old is not None and bool(replaced_paths(old, obj))


def _replicas(objects: Sequence[Mapping[str, Any]], owner: Subject) -> int:
    found = next(o for o in objects if Subject.of(o) == owner)
    replicas = (found.get("spec") or {}).get("replicas")
    return 1 if replicas is None else int(replicas)


def _claim_key(namespace: str, name: str) -> tuple[str, str, str, str]:
    return "", "PersistentVolumeClaim", namespace, name


def _effect(old: Mapping[str, Any], obj: Mapping[str, Any], day2: _Day2) -> tuple[Level, str]:
    """The level and words of what replacing ``obj`` (``old`` as applied) does; it is deleted first, its
    name being fixed."""
    subject = Subject.of(obj)
    if subject.kind == "PersistentVolume":
        ref = (old.get("spec") or {}).get("claimRef") or {}
        key = _claim_key(str(ref.get("namespace", "")), str(ref.get("name", "")))
        if key not in day2.applied:
            return "advisory", "a new volume object; the old one was bound to no claim of the plan"
        claim = day2.planned.get(key)
        if claim is not None and day2.replaced(claim):
            return "advisory", f"its claim {key[2]}/{key[3]} is replaced too (judged there)"
        stays = "which stays" if claim is not None else "which the update deletes only at its end"
        return "mandatory", (
            f"it is bound to claim {key[2]}/{key[3]}, {stays}: kubernetes.io/pv-protection keeps the "
            'volume until the claim is gone, so the delete does not complete (Kubernetes "Persistent '
            'Volumes", Storage Object in Use Protection); give the new volume and its claim names of '
            "their own (the workloads switch to the new pair, the old pair is deleted last)"
        )
    if subject.kind == "PersistentVolumeClaim":
        users = day2.mounted.get((subject.namespace, subject.name), [])
        if users:
            return "mandatory", (
                f"{', '.join(sorted(map(str, users)))} mount it: kubernetes.io/pvc-protection keeps the "
                'claim while a pod uses it, so the delete does not complete (Kubernetes "Persistent '
                'Volumes", Storage Object in Use Protection); give the new claim a name of its own'
            )
        return "advisory", "a new claim, so a new volume; the old volume follows its reclaim policy"
    return "advisory", _EFFECTS.get(subject.kind, "deleted, then created again")


_EFFECTS = {
    "Job": "the Job runs again (`pulumi up` waits for it unless it carries pulumi.com/skipAwait)",
    "StorageClass": (
        "volumes provisioned before keep the old class's parameters; only new claims get the new ones"
    ),
    "Deployment": "its pods stop before the new ones start: an outage",
    "DaemonSet": "its pods stop before the new ones start: an outage",
    "StatefulSet": "its pods stop before the new ones start (their claims stay): an outage",
    "Service": "a new cluster IP: clients holding the old address fail until they resolve the name again",
    "Secret": "absent between the delete and the create: a pod starting then cannot read it",
    "ConfigMap": "absent between the delete and the create: a pod starting then cannot read it",
    "RoleBinding": "its grant is absent between the delete and the create",
    "ClusterRoleBinding": "its grant is absent between the delete and the create",
    "ResourceQuota": "the namespace has no quota between the delete and the create",
}


def judge_immutable(
    previous: Sequence[Mapping[str, Any]] | None, objects: Sequence[Mapping[str, Any]]
) -> list[Finding]:
    """Each replacement (``REPLACED``, with its effect) and each refused change (``POLICY``) from
    ``previous`` (the objects the last plan applied; ``None``: no day 2 to judge) to ``objects``."""
    if previous is None:
        return []
    day2 = _Day2.of(previous, objects)
    classes = {Subject.of(o).name: o for o in objects if o.get("kind") == "StorageClass"}
    findings: list[Finding] = []
    for obj in objects:
        old = day2.applied.get(_identity(obj))
        if old is None or _HOOK in ((obj.get("metadata") or {}).get("annotations") or {}):
            continue
        if paths := replaced_paths(old, obj):
            level, effect = _effect(old, obj, day2)
            message = (
                f"{', '.join(paths)} changed, which pulumi-kubernetes applies by replacement (forceNew, "
                f"provider/pkg/provider/diff.go), deleting first: {effect}"
            )
            findings.append(Finding(REPLACED, level, Subject.of(obj), message))
            continue
        rule = _RULES.get(str(obj.get("kind")))
        if rule is not None:
            findings.extend(
                Finding(POLICY, "mandatory", Subject.of(obj), problem) for problem in rule(old, obj, classes)
            )
    return findings
