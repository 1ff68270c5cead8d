"""Reading the servers: real exposition text from prometheus-client with the contract's names, over HTTP."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.workloads.delivery.fleet import Behaviour, MetricsServer
from workloads.delivery import contract
from workloads.delivery.scrape import Scraper, Targets, not_applied, quantile, window_stats

MODEL = "digits-mlp"


@pytest.fixture
def servers() -> Iterator[list[MetricsServer]]:
    made = [MetricsServer(), MetricsServer()]
    yield made
    for server in made:
        server.close()


def test_quantile_interpolates_within_the_bucket_as_prometheus_does() -> None:
    """histogram_quantile: linear within the bucket holding the rank, lower bound 0 for the first."""
    buckets = {0.005: 50.0, 0.01: 100.0, math.inf: 100.0}
    assert quantile(0.99, buckets) == pytest.approx(0.005 + 0.005 * 49 / 50)
    assert quantile(0.5, buckets) == pytest.approx(0.005)
    assert quantile(0.2, buckets) == pytest.approx(0.002)


def test_quantile_in_the_inf_bucket_is_the_highest_finite_bound_and_empty_is_none() -> None:
    assert quantile(0.99, {0.005: 10.0, 0.01: 10.0, math.inf: 100.0}) == 0.01
    assert quantile(0.99, {0.005: 0.0, math.inf: 0.0}) is None
    assert quantile(0.99, {}) is None


def test_a_window_sums_every_server_and_splits_by_role(servers: list[MetricsServer]) -> None:
    scraper = Scraper(Targets(urls=tuple(s.url for s in servers)))
    start = scraper.snapshot()
    slow = Behaviour(error_rate=0.1, latency_s=0.03, psi=0.4)
    for server in servers:
        server.answer(MODEL, "1", "champion", 900, Behaviour())
        server.answer(MODEL, "2", "challenger", 100, slow)
    end = scraper.snapshot()
    stats = window_stats(start, end, MODEL, "1", "2")
    assert (stats.champion.requests, stats.champion.errors) == (1800, 0)
    assert (stats.challenger.requests, stats.challenger.errors) == (200, 20)
    assert stats.champion.p99_s is not None and 0.0025 < stats.champion.p99_s <= 0.005
    assert stats.challenger.p99_s is not None and 0.025 < stats.challenger.p99_s <= 0.05
    # 100 rows per server: below the 500-row floor, the fake server (as the real one) reports no PSI.
    assert stats.drift.servers == ((100, None), (100, None))


def test_shadow_and_drift_of_the_challenger(servers: list[MetricsServer]) -> None:
    scraper = Scraper(Targets(urls=(servers[0].url,)))
    start = scraper.snapshot()
    servers[0].copy(MODEL, "1", "2", 600, Behaviour(agreement=0.5, psi=0.3, error_rate=0.5))
    stats = window_stats(start, scraper.snapshot(), MODEL, "1", "2")
    assert (stats.shadow.compared, stats.shadow.agreed, stats.shadow.failed) == (300, 150, 300)
    assert stats.drift.servers == ((600, 0.3),)
    assert stats.shadow.champion_p99_s is not None and stats.shadow.challenger_p99_s is not None


def test_a_server_restarted_mid_window_counts_from_its_restart(servers: list[MetricsServer]) -> None:
    scraper = Scraper(Targets(urls=(servers[0].url,)))
    servers[0].answer(MODEL, "1", "champion", 5000, Behaviour())
    start = scraper.snapshot()
    servers[0].reset()
    servers[0].answer(MODEL, "1", "champion", 300, Behaviour())
    stats = window_stats(start, scraper.snapshot(), MODEL, "1", None)
    assert stats.champion.requests == 300


def test_only_servers_in_both_snapshots_count(servers: list[MetricsServer]) -> None:
    start = Scraper(Targets(urls=(servers[0].url,))).snapshot()
    for server in servers:
        server.answer(MODEL, "1", "champion", 100, Behaviour())
    end = Scraper(Targets(urls=tuple(s.url for s in servers))).snapshot()
    assert window_stats(start, end, MODEL, "1", None).champion.requests == 100


def test_bearer_token_from_a_file_and_unreachable_servers_named(tmp_path: Path) -> None:
    guarded = MetricsServer(token="s3cret")
    try:
        token = tmp_path / "token"
        token.write_text("s3cret\n")
        assert list(Scraper(Targets(urls=(guarded.url,)), token_file=token).snapshot()) == [guarded.url]
        anonymous = Scraper(Targets(urls=(guarded.url,)))
        assert anonymous.snapshot() == {}
        assert anonymous.unreachable == [f"{guarded.url}: HTTP 401"]
    finally:
        guarded.close()


def test_a_dns_name_is_every_address_it_resolves_to() -> None:
    def getaddrinfo(host: str, port: int, **_: Any) -> list[Any]:
        assert (host, port) == ("inference-pods.serving.svc", 8443)
        v4 = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port))
        v6 = (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fd00::5", port, 0, 0))
        return [v4, v6, v4]

    found = Targets(dns="inference-pods.serving.svc", port=8443, scheme="https").resolve(getaddrinfo)
    assert [t.url for t in found] == ["https://10.0.0.7:8443/metrics", "https://[fd00::5]:8443/metrics"]
    assert {t.tls_name for t in found} == {"inference-pods.serving.svc"}


def test_a_name_without_records_is_no_servers() -> None:
    def getaddrinfo(*_: Any, **__: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    assert Targets(dns="nobody.serving.svc").resolve(getaddrinfo) == []


def test_applied_settings(servers: list[MetricsServer]) -> None:
    servers[0].split_applied.labels(MODEL, "2").set(25)
    servers[1].split_applied.labels(MODEL, "").set(0)
    snapshot = Scraper(Targets(urls=tuple(s.url for s in servers))).snapshot()
    lagging = not_applied(snapshot, MODEL, contract.SPLIT_APPLIED, 25, "2")
    assert lagging == [f"{servers[1].url} shows {{'': 0.0}}"]
    assert not_applied(snapshot, MODEL, contract.SPLIT_APPLIED, 0, "2") == [
        f"{servers[0].url} shows {{'2': 25.0}}"
    ]
    # A registered model whose name is not the one the servers label their series with (the model's
    # metadata name): said, rather than "nothing" until the timeout.
    assert not_applied(snapshot, "digits-prod", contract.SPLIT_APPLIED, 25, "2") == [
        f"{s.url} shows nothing for digits-prod (it serves model {MODEL}, not digits-prod)"
        for s in sorted(servers, key=lambda s: s.url)
    ]


def test_a_tls_server_name_is_checked_whatever_address_is_connected_to() -> None:
    """The servers' certificate names the ``inference`` Service (as the ServiceMonitor's ``serverName``
    checks it), not a pod's address nor the headless name: given, it is the name for every target."""

    def getaddrinfo(host: str, port: int, **_: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port))]

    named = Targets(
        urls=("https://10.0.0.9:8080/metrics",),
        dns="inference-pods.ml-inference.svc.cluster.local",
        scheme="https",
        tls_name="inference.ml-inference.svc",
    )
    assert {t.tls_name for t in named.resolve(getaddrinfo)} == {"inference.ml-inference.svc"}
