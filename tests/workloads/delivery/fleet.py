"""Stand-ins for the inference servers as the rollout sees them: real HTTP servers exposing real
prometheus-client registries with the contract's metric names, driven by the test.

``Fleet.tick`` plays one stretch of time: every server reads the model's split and shadow tags and the
aliases from the (real) registry, as the real servers do, shows them as applied, and answers requests
with the behaviour the test gave each version.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tests.http_stub import InThread, base_url, loopback
from workloads.delivery import contract
from workloads.registry.client import RegistryClient
from workloads.registry.lock import effective_share
from workloads.registry.rollout import CHALLENGER, CHAMPION

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
DRIFT_WINDOW = 2000


@dataclass
class Behaviour:
    """How a version answers: its error share, latency, the PSI its inputs show and label agreement."""

    error_rate: float = 0.0
    latency_s: float = 0.004
    psi: float = 0.05
    agreement: float = 1.0


class MetricsServer:
    """One server's metrics, on its own registry, at ``url`` (a bearer ``token`` required if given)."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.reset()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if server.token and self.headers.get("Authorization") != f"Bearer {server.token}":
                    self.send_response(401)
                    self.end_headers()
                    return
                body = generate_latest(server.registry)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.served = InThread(loopback(Handler))
        self.url = f"{base_url(self.served.server)}/metrics"

    def reset(self) -> None:
        """A fresh registry: what a restarted server shows (every counter back at 0)."""
        reg = self.registry = CollectorRegistry()
        live = ["model", "version", "role"]
        self.responses = Counter(contract.VERSION_RESPONSES, "", [*live, "code"], registry=reg)
        self.errors = Counter(contract.VERSION_ERRORS, "", [*live, "reason"], registry=reg)
        self.latency = Histogram(contract.VERSION_LATENCY, "", live, buckets=LATENCY_BUCKETS, registry=reg)
        self.shadow = Counter(contract.SHADOW_REQUESTS, "", ["model", "version", "outcome"], registry=reg)
        self.agreed = Counter(contract.SHADOW_AGREED, "", ["model", "version"], registry=reg)
        self.shadow_latency = Histogram(
            contract.SHADOW_LATENCY, "", ["model", "version", "role"], buckets=LATENCY_BUCKETS, registry=reg
        )
        self.split_applied = Gauge(contract.SPLIT_APPLIED, "", ["model", "version"], registry=reg)
        self.shadow_applied = Gauge(contract.SHADOW_APPLIED, "", ["model", "version"], registry=reg)
        self.drift_samples = Gauge(contract.DRIFT_SAMPLES, "", ["model", "version"], registry=reg)
        self.drift_psi = Gauge(contract.DRIFT_PSI, "", ["model", "version", "feature"], registry=reg)
        self.rows: dict[str, int] = {}

    def answer(self, model: str, version: str, role: str, n: int, behaviour: Behaviour) -> None:
        errors = round(n * behaviour.error_rate)
        if errors:
            self.responses.labels(model, version, role, "422").inc(errors)
            self.errors.labels(model, version, role, "non_finite_output").inc(errors)
        self.responses.labels(model, version, role, "200").inc(n - errors)
        child = self.latency.labels(model, version, role)
        for _ in range(n):
            child.observe(behaviour.latency_s)
        self.see_rows(model, version, n, behaviour)

    def see_rows(self, model: str, version: str, n: int, behaviour: Behaviour) -> None:
        rows = self.rows[version] = min(DRIFT_WINDOW, self.rows.get(version, 0) + n)
        self.drift_samples.labels(model, version).set(rows)
        if rows >= 500:  # the server's floor: no PSI below it
            self.drift_psi.labels(model, version, "pixel_0").set(behaviour.psi / 2)
            self.drift_psi.labels(model, version, "pixel_1").set(behaviour.psi)

    def copy(self, model: str, champion: str, challenger: str, n: int, behaviour: Behaviour) -> None:
        failed = round(n * behaviour.error_rate)
        compared = n - failed
        self.shadow.labels(model, challenger, "failed").inc(failed)
        self.shadow.labels(model, challenger, "compared").inc(compared)
        self.agreed.labels(model, challenger).inc(round(compared * behaviour.agreement))
        for role, latency in ((CHAMPION, Behaviour().latency_s), (CHALLENGER, behaviour.latency_s)):
            child = self.shadow_latency.labels(model, challenger, role)
            for _ in range(n):
                child.observe(latency)
        self.see_rows(model, challenger, n, behaviour)

    def close(self) -> None:
        self.served.close()


def champion_and_challenger(client: RegistryClient, name: str) -> None:
    """Model ``name`` with two versions of one run: version 1 the ``@champion``, 2 the ``@challenger``."""
    client.ensure_registered_model(name)
    run = client.create_run(client.experiment_id("delivery-tests"), name, {})["info"]
    for _ in range(2):
        client.create_version(name, f"{run['artifact_uri']}/model", run["run_id"], {})
    client.set_alias(name, CHAMPION, "1")
    client.set_alias(name, CHALLENGER, "2")


@dataclass
class Fleet:
    """Servers of one model following the registry; ``behaviours`` by version (default: healthy)."""

    client: RegistryClient
    model: str
    servers: list[MetricsServer]
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    # How a version behaves once it is the champion, if not as before (a regression after promotion).
    as_champion: dict[str, Behaviour] = field(default_factory=dict)
    # Requests each server answers per second of played time.
    rate_per_s: float = 20.0
    # Servers that never apply a new setting (a stuck replica).
    stuck: set[int] = field(default_factory=set)
    settings: list[tuple[int, int]] = field(default_factory=list)
    seed: random.Random = field(default_factory=lambda: random.Random(7))

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(s.url for s in self.servers)

    def tick(self, seconds: float) -> None:
        tags = self.client.registered_model(self.model).tags
        now = datetime.now(UTC)  # as a server reads them (workloads/inference/follow.py)
        split = effective_share(tags, now, int(tags.get(contract.SPLIT_TAG, "0")))
        shadow = effective_share(tags, now, int(tags.get(contract.SHADOW_TAG, "0")))
        champion = self.client.version_by_alias(self.model, CHAMPION).version
        found = self.client.alias_or_none(self.model, CHALLENGER)
        challenger = found.version if found is not None and (split or shadow) else ""
        if not self.settings or self.settings[-1] != (split, shadow):
            self.settings.append((split, shadow))
        for index, server in enumerate(self.servers):
            if index in self.stuck:
                continue
            for gauge, value in ((server.split_applied, split), (server.shadow_applied, shadow)):
                gauge.clear()
                gauge.labels(self.model, challenger).set(value)
            n = round(self.rate_per_s * seconds)
            to_challenger = round(n * split / 100) if challenger else 0
            behaviour = self.as_champion.get(champion) or self.behaviour(champion)
            server.answer(self.model, champion, CHAMPION, n - to_challenger, behaviour)
            if to_challenger:
                behaviour = self.behaviour(challenger)
                server.answer(self.model, challenger, CHALLENGER, to_challenger, behaviour)
            copies = round((n - to_challenger) * shadow / 100) if challenger else 0
            if copies:
                server.copy(self.model, champion, challenger, copies, self.behaviour(challenger))

    def behaviour(self, version: str) -> Behaviour:
        return self.behaviours.get(version, Behaviour())

    def close(self) -> None:
        for server in self.servers:
            server.close()
