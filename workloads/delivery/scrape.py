"""Reading the servers' ``/metrics``: snapshots of every server, and a window as the difference of two.

Targets are given as URLs, or as a DNS name that resolves to every pod (a headless Service: one A record
per ready pod, so the rollout needs no Kubernetes API rights), re-resolved at every snapshot so pods that
come and go are followed. Over HTTPS to a pod's address the certificate is checked against a name, not
the address: ``tls_name`` when given (the name the servers' certificate is issued for: on the cluster the
``inference`` Service's, ``inference.ml-inference.svc``, as the ServiceMonitor checks it), else the DNS
name that was resolved.

A window is judged only on servers present in both of its snapshots: a pod that appears mid-window has no
start, one that vanished has no end. Counters are differences; a server any of whose counters went down
restarted mid-window (a Prometheus counter only resets), and its end values are the increase since the
restart (what happened before it in the window is lost, and undercounted, not invented). Gauges (the
applied settings, drift) are read from the end snapshot. Histogram quantiles interpolate linearly within
the bucket, as Prometheus' ``histogram_quantile`` does.
"""

from __future__ import annotations

import http.client
import math
import socket
import ssl
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from workloads.delivery import contract
from workloads.delivery.decision import DriftWindow, RoleWindow, ShadowWindow, WindowStats
from workloads.registry.rollout import CHALLENGER, CHAMPION

Labels = tuple[tuple[str, str], ...]
# (sample name, sorted labels) -> value, for one server.
Series = dict[tuple[str, Labels], float]
# What each reachable server exposed, by its metrics URL.
Snapshot = dict[str, Series]
_CUMULATIVE = ("_total", "_bucket", "_count", "_sum")
P99 = 0.99


class ScrapeError(Exception):
    """A server that could not be read."""


@dataclass(frozen=True)
class Target:
    url: str
    # The name the server's certificate is checked against when ``url`` names an address.
    tls_name: str | None = None


@dataclass(frozen=True)
class Targets:
    """Where the servers are: ``urls``, or every address ``dns`` resolves to, at ``port`` over ``scheme``."""

    urls: tuple[str, ...] = ()
    dns: str | None = None
    port: int = 8080
    scheme: str = "http"
    path: str = "/metrics"
    # Over HTTPS, the name every server's certificate is checked against (None: the URL's host, or
    # ``dns`` for the addresses it resolves to).
    tls_name: str | None = None

    def resolve(self, getaddrinfo: Callable[..., list[Any]] = socket.getaddrinfo) -> list[Target]:
        found = [Target(url, self.tls_name) for url in self.urls]
        if self.dns is None:
            return found
        try:
            records = getaddrinfo(self.dns, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror:  # a headless Service with no ready pod has no records
            return found
        addresses = sorted({str(record[4][0]) for record in records})
        for address in addresses:
            host = f"[{address}]" if ":" in address else address
            found.append(Target(f"{self.scheme}://{host}:{self.port}{self.path}", self.tls_name or self.dns))
        return found


class _TLSConnection(http.client.HTTPSConnection):
    """HTTPS to an address, the certificate checked against ``server_hostname``."""

    def __init__(self, host: str, port: int, *, timeout: float, tls: ssl.SSLContext, server_hostname: str):
        super().__init__(host, port, timeout=timeout, context=tls)
        self._tls = tls
        self._server_hostname = server_hostname

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(sock, server_hostname=self._server_hostname)


def http_call(
    target: Target,
    method: str,
    headers: Mapping[str, str],
    *,
    tls: ssl.SSLContext,
    timeout_s: float,
    body: bytes | None = None,
) -> tuple[int, bytes]:
    """One request to ``target.url`` (its path and query), over HTTPS checked against ``target.tls_name``
    (else the URL's host); the status and body. ScrapeError when no answer came."""
    parts = urllib.parse.urlsplit(target.url)
    host = parts.hostname or ""
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        name = target.tls_name or host
        connection = _TLSConnection(host, parts.port or 443, timeout=timeout_s, tls=tls, server_hostname=name)
    else:
        connection = http.client.HTTPConnection(host, parts.port or 80, timeout=timeout_s)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(method, path, body=body, headers=dict(headers))
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise ScrapeError(f"{target.url}: {exc}") from None
    finally:
        connection.close()


def http_get(target: Target, headers: Mapping[str, str], *, tls: ssl.SSLContext, timeout_s: float) -> bytes:
    status, body = http_call(target, "GET", headers, tls=tls, timeout_s=timeout_s)
    if status != 200:
        raise ScrapeError(f"{target.url}: HTTP {status}")
    return body


def parse(text: str) -> Series:
    """Every sample of a Prometheus text exposition."""
    series: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return series


def bearer(token_file: Path | None) -> dict[str, str]:
    """The Authorization header from a token file, read at each use (a mounted Secret rotates)."""
    if token_file is None:
        return {}
    return {"Authorization": f"Bearer {token_file.read_text().strip()}"}


@dataclass
class Scraper:
    targets: Targets
    token_file: Path | None = None
    tls: ssl.SSLContext = field(default_factory=ssl.create_default_context)
    timeout_s: float = 10.0
    # The servers the last snapshot could not read, one line each.
    unreachable: list[str] = field(default_factory=list)

    def snapshot(self) -> Snapshot:
        headers = bearer(self.token_file)
        taken: Snapshot = {}
        self.unreachable = []
        for target in self.targets.resolve():
            try:
                body = http_get(target, headers, tls=self.tls, timeout_s=self.timeout_s)
                taken[target.url] = parse(body.decode())
            except (ScrapeError, ValueError, UnicodeDecodeError) as exc:
                self.unreachable.append(str(exc))
        return taken


def increase(start: Snapshot, end: Snapshot) -> Snapshot:
    """The cumulative samples' increase over the window, per server present in both snapshots."""
    window: Snapshot = {}
    for url in start.keys() & end.keys():
        before = start[url]
        after = {k: v for k, v in end[url].items() if k[0].endswith(_CUMULATIVE)}
        restarted = any(value < before.get(key, 0.0) for key, value in after.items())
        window[url] = after if restarted else {k: v - before.get(k, 0.0) for k, v in after.items()}
    return window


def _matches(labels: Labels, wanted: Mapping[str, str]) -> bool:
    have = dict(labels)
    return all(have.get(k) == v for k, v in wanted.items())


def total(servers: Iterable[Series], name: str, **wanted: str) -> float:
    return sum(v for s in servers for (n, labels), v in s.items() if n == name and _matches(labels, wanted))


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The ``q`` quantile of a cumulative histogram ``{upper bound: count}``, None when it is empty."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower  # in the +Inf bucket: the highest finite bound, as Prometheus answers
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = bound, count
    return lower


def histogram_quantile(servers: Iterable[Series], name: str, q: float, **wanted: str) -> float | None:
    buckets: dict[float, float] = defaultdict(float)
    for series in servers:
        for (sample, labels), value in series.items():
            if sample == f"{name}_bucket" and _matches(labels, wanted):
                buckets[float(dict(labels)["le"])] += value
    return quantile(q, buckets)


def role_window(servers: list[Series], model: str, version: str, role: str) -> RoleWindow:
    labels = {"model": model, "version": version, "role": role}
    return RoleWindow(
        requests=int(total(servers, contract.VERSION_RESPONSES, **labels)),
        errors=int(total(servers, contract.VERSION_ERRORS, **labels)),
        p99_s=histogram_quantile(servers, contract.VERSION_LATENCY, P99, **labels),
    )


def drift_window(end: Snapshot, model: str, version: str) -> DriftWindow:
    servers = []
    for series in end.values():
        samples = int(total([series], contract.DRIFT_SAMPLES, model=model, version=version))
        scores = [
            v
            for (n, labels), v in series.items()
            if n == contract.DRIFT_PSI and _matches(labels, {"model": model, "version": version})
        ]
        servers.append((samples, max(scores) if scores else None))
    return DriftWindow(tuple(servers))


def confidence_cells(series: Series, model: str, version: str) -> dict[tuple[int, int], float]:
    """One server's ``CONFIDENCE_ROWS`` of ``version``: (predicted class, bin) -> rows."""
    cells: dict[tuple[int, int], float] = {}
    for (name, labels), value in series.items():
        have = dict(labels)
        if name == contract.CONFIDENCE_ROWS and _matches(labels, {"model": model, "version": version}):
            cells[(int(have["class"]), int(have["bin"]))] = value
    return cells


def window_stats(
    start: Snapshot, end: Snapshot, model: str, champion: str, challenger: str | None
) -> WindowStats:
    """The window between two snapshots, as the decision reads it (``challenger`` None: the bake)."""
    servers = list(increase(start, end).values())
    champion_window = role_window(servers, model, champion, CHAMPION)
    if challenger is None:
        return WindowStats(champion=champion_window, drift=drift_window(end, model, champion))
    shadow = {"model": model, "version": challenger}
    outcomes = {
        o: int(total(servers, contract.SHADOW_REQUESTS, outcome=o, **shadow))
        for o in contract.SHADOW_OUTCOMES
    }
    return WindowStats(
        champion=champion_window,
        challenger=role_window(servers, model, challenger, CHALLENGER),
        shadow=ShadowWindow(
            compared=outcomes["compared"],
            agreed=int(total(servers, contract.SHADOW_AGREED, **shadow)),
            dropped=outcomes["dropped"],
            failed=outcomes["failed"],
            challenger_p99_s=histogram_quantile(
                servers, contract.SHADOW_LATENCY, P99, role=CHALLENGER, **shadow
            ),
            champion_p99_s=histogram_quantile(servers, contract.SHADOW_LATENCY, P99, role=CHAMPION, **shadow),
        ),
        drift=drift_window(end, model, challenger),
    )


def not_applied(snapshot: Snapshot, model: str, metric: str, value: int, version: str) -> list[str]:
    """The servers not yet applying ``value`` of ``metric`` (SPLIT_APPLIED or SHADOW_APPLIED): above 0,
    with the challenger ``version`` loaded; at 0, every series of the model at 0 (or none)."""
    lagging = []
    for url, series in sorted(snapshot.items()):
        shown = {
            dict(labels).get("version", ""): v
            for (n, labels), v in series.items()
            if n == metric and dict(labels).get("model") == model
        }
        done = shown.get(version) == value if value > 0 else all(v == 0 for v in shown.values())
        if done:
            continue
        if shown:
            lagging.append(f"{url} shows {shown}")
            continue
        # Servers label their series with the model name in the version's metadata.json: a registered
        # model of another name is never found (the trainer registers under the metadata's name).
        others = sorted({dict(labels).get("model", "") for (n, labels) in series if n == metric} - {""})
        serving = f" (it serves model {', '.join(others)}, not {model})" if others else ""
        lagging.append(f"{url} shows nothing for {model}{serving}")
    return lagging
