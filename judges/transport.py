"""Transport: every flow of the reachability contract (judges.reachability) is TLS, or a named exception
with its reason (issue 35; compliance review T4-T6: "each service interaction encrypted").

How a flow counts as TLS, from the planned objects alone:
- the API server's calls to admission webhooks and aggregated APIs: Kubernetes calls a webhook's Service
  over HTTPS only (Kubernetes docs, "Dynamic Admission Control", ``clientConfig.service``: "Communication
  with the webhook server uses TLS");
- a call to a pod's port whose container is configured to serve TLS: its env or arguments name a
  certificate and a key file of one Secret it mounts (``serves_tls``; the registry and inference refuse
  anything older than TLS 1.3: workloads/registry/server/launch.py, workloads/inference/server.py), never
  a port's name (review B6: a port named ``https`` serving clear text passed); and, where the plan
  configures the client (every container naming the destination's Service), the client calls https and
  verifies with a CA file from a Secret (``client_verification``);
- a peer outside the pod network on 443 (the cloud's HTTPS endpoints: object store, identity, STS) or on
  the PostgreSQL port (the registry's database, whose server refuses plaintext connections:
  ``rds.force_ssl``, ``require_secure_transport``; components/aws and components/azure
  registry_database.py), and whose client the plan configures to verify: ``peer_client`` reads the
  containers' settings (review 35 A6), libpq's ``sslmode`` stated ``verify-full`` for PostgreSQL, no
  ``http://`` endpoint outside the cluster; the registry verifies the server's certificate and name on
  both clouds (``sslmode=verify-full``: the vendored Amazon RDS me-central-1 roots on AWS, the system's
  DigiCert / Microsoft roots on Azure; workloads/registry/server/launch.py ``database_ca``), so it needs
  no exception.

The exceptions (``EXCEPTIONS``), each named with why it is accepted and what contains it:
- ``cluster-dns``: name lookups to kube-dns on 53 are DNS, not TLS;
- ``training-fabric``: a DDP run's pods among themselves on the rendezvous port and NCCL's ports only,
  for a torchrun Job requesting an RDMA device (EFA or InfiniBand: ``training_fabric`` names that
  evidence; review B7: any workload's self-flows passed): no TLS exists for them; contained by the
  namespace's NetworkPolicy (no other pod reaches those ports: ``flow-denied``/``flow-not-in-contract``
  judge it) and the GPU pool's own subnet and security group (docs/security.md);
- ``metrics-scrape``: Prometheus scraping a target that serves plain HTTP (the vendored exporters: node-
  exporter, kube-state-metrics, the operators; review T5): metrics carry no credentials or data; the
  platform's own targets that carry tokens (inference) are scraped over verified HTTPS;
- ``azure-files-nfs``: the kubelet's NFS mount of an Azure Files share through the Azure Files CSI
  driver's TLS tunnel (``encryptInTransit``, driver v1.33.0 or later), which is no pod's flow: the
  register lists each such volume (docs/security.md, "The exceptions"). The share's account requires it
  server-side too (secure transfer, and its file service's
  ``protocolSettings.nfs.encryptionInTransit.required``, storage API 2025-01-01: the pack's
  ``azure-files-nfs-tls-required``); what remains is that AZNFS's stunnel negotiates the TLS version;
- ``nfs-encrypted-mount``: any other NFS mount the mount itself encrypts (EFS through efs-utils' TLS,
  RPC-with-TLS, Kerberos ``krb5p``), the protocol version negotiated by the client.
Every other NFS mount (a PersistentVolume, a StorageClass or a pod's inline volume, in-tree or by any
CSI driver) is a plaintext flow (``nfs_in_clear``; review rev35d A1).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import DNS_PORT, Pod, labels_match, of_kind, pods, service_selects
from judges.netpol import Endpoint
from judges.reachability import (
    CONTROL_PLANE_NETWORK,
    HTTPS,
    NCCL_PORTS,
    RENDEZVOUS,
    Cluster,
    Flow,
    contract,
    runs_torchrun,
)

PLAINTEXT = "plaintext-flow"
POSTGRES = 5432
TIER_LABEL = "tier"
ENTERPRISE = "enterprise"
# The keys of a ``kubernetes.io/tls`` Secret, and the CA a client verifies with (the registry's
# ``registry-ca``, inference's ``inference-ca``).
TLS_KEYS = ("tls.crt", "tls.key")
CA_KEY = "ca.crt"
_CERTIFICATE = re.compile(r"crt|cert", re.IGNORECASE)
_KEY = re.compile(r"key", re.IGNORECASE)
# The RDMA devices NCCL's fabric uses: EFA (aws-efa-k8s-device-plugin) and InfiniBand (the network
# operator's shared RDMA device plugin, ``rdma/shared_ib``).
EFA_RESOURCE = "vpc.amazonaws.com/efa"
RDMA_PREFIX = "rdma/"


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
            "a DDP run's pods among themselves on the rendezvous port and NCCL's ports, the run on the RDMA "
            "fabric (EFA or InfiniBand): no TLS exists for them; contained by the namespace's NetworkPolicy "
            "and the GPU pool's subnet and security group",
        ),
        TransportException(
            "metrics-scrape",
            "Prometheus scraping an exporter that serves plain HTTP: metrics only, no credentials or data",
        ),
        TransportException(
            "azure-files-nfs",
            "a node's NFS 4.1 mount of an Azure Files share (TCP 2049) through the CSI driver's AZNFS TLS "
            "tunnel (encryptInTransit: stunnel verifying the chain and the name *.file.core.windows.net, "
            "TLS version negotiated, 1.2 or 1.3); the account requires secure transfer and its file service "
            "encryption in transit for NFS (pack policy azure-files-nfs-tls-required), so the server "
            "refuses a clear "
            "mount; contained by the account's private endpoint, its only way in, in the stack's VNet",
        ),
        TransportException(
            "nfs-encrypted-mount",
            "a node's NFS mount encrypted by the mount itself (EFS through efs-utils' TLS tunnel, the EFS "
            "CSI driver's default; or RPC-with-TLS xprtsec=tls|mtls, or Kerberos sec=krb5p): the client "
            "negotiates the protocol version, not the platform's TLS 1.3; the kubelet mounts it, no pod's "
            "flow",
        ),
    )
}
# NFS mounts (issue 35, review rev35d A1): NFS has no encryption of its own, so a mount is encrypted
# only where a sourced mechanism applies, whichever route mounts it:
# - the Azure Files CSI driver over NFS (``protocol`` or ``fsType`` ``nfs``:
#   kubernetes-sigs/azurefile-csi-driver docs/driver-parameters.md) with ``encryptInTransit`` (from
#   v1.33.0), a volume attribute or
#   StorageClass parameter read with Go's ``strconv.ParseBool``, or a mount option of that name matched
#   case-insensitively (pkg/azurefile/nodeserver.go v1.35.7 l.411-415, l.590-596; utils.go
#   ``removeOptionIfExists``): the mount goes through AZNFS's stunnel;
# - the EFS CSI driver, which mounts through efs-utils' TLS tunnel (mount option ``tls``) unless the
#   volume's ``encryptInTransit`` parses false (aws-efs-csi-driver v2.3.0, the pinned add-on's
#   version, pkg/driver/node.go l.97-156; aws-efs-csi-driver docs/parameters.md, "encryptInTransit");
# - any NFS client with the kernel's RPC-with-TLS (``xprtsec=tls`` or ``mtls``: nfs(5), "xprtsec";
#   Linux Documentation/filesystems/nfs/rpc-with-tls.rst, kernel 6.5 on) or Kerberos with privacy
#   (``sec=krb5p``: nfs(5), "Security flavors": "krb5p ... provides ... privacy" , i.e. encryption).
# Any other NFS mount, in-tree ``nfs`` (kubelet runs ``mount -t nfs``), ``nfs.csi.k8s.io``, or any CSI
# driver or class whose ``protocol``/``fsType`` is NFS, is in clear.
AZURE_FILES_DRIVER = "file.csi.azure.com"
EFS_DRIVER = "efs.csi.aws.com"
NFS_DRIVERS = frozenset({EFS_DRIVER, "nfs.csi.k8s.io"})
# ``aznfs`` is the Azure Blob CSI driver's NFS 3.0 mount through the AZNFS helper (kubernetes-sigs/
# blob-csi-driver pkg/blob/blob.go: ``AZNFS = "aznfs"``, ``supportedProtocolList`` fuse, fuse2, nfs, aznfs);
# Blob NFS 3.0 has no encryption of its own (review rev35e A6).
NFS_KINDS = frozenset({"nfs", "nfs4", "aznfs"})
ENCRYPT_IN_TRANSIT = "encryptintransit"
KERNEL_ENCRYPTING_OPTIONS = frozenset({"xprtsec=tls", "xprtsec=mtls", "sec=krb5p"})
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
# A PostgreSQL client's TLS mode: libpq's ``PGSSLMODE`` or a connection URL's ``sslmode`` parameter
# (PostgreSQL docs, "Environment Variables" and "Connection URIs").
PGSSLMODE = "PGSSLMODE"
VERIFY_FULL = "verify-full"
_SSLMODE_IN_URL = re.compile(r"^postgres(?:ql)?(?:\+\w+)?://.*[?&]sslmode=([\w-]+)")
_HTTP_URL = re.compile(r"^http://([^/:?#]+)", re.IGNORECASE)


def _config(container: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What a container is configured with: (where, value) for each env value, argument and command word
    (a ``--flag=value`` argument counts by its value)."""
    found = [
        (f"env {e['name']}", str(e["value"]))
        for e in container.get("env") or []
        if isinstance(e.get("value"), str)
    ]
    for key in ("command", "args"):
        for word in container.get(key) or []:
            flag, _, value = str(word).partition("=")
            found.append((f"{key} {flag}", value or flag))
    return found


def peer_client(pod: Pod, port: int) -> str | None:
    """Why the pod's client of a peer outside the pod network does not verify TLS, from its containers'
    settings (review 35 A6: a port's number is not TLS), or None:
    - on the PostgreSQL port, libpq's ``sslmode`` (``PGSSLMODE`` or a URL's ``sslmode=``) must be stated
      and ``verify-full``: ``require`` and ``verify-ca`` do not check the server's name, ``disable``,
      ``allow`` and ``prefer`` may not encrypt (PostgreSQL docs, "SSL Support", table "SSL Mode
      Descriptions");
    - on any port, an endpoint the plan names outside the cluster (an object store, an identity or API
      endpoint) must be ``https://``: an ``http://`` one is clear text whatever its port."""
    modes: list[tuple[str, str]] = []
    for container in pod.containers():
        for where, value in _config(container):
            if where == f"env {PGSSLMODE}":
                modes.append((f"container {container['name']} {where}", value))
            for mode in _SSLMODE_IN_URL.findall(value):
                modes.append((f"container {container['name']} {where}", mode))
            http = _HTTP_URL.match(value)
            if http is not None and not _in_cluster(http.group(1)):
                return f"container {container['name']} {where} is {value}, not https"
    if port != POSTGRES:
        return None
    if not modes:
        return f"no container states libpq's sslmode ({PGSSLMODE}): verify-full is required"
    for where, mode in modes:
        if mode != VERIFY_FULL:
            return f"{where} sets sslmode={mode}, not {VERIFY_FULL} (the server's certificate and name)"
    return None


def _in_cluster(host: str) -> bool:
    return host in ("localhost", "127.0.0.1") or host.endswith((".svc", ".svc.cluster.local"))


def _secret_mounts(pod: Pod, container: Mapping[str, Any]) -> dict[str, str]:
    """The container's mount paths of Secret volumes, and each Secret's name."""
    secrets = {
        v["name"]: str(v["secret"].get("secretName"))
        for v in pod.spec.get("volumes") or []
        if isinstance(v.get("secret"), Mapping)
    }
    return {
        str(m["mountPath"]).rstrip("/"): secrets[m["name"]]
        for m in container.get("volumeMounts") or []
        if m.get("name") in secrets and not m.get("subPath")
    }


def _secret_keys(cluster: Cluster, namespace: str, name: str) -> frozenset[str]:
    """The keys a planned Secret holds (a ``kubernetes.io/tls`` one at least its certificate and key)."""
    for secret in of_kind(cluster.objects, "Secret"):
        metadata = secret["metadata"]
        if metadata.get("namespace") == namespace and metadata.get("name") == name:
            keys = {*(secret.get("data") or {}), *(secret.get("stringData") or {})}
            if secret.get("type") == "kubernetes.io/tls":
                keys |= set(TLS_KEYS)
            return frozenset(keys)
    return frozenset()


def _secret_files(
    cluster: Cluster, pod: Pod, container: Mapping[str, Any]
) -> dict[str, tuple[str, str, str]]:
    """Each Secret file the container's configuration names: (where, the Secret, the file's name), by
    path; a configured directory that mounts a planned Secret names each of its keys."""
    mounts = _secret_mounts(pod, container)
    files: dict[str, tuple[str, str, str]] = {}
    for where, value in _config(container):
        path = value.rstrip("/")
        directory, _, name = path.rpartition("/")
        if directory in mounts:
            files[path] = (where, mounts[directory], name)
        elif path in mounts:
            for key in _secret_keys(cluster, pod.namespace, mounts[path]):
                files[f"{path}/{key}"] = (where, mounts[path], key)
    return files


def serves_tls(cluster: Cluster, pod: Pod, port: int) -> str | None:
    """How the container serving ``port`` is configured for TLS: its certificate and key files, from a
    Secret it mounts, named in its env or arguments (``--web.cert-file``, ``SERVE_TLS_CERT_FILE``, a
    directory holding ``tls.crt`` and ``tls.key``); None when nothing configures it. A port's name says
    nothing about what the server speaks."""
    for container in pod.containers():
        if not any(int(p.get("containerPort", -1)) == port for p in container.get("ports") or []):
            continue
        by_secret: dict[str, list[tuple[str, str]]] = {}
        for where, secret, name in _secret_files(cluster, pod, container).values():
            by_secret.setdefault(secret, []).append((where, name))
        for secret, files in by_secret.items():
            certificate = [where for where, name in files if _CERTIFICATE.search(name)]
            key = [where for where, name in files if _KEY.search(name)]
            if certificate and key:
                wheres = " and ".join(sorted({certificate[0], key[0]}))
                return f"container {container['name']}: {wheres} from Secret {secret}"
    return None


def _names(cluster: Cluster, flow: Flow) -> tuple[str, ...]:
    """The DNS names of the Services in front of the flow's destination pod on its port."""
    destination = flow.destination.pod
    assert destination is not None
    names = []
    for service in cluster.services:
        metadata = service["metadata"]
        if metadata.get("namespace") == destination.namespace and service_selects(
            (service.get("spec") or {}).get("selector"), destination.labels
        ):
            names.append(f"{metadata['name']}.{metadata['namespace']}.svc")
    return tuple(names)


def client_verification(cluster: Cluster, flow: Flow) -> str | None:
    """Why the flow's client does not verify the server it names, or None: each container configured
    with a destination Service's name must call it over ``https`` (no ``http://`` URL, no ``*SCHEME``
    set to ``http``, no ``*INSECURE*`` switch on) and name a CA file (``ca.crt``) from a Secret it mounts.
    A client the plan does not configure (an outside caller, Prometheus, a queued team Job) is judged by
    the server alone."""
    source = flow.source.pod
    assert source is not None
    names = _names(cluster, flow)
    for container in source.containers():
        config = _config(container)
        naming = [(w, v) for w, v in config if any(re.search(rf"\b{re.escape(n)}\b", v) for n in names)]
        if not naming:
            continue
        where = f"container {container['name']}"
        for w, v in naming:
            if v.startswith("http://"):
                return f"{where}: {w} calls {v} in clear"
        for w, v in config:
            if w.startswith("env ") and (
                (w.endswith("SCHEME") and v.lower() == "http")
                or ("INSECURE" in w and v.lower() in ("1", "true", "yes"))
            ):
                return f"{where}: {w}={v} turns verification off"
        if not any(name == CA_KEY for _, _, name in _secret_files(cluster, source, container).values()):
            return f"{where}: names {naming[0][1]} ({naming[0][0]}) but no CA file ({CA_KEY}) from a Secret"
    return None


def scrape_verification(cluster: Cluster, flow: Flow) -> tuple[Subject, str] | None:
    """A ServiceMonitor endpoint that scrapes the flow's TLS server without verifying it: its ``scheme`` is
    not ``https``, its ``tlsConfig`` names no ``ca`` or skips verification; (the monitor, the field)."""
    destination = flow.destination.pod
    assert destination is not None
    for monitor in of_kind(cluster.objects, "ServiceMonitor"):
        spec = monitor.get("spec") or {}
        namespaces = spec.get("namespaceSelector") or {}
        if not (
            namespaces.get("any")
            or destination.namespace
            in (namespaces.get("matchNames") or [monitor["metadata"].get("namespace")])
        ):
            continue
        for service in cluster.services:
            metadata = service["metadata"]
            if metadata.get("namespace") != destination.namespace or not (
                labels_match(spec.get("selector"), metadata.get("labels") or {})
                and service_selects((service.get("spec") or {}).get("selector"), destination.labels)
            ):
                continue
            ports = {p.get("name"): p for p in (service.get("spec") or {}).get("ports") or []}
            for index, endpoint in enumerate(spec.get("endpoints") or []):
                port = ports.get(endpoint.get("port"))
                target = port and port.get("targetPort", port.get("port"))
                number = destination.named_port(target, "TCP") if isinstance(target, str) else target
                if number is None or int(number) != flow.port:
                    continue
                tls = endpoint.get("tlsConfig") or {}
                where = f"spec.endpoints[{index}]"
                if endpoint.get("scheme") != "https":
                    return Subject.of(monitor), f"{where}.scheme is {endpoint.get('scheme') or 'http'}"
                if tls.get("insecureSkipVerify") or not tls.get("ca"):
                    return Subject.of(monitor), f"{where}.tlsConfig names no CA or skips verification"
    return None


def training_fabric(pod: Pod) -> str | None:
    """The evidence that ``pod`` is a DDP run on the RDMA fabric: torchrun in its command and a container
    requesting an RDMA device (EFA, ``vpc.amazonaws.com/efa``; InfiniBand, ``rdma/...``), so NCCL's data
    moves over RDMA (docs/security.md, "The exceptions", `training-fabric`); None for any other workload."""
    if not runs_torchrun(pod):
        return None
    for container in pod.containers():
        resources = (
            (container.get("resources") or {}).get("limits")
            or (container.get("resources") or {}).get("requests")
            or {}
        )
        devices = sorted(r for r in resources if r == EFA_RESOURCE or r.startswith(RDMA_PREFIX))
        if devices:
            return f"torchrun with {', '.join(devices)} (container {container['name']})"
    return None


def _fabric_port(port: int) -> bool:
    return port == RENDEZVOUS or NCCL_PORTS[0] <= port <= NCCL_PORTS[1]


def judge_flow(cluster: Cluster, flow: Flow) -> tuple[str | None, Subject, str]:
    """``("tls" | an exception's name | None, the object to fix, why)``: None is a flow in clear or a
    client that does not verify, outside the exceptions."""
    source, destination = flow.source, flow.destination
    if source.pod is None:  # the API server: webhooks and aggregated APIs are HTTPS only
        return "tls", _subject(flow), "the API server calls webhooks and APIServices over HTTPS"
    if destination.pod is None:
        unverified = peer_client(source.pod, flow.port)
        if unverified is not None:
            return (
                None,
                source.pod.owner,
                f"reaches {destination.name} on {flow.port} unverified: {unverified}",
            )
        tls = flow.port in (HTTPS, POSTGRES)
        return ("tls" if tls else None), source.pod.owner, f"reaches {destination.name} on {flow.port}"
    if destination.pod.labels.get("k8s-app") == "kube-dns" and flow.port == DNS_PORT:
        return "cluster-dns", destination.pod.owner, "DNS"
    if destination.pod is source.pod and _fabric_port(flow.port):
        evidence = training_fabric(source.pod)
        if evidence is not None:
            return "training-fabric", source.pod.owner, evidence
    served = serves_tls(cluster, destination.pod, flow.port)
    if served is None:
        if source.pod.owner.kind == "Prometheus":
            return "metrics-scrape", destination.pod.owner, "plain HTTP scrape"
        return (
            None,
            destination.pod.owner,
            (
                f"port {flow.port} serves no TLS: no container configures a certificate and key from a "
                "Secret (env or args; a port's name is not TLS)"
            ),
        )
    if source.pod.owner.kind == "Prometheus":
        scraped = scrape_verification(cluster, flow)
        if scraped is not None:
            monitor, why = scraped
            return None, monitor, f"scrapes port {flow.port} of {destination.name} unverified: {why}"
        return "tls", destination.pod.owner, served
    unverified = client_verification(cluster, flow)
    if unverified is not None:
        return (
            None,
            source.pod.owner,
            f"calls port {flow.port} of {destination.name} unverified: {unverified}",
        )
    return "tls", destination.pod.owner, served


def classify(cluster: Cluster, flow: Flow) -> str | None:
    """``"tls"``, an exception's name, or None: in clear and not excepted."""
    return judge_flow(cluster, flow)[0]


def _enterprise(endpoint: Endpoint) -> bool:
    return endpoint.pod is not None and endpoint.pod.labels.get(TIER_LABEL) == ENTERPRISE


def _subject(flow: Flow) -> Subject:
    pod = flow.destination.pod or flow.source.pod
    assert pod is not None
    return pod.owner


def judge_transport(
    objects: Sequence[Mapping[str, Any]], control_plane: str = CONTROL_PLANE_NETWORK
) -> list[Finding]:
    """One finding per object to fix and reason: a server that serves no TLS, or a client that does not
    verify it, outside the exceptions; mandatory where either end is an enterprise workload."""
    cluster = Cluster(objects, control_plane)
    found: dict[tuple[Subject, str], tuple[list[str], bool]] = {}
    for flow in contract(cluster):
        kind, subject, why = judge_flow(cluster, flow)
        if kind is not None:
            continue
        purposes, mandatory = found.setdefault((subject, why), ([], False))
        if flow.purpose not in purposes:
            purposes.append(flow.purpose)
        found[(subject, why)] = (
            purposes,
            mandatory or _enterprise(flow.source) or _enterprise(flow.destination),
        )
    return [
        *(
            Finding(
                PLAINTEXT,
                "mandatory" if mandatory else "advisory",
                subject,
                f"{why}, and no exception covers it ({min(purposes)}"
                + (f" and {len(purposes) - 1} more" if len(purposes) > 1 else "")
                + "): configure TLS and its verification, or name the exception in judges/transport.py",
            )
            for (subject, why), (purposes, mandatory) in found.items()
        ),
        *(
            Finding(
                PLAINTEXT,
                "mandatory",
                subject,
                f"{why}: nothing encrypts the mount, so NFS crosses the network in clear (NFS has no "
                "encryption of its own): mount Azure Files through its CSI driver with encryptInTransit: "
                '"true" (azurefile-csi-driver v1.33.0 or later), EFS through its CSI driver (TLS by '
                "default), or another server with xprtsec=tls|mtls or sec=krb5p; or name the exception in "
                "judges/transport.py",
            )
            for subject, why in nfs_in_clear(objects)
        ),
    ]


def exceptions_taken(
    objects: Sequence[Mapping[str, Any]], control_plane: str = CONTROL_PLANE_NETWORK
) -> list[tuple[Subject, str, str]]:
    """Each object whose flows an exception covers, once per exception: (the object, the exception's name,
    its reason, the evidence it rests on for the training fabric, and the flows it covers), for the
    evidence's exceptions register."""
    cluster = Cluster(objects, control_plane)
    covered: dict[tuple[Subject, str], tuple[str, list[str]]] = {}
    for flow in contract(cluster):
        kind, subject, why = judge_flow(cluster, flow)
        if kind in EXCEPTIONS:
            purposes = covered.setdefault((subject, kind), (why, []))[1]
            if flow.purpose not in purposes:
                purposes.append(flow.purpose)
    return [
        *(
            (
                subject,
                name,
                EXCEPTIONS[name].reason
                + (f"; evidence: {evidence}" if name == "training-fabric" else "")
                + f" ({purposes[0]}"
                + (f" and {len(purposes) - 1} more" if len(purposes) > 1 else "")
                + ")",
            )
            for (subject, name), (evidence, purposes) in covered.items()
        ),
        *((subject, how, f"{EXCEPTIONS[how].reason} ({why})") for subject, why, how in nfs_volumes(objects)),
    ]


def _parse_bool(value: object) -> bool | None:
    """Go's ``strconv.ParseBool``, as both CSI drivers read their boolean attributes: ``None`` where it
    refuses the value (the driver then refuses the mount)."""
    text = str(value)
    return True if text in _GO_TRUE else False if text in _GO_FALSE else None


def _options(mount_options: object) -> list[str]:
    """Each mount option, lowered; one entry may carry several, comma-separated (mount(8))."""
    if not isinstance(mount_options, list):
        return []
    return [o.strip().lower() for entry in mount_options for o in str(entry).split(",") if o.strip()]


def nfs_encryption(
    driver: str | None, attributes: Mapping[str, Any], mount_options: object
) -> tuple[bool, str | None]:
    """Whether a volume source (``driver`` ``None``: Kubernetes' in-tree ``nfs``) mounts NFS, and the
    exception that names how it is encrypted in transit, ``None`` where nothing encrypts it (NFS has no
    encryption of its own; every driver's keys read case-insensitively)."""
    lowered = {str(k).lower(): v for k, v in attributes.items()}
    kinds = {str(lowered.get(key, "")).lower() for key in ("protocol", "fstype")}
    nfs = driver is None or driver in NFS_DRIVERS or bool(kinds & NFS_KINDS)
    if not nfs:
        return False, None
    options = _options(mount_options)
    if driver == AZURE_FILES_DRIVER and (
        _parse_bool(lowered.get(ENCRYPT_IN_TRANSIT)) or ENCRYPT_IN_TRANSIT in options
    ):
        return True, "azure-files-nfs"
    if driver == EFS_DRIVER and _parse_bool(lowered.get(ENCRYPT_IN_TRANSIT, "true")):
        return True, "nfs-encrypted-mount"
    if any(o in KERNEL_ENCRYPTING_OPTIONS for o in options):
        return True, "nfs-encrypted-mount"
    return True, None


def _nfs_mounts(
    objects: Sequence[Mapping[str, Any]],
) -> Iterator[tuple[Subject, str, str | None]]:
    """Each NFS mount the plan asks for: PersistentVolumes (in-tree ``nfs`` or any CSI driver mounting
    NFS), StorageClasses provisioning such volumes, and pods' inline volumes: (the object, what it
    mounts, the exception naming its encryption or ``None``)."""
    for volume in of_kind(objects, "PersistentVolume"):
        spec, name = volume.get("spec") or {}, volume["metadata"]["name"]
        options = spec.get("mountOptions")
        if spec.get("nfs"):
            nfs_source = spec["nfs"]
            _, how = nfs_encryption(None, {}, options)
            share = f"{nfs_source.get('server')}:{nfs_source.get('path')}"
            yield Subject.of(volume), f"the nodes mounting {share} for {name} (in-tree nfs)", how
        csi = spec.get("csi") or {}
        attributes = csi.get("volumeAttributes") or {}
        nfs, how = nfs_encryption(csi.get("driver"), attributes, options) if csi else (False, None)
        if nfs:
            share = (
                f"share {attributes.get('shareName')} of account {attributes.get('storageAccount')}"
                if csi.get("driver") == AZURE_FILES_DRIVER
                else f"{csi.get('volumeHandle')} through {csi.get('driver')}"
            )
            yield Subject.of(volume), f"the nodes mounting {share} for {name}", how
    for storage_class in of_kind(objects, "StorageClass"):
        nfs, how = nfs_encryption(
            storage_class.get("provisioner"),
            storage_class.get("parameters") or {},
            storage_class.get("mountOptions"),
        )
        if nfs:
            name = storage_class["metadata"]["name"]
            yield Subject.of(storage_class), f"the NFS volumes {name} provisions", how
    for pod in pods(objects):
        for volume in pod.spec.get("volumes") or []:
            if volume.get("nfs"):
                share = f"{volume['nfs'].get('server')}:{volume['nfs'].get('path')}"
                what = f"the nodes mounting {share} for volume {volume.get('name')} (in-tree nfs, inline)"
                yield pod.owner, what, None
            csi = volume.get("csi") or {}
            nfs, how = (
                nfs_encryption(csi.get("driver"), csi.get("volumeAttributes") or {}, None)
                if csi
                else (False, None)
            )
            if nfs:
                what = f"the nodes mounting volume {volume.get('name')} through {csi.get('driver')} (inline)"
                yield pod.owner, what, how


def nfs_volumes(objects: Sequence[Mapping[str, Any]]) -> list[tuple[Subject, str, str]]:
    """Each NFS mount encrypted in transit, what it mounts and the exception naming how: the flows
    ``azure-files-nfs`` and ``nfs-encrypted-mount`` cover (the kubelet mounts it, so no pod's flow in
    the contract shows them)."""
    return [(subject, why, how) for subject, why, how in _nfs_mounts(objects) if how is not None]


def nfs_in_clear(objects: Sequence[Mapping[str, Any]]) -> list[tuple[Subject, str]]:
    """Each NFS mount nothing encrypts: a plaintext flow no exception covers (the kubelet's mount,
    outside the contract's pod flows)."""
    return [(subject, why) for subject, why, how in _nfs_mounts(objects) if how is None]


def transport_table(objects: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, str]]:
    """Each contract flow's purpose, port and transport (``tls``, an exception's name, or ``plaintext``):
    the evidence docs/security.md's table summarises."""
    cluster = Cluster(objects, CONTROL_PLANE_NETWORK)
    return [(f.purpose, f.port, classify(cluster, f) or "plaintext") for f in contract(cluster)]
