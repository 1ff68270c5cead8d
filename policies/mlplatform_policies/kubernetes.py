"""Kubernetes workload hardening, judged on the objects the program applies.

Objects arrive as resources typed ``kubernetes:<group/version>:<Kind>`` with ``apiVersion``, ``kind``,
``metadata`` and ``spec`` as in the object. Mandatory rules follow the Pod Security "restricted"
essentials (no privilege, no host namespaces, non-root, no escalation, no added capabilities) plus
limits and pinned images; the rest of the checkov baseline is advisory. The exception annotations are
described in ``settings.py``.

Helm releases: the engine sees a ``kubernetes:helm.sh/v3:Release`` as one resource. ``mlplatform check``
renders each release offline and sends the objects its chart creates as further resources (children
of the release, typed by their own kind), so every rule here judges them like the program's own; each
templated object carries Helm's ``meta.helm.sh/release-name`` and ``release-namespace`` annotations, as
on the cluster after the release. A release no object in the stack carries those annotations for was
not rendered (``pulumi preview``, or a chart missing from the cache): ``k8s-unrendered-content`` says so.
An object Helm installs may carry a written ``policy.ml-platform.io/chart-exception`` reason (set where
the chart is pinned, for what no chart value can fix): the hardening rule exempts that one object. On
the program's own objects the annotation means nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import ResourceValidationPolicy, Severity, StackValidationPolicy

from . import tokens
from .factory import ADVISORY, Finding, by_type, resource_policy, stack_policy
from .settings import CAPABILITIES_REASON, PRIVILEGED_REASON
from .subject import Graph, Subject
from .values import at, describe, elements, is_false, is_set, is_true, known

_HOST_NAMESPACES = ("hostPID", "hostIPC", "hostNetwork")
_PROBED = ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet", "kubernetes:apps/v1:DaemonSet")
_RELEASE = "kubernetes:helm.sh/v3:Release"
_RELEASE_NAME = "meta.helm.sh/release-name"
_RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
_CHART_EXCEPTION = "policy.ml-platform.io/chart-exception"
_UNRENDERED = (
    _RELEASE,
    "kubernetes:helm.sh/v4:Chart",
    "kubernetes:yaml/v2:ConfigGroup",
    "kubernetes:yaml/v2:ConfigFile",
    "kubernetes:kustomize/v2:Directory",
)
_MIN_UID = 10000


def _pod_spec(subject: Subject) -> Mapping[str, Any]:
    path = tokens.POD_SPEC_PATHS[subject.type]
    spec = known(subject.get(path), path)
    return spec if isinstance(spec, Mapping) else {}


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(label, container)`` for every init and app container."""
    for field in ("initContainers", "containers"):
        for index, container in enumerate(elements(spec, field)):
            if isinstance(container, Mapping):
                yield f"{field}[{index}] ({container.get('name', '?')})", container


def _effective(container: Mapping[str, Any], spec: Mapping[str, Any], key: str) -> Any:
    """A security setting as Kubernetes applies it: the container's, else the pod's."""
    own = known(at(container, f"securityContext.{key}"), f"securityContext.{key}")
    return own if own is not None else known(at(spec, f"securityContext.{key}"), f"securityContext.{key}")


def _image_problem(image: Any) -> str | None:
    """Why an image reference is not pinned (a tag other than ``latest``, or a digest)."""
    image = known(image, "image")
    if not isinstance(image, str) or not image:
        return "image is not set"
    if "@" in image:
        return None
    name = image.rsplit("/", 1)[-1]
    if ":" not in name:
        return f"image {image} has no tag; pin a version tag or a digest"
    if name.rsplit(":", 1)[1] == "latest":
        return f"image {image} uses :latest; pin a version tag or a digest"
    return None


def _root_for_capability(subject: Subject, container: Mapping[str, Any]) -> bool:
    """An added capability reaches the effective set of a root process only (containers get no ambient
    capabilities: kubernetes/kubernetes#56374), so a container that adds only exceptable capabilities,
    with the written reason, may run as UID 0 to use them."""
    added = elements(container, "securityContext.capabilities.add")
    exceptable = subject.setting("exceptableCapabilities")
    return bool(added) and all(c in exceptable for c in added) and subject.reason(CAPABILITIES_REASON)


def _privilege(subject: Subject, spec: Mapping[str, Any]) -> Iterator[str]:
    for field in _HOST_NAMESPACES:
        if is_true(known(spec.get(field), field)):
            yield f"{field} is true; the pod shares the node's namespace"
    exceptable = subject.setting("exceptableCapabilities")
    for label, container in _containers(spec):
        if is_true(known(at(container, "securityContext.privileged"), "privileged")):
            yield f"{label} runs privileged"
        escalation = known(
            at(container, "securityContext.allowPrivilegeEscalation"), "allowPrivilegeEscalation"
        )
        if not is_false(escalation):
            yield f"{label} securityContext.allowPrivilegeEscalation is {describe(escalation)}; set it false"
        added = elements(container, "securityContext.capabilities.add")
        if not _root_for_capability(subject, container):
            if not is_true(_effective(container, spec, "runAsNonRoot")):
                yield f"{label} runAsNonRoot is not true (container or pod securityContext)"
            if _effective(container, spec, "runAsUser") in (0, 0.0):
                yield f"{label} runs as UID 0"
        for capability in added:
            if capability not in exceptable:
                yield f"{label} adds capability {capability}"
            elif not subject.reason(CAPABILITIES_REASON):
                yield f"{label} adds {capability} without a written reason in {CAPABILITIES_REASON}"


def _hardening(subject: Subject) -> Iterator[str]:
    if subject.annotations().get(_RELEASE_NAME) and subject.reason(_CHART_EXCEPTION):
        return
    spec = _pod_spec(subject)
    if not subject.reason(PRIVILEGED_REASON):
        yield from _privilege(subject, spec)
    for label, container in _containers(spec):
        for resource in ("cpu", "memory"):
            if not is_set(at(container, f"resources.limits.{resource}")):
                yield f"{label} resources.limits.{resource} is not set"
        problem = _image_problem(container.get("image"))
        if problem:
            yield f"{label} {problem}"


def namespace_of(subject: Subject) -> Any:
    """The namespace an object lands in: its own, else the provider's default, else ``default``."""
    own = subject.get("metadata.namespace")
    return own if own is not None else subject.provider.get("namespace") or "default"


def _container_baseline(subject: Subject, label: str, container: Mapping[str, Any]) -> Iterator[str]:
    spec = _pod_spec(subject)
    if not is_true(known(at(container, "securityContext.readOnlyRootFilesystem"), "readOnlyRootFilesystem")):
        yield f"{label} readOnlyRootFilesystem is not true"
    if "ALL" not in elements(container, "securityContext.capabilities.drop"):
        yield f"{label} does not drop ALL capabilities"
    if _effective(container, spec, "seccompProfile") is None:
        yield f"{label} has no seccompProfile (RuntimeDefault)"
    uid = _effective(container, spec, "runAsUser")
    if _root_for_capability(subject, container):
        return
    if not isinstance(uid, (int, float)) or uid < _MIN_UID:
        yield f"{label} runAsUser is {describe(uid)}, not {_MIN_UID} or more"


def _baseline(subject: Subject) -> Iterator[str]:
    """One advisory line per workload: the gaps are read together, and a table stays readable."""
    gaps = list(_baseline_gaps(subject))
    if gaps:
        yield "; ".join(gaps)


def _baseline_gaps(subject: Subject) -> Iterator[str]:
    spec = _pod_spec(subject)
    if not is_false(known(spec.get("automountServiceAccountToken"), "automountServiceAccountToken")):
        yield "automountServiceAccountToken is not false"
    if known(namespace_of(subject), "metadata.namespace") == "default":
        yield "runs in the default namespace"
    for label, container in _containers(spec):
        yield from _container_baseline(subject, label, container)
        if subject.type in _PROBED:
            yield from (
                f"{label} has no {probe}"
                for probe in ("livenessProbe", "readinessProbe")
                if probe not in container
            )


def _unrendered(graph: Graph) -> Iterator[Finding]:
    """Releases and YAML groups whose objects are not in the stack: nothing inside them was judged."""
    rendered = {
        (subject.annotations().get(_RELEASE_NAME), subject.annotations().get(_RELEASE_NAMESPACE))
        for subject in graph.subjects
        if subject.package == "kubernetes"
    }
    for subject in graph.of(*_UNRENDERED):
        if subject.type == _RELEASE and (subject.get("name"), subject.get("namespace")) in rendered:
            continue
        chart = subject.get("chart") or subject.get("files") or subject.get("directory") or subject.name
        version = subject.get("version")
        # "<chart>@<version>: ..." keeps the subject one token, so a report can group releases.
        pinned = f"@{version}" if version else " (no chart version pinned)" if subject.get("chart") else ""
        yield (
            subject.urn,
            f"{chart}{pinned}: the objects it renders are not judged (to the engine it is one resource); "
            "`mlplatform check` renders them from the packaged charts in the repository's charts/ "
            "(MLPLATFORM_CHARTS names another folder; `mlplatform charts pull` fetches a pinned one)",
        )


POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    resource_policy(
        "k8s-workload-hardening",
        "Workloads run unprivileged: no privileged containers or host namespaces, non-root, no privilege "
        "escalation, no added capabilities (except documented ones), CPU and memory limits, pinned images.",
        by_type(dict.fromkeys(tokens.WORKLOADS, _hardening)),
        severity=Severity.HIGH,
        settings=("exceptableCapabilities",),
    ),
    resource_policy(
        "k8s-workload-baseline",
        "Workloads follow the rest of the checkov baseline: read-only root filesystem, drop ALL "
        "capabilities, seccomp, UID >= 10000, no service account token, probes, not the default namespace.",
        by_type(dict.fromkeys(tokens.WORKLOADS, _baseline)),
        severity=Severity.LOW,
        enforcement=ADVISORY,
    ),
    stack_policy(
        "k8s-unrendered-content",
        "Helm releases and YAML groups whose objects are not in the stack (not rendered) are not judged.",
        _unrendered,
        severity=Severity.LOW,
        enforcement=ADVISORY,
    ),
]
