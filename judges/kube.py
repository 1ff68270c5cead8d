"""The planned objects as the cluster sees them: namespaces with their labels, the pods each workload
creates, label selectors (apimachinery ``LabelSelector`` semantics)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from judges.findings import Subject

# The label the API server sets on every namespace (Kubernetes 1.22+, "Well-Known Labels").
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def labels_match(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector: ``None`` (absent) matches nothing, ``{}`` everything; matchLabels and every
    matchExpressions term are ANDed (apimachinery ``LabelSelectorAsSelector``)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for term in selector.get("matchExpressions") or []:
        key, operator, values = term["key"], term["operator"], set(term.get("values") or [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def service_selects(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """A Service's ``spec.selector`` (a plain map): an empty or absent one selects no pods."""
    return bool(selector) and all(labels.get(k) == v for k, v in (selector or {}).items())


@dataclass(frozen=True)
class Pod:
    """The pods one workload object creates, as its template describes them."""

    owner: Subject
    namespace: str
    labels: Mapping[str, str]
    spec: Mapping[str, Any]
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def host_network(self) -> bool:
        return bool(self.spec.get("hostNetwork"))

    def containers(self) -> Iterator[Mapping[str, Any]]:
        """Every container the pod runs: init, regular and ephemeral."""
        for key in ("initContainers", "containers", "ephemeralContainers"):
            yield from self.spec.get(key) or []

    def named_port(self, name: str, protocol: str) -> int | None:
        """The number a named port resolves to in this pod (first container declaring it, as kube-proxy
        and NetworkPolicy resolve it)."""
        for container in self.containers():
            for port in container.get("ports") or []:
                if port.get("name") == name and port.get("protocol", "TCP") == protocol:
                    return int(port["containerPort"])
        return None


# Built-in kinds that live in no namespace (``kubectl api-resources --namespaced=false``, Kubernetes
# 1.35): a ``metadata.namespace`` on one is cleared on create (``rest.BeforeCreate``). A custom kind's
# scope comes from its CustomResourceDefinition.
CLUSTER_KINDS = frozenset(
    {
        "APIService",
        "CSIDriver",
        "CSINode",
        "CertificateSigningRequest",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "FlowSchema",
        "IngressClass",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
        "VolumeAttributesClass",
    }
)


# A ConfigMap carrying an object a workload creates at run time (the drift monitor's retrain Job,
# workloads/inference/k8s.py): the label names its kind, ``CARRIED_KEY`` holds it as JSON.
CARRIED_LABEL = "ml-platform.io/carries"
CARRIED_KEY = "object.json"


def carried(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The objects the planned ConfigMaps carry (``CARRIED_LABEL``), judged as if applied: what a workload
    creates through the API must pass what ``pulumi up`` would have to. One that is not JSON of the kind
    its label names is carried as it stands, for the API-validation judge to refuse."""
    found: list[Mapping[str, Any]] = []
    for obj in objects:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if obj.get("kind") != "ConfigMap" or CARRIED_LABEL not in labels:
            continue
        text = (obj.get("data") or {}).get(CARRIED_KEY)
        try:
            value = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            value = None
        if isinstance(value, dict) and value.get("kind") == labels[CARRIED_LABEL]:
            found.append(value)
        else:
            meta = obj.get("metadata") or {}
            found.append(
                {
                    "kind": labels[CARRIED_LABEL],
                    "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
                }
            )
    return found


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return {"metadata": obj.get("metadata") or {}, "spec": spec}
    if kind in {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "ReplicationController"}:
        template: Mapping[str, Any] | None = spec.get("template")
        return template
    if kind == "CronJob":
        job_template: Mapping[str, Any] | None = (
            (spec.get("jobTemplate") or {}).get("spec", {}).get("template")
        )
        return job_template
    return None


def pods(objects: Sequence[Mapping[str, Any]]) -> list[Pod]:
    """The pods the planned workloads create (one per template), labels as the pods carry them."""
    found = []
    for obj in objects:
        template = _template(obj)
        if template is None:
            continue
        subject = Subject.of(obj)
        metadata = template.get("metadata") or {}
        labels = dict(metadata.get("labels") or {})
        if subject.kind == "Job":
            # The Job controller adds these to every pod (kubernetes.io "Jobs", labels on pods, 1.27+).
            labels |= {"batch.kubernetes.io/job-name": subject.name, "job-name": subject.name}
        annotations = dict(metadata.get("annotations") or {})
        found.append(Pod(subject, subject.namespace, labels, template.get("spec") or {}, annotations))
    return found


def namespace_labels(objects: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Planned namespaces → their labels, with the automatic ``kubernetes.io/metadata.name``; namespaces
    that objects live in but that the plan does not create (``kube-system``, ``default``) get that label
    only."""
    found: dict[str, dict[str, str]] = {}
    for obj in objects:
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        if namespace:
            found.setdefault(namespace, {NAMESPACE_NAME_LABEL: namespace})
    for obj in objects:
        if obj.get("kind") == "Namespace" and obj.get("apiVersion") == "v1":
            metadata = obj.get("metadata") or {}
            name = str(metadata["name"])
            found[name] = {**(metadata.get("labels") or {}), NAMESPACE_NAME_LABEL: name}
    return found


def of_kind(objects: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [obj for obj in objects if obj.get("kind") == kind]


# The cluster's DNS pods (CoreDNS, made by EKS and AKS as an add-on): the label and ports the kube-dns
# Service selects in kube-system on both.
DNS_PORT = 53
CLUSTER_DNS = Pod(
    Subject("Deployment", "kube-system", "coredns"),
    "kube-system",
    {"k8s-app": "kube-dns"},
    {
        "containers": [
            {
                "name": "coredns",
                "ports": [
                    {"name": "dns", "containerPort": DNS_PORT, "protocol": "UDP"},
                    {"name": "dns-tcp", "containerPort": DNS_PORT, "protocol": "TCP"},
                ],
            }
        ]
    },
)


def operated_pods(objects: Sequence[Mapping[str, Any]]) -> list[Pod]:
    """The pods prometheus-operator runs for each Prometheus and Alertmanager (one shard, one replica
    judged): the labels its ``statefulset.go`` puts on each pod template (``app.kubernetes.io/name``,
    ``instance``, ``managed-by``, and ``operator.prometheus.io/name``/``shard`` and ``prometheus`` for a
    Prometheus, ``alertmanager`` for an Alertmanager), plus ``podMetadata``. Their containers are the
    operator's, so no port is declared here."""
    found = []
    for kind, name_label in (("Prometheus", "prometheus"), ("Alertmanager", "alertmanager")):
        for operated in of_kind(objects, kind):
            subject = Subject.of(operated)
            extra = ((operated.get("spec") or {}).get("podMetadata") or {}).get("labels") or {}
            labels = {
                "app.kubernetes.io/name": name_label,
                "app.kubernetes.io/instance": subject.name,
                "app.kubernetes.io/managed-by": "prometheus-operator",
                name_label: subject.name,
                **(
                    {"operator.prometheus.io/name": subject.name, "operator.prometheus.io/shard": "0"}
                    if kind == "Prometheus"
                    else {}
                ),
                **extra,
            }
            found.append(Pod(subject, subject.namespace, labels, {"containers": []}))
    return found
