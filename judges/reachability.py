"""Reachability: the flows the platform needs, declared once, checked against the planned NetworkPolicies
(judges.netpol).

The contract:
- the API server → every admission webhook and every aggregated APIService backend, on the pod port its
  Service leads to. kube-apiserver is not a pod: its calls come from the control plane's addresses in the
  cluster's network (EKS cross-account ENIs in the cluster subnets; AKS konnectivity or the API-server
  subnet), so only a rule without ``from``, or an ``ipBlock`` holding that network, admits it;
- Prometheus → every scrape target its ServiceMonitors, PodMonitors and additional scrape configs name;
- the pods of a training run ↔ each other: the rendezvous port and the ports NCCL opens (ephemeral);
  in a queued namespace without a planned run, a Job's pods ↔ each other the same way;
- inference ← its clients: any pod of another namespace, on the ports its Service serves;
- the model registry ← the pods of every planned run, every inference pod, every rollout and drift
  monitor pod and a Job's pods in every queued namespace without a planned run, on the ports its Service
  serves (issue 28: training logs and registers, serving resolves its alias; issue 29: the rollout moves
  aliases and sets the split; issue 40: the monitor reads @champion, records, rolls back);
- a rollout's or a drift monitor's pods → every inference pod of its namespace, on the ports the Services
  in front of them serve (issues 29, 40: each reads every server's ``/metrics`` and sends the labelled
  set through the Service);
- a pod → each peer outside the pod network its template declares (annotation
  ``reaches.ml-platform.io/<name>: <cidr>:<port>``: the registry's database, its artifact store's
  endpoints, its cloud identity's token exchange). A peer at ``0.0.0.0/0`` is public HTTPS that no
  NetworkPolicy can name more narrowly (S3 through its gateway endpoint, STS, Entra ID): that pod's
  egress to the internet is then in the contract;
- every pod → the cluster DNS (kube-dns in kube-system, 53 UDP and TCP);
- nothing else to the internet: a pod of an egress-isolated namespace that may reach a public address
  is a finding.
A needed flow that the policies deny is mandatory. A flow they allow into an isolated pod that the
contract does not list is reported (advisory), as is a pod of a planned namespace that no policy isolates,
and a needed flow whose far end the plan does not create (an operator's run-time Service): not judged.

Only the policies' semantics are modelled: what a CNI adds (node-local traffic for kubelet probes,
hostNetwork pods' node addresses) is outside the contract.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from judges.findings import Finding, Subject
from judges.kube import (
    CLUSTER_DNS,
    DNS_PORT,
    Pod,
    labels_match,
    namespace_labels,
    of_kind,
    operated_pods,
    pods,
    service_selects,
)
from judges.netpol import Endpoint, Policies

NEEDED = "flow-denied"
EXTRA = "flow-not-in-contract"
INTERNET = "internet-egress"
UNISOLATED = "pod-not-isolated"
UNJUDGED = "flow-not-judged"
POLICIES = (NEEDED, EXTRA, INTERNET, UNISOLATED, UNJUDGED)

# Where the API server's calls come from: the cluster's private network (RFC 1918 10/8 by default; the
# stack's VPC/VNet range when the caller knows it).
CONTROL_PLANE_NETWORK = "10.0.0.0/8"
# A public address standing for "the internet" (Cloudflare's resolver; any non-RFC 1918 address would do).
INTERNET_ADDRESS = "1.1.1.1/32"
HTTPS = 443
RENDEZVOUS = 29400
# NCCL's bootstrap and socket transport listen on ephemeral ports (Linux ip_local_port_range 32768-60999).
NCCL_PORTS = (32768, 60999)
INFERENCE_COMPONENT = "inference"
ROLLOUT_COMPONENT = "rollout"
MONITOR_COMPONENT = "drift-monitor"
COMPONENT_LABEL = "app.kubernetes.io/component"
REGISTRY_COMPONENT = "registry"
PEER_ANNOTATION_PREFIX = "reaches.ml-platform.io/"
PUBLIC_NETWORK = "0.0.0.0/0"
# A pod of a namespace the plan knows nothing about: an inference client, or any other pod.
_STRANGER = Pod(Subject("Pod", "default", "any-pod"), "default", {}, {"containers": []})


@dataclass(frozen=True)
class Flow:
    """One flow the contract needs, and why."""

    purpose: str
    source: Endpoint
    destination: Endpoint
    port: int
    protocol: str = "TCP"


class Cluster:
    """The planned objects as the contract reads them."""

    def __init__(self, objects: Sequence[Mapping[str, Any]], control_plane: str) -> None:
        self.objects = objects
        self.namespaces = namespace_labels(objects)
        self.namespaces.setdefault("kube-system", {"kubernetes.io/metadata.name": "kube-system"})
        self.pods = pods(objects) + operated_pods(objects)
        self.policies = Policies(of_kind(objects, "NetworkPolicy"), self.namespaces)
        self.control_plane = Endpoint.outside("the API server", control_plane)
        self.services = [s for s in of_kind(objects, "Service")]
        # Needed flows whose far end the plan does not create (an operator makes it at run time).
        self.unjudged: list[tuple[Subject, str]] = []

    def service(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        for service in self.services:
            metadata = service["metadata"]
            if metadata.get("namespace") == namespace and metadata.get("name") == name:
                return service
        return None

    def backends(self, service: Mapping[str, Any]) -> list[Pod]:
        namespace = service["metadata"].get("namespace")
        selector = (service.get("spec") or {}).get("selector")
        return [p for p in self.pods if p.namespace == namespace and service_selects(selector, p.labels)]


def _target_port(pod: Pod, service_port: Mapping[str, Any]) -> int | None:
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, str) and not target.isdigit():
        return pod.named_port(target, service_port.get("protocol", "TCP"))
    return int(target) if target is not None else None


def _service_flows(
    cluster: Cluster,
    purpose: str,
    source: Endpoint,
    service: Mapping[str, Any] | None,
    ports: Sequence[Mapping[str, Any]],
) -> Iterator[Flow]:
    if service is None:
        return
    for pod in cluster.backends(service):
        for service_port in ports:
            port = _target_port(pod, service_port)
            if port is not None:
                yield Flow(purpose, source, Endpoint.of(pod), port, service_port.get("protocol", "TCP"))


def _api_server_flows(cluster: Cluster) -> Iterator[Flow]:
    """Webhooks and APIServices that name a Service: the API server calls the pods behind it."""
    callers: list[tuple[Subject, str, Mapping[str, Any]]] = []
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for configuration in of_kind(cluster.objects, kind):
            for webhook in configuration.get("webhooks") or []:
                service = (webhook.get("clientConfig") or {}).get("service")
                closed = webhook.get("failurePolicy", "Fail") == "Fail"
                if service:
                    purpose = f"webhook {webhook['name']} (failurePolicy {'Fail' if closed else 'Ignore'})"
                    callers.append((Subject.of(configuration), purpose, service))
    for apiservice in of_kind(cluster.objects, "APIService"):
        service = (apiservice.get("spec") or {}).get("service")
        if service:
            callers.append((Subject.of(apiservice), f"APIService {apiservice['metadata']['name']}", service))
    for caller, purpose, reference in callers:
        service = cluster.service(str(reference.get("namespace")), str(reference.get("name")))
        wanted = int(reference.get("port", HTTPS))
        ports = [p for p in (service or {}).get("spec", {}).get("ports") or [] if int(p["port"]) == wanted]
        flows = list(
            _service_flows(cluster, f"the API server calls {purpose}", cluster.control_plane, service, ports)
        )
        if not flows:
            where = f"{reference.get('namespace')}/{reference.get('name')}:{wanted}"
            cluster.unjudged.append((caller, f"{purpose}: Service {where} leads to no pod the plan creates"))
        yield from flows


def _monitor_namespaces(monitor: Mapping[str, Any]) -> tuple[bool, list[str]]:
    selector = monitor["spec"].get("namespaceSelector") or {}
    if selector.get("any"):
        return True, []
    return False, list(selector.get("matchNames") or [monitor["metadata"].get("namespace")])


def _scrape_flows(cluster: Cluster) -> Iterator[Flow]:
    prometheus_pods = [p for p in cluster.pods if p.owner.kind == "Prometheus"]
    for prometheus in prometheus_pods:
        source = Endpoint.of(prometheus)
        purpose = f"Prometheus {prometheus.owner.name} scrapes"
        for monitor in of_kind(cluster.objects, "ServiceMonitor"):
            any_namespace, names = _monitor_namespaces(monitor)
            for service in cluster.services:
                metadata = service["metadata"]
                if not (any_namespace or metadata.get("namespace") in names):
                    continue
                if not labels_match(monitor["spec"].get("selector", {}), metadata.get("labels") or {}):
                    continue
                for endpoint in monitor["spec"].get("endpoints") or []:
                    ports = [
                        p
                        for p in service["spec"].get("ports") or []
                        if p.get("name") == endpoint.get("port")
                        or ("targetPort" in endpoint and p.get("targetPort") == endpoint["targetPort"])
                    ]
                    yield from _service_flows(
                        cluster, f"{purpose} {metadata['name']}", source, service, ports
                    )
        for monitor in of_kind(cluster.objects, "PodMonitor"):
            any_namespace, names = _monitor_namespaces(monitor)
            for pod in cluster.pods:
                if not (any_namespace or pod.namespace in names):
                    continue
                if not labels_match(monitor["spec"].get("selector", {}), pod.labels):
                    continue
                for endpoint in monitor["spec"].get("podMetricsEndpoints") or []:
                    port = pod.named_port(str(endpoint.get("port")), "TCP") or endpoint.get("portNumber")
                    if port:
                        yield Flow(f"{purpose} {pod.owner.name}", source, Endpoint.of(pod), int(port))
        yield from _additional_scrape_flows(cluster, prometheus, source, purpose)


def _additional_scrape_flows(
    cluster: Cluster, prometheus: Pod, source: Endpoint, purpose: str
) -> Iterator[Flow]:
    """``additionalScrapeConfigs`` with ``kubernetes_sd_configs`` of role endpoints or service, filtered by
    ``keep``/``drop`` on the service name (the relabelling this platform writes)."""
    spec = next(
        (
            p.get("spec") or {}
            for p in of_kind(cluster.objects, "Prometheus")
            if Subject.of(p) == prometheus.owner
        ),
        {},
    )
    reference = spec.get("additionalScrapeConfigs")
    if not reference:
        return
    secret = next(
        (
            s
            for s in of_kind(cluster.objects, "Secret")
            if s["metadata"].get("namespace") == prometheus.namespace
            and s["metadata"]["name"] == reference["name"]
        ),
        None,
    )
    if secret is None:
        return
    text = (secret.get("stringData") or {}).get(reference["key"])
    if text is None:
        text = base64.b64decode((secret.get("data") or {}).get(reference["key"], "")).decode()
    for job in yaml.safe_load(text) or []:
        flows = list(_scrape_job_flows(cluster, job, source, purpose))
        if not flows:
            cluster.unjudged.append(
                (prometheus.owner, f"scrape job {job['job_name']}: no Service or pod the plan creates")
            )
        yield from flows


def _scrape_job_flows(
    cluster: Cluster, job: Mapping[str, Any], source: Endpoint, purpose: str
) -> Iterator[Flow]:
    """One job's targets: Services of its ``kubernetes_sd_configs`` that its relabelling keeps."""
    for sd in job.get("kubernetes_sd_configs") or []:
        if sd.get("role") not in {"endpoints", "service", "endpointslice"}:
            continue
        names = (sd.get("namespaces") or {}).get("names")
        for service in cluster.services:
            metadata = service["metadata"]
            if names and metadata.get("namespace") not in names:
                continue
            if _kept(job.get("relabel_configs") or [], metadata):
                yield from _service_flows(
                    cluster,
                    f"{purpose} job {job['job_name']}",
                    source,
                    service,
                    service["spec"].get("ports") or [],
                )


def _kept(relabels: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any]) -> bool:
    known = {
        "__meta_kubernetes_service_name": str(metadata.get("name")),
        "__meta_kubernetes_namespace": str(metadata.get("namespace")),
    }
    for relabel in relabels:
        action, sources = relabel.get("action", "replace"), relabel.get("source_labels") or []
        if action not in {"keep", "drop"} or not all(s in known for s in sources):
            continue
        value = relabel.get("separator", ";").join(known[s] for s in sources)
        matched = re.fullmatch(str(relabel.get("regex", "(.*)")), value) is not None
        if matched != (action == "keep"):
            return False
    return True


def runs_torchrun(pod: Pod) -> bool:
    return any(
        "torchrun" in " ".join(c.get("command") or []) + " ".join(c.get("args") or [])
        for c in pod.containers()
    )


def _peer_flows(cluster: Cluster) -> Iterator[Flow]:
    """Each planned run's pods reach each other; so do a Job's pods in every queued namespace with no
    planned run (a team's)."""
    runs = _runs(cluster)
    for pod in runs:
        ports = sorted(
            {*(int(q["containerPort"]) for c in pod.containers() for q in c.get("ports") or []), RENDEZVOUS}
        )
        yield from _between(f"the pods of run {pod.owner.name} reach each other", pod, ports)
    for probe in _queue_probes(cluster, runs):
        yield from _between(
            f"a Job's pods in queued namespace {probe.namespace} reach each other", probe, [RENDEZVOUS]
        )


def _runs(cluster: Cluster) -> list[Pod]:
    return [p for p in cluster.pods if p.owner.kind == "Job" and runs_torchrun(p)]


def _queue_probes(cluster: Cluster, runs: Sequence[Pod]) -> Iterator[Pod]:
    """A Job's pod in each queued namespace with no planned run (a team's), as Kueue's pods look."""
    with_runs = {p.namespace for p in runs}
    for queue in of_kind(cluster.objects, "LocalQueue"):
        namespace = str(queue["metadata"].get("namespace"))
        if namespace in with_runs:
            continue
        yield Pod(
            Subject.of(queue),
            namespace,
            {
                "batch.kubernetes.io/job-name": "any-queued-job",
                "job-name": "any-queued-job",
                "kueue.x-k8s.io/queue-name": str(queue["metadata"]["name"]),
            },
            {
                "containers": [
                    {"name": "trainer", "ports": [{"containerPort": RENDEZVOUS, "protocol": "TCP"}]}
                ]
            },
        )


def _probe_endpoint(pod: Pod) -> Endpoint:
    if pod.owner.kind == "LocalQueue":
        return Endpoint(f"a Job's pod queued in {pod.namespace}", pod=pod)
    return Endpoint.of(pod)


def _between(purpose: str, pod: Pod, ports: Sequence[int]) -> Iterator[Flow]:
    endpoint = _probe_endpoint(pod)
    for port in (*ports, *NCCL_PORTS):
        yield Flow(purpose, endpoint, endpoint, port)


def _inference_flows(cluster: Cluster) -> Iterator[Flow]:
    client = Endpoint.of(_STRANGER)
    for service in cluster.services:
        backends = cluster.backends(service)
        if any(p.labels.get("app.kubernetes.io/component") == INFERENCE_COMPONENT for p in backends):
            yield from _service_flows(
                cluster,
                f"clients call Service {service['metadata']['name']}",
                client,
                service,
                service["spec"].get("ports") or [],
            )


def _rollout_flows(cluster: Cluster) -> Iterator[Flow]:
    for rollout in cluster.pods:
        if rollout.labels.get(COMPONENT_LABEL) not in (ROLLOUT_COMPONENT, MONITOR_COMPONENT):
            continue
        for service in cluster.services:
            backends = cluster.backends(service)
            if service["metadata"].get("namespace") != rollout.namespace or not any(
                p.labels.get(COMPONENT_LABEL) == INFERENCE_COMPONENT for p in backends
            ):
                continue
            yield from _service_flows(
                cluster,
                f"{rollout.owner.name} reads the servers behind Service {service['metadata']['name']}",
                Endpoint.of(rollout),
                service,
                service["spec"].get("ports") or [],
            )


def _registry_flows(cluster: Cluster) -> Iterator[Flow]:
    runs = _runs(cluster)
    callers = {INFERENCE_COMPONENT, ROLLOUT_COMPONENT, MONITOR_COMPONENT}
    clients = [
        *(Endpoint.of(p) for p in runs),
        *(Endpoint.of(p) for p in cluster.pods if p.labels.get(COMPONENT_LABEL) in callers),
        *(_probe_endpoint(p) for p in _queue_probes(cluster, runs)),
    ]
    for service in cluster.services:
        backends = cluster.backends(service)
        if not any(p.labels.get(COMPONENT_LABEL) == REGISTRY_COMPONENT for p in backends):
            continue
        for client in clients:
            yield from _service_flows(
                cluster,
                f"{client.name} calls the model registry (Service {service['metadata']['name']})",
                client,
                service,
                service["spec"].get("ports") or [],
            )


def _peer_declared_flows(cluster: Cluster) -> Iterator[Flow]:
    """What pod templates declare they reach outside the pod network."""
    for pod in cluster.pods:
        for key, value in (pod.annotations or {}).items():
            if not key.startswith(PEER_ANNOTATION_PREFIX):
                continue
            name = key.removeprefix(PEER_ANNOTATION_PREFIX)
            network, _, port = str(value).rpartition(":")
            destination = (
                Endpoint.outside("the internet", INTERNET_ADDRESS)
                if network == PUBLIC_NETWORK
                else Endpoint.outside(f"{name} ({network})", network)
            )
            yield Flow(f"{pod.owner.name} reaches {name}", Endpoint.of(pod), destination, int(port))


def _dns_flows(cluster: Cluster) -> Iterator[Flow]:
    dns = Endpoint.of(CLUSTER_DNS)
    for pod in cluster.pods:
        if not pod.host_network:
            for protocol in ("UDP", "TCP"):
                yield Flow(
                    "resolves names through the cluster DNS", Endpoint.of(pod), dns, DNS_PORT, protocol
                )


def contract(cluster: Cluster) -> list[Flow]:
    return [
        *_api_server_flows(cluster),
        *_scrape_flows(cluster),
        *_peer_flows(cluster),
        *_inference_flows(cluster),
        *_rollout_flows(cluster),
        *_registry_flows(cluster),
        *_peer_declared_flows(cluster),
        *_dns_flows(cluster),
    ]


def judge_reachability(
    objects: Sequence[Mapping[str, Any]], control_plane: str = CONTROL_PLANE_NETWORK
) -> list[Finding]:
    cluster = Cluster(objects, control_plane)
    flows = contract(cluster)
    findings = _denied(cluster, flows)
    findings += [
        Finding(UNJUDGED, "advisory", subject, f"{why}: not judged offline")
        for subject, why in cluster.unjudged
    ]
    findings += _internet(cluster, flows)
    findings += _extra(cluster, flows)
    return findings


def _subject(endpoint: Endpoint) -> Subject:
    assert endpoint.pod is not None
    return endpoint.pod.owner


def _denied(cluster: Cluster, flows: Sequence[Flow]) -> list[Finding]:
    """One finding per destination and source: the ports denied and the purposes they serve. A flow out
    of the pod network is reported against its source."""
    denied: dict[tuple[Subject, str], dict[str, list[str]]] = {}
    for flow in flows:
        if not cluster.policies.allows(flow.source, flow.destination, flow.port, flow.protocol):
            if flow.destination.pod is not None:
                key = (_subject(flow.destination), flow.source.name)
            else:
                key = (_subject(flow.source), f"{flow.source.name} → {flow.destination.name}")
            ports = denied.setdefault(key, {})
            ports.setdefault(f"{flow.port}/{flow.protocol}", []).append(flow.purpose)
    findings = []
    for (subject, source), ports in denied.items():
        purposes = sorted({p for listed in ports.values() for p in listed})
        findings.append(
            Finding(
                NEEDED,
                "mandatory",
                subject,
                f"the NetworkPolicies deny {source} → {', '.join(ports)}, which the contract needs "
                f"({len(purposes)} flow(s)): {_few(purposes)}",
            )
        )
    return findings


def _egress_isolated_namespaces(cluster: Cluster) -> set[str]:
    return {
        str(p["metadata"]["namespace"])
        for p in cluster.policies.policies
        if "Egress" in (p["spec"].get("policyTypes") or []) and p["spec"].get("podSelector") == {}
    }


def _internet(cluster: Cluster, flows: Sequence[Flow]) -> list[Finding]:
    internet = Endpoint.outside("the internet", INTERNET_ADDRESS)
    isolated = _egress_isolated_namespaces(cluster)
    needed = {f.source.name for f in flows if f.destination == internet and f.port == HTTPS}
    return [
        Finding(
            INTERNET,
            "mandatory" if pod.namespace in isolated else "advisory",
            pod.owner,
            f"may open connections to the internet ({INTERNET_ADDRESS} on {HTTPS}/TCP); "
            "the contract allows none",
        )
        for pod in cluster.pods
        if not pod.host_network
        and Endpoint.of(pod).name not in needed
        and cluster.policies.allows(Endpoint.of(pod), internet, HTTPS)
    ]


def _extra(cluster: Cluster, flows: Sequence[Flow]) -> list[Finding]:
    """Flows into isolated pods the contract does not list, from any planned pod, the API server, or a pod
    of another namespace; and pods of planned namespaces that no policy isolates."""
    needed = {
        (f.source.name, _subject(f.destination), f.port, f.protocol) for f in flows if f.destination.pod
    }
    sources = [*(Endpoint.of(p) for p in cluster.pods), cluster.control_plane, Endpoint.of(_STRANGER)]
    planned = {str(n["metadata"]["name"]) for n in of_kind(cluster.objects, "Namespace")}
    findings = []
    for pod in cluster.pods:
        if pod.host_network:
            continue
        if not cluster.policies.isolated(pod, "Ingress"):
            if pod.namespace in planned:
                findings.append(
                    Finding(
                        UNISOLATED,
                        "advisory",
                        pod.owner,
                        "no NetworkPolicy isolates its ingress: any pod may connect",
                    )
                )
            continue
        ports = sorted(
            {
                (int(q["containerPort"]), q.get("protocol", "TCP"))
                for c in pod.containers()
                for q in c.get("ports") or []
            }
        )
        extra: dict[str, list[str]] = {}
        for port, protocol in ports:
            for source in sources:
                if (source.name, pod.owner, port, protocol) in needed or source.pod is pod:
                    continue
                if cluster.policies.allows(source, Endpoint.of(pod), port, protocol):
                    extra.setdefault(f"{port}/{protocol}", []).append(source.name)
        for port_text, names in extra.items():
            findings.append(
                Finding(
                    EXTRA,
                    "advisory",
                    pod.owner,
                    f"{port_text} is open to flows the contract does not list: {_few(names)}",
                )
            )
    return findings


def _few(names: Sequence[str], shown: int = 3) -> str:
    """The first few of a long list, and how many more."""
    ordered = sorted(names)
    more = f" and {len(ordered) - shown} more" if len(ordered) > shown else ""
    return ", ".join(ordered[:shown]) + more
