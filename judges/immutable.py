"""Day 2: a change the API server refuses on update. The judge compares each object a plan applies with
the same object (group, kind, namespace, name) in the plan applied before it, and names each field whose
change the update validation of k8s.io/kubernetes (1.35, the clusters' minor version) refuses:

- ``pkg/registry/apps/{deployment,replicaset,daemonset}/strategy.go`` ``ValidateUpdate``: ``spec.selector``
  of apps/v1 objects is immutable ("field is immutable");
- ``pkg/apis/apps/validation`` ``ValidateStatefulSetUpdate``: "updates to statefulset spec for fields other
  than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit',
  'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";
- ``pkg/apis/batch/validation`` ``ValidateJobSpecUpdate``: ``completions`` (``validateCompletions``: an
  Indexed Job may change it only together with an equal ``parallelism``), ``selector``, ``template``
  (``validatePodTemplateUpdate``), ``completionMode``, ``podFailurePolicy``, ``backoffLimitPerIndex``
  (a CronJob's ``jobTemplate`` is not: each run is a new Job);
- ``pkg/apis/core/validation``: ``ValidateServiceUpdate`` (a set ``clusterIP``/``clusterIPs`` changes only
  to or from ``ExternalName``), ``ValidatePersistentVolumeClaimUpdate`` (the spec but
  ``resources.requests`` and ``volumeAttributesClassName``; storage never below the applied request; growth
  only through a StorageClass with ``allowVolumeExpansion``: ``plugin/pkg/admission/storage/
  persistentvolume/resize`` ``Validate``), ``ValidatePersistentVolumeUpdate`` (the volume source and
  ``volumeMode``), ``ValidateSecretUpdate`` (``type``; with ``immutable: true`` the data and the flag
  itself), ``ValidateConfigMapUpdate`` (with ``immutable: true`` the data and the flag);
- ``pkg/apis/storage/validation`` ``ValidateStorageClassUpdate`` (``parameters``, ``provisioner``,
  ``reclaimPolicy``, ``volumeBindingMode``), ``ValidateCSIDriverUpdate`` (``attachRequired``,
  ``volumeLifecycleModes``);
- ``pkg/apis/rbac/validation`` ``ValidateRoleBindingUpdate``/``ValidateClusterRoleBindingUpdate``
  ("cannot change roleRef");
- ``pkg/apis/networking/validation`` ``ValidateIngressClassUpdate`` (``spec.controller``);
- ``pkg/apis/scheduling/validation`` ``ValidatePriorityClassUpdate`` (``value``, ``preemptionPolicy``).

Each is mandatory: the update fails, and the only way on is to delete and recreate the object (a
StatefulSet's or claim's data, a Service's address, a binding's grant in the meantime).

A Helm hook (annotation ``helm.sh/hook``) is never updated: Helm creates it at its event, after deleting
the one before under the ``before-hook-creation`` policy, the default where a chart names none (Helm
docs, "Chart Hooks", "Hook deletion policies"; helm pkg/action/hooks.go ``execHook``). A hook Job whose
image moves (a chart bump, the stack's mirror lock) is a new Job, not a refused update.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from judges.findings import Finding, Subject
from judges.limits import quantity

POLICY = "immutable-field-changed"
_HOOK = "helm.sh/hook"

_STATEFULSET_MUTABLE = frozenset(
    {
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "revisionHistoryLimit",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    }
)
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

Rule = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Mapping[str, Any]]], Iterator[str]]


def _get(obj: Mapping[str, Any], path: str) -> Any:
    """The value at ``path``; an empty map or list reads as absent (a plan may write either)."""
    node: Any = obj
    for key in path.split("."):
        node = node.get(key) if isinstance(node, Mapping) else None
    return None if node in ({}, []) else node


def _fields(*paths: str, function: str) -> Rule:
    def rule(
        old: Mapping[str, Any], new: Mapping[str, Any], _: Mapping[str, Mapping[str, Any]]
    ) -> Iterator[str]:
        for path in paths:
            if _get(old, path) != _get(new, path):
                yield f"{path}: field is immutable ({function})"

    return rule


def _statefulset(old: Mapping[str, Any], new: Mapping[str, Any], _: Any) -> Iterator[str]:
    before, after = old.get("spec") or {}, new.get("spec") or {}
    for key in sorted((set(before) | set(after)) - _STATEFULSET_MUTABLE):
        if before.get(key) != after.get(key):
            yield (
                f"spec.{key}: updates to statefulset spec for fields other than "
                f"{', '.join(sorted(_STATEFULSET_MUTABLE))} are forbidden (ValidateStatefulSetUpdate)"
            )


def _job(old: Mapping[str, Any], new: Mapping[str, Any], _: Any) -> Iterator[str]:
    before, after = old.get("spec") or {}, new.get("spec") or {}
    elastic = after.get("completionMode") == "Indexed" and after.get("completions") == after.get(
        "parallelism"
    )
    if before.get("completions") != after.get("completions") and not elastic:
        yield "spec.completions: field is immutable (ValidateJobSpecUpdate, validateCompletions)"
    for key in ("selector", "template", "completionMode", "podFailurePolicy", "backoffLimitPerIndex"):
        if before.get(key) != after.get(key):
            yield f"spec.{key}: field is immutable (ValidateJobSpecUpdate)"


def _service(old: Mapping[str, Any], new: Mapping[str, Any], _: Any) -> Iterator[str]:
    before, after = old.get("spec") or {}, new.get("spec") or {}
    if "ExternalName" in {before.get("type"), after.get("type")}:
        return
    for key in ("clusterIP", "clusterIPs"):
        if before.get(key) and before.get(key) != after.get(key):
            yield f"spec.{key}: field is immutable (ValidateServiceUpdate)"


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
            yield (
                f"spec.{key}: the volume source and volumeMode are immutable (ValidatePersistentVolumeUpdate)"
            )


def _immutable_data(function: str, keys: tuple[str, ...]) -> Rule:
    def rule(old: Mapping[str, Any], new: Mapping[str, Any], _: Any) -> Iterator[str]:
        if old.get("kind") == "Secret" and old.get("type", "Opaque") != new.get("type", "Opaque"):
            yield f"type: field is immutable ({function})"
        if not old.get("immutable"):
            return
        if not new.get("immutable"):
            yield f"immutable: field is immutable when `immutable` is set ({function})"
        for key in keys:
            if (old.get(key) or {}) != (new.get(key) or {}):
                yield f"{key}: field is immutable when `immutable` is set ({function})"

    return rule


def _role_ref(function: str) -> Rule:
    def rule(old: Mapping[str, Any], new: Mapping[str, Any], _: Any) -> Iterator[str]:
        if old.get("roleRef") != new.get("roleRef"):
            yield f"roleRef: cannot change roleRef ({function})"

    return rule


_RULES: dict[str, Rule] = {
    "Deployment": _fields("spec.selector", function="deployment strategy ValidateUpdate"),
    "ReplicaSet": _fields("spec.selector", function="replicaset strategy ValidateUpdate"),
    "DaemonSet": _fields("spec.selector", function="daemonset strategy ValidateUpdate"),
    "StatefulSet": _statefulset,
    "Job": _job,
    "Service": _service,
    "PersistentVolumeClaim": _claim,
    "PersistentVolume": _volume,
    "Secret": _immutable_data("ValidateSecretUpdate", ("data", "stringData")),
    "ConfigMap": _immutable_data("ValidateConfigMapUpdate", ("data", "binaryData")),
    "StorageClass": _fields(
        "parameters",
        "provisioner",
        "reclaimPolicy",
        "volumeBindingMode",
        function="ValidateStorageClassUpdate",
    ),
    "CSIDriver": _fields(
        "spec.attachRequired", "spec.volumeLifecycleModes", function="ValidateCSIDriverUpdate"
    ),
    "RoleBinding": _role_ref("ValidateRoleBindingUpdate"),
    "ClusterRoleBinding": _role_ref("ValidateClusterRoleBindingUpdate"),
    "IngressClass": _fields("spec.controller", function="ValidateIngressClassUpdate"),
    "PriorityClass": _fields("value", "preemptionPolicy", function="ValidatePriorityClassUpdate"),
}


def _identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    subject = Subject.of(obj)
    return group, subject.kind, subject.namespace, subject.name


def judge_immutable(
    previous: Sequence[Mapping[str, Any]] | None, objects: Sequence[Mapping[str, Any]]
) -> list[Finding]:
    """Each refused change from ``previous`` (the objects the last plan applied; ``None``: no day 2 to
    judge) to ``objects``."""
    if previous is None:
        return []
    applied = {_identity(obj): obj for obj in previous}
    classes = {Subject.of(o).name: o for o in objects if o.get("kind") == "StorageClass"}
    findings: list[Finding] = []
    for obj in objects:
        rule = _RULES.get(str(obj.get("kind")))
        old = applied.get(_identity(obj))
        if rule is None or old is None or _HOOK in ((obj.get("metadata") or {}).get("annotations") or {}):
            continue
        findings.extend(
            Finding(POLICY, "mandatory", Subject.of(obj), problem) for problem in rule(old, obj, classes)
        )
    return findings
