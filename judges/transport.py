"""Transport: every flow of the reachability contract (judges.reachability) is TLS, or a named exception
with its reason (issue 35; compliance review T4-T6: "each service interaction encrypted").

How a flow counts as TLS, from the planned objects alone:
- the API server's calls to admission webhooks and aggregated APIs: Kubernetes calls a webhook's Service
  over HTTPS only (Kubernetes docs, "Dynamic Admission Control", ``clientConfig.service``: "Communication
  with the webhook server uses TLS");
- a call to a pod's port that the pod names ``https``, or that a Service selecting it serves under a port
  named ``https`` or with ``appProtocol: https`` (the registry and inference with TLS on; the servers
  refuse anything older than TLS 1.3: workloads/registry/server/launch.py, workloads/inference/server.py);
- a peer outside the pod network on 443 (the cloud's HTTPS endpoints: object store, identity, STS) or on
  the PostgreSQL port (the registry's database, whose server refuses plaintext connections:
  ``rds.force_ssl``, ``require_secure_transport``; components/aws and components/azure
  registry_database.py), and whose client verifies the server's certificate and name on both clouds
  (``sslmode=verify-full``: the vendored Amazon RDS me-central-1 roots on AWS, the system's DigiCert /
  Microsoft roots on Azure; workloads/registry/server/launch.py ``database_ca``), so it needs no exception.

The exceptions (``EXCEPTIONS``), each named with why it is accepted and what contains it:
- ``cluster-dns``: name lookups to kube-dns on 53 are DNS, not TLS;
- ``training-fabric``: a run's pods among themselves (c10d rendezvous, gloo, NCCL over sockets or RDMA):
  no TLS exists for them; contained by the namespace's NetworkPolicy (no other pod reaches those
  ports: ``flow-denied``/``flow-not-in-contract`` judge it) and the GPU pool's own subnet and security
  group (docs/security.md);
- ``metrics-scrape``: Prometheus scraping a target that serves plain HTTP (the vendored exporters: node-
  exporter, kube-state-metrics, the operators; review T5): metrics carry no credentials or data; the
  platform's own targets that carry tokens (inference) are scraped over verified HTTPS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import DNS_PORT, Pod, service_selects
from judges.netpol import Endpoint
from judges.reachability import (
    CONTROL_PLANE_NETWORK,
    HTTPS,
    Cluster,
    Flow,
    contract,
)

PLAINTEXT = "plaintext-flow"
POSTGRES = 5432
TIER_LABEL = "tier"
ENTERPRISE = "enterprise"
TLS_NAMES = frozenset({"https"})


@dataclass(frozen=True)
class TransportException:
    name: str
    reason: str


EXCEPTIONS = {
    e.name: e
    for e in (
        TransportException(
            "cluster-dns", "name lookups to the cluster DNS on 53 (DNS has no TLS in-cluster)"
        ),
        TransportException(
            "training-fabric",
            "a run's pods among themselves (rendezvous, gloo, NCCL): no TLS exists for them; contained by "
            "the namespace's NetworkPolicy and the GPU pool's subnet and security group",
        ),
        TransportException(
            "metrics-scrape",
            "Prometheus scraping an exporter that serves plain HTTP: metrics only, no credentials or data",
        ),
    )
}


def _service_port_is_tls(cluster: Cluster, pod: Pod, port: int) -> bool:
    for service in cluster.services:
        if service["metadata"].get("namespace") != pod.namespace:
            continue
        if not service_selects((service.get("spec") or {}).get("selector"), pod.labels):
            continue
        for service_port in (service.get("spec") or {}).get("ports") or []:
            target = service_port.get("targetPort", service_port.get("port"))
            number = (
                pod.named_port(target, service_port.get("protocol", "TCP"))
                if isinstance(target, str)
                else target
            )
            if number is not None and int(number) == port:
                names = {service_port.get("name"), service_port.get("appProtocol")}
                if names & TLS_NAMES:
                    return True
    return False


def _pod_port_is_tls(pod: Pod, port: int) -> bool:
    return any(
        int(p.get("containerPort", -1)) == port and p.get("name") in TLS_NAMES
        for c in pod.containers()
        for p in c.get("ports") or []
    )


def classify(cluster: Cluster, flow: Flow) -> str | None:
    """``"tls"``, an exception's name, or None: in clear and not excepted."""
    source, destination = flow.source, flow.destination
    if source.pod is None:  # the API server: webhooks and aggregated APIs are HTTPS only
        return "tls"
    if destination.pod is None:
        return "tls" if flow.port in (HTTPS, POSTGRES) else None
    if destination.pod.labels.get("k8s-app") == "kube-dns" and flow.port == DNS_PORT:
        return "cluster-dns"
    if destination.pod is source.pod:
        return "training-fabric"
    if _pod_port_is_tls(destination.pod, flow.port) or _service_port_is_tls(
        cluster, destination.pod, flow.port
    ):
        return "tls"
    if source.pod.owner.kind == "Prometheus":
        return "metrics-scrape"
    return None


def _enterprise(endpoint: Endpoint) -> bool:
    return endpoint.pod is not None and endpoint.pod.labels.get(TIER_LABEL) == ENTERPRISE


def _subject(flow: Flow) -> Subject:
    pod = flow.destination.pod or flow.source.pod
    assert pod is not None
    return pod.owner


def judge_transport(
    objects: Sequence[Mapping[str, Any]], control_plane: str = CONTROL_PLANE_NETWORK
) -> list[Finding]:
    """One finding per destination and port carried in clear outside the exceptions."""
    cluster = Cluster(objects, control_plane)
    found: dict[tuple[Subject, int], tuple[list[str], bool]] = {}
    for flow in contract(cluster):
        if classify(cluster, flow) is not None:
            continue
        purposes, mandatory = found.setdefault((_subject(flow), flow.port), ([], False))
        if flow.purpose not in purposes:
            purposes.append(flow.purpose)
        found[(_subject(flow), flow.port)] = (
            purposes,
            mandatory or _enterprise(flow.source) or _enterprise(flow.destination),
        )
    return [
        Finding(
            PLAINTEXT,
            "mandatory" if mandatory else "advisory",
            subject,
            f"port {port} is plaintext and no exception covers it ({min(purposes)}"
            + (f" and {len(purposes) - 1} more" if len(purposes) > 1 else "")
            + "): serve TLS (a port named https) or name the exception in judges/transport.py",
        )
        for (subject, port), (purposes, mandatory) in found.items()
    ]


def exceptions_taken(
    objects: Sequence[Mapping[str, Any]], control_plane: str = CONTROL_PLANE_NETWORK
) -> list[tuple[Subject, str, str]]:
    """Each object whose flows an exception covers, once per exception: (the object, the exception's name,
    its reason and the flows it covers), for the evidence's exceptions register."""
    cluster = Cluster(objects, control_plane)
    covered: dict[tuple[Subject, str], list[str]] = {}
    for flow in contract(cluster):
        kind = classify(cluster, flow)
        if kind in EXCEPTIONS:
            purposes = covered.setdefault((_subject(flow), kind), [])
            if flow.purpose not in purposes:
                purposes.append(flow.purpose)
    return [
        (
            subject,
            name,
            f"{EXCEPTIONS[name].reason} ({purposes[0]}"
            + (f" and {len(purposes) - 1} more" if len(purposes) > 1 else "")
            + ")",
        )
        for (subject, name), purposes in covered.items()
    ]


def transport_table(objects: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, str]]:
    """Each contract flow's purpose, port and transport (``tls``, an exception's name, or ``plaintext``):
    the evidence docs/security.md's table summarises."""
    cluster = Cluster(objects, CONTROL_PLANE_NETWORK)
    return [(f.purpose, f.port, classify(cluster, f) or "plaintext") for f in contract(cluster)]
