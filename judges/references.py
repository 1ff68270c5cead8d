"""Reference integrity: every name an object uses to reach another resolves to an object the plan creates,
or to one made elsewhere (``judges.elsewhere``: built into every cluster, or made by an operator's
documented step, reported as advisory so the operator sees the list).

What a dangling reference does on a real cluster (kubernetes.io docs for each field):

- an object in a namespace that neither the plan nor anyone else makes (the NamespaceLifecycle admission
  plugin refuses every create there: ``namespaces "<name>" not found``; kubernetes.io "Admission Control",
  NamespaceLifecycle): one finding per namespace, counting its objects, in place of the references of
  its objects to one another;
- a non-optional Secret or ConfigMap volume, ``envFrom`` source or ``secretKeyRef``/``configMapKeyRef``
  ("Secrets", "ConfigMaps": the kubelet will not start the pod, ``MountVolume.SetUp failed`` or
  ``CreateContainerConfigError``); ``optional: true`` references are skipped; a CSI volume's
  ``nodePublishSecretRef`` (the kubelet's NodePublishVolume call fails, "Volumes", csi);
- ``serviceAccountName`` (the ServiceAccount admission plugin refuses the pod), a PersistentVolumeClaim
  (the pod stays Pending), ``priorityClassName`` (the Priority admission plugin refuses the pod), a
  claim's StorageClass or volume (the claim stays Pending), and a generic ephemeral volume's
  ``volumeClaimTemplate`` StorageClass (the claim the ephemeral volume controller makes stays Pending, and
  the pod with it: "Ephemeral Volumes");
- a ``kueue.x-k8s.io/priority-class`` label (on a Job, or a CronJob's ``jobTemplate``) naming a
  WorkloadPriorityClass (Kueue 0.19 ``pkg/util/priority`` ``GetPriorityFromWorkloadPriorityClass``
  returns the Get error, the job reconciler makes no Workload, and the Job stays suspended, never admitted);
- a RoleBinding's or ClusterRoleBinding's ``roleRef`` (the binding grants nothing);
- an HPA's ``scaleTargetRef`` (the HPA reports ``FailedGetScale``); a PDB that selects no pod (protects
  nothing);
- a Service selector that matches no planned pod in its namespace, or a named ``targetPort`` a selected
  pod does not declare (the EndpointSlice controller skips that pod: ``FindPort`` in
  ``pkg/api/v1/pod/util.go``);
- a StatefulSet's ``volumeClaimTemplates`` StorageClass (the controller's claims stay Pending, and the
  pods with them);
- a StatefulSet's governing ``serviceName`` that the plan does not create: the controller still creates
  and runs the pods, but their per-pod DNS names (``<pod>.<service>.<namespace>.svc``) do not exist
  (kubernetes.io "StatefulSets", Stable Network ID: the user creates the headless Service). Mandatory
  when a planned object names such a pod DNS name (a rendezvous endpoint ``<set>-0.<service>``, a peer
  list): it never resolves; advisory otherwise (``statefulset-service-missing``);
- a webhook's or APIService's backend Service, and the Service port it names (the API server's calls
  fail: fail-closed webhooks refuse every matching request).

An object that names one missing object at several fields (a webhook configuration's 22 webhooks on one
Service) is one finding listing the fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judges.elsewhere import made_elsewhere
from judges.findings import Finding, Subject
from judges.kube import (
    CLUSTER_DNS,
    CLUSTER_KINDS,
    Pod,
    labels_match,
    of_kind,
    operated_pods,
    pods,
    service_selects,
)

POLICY = "dangling-reference"
GOVERNING_POLICY = "statefulset-service-missing"
OPERATOR_POLICY = "operator-made-object"
SERVICE_POLICY = "service-without-endpoints"

# The referenced kinds that live in no namespace: the built-in ones and Kueue's WorkloadPriorityClass.
_CLUSTER_SCOPED = CLUSTER_KINDS | {"WorkloadPriorityClass"}
# Kueue's WorkloadPriorityClassLabel (pkg/controller/constants).
WORKLOAD_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@dataclass(frozen=True)
class Reference:
    """``owner`` names ``kind`` ``namespace``/``name`` at ``field``."""

    owner: Subject
    field: str
    kind: str
    namespace: str
    name: str


def _pod_references(pod: Pod) -> Iterator[Reference]:
    spec, ns = pod.spec, pod.namespace

    def ref(field: str, kind: str, name: Any) -> Reference:
        return Reference(pod.owner, field, kind, ns, str(name))

    yield ref("serviceAccountName", "ServiceAccount", spec.get("serviceAccountName") or "default")
    if spec.get("priorityClassName"):
        yield Reference(pod.owner, "priorityClassName", "PriorityClass", "", spec["priorityClassName"])
    for volume in spec.get("volumes") or []:
        where = f"volumes[{volume.get('name')}]"
        secret, config_map = volume.get("secret"), volume.get("configMap")
        if secret and not secret.get("optional"):
            yield ref(f"{where}.secret.secretName", "Secret", secret.get("secretName"))
        if config_map and not config_map.get("optional"):
            yield ref(f"{where}.configMap.name", "ConfigMap", config_map.get("name"))
        if volume.get("persistentVolumeClaim"):
            claim = volume["persistentVolumeClaim"].get("claimName")
            yield ref(f"{where}.persistentVolumeClaim.claimName", "PersistentVolumeClaim", claim)
        claim_spec = ((volume.get("ephemeral") or {}).get("volumeClaimTemplate") or {}).get("spec") or {}
        if claim_spec.get("storageClassName"):
            field = f"{where}.ephemeral.volumeClaimTemplate.spec.storageClassName"
            yield Reference(pod.owner, field, "StorageClass", "", str(claim_spec["storageClassName"]))
        publish = (volume.get("csi") or {}).get("nodePublishSecretRef")
        if publish:
            yield ref(f"{where}.csi.nodePublishSecretRef.name", "Secret", publish.get("name"))
        for index, source in enumerate((volume.get("projected") or {}).get("sources") or []):
            for key, kind in (("secret", "Secret"), ("configMap", "ConfigMap")):
                if source.get(key) and not source[key].get("optional"):
                    yield ref(f"{where}.projected.sources[{index}].{key}.name", kind, source[key].get("name"))
    for container in pod.containers():
        where = f"containers[{container.get('name')}]"
        for source in container.get("envFrom") or []:
            for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                if source.get(key) and not source[key].get("optional"):
                    yield ref(f"{where}.envFrom.{key}.name", kind, source[key].get("name"))
        for env in container.get("env") or []:
            value_from = env.get("valueFrom") or {}
            for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                if value_from.get(key) and not value_from[key].get("optional"):
                    field = f"{where}.env[{env.get('name')}].valueFrom.{key}.name"
                    yield ref(field, kind, value_from[key].get("name"))


def _workload_priority(obj: Mapping[str, Any]) -> Iterator[Reference]:
    """The WorkloadPriorityClass a Job (or each Job a CronJob makes) asks Kueue for."""
    at, metadata = "metadata", obj.get("metadata") or {}
    if obj.get("kind") == "CronJob":
        at, metadata = (
            "spec.jobTemplate.metadata",
            ((obj.get("spec") or {}).get("jobTemplate") or {}).get("metadata") or {},
        )
    name = (metadata.get("labels") or {}).get(WORKLOAD_PRIORITY_LABEL)
    if name:
        field = f"{at}.labels[{WORKLOAD_PRIORITY_LABEL}]"
        yield Reference(Subject.of(obj), field, "WorkloadPriorityClass", "", str(name))


def _object_references(obj: Mapping[str, Any]) -> Iterator[Reference]:
    kind, owner, spec = obj.get("kind"), Subject.of(obj), obj.get("spec") or {}
    ns = owner.namespace
    yield from _workload_priority(obj)
    if kind == "PersistentVolumeClaim":
        if spec.get("storageClassName"):
            yield Reference(owner, "spec.storageClassName", "StorageClass", "", spec["storageClassName"])
        if spec.get("volumeName"):
            yield Reference(owner, "spec.volumeName", "PersistentVolume", "", spec["volumeName"])
    elif kind in {"RoleBinding", "ClusterRoleBinding"}:
        role = obj.get("roleRef") or {}
        role_ns = ns if role.get("kind") == "Role" else ""
        yield Reference(owner, "roleRef", str(role.get("kind")), role_ns, str(role.get("name")))
    elif kind == "HorizontalPodAutoscaler":
        target = spec.get("scaleTargetRef") or {}
        yield Reference(owner, "spec.scaleTargetRef", str(target.get("kind")), ns, str(target.get("name")))
    elif kind == "StatefulSet":
        for index, claim in enumerate(spec.get("volumeClaimTemplates") or []):
            name = (claim.get("spec") or {}).get("storageClassName")
            if name:
                field = f"spec.volumeClaimTemplates[{index}].spec.storageClassName"
                yield Reference(owner, field, "StorageClass", "", str(name))
    elif kind in {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}:
        for webhook in obj.get("webhooks") or []:
            service = (webhook.get("clientConfig") or {}).get("service")
            if service:
                field = f"webhooks[{webhook.get('name')}].clientConfig.service"
                yield Reference(
                    owner, field, "Service", str(service.get("namespace")), str(service.get("name"))
                )
    elif kind == "APIService" and spec.get("service"):
        service = spec["service"]
        yield Reference(
            owner, "spec.service", "Service", str(service.get("namespace")), str(service.get("name"))
        )


def _key(kind: str, namespace: str, name: str) -> tuple[str, str, str]:
    return kind, "" if kind in _CLUSTER_SCOPED else namespace, name


def _fields(fields: list[str]) -> str:
    if len(fields) <= 3:
        return ", ".join(fields)
    return f"{', '.join(fields[:3])} and {len(fields) - 3} more ({len(fields)} fields)"


def _resolve(
    references: Iterator[Reference],
    planned: set[tuple[str, str, str]],
    missing: Mapping[str, Any],
    cluster: str | None,
) -> Iterator[Finding]:
    """One finding per object and what it names: the fields that name it, listed. A reference into a
    ``missing`` namespace is that namespace's finding."""
    grouped: dict[tuple[Subject, tuple[str, str, str]], list[Reference]] = {}
    for ref in references:
        key = _key(ref.kind, ref.namespace, ref.name)
        if key not in planned and key[1] not in missing:
            grouped.setdefault((ref.owner, key), []).append(ref)
    for (owner, key), refs in grouped.items():
        kind, namespace, name = key
        where = f"{namespace}/{name}" if namespace else name
        fields = _fields(list(dict.fromkeys(ref.field for ref in refs)))
        elsewhere = made_elsewhere(*key, cluster)
        if elsewhere is None:
            yield Finding(
                POLICY,
                "mandatory",
                owner,
                f"{fields}: {kind} {where} is not in the plan and not made elsewhere "
                "(a reference must resolve, or the cluster refuses or never starts it)",
            )
        elif elsewhere.operator:
            yield Finding(
                OPERATOR_POLICY,
                "advisory",
                owner,
                f"{fields}: {kind} {where} is made by the operator, not the plan "
                f"({elsewhere.made_by}); its pods do not start until it exists",
            )


def missing_namespaces(objects: Sequence[Mapping[str, Any]]) -> dict[str, list[Subject]]:
    """Namespaces that hold planned namespaced objects (a custom resource by its CRD's ``scope``) but
    that neither the plan creates nor anyone else makes (``judges.elsewhere``: built in, or an operator's
    documented step) → their objects."""
    created = {
        Subject.of(o).name for o in objects if o.get("kind") == "Namespace" and o.get("apiVersion") == "v1"
    }
    cluster_kinds = CLUSTER_KINDS | {
        str(crd["spec"]["names"]["kind"])
        for crd in of_kind(objects, "CustomResourceDefinition")
        if (crd.get("spec") or {}).get("scope") == "Cluster"
    }
    found: dict[str, list[Subject]] = {}
    for obj in objects:
        subject = Subject.of(obj)
        if not subject.namespace or subject.kind in cluster_kinds or subject.namespace in created:
            continue
        if made_elsewhere("Namespace", "", subject.namespace) is None:
            found.setdefault(subject.namespace, []).append(subject)
    return found


def _namespaces(missing: Mapping[str, list[Subject]]) -> Iterator[Finding]:
    for namespace, held in missing.items():
        named = ", ".join(str(s) for s in held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
        count = f"{len(held)} planned object{'s' if len(held) > 1 else ''}"
        yield Finding(
            POLICY,
            "mandatory",
            Subject("Namespace", "", namespace),
            f"metadata.namespace of {count} ({named}): Namespace {namespace} is not in the plan and not "
            "made elsewhere; the NamespaceLifecycle admission plugin refuses every one "
            f'(namespaces "{namespace}" not found)',
        )


def _services(objects: Sequence[Mapping[str, Any]], running: list[Pod]) -> Iterator[Finding]:
    """Each selector Service selects a pod that runs in its namespace (planned, run by an operator the
    plan installs, or the cluster's DNS), and each named targetPort resolves in every pod it selects
    whose containers are known."""
    for service in of_kind(objects, "Service"):
        spec, subject = service.get("spec") or {}, Subject.of(service)
        selector = spec.get("selector")
        if not selector or spec.get("type") == "ExternalName":
            continue  # endpoints managed by hand, or a DNS alias
        selected = [
            p for p in running if p.namespace == subject.namespace and service_selects(selector, p.labels)
        ]
        if not selected:
            yield Finding(
                SERVICE_POLICY,
                "mandatory",
                subject,
                f"spec.selector {selector} matches no pod that runs in {subject.namespace}: the "
                "Service has no endpoints",
            )
            continue
        for port in spec.get("ports") or []:
            target = port.get("targetPort")
            if not isinstance(target, str):
                continue
            protocol = str(port.get("protocol", "TCP"))
            for pod in selected:
                if pod.spec.get("containers") and pod.named_port(target, protocol) is None:
                    yield Finding(
                        SERVICE_POLICY,
                        "mandatory",
                        subject,
                        f"spec.ports[{port.get('name', port.get('port'))}].targetPort {target!r}: no "
                        f"container of {pod.owner} declares a {protocol} port of that name, so the "
                        "EndpointSlice controller leaves its pods out",
                    )


def _backend_ports(objects: Sequence[Mapping[str, Any]]) -> Iterator[Finding]:
    """A webhook's or APIService's ``service.port`` (default 443) is a port the Service exposes."""
    services = {Subject.of(s): s for s in of_kind(objects, "Service")}
    backends: list[tuple[Subject, str, Mapping[str, Any]]] = []
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for config in of_kind(objects, kind):
            for webhook in config.get("webhooks") or []:
                service = (webhook.get("clientConfig") or {}).get("service")
                if service:
                    field = f"webhooks[{webhook.get('name')}].clientConfig.service.port"
                    backends.append((Subject.of(config), field, service))
    for api_service in of_kind(objects, "APIService"):
        service = (api_service.get("spec") or {}).get("service")
        if service:
            backends.append((Subject.of(api_service), "spec.service.port", service))
    for owner, field, service in backends:
        target = services.get(Subject("Service", str(service.get("namespace")), str(service.get("name"))))
        port = int(service.get("port", 443))
        if target is None:
            continue  # reported as a dangling reference
        exposed = {int(p["port"]) for p in (target.get("spec") or {}).get("ports") or []}
        if port not in exposed:
            yield Finding(
                POLICY,
                "mandatory",
                owner,
                f"{field}: Service {service.get('namespace')}/{service.get('name')} exposes "
                f"{sorted(exposed)}, not {port}: the API server's calls fail",
            )


def _budgets(objects: Sequence[Mapping[str, Any]], running: list[Pod]) -> Iterator[Finding]:
    for budget in of_kind(objects, "PodDisruptionBudget"):
        subject, selector = Subject.of(budget), (budget.get("spec") or {}).get("selector")
        if not any(p.namespace == subject.namespace and labels_match(selector, p.labels) for p in running):
            yield Finding(
                POLICY,
                "advisory",
                subject,
                f"spec.selector matches no pod the plan creates in {subject.namespace}: the budget protects "
                "nothing the plan runs",
            )


def _governing_services(
    objects: Sequence[Mapping[str, Any]], planned: set[tuple[str, str, str]]
) -> Iterator[Finding]:
    """A StatefulSet whose governing Service the plan does not create: mandatory only where a planned
    object addresses one of its pods by the DNS name that Service would give it."""
    texts: list[tuple[Subject, str]] | None = None
    for workload in of_kind(objects, "StatefulSet"):
        subject, service = Subject.of(workload), str((workload.get("spec") or {}).get("serviceName") or "")
        if not service or _key("Service", subject.namespace, service) in planned:
            continue
        if texts is None:
            texts = [(Subject.of(obj), json.dumps(obj)) for obj in objects]
        pod_name = re.compile(rf"\b{re.escape(subject.name)}-[0-9]+\.{re.escape(service)}\b")
        users = [(user, match.group(0)) for user, text in texts if (match := pod_name.search(text))]
        lacking = (
            f"spec.serviceName: Service {subject.namespace}/{service} is not in the plan: the pods are "
            f"created and run, but get no per-pod DNS names (<pod>.{service}.{subject.namespace}.svc; "
            'kubernetes.io "StatefulSets", Stable Network ID: the headless Service is the user\'s to create)'
        )
        if users:
            named = ", ".join(f"{user} names {name}" for user, name in users[:3])
            yield Finding(POLICY, "mandatory", subject, f"{lacking}; {named}, which never resolves")
        else:
            yield Finding(
                GOVERNING_POLICY, "advisory", subject, f"{lacking}; nothing planned addresses a pod by it"
            )


def judge_references(objects: Sequence[Mapping[str, Any]], cluster: str | None = None) -> list[Finding]:
    """Every reference of the objects; ``cluster`` (``eks``, ``aks``; ``None`` not known) decides which
    service's built-in objects exist (``judges.elsewhere``)."""
    planned = {_key(str(o.get("kind")), Subject.of(o).namespace, Subject.of(o).name) for o in objects}
    planned_pods = pods(objects)
    running = [*planned_pods, *operated_pods(objects), CLUSTER_DNS]
    references = (
        ref
        for source in (
            *(_pod_references(pod) for pod in planned_pods),
            *(_object_references(obj) for obj in objects),
        )
        for ref in source
    )
    missing = missing_namespaces(objects)
    return [
        *_namespaces(missing),
        *_resolve(references, planned, missing, cluster),
        *_services(objects, running),
        *_backend_ports(objects),
        *_budgets(objects, running),
        *_governing_services(objects, planned),
    ]
