"""API-server validation that the OpenAPI schemas do not express: the object passes a schema check
(kubeconform, kubernetes-validate) and the API server still answers 422. Each rule names the function of
k8s.io/kubernetes that enforces it (Kubernetes 1.35, the clusters' minor version):

- ``pkg/apis/apps/validation``: ``ValidateDeploymentSpec``, ``ValidateReplicaSetSpec``,
  ``ValidateStatefulSetSpec``, ``ValidateDaemonSetSpec``: a non-empty selector that matches the template's
  labels ("`selector` does not match template `labels`"), and a template ``restartPolicy`` of ``Always``
  (``ValidatePodTemplateSpecForReplicaSet``, ``...ForStatefulSet``, ``ValidateDaemonSetSpec``);
  ``ValidateDeploymentStrategy`` (``rollingUpdate`` Forbidden with ``type: Recreate``, a type other than
  ``Recreate``/``RollingUpdate`` NotSupported) and ``ValidateRollingUpdateDeployment`` (``maxUnavailable``
  and ``maxSurge``, 25% each when unset, not both 0; ``maxUnavailable`` at most 100%); the same spec
  validations' ``ValidateNonnegativeField`` on ``replicas``, ``minReadySeconds`` and
  ``revisionHistoryLimit``;
- ``pkg/apis/batch/validation``: ``ValidateJobSpec`` (a selector given by hand matches the template),
  ``validateJobSpec`` (``restartPolicy`` ``OnFailure`` or ``Never``; only ``Never`` "is supported when
  podFailurePolicy is specified"), ``validatePodReplacementPolicy`` (with a podFailurePolicy only
  ``Failed``), ``validatePodFailurePolicyRule`` (``onExitCodes.containerName`` names one of the template's
  containers or initContainers), ``validateJobSpec`` again (``completions`` Required when
  ``completionMode`` is ``Indexed``; ``parallelism``, ``completions``, ``activeDeadlineSeconds``,
  ``backoffLimit``, ``ttlSecondsAfterFinished``, ``backoffLimitPerIndex``, ``maxFailedIndexes``
  non-negative, ``ValidateNonnegativeField``), ``ValidateCronJobSpec`` (``startingDeadlineSeconds`` and the
  history limits non-negative; name at most 52 characters: the Job name gets
  an 11-character suffix) and ``validateScheduleFormat`` (``judges.cron``: robfig/cron's standard parser,
  no ``TZ``/``CRON_TZ`` in the schedule);
- ``pkg/apis/core/validation``: ``ValidateObjectMeta`` with the kind's name rule (``NameIsDNSSubdomain``;
  ``ValidateNamespaceName`` a DNS-1123 label; ``ValidateServiceName`` a DNS-1035 label; RBAC's
  ``ValidateRBACName`` a path segment),
  ``ValidateLabels`` (qualified-name keys, label values of 63 characters at most),
  ``ValidateAnnotations`` in ``staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go``
  (qualified-name keys checked lower-cased, "case doesn't matter"; keys and values 256 KiB in all),
  ``validateContainers`` (container names DNS-1123 labels, unique in the pod), ``validateContainerPorts``
  (port names IANA_SVC_NAME: 15 characters at most, unique in the container; ``containerPort`` and a
  ``hostPort`` other than 0 within 1-65535, ``IsValidPortNum``), ``validateProbe`` (counts non-negative)
  and ``validateContainers`` again (a liveness or startup probe's ``successThreshold`` "must be 1"),
  ``ValidateService`` (ports within 1-65535, no port and protocol twice, no ``nodePort`` on a
  ``ClusterIP`` Service),
  ``ValidateResourceRequirements`` (an extended resource's request equal to its limit, and a limit set;
  a request above its limit is ``judges.limits``'), ``validateContainerResourceName`` (a name without a
  domain is one of ``IsStandardContainerResourceName``'s: ``cpu``, ``memory``, ``ephemeral-storage``,
  ``hugepages-<size>``; ``gpu`` is refused, ``nvidia.com/gpu`` is an extended resource),
  ``ValidateVolumeMounts`` (each ``volumeMounts[].name`` a volume of the pod, "Not found"; mount paths
  unique in a container) and ``ValidateVolumes`` (volume names unique in the pod);
- the kubelet resolves a probe's named port among the container's own ports (``pkg/probe``
  ``ResolveContainerPort``, "couldn't find port"): a name no port declares fails the probe forever.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from judges.cron import schedule_problems
from judges.findings import Finding, Subject
from judges.kube import labels_match
from judges.limits import quantity

POLICY = "api-validation"
PROBE_POLICY = "probe-port-unresolved"

# k8s.io/apimachinery/pkg/util/validation: IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label,
# IsQualifiedName, IsValidLabelValue, IsValidPortName.
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
ANNOTATIONS_LIMIT = 256 * 1024  # TotalAnnotationSizeLimitB (objectmeta.go)
_WORKLOADS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"})
_JOB_COUNTS = (
    "parallelism",
    "completions",
    "activeDeadlineSeconds",
    "backoffLimit",
    "ttlSecondsAfterFinished",
    "backoffLimitPerIndex",
    "maxFailedIndexes",
)
_CRON_JOB_COUNTS = ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit")


def dns1123_label(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters (DNS-1123 label)"
    if not _DNS1123_LABEL.match(value):
        return "must consist of lower case alphanumerics or '-', start and end alphanumeric (DNS-1123 label)"
    return None


def dns1123_subdomain(value: str) -> str | None:
    if len(value) > 253:
        return "must be no more than 253 characters (DNS-1123 subdomain)"
    if not all(_DNS1123_LABEL.match(part) for part in value.split(".")):
        return "must be lower case alphanumerics, '-' or '.', start and end alphanumeric (DNS-1123 subdomain)"
    return None


def dns1035_label(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters (DNS-1035 label)"
    if not _DNS1035_LABEL.match(value):
        return "must start with a letter, then lower case alphanumerics or '-' (DNS-1035 label)"
    return None


def qualified_name(value: str) -> str | None:
    prefix, _, name = value.rpartition("/")
    if "/" in prefix:
        return "a qualified name has at most one '/'"
    if prefix and (why := dns1123_subdomain(prefix)) is not None:
        return f"prefix {prefix!r} {why}"
    if len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return "name part: 63 characters at most, alphanumerics, '-', '_' or '.', alphanumeric at both ends"
    return None


def label_value(value: str) -> str | None:
    if value == "":
        return None
    if len(value) > 63 or not _QUALIFIED_NAME.match(value):
        return "must be 63 characters at most, alphanumerics, '-', '_' or '.', alphanumeric at both ends"
    return None


def port_name(value: str) -> str | None:
    """IsValidPortName (IANA_SVC_NAME)."""
    if len(value) > 15:
        return "must be no more than 15 characters (IANA_SVC_NAME)"
    if not _PORT_NAME.match(value) or "--" in value or not re.search("[a-z]", value):
        return "must be lower case alphanumerics or '-', with a letter, no '--', alphanumeric at both ends"
    return None


def path_segment(value: str) -> str | None:
    """IsValidPathSegmentName: what ``ValidateRBACName`` allows (``system:`` roles have colons)."""
    if value in {".", ".."} or "/" in value or "%" in value:
        return "may not be '.' or '..' nor contain '/' or '%' (path segment name)"
    return None


_RBAC = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})


def _name_rule(kind: str) -> Any:
    if kind in _RBAC:
        return path_segment
    if kind == "Namespace":
        return dns1123_label
    if kind == "Service":
        return dns1035_label
    return dns1123_subdomain


def _metadata(obj: Mapping[str, Any], at: str) -> Iterator[str]:
    metadata = obj.get("metadata") or {}
    for key, value in (metadata.get("labels") or {}).items():
        if (why := qualified_name(str(key))) is not None:
            yield f"{at}.labels: key {key!r}: {why} (ValidateLabels)"
        if (why := label_value(str(value))) is not None:
            yield f"{at}.labels[{key}]: value {value!r}: {why} (ValidateLabels)"
    annotations = metadata.get("annotations") or {}
    for key in annotations:
        if (why := qualified_name(str(key).lower())) is not None:
            yield f"{at}.annotations: key {key!r}: {why} (ValidateAnnotations)"
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_LIMIT:
        yield (
            f"{at}.annotations: {size} bytes in all, more than {ANNOTATIONS_LIMIT} "
            "(TotalAnnotationSizeLimitB, ValidateAnnotationsSize)"
        )


# IsStandardContainerResourceName (pkg/apis/core/helper): the names a container may use without a domain.
_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


def container_resource_name(name: str) -> str | None:
    """``validateContainerResourceName``: why the API server refuses ``name`` in a container's requests or
    limits (``None``: it takes it)."""
    if (why := qualified_name(name)) is not None:
        return f"{why} (validateResourceName)"
    if "/" not in name:
        if name in _STANDARD_CONTAINER_RESOURCES or name.startswith("hugepages-"):
            return None
        return (
            "must be a standard resource for containers (cpu, memory, ephemeral-storage, hugepages-<size>) "
            "or fully qualified, as nvidia.com/gpu is (validateContainerResourceName, "
            "IsStandardContainerResourceName)"
        )
    native = "kubernetes.io/" in name
    if not native and (name.startswith("requests.") or qualified_name(f"requests.{name}") is not None):
        return "doesn't follow extended resource name standard (validateContainerResourceName)"
    return None


def _resources(where: str, container: Mapping[str, Any]) -> Iterator[str]:
    """Resource names the API server knows; extended resources cannot be overcommitted. (A request above
    its limit is the limit-range judge's: ``judges.limits.admit`` applies the same rule after LimitRange
    defaulting.)"""
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for key, stated in (("requests", requests), ("limits", limits)):
        for name in stated:
            if (why := container_resource_name(str(name))) is not None:
                yield f"{where}.resources.{key}[{name}]: {why}"
    for name, request in requests.items():
        if "/" not in name or name.startswith("kubernetes.io/"):
            continue
        if name not in limits:
            yield f"{where}.resources.limits[{name}]: required, extended (ValidateResourceRequirements)"
        elif quantity(request) != quantity(limits[name]):
            yield (
                f"{where}.resources.requests[{name}]: {request} must equal the limit {limits[name]} "
                "for an extended resource (ValidateResourceRequirements)"
            )


def port_number(value: Any) -> str | None:
    """``IsValidPortNum``: what ``validateContainerPorts`` and ``validateServicePort`` ask of a port."""
    number = _integer(value)
    if number is None or not 1 <= number <= 65535:
        return f"{value!r} must be between 1 and 65535, inclusive (IsValidPortNum)"
    return None


def _integer(value: Any) -> int | None:
    """An integer field as the plan may carry it (Pulumi's JSON numbers read back as floats)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


def _negative(spec: Mapping[str, Any], at: str, fields: Sequence[str], function: str) -> Iterator[str]:
    """``ValidateNonnegativeField`` on the integer ``fields`` of ``spec`` that are set."""
    for name in fields:
        value = _integer(spec.get(name))
        if value is not None and value < 0:
            yield f"{at}.{name} {value}: must be greater than or equal to 0 ({function})"


def _thresholds(where: str, container: Mapping[str, Any]) -> Iterator[str]:
    """``validateContainers``: a liveness or startup probe's ``successThreshold`` "must be 1" (0, unset, is
    defaulted to 1 by ``SetDefaults_Probe``); ``validateProbe``: its counts are non-negative."""
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        handler = container.get(probe)
        if not handler:
            continue
        yield from _negative(
            handler,
            f"{where}.{probe}",
            (
                "initialDelaySeconds",
                "timeoutSeconds",
                "periodSeconds",
                "successThreshold",
                "failureThreshold",
            ),
            "validateProbe",
        )
        threshold = handler.get("successThreshold")
        if probe != "readinessProbe" and threshold not in (None, 0, 1):
            yield f"{where}.{probe}.successThreshold {threshold!r}: must be 1 (validateContainers)"


def _probes(where: str, container: Mapping[str, Any]) -> Iterator[str]:
    names = {str(p.get("name")) for p in container.get("ports") or [] if p.get("name")}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        handler = container.get(probe) or {}
        for action in ("httpGet", "tcpSocket", "grpc"):
            port = (handler.get(action) or {}).get("port")
            if isinstance(port, str) and not port.isdigit() and port not in names:
                yield f"{where}.{probe}.{action}.port {port!r}: the container declares no port of that name"


def _volume_mounts(where: str, container: Mapping[str, Any], volumes: set[str]) -> Iterator[str]:
    """``ValidateVolumeMounts``: each mount names a volume of the pod, at a path of its own."""
    paths: set[str] = set()
    for index, mount in enumerate(container.get("volumeMounts") or []):
        name, path = str(mount.get("name")), str(mount.get("mountPath"))
        if name not in volumes:
            yield (
                f"{where}.volumeMounts[{index}].name {name!r}: Not found, the pod has no volume of that name "
                "(ValidateVolumeMounts)"
            )
        if path in paths:
            yield f"{where}.volumeMounts[{index}].mountPath {path!r}: must be unique (ValidateVolumeMounts)"
        paths.add(path)


def _pod_spec(spec: Mapping[str, Any], at: str, claims: Sequence[str] = ()) -> Iterator[tuple[str, str]]:
    """(policy, problem) for one pod spec; ``claims``, a StatefulSet's volumeClaimTemplates names, are
    volumes its controller adds to each pod (``ValidatePodTemplateSpecForStatefulSet``: mounts name one of
    "the union of the given volumes and volumeClaims")."""
    volumes: set[str] = set(claims)
    for volume in spec.get("volumes") or []:
        name = str(volume.get("name"))
        if name in volumes:
            yield POLICY, f"{at}.volumes[{name}].name: Duplicate value (ValidateVolumes)"
        volumes.add(name)
    seen: set[str] = set()
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            name = str(container.get("name"))
            where = f"{at}.{key}[{name}]"
            if (why := dns1123_label(name)) is not None:
                yield POLICY, f"{where}.name: {why} (validateContainers)"
            if name in seen:
                yield POLICY, f"{where}.name: duplicate container name in the pod (validateContainers)"
            seen.add(name)
            port_names: set[str] = set()
            for port in container.get("ports") or []:
                for field_name in ("containerPort", "hostPort"):
                    number = port.get(field_name)
                    if number not in (None, 0) and (why := port_number(number)) is not None:
                        yield POLICY, f"{where}.ports[{port.get('name') or number}].{field_name}: {why}"
                if not port.get("name"):
                    continue
                if (why := port_name(str(port["name"]))) is not None:
                    yield POLICY, f"{where}.ports[{port['name']}].name: {why} (validateContainerPorts)"
                if port["name"] in port_names:
                    yield (
                        POLICY,
                        f"{where}.ports[{port['name']}].name: duplicate port name (validateContainerPorts)",
                    )
                port_names.add(str(port["name"]))
            for problem in (*_resources(where, container), *_thresholds(where, container)):
                yield POLICY, problem
            for problem in _volume_mounts(where, container, volumes):
                yield POLICY, problem
            for problem in _probes(where, container):
                yield PROBE_POLICY, problem


def _selector(kind: str, spec: Mapping[str, Any], function: str) -> Iterator[str]:
    selector = spec.get("selector")
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if selector is None or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        if kind in _WORKLOADS:
            yield f"spec.selector: required and non-empty ({function})"
        return
    if not labels_match(selector, labels):
        yield f"spec.template.metadata.labels: `selector` does not match template `labels` ({function})"


def _restart_policy(kind: str, spec: Mapping[str, Any], at: str) -> Iterator[str]:
    policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy", "Always")
    if kind in _WORKLOADS and policy != "Always":
        yield f"{at}.template.spec.restartPolicy {policy!r}: only 'Always' is supported (Validate{kind}Spec)"
    if kind == "Job":
        if policy not in {"OnFailure", "Never"}:
            yield f"{at}.template.spec.restartPolicy {policy!r}: OnFailure or Never only (validateJobSpec)"
        elif spec.get("podFailurePolicy") is not None and policy != "Never":
            yield (
                f"{at}.template.spec.restartPolicy {policy!r}: only 'Never' is supported when "
                "podFailurePolicy is specified (validateJobSpec)"
            )
        yield from _pod_failure_policy(spec, at)


def _completions(spec: Mapping[str, Any], at: str) -> Iterator[str]:
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        yield f"{at}.completions: Required value when completion mode is Indexed (validateJobSpec)"


def _percent(value: Any) -> int | None:
    """An IntOrString as ``getIntOrPercentValue`` reads it (``None``: neither an integer nor a percent)."""
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"([0-9]+)%", str(value))
    return int(match.group(1)) if match else None


def _strategy(spec: Mapping[str, Any]) -> Iterator[str]:
    """``ValidateDeploymentStrategy`` after apps/v1 defaulting (``SetDefaults_Deployment``: an empty type is
    ``RollingUpdate`` and its unset ``maxUnavailable``/``maxSurge`` are 25%)."""
    strategy = spec.get("strategy") or {}
    kind, rolling = strategy.get("type") or "RollingUpdate", strategy.get("rollingUpdate")
    if kind == "Recreate":
        if rolling is not None:
            yield (
                "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is "
                "'Recreate' (ValidateDeploymentStrategy)"
            )
        return
    if kind != "RollingUpdate":
        yield (
            f"spec.strategy.type {kind!r}: Unsupported value: 'Recreate' or 'RollingUpdate' "
            "(ValidateDeploymentStrategy)"
        )
        return
    values = {key: (rolling or {}).get(key, "25%") for key in ("maxUnavailable", "maxSurge")}
    for key, value in values.items():
        if _percent(value) is None or (_percent(value) or 0) < 0:
            yield (
                f"spec.strategy.rollingUpdate.{key} {value!r}: must be a non-negative integer or a "
                "percentage, e.g. '5%' (ValidatePositiveIntOrPercent)"
            )
    unavailable, surge = _percent(values["maxUnavailable"]), _percent(values["maxSurge"])
    if unavailable == 0 and surge == 0:
        yield (
            "spec.strategy.rollingUpdate.maxUnavailable: may not be 0 when `maxSurge` is 0 "
            "(ValidateRollingUpdateDeployment)"
        )
    if isinstance(values["maxUnavailable"], str) and (unavailable or 0) > 100:
        yield (
            f"spec.strategy.rollingUpdate.maxUnavailable {values['maxUnavailable']!r}: must not be greater "
            "than 100% (ValidateRollingUpdateDeployment)"
        )


def _pod_failure_policy(spec: Mapping[str, Any], at: str) -> Iterator[str]:
    failure_policy = spec.get("podFailurePolicy")
    if failure_policy is None:
        return
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None and replacement != "Failed":
        yield (
            f"{at}.podReplacementPolicy {replacement!r}: only 'Failed' is supported when podFailurePolicy "
            "is specified (validatePodReplacementPolicy)"
        )
    template = (spec.get("template") or {}).get("spec") or {}
    names = {str(c.get("name")) for key in ("containers", "initContainers") for c in template.get(key) or []}
    for index, rule in enumerate(failure_policy.get("rules") or []):
        container = (rule.get("onExitCodes") or {}).get("containerName")
        if container is not None and container not in names:
            yield (
                f"{at}.podFailurePolicy.rules[{index}].onExitCodes.containerName {container!r}: must be one "
                "of the container or initContainer names in the pod template (validatePodFailurePolicyRule)"
            )


def _problems(obj: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    kind = str(obj.get("kind"))
    name = str((obj.get("metadata") or {}).get("name") or "")
    rule = _name_rule(kind)
    if name and (why := rule(name)) is not None:
        yield POLICY, f"metadata.name {name!r}: {why} (ValidateObjectMeta)"
    if kind == "CronJob" and len(name) > 52:
        yield POLICY, f"metadata.name {name!r}: must be no more than 52 characters (ValidateCronJob)"
    for problem in _metadata(obj, "metadata"):
        yield POLICY, problem
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        schedule = str(spec.get("schedule") or "")
        for why in schedule_problems(schedule):
            yield POLICY, f"spec.schedule {schedule!r}: {why} (validateScheduleFormat)"
        yield from ((POLICY, p) for p in _negative(spec, "spec", _CRON_JOB_COUNTS, "ValidateCronJobSpec"))
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
        kind, at = "Job", "spec.jobTemplate.spec"
    else:
        at = "spec"
    if kind == "Deployment":
        yield from ((POLICY, p) for p in _strategy(spec))
    if kind in _WORKLOADS:
        counts = ("minReadySeconds", "revisionHistoryLimit", *(() if kind == "DaemonSet" else ("replicas",)))
        yield from ((POLICY, p) for p in _negative(spec, at, counts, f"Validate{kind}Spec"))
    if kind == "Job":
        yield from ((POLICY, p) for p in _completions(spec, at))
        yield from ((POLICY, p) for p in _negative(spec, at, _JOB_COUNTS, "validateJobSpec"))
    if kind in _WORKLOADS or kind == "Job":
        function = "ValidateJobSpec" if kind == "Job" else f"Validate{kind}Spec"
        for problem in _selector(kind, spec, function):
            yield POLICY, problem
        for problem in _restart_policy(kind, spec, at):
            yield POLICY, problem
        yield from ((POLICY, p) for p in _metadata(spec.get("template") or {}, f"{at}.template.metadata"))
        claims = [str((c.get("metadata") or {}).get("name")) for c in spec.get("volumeClaimTemplates") or []]
        yield from _pod_spec((spec.get("template") or {}).get("spec") or {}, f"{at}.template.spec", claims)
    elif kind == "Pod":
        yield from _pod_spec(spec, "spec")
    elif kind == "Service":
        yield from ((POLICY, p) for p in _service_ports(spec))


def _service_ports(spec: Mapping[str, Any]) -> Iterator[str]:
    """``ValidateService``: each port valid (``validateServicePort``), no port and protocol twice
    (``field.Duplicate``), and no ``nodePort`` on a ``ClusterIP`` Service ("may not be used when `type` is
    'ClusterIP'"; ``type`` defaults to ``ClusterIP``, ``protocol`` to ``TCP``)."""
    seen: set[tuple[Any, str]] = set()
    cluster_ip = (spec.get("type") or "ClusterIP") == "ClusterIP"
    for index, port in enumerate(spec.get("ports") or []):
        where = f"spec.ports[{index}]"
        number, protocol = port.get("port"), str(port.get("protocol") or "TCP")
        if (why := port_number(number)) is not None:
            yield f"{where}.port: {why} (validateServicePort)"
        if (number, protocol) in seen:
            yield f"{where}: Duplicate value: port {number}/{protocol} (ValidateService)"
        seen.add((number, protocol))
        if cluster_ip and port.get("nodePort") not in (None, 0):
            yield f"{where}.nodePort: Forbidden: may not be used when `type` is 'ClusterIP' (ValidateService)"


def judge_validation(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    return [
        Finding(policy, "mandatory", Subject.of(obj), problem)
        for obj in objects
        for policy, problem in _problems(obj)
    ]
