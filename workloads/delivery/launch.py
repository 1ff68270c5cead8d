"""One way to start a rollout, for the CLI (``mlplatform rollout``) and the cluster Job
(``python -m workloads.delivery``, in the inference image: no typer command of ours, no MLflow).

The Job is configured by environment variables (``ENV``), the CLI by flags that fill the same
``Settings``. Exit codes: 0 promoted (and baked), or passed and handed over to a promotion (``promote:
false``: the traffic back at the champion); 1 stopped or rolled back, or terminated in the bake (the reason
on stderr and on the record and the challenger's tags); 2 bad input (one line naming the flag or variable)
or a registry or record error before anything was judged.

SIGTERM (the Job's deadline, ``kubectl delete job``, a node drain; the kubelet sends SIGKILL after the
pod's grace period) becomes ``Terminated``, so the rollout sends the traffic back and records why before
it exits. Without a handler it would not even stop: as PID 1 of its container, a process is sent no
signal whose handler is the default one, and Python leaves SIGTERM's at the default.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from workloads.delivery.plan import PlanError, RolloutPlan, parse_plan
from workloads.delivery.runner import LabelledSet, Result, Rollout, RolloutError, ServiceClient, Terminated
from workloads.delivery.scrape import Scraper, Targets
from workloads.registry.client import TRACKING_URI_ENV, RegistryClient, RegistryError
from workloads.registry.record import RECORD_ENV, RecordError, identity, open_journal

EXIT_OK, EXIT_STOPPED, EXIT_BAD_INPUT = 0, 1, 2
# The Job's variables (the registry's credentials are the client's own: MLFLOW_TRACKING_*).
ENV = {
    "model": "ROLLOUT_MODEL",
    "metrics_urls": "ROLLOUT_METRICS_URLS",  # comma-separated
    "metrics_dns": "ROLLOUT_METRICS_DNS",
    "metrics_port": "ROLLOUT_METRICS_PORT",
    "metrics_scheme": "ROLLOUT_METRICS_SCHEME",
    "service_url": "ROLLOUT_SERVICE_URL",
    "token_file": "ROLLOUT_TOKEN_FILE",
    "ca_file": "ROLLOUT_CA_FILE",
    # The name the servers' certificate is issued for, checked whatever address is connected to.
    "tls_server_name": "ROLLOUT_TLS_SERVER_NAME",
    "plan": "ROLLOUT_PLAN",  # the plan as JSON, camelCase keys
    "actor": "ROLLOUT_ACTOR",
}


@dataclass(frozen=True)
class Settings:
    model: str
    registry_uri: str
    plan: RolloutPlan
    actor: str
    targets: Targets
    service_url: str | None = None
    token_file: Path | None = None
    ca_file: Path | None = None
    # The lifecycle record (a directory, workloads/registry/record.py); None: not recorded.
    record: str | None = None


def targets(
    urls: tuple[str, ...],
    dns: str | None,
    port: int,
    scheme: str,
    url_flag: str,
    dns_flag: str,
    tls_name: str | None = None,
) -> Targets:
    if bool(urls) == bool(dns):
        raise RolloutError(f"give the servers' metrics as {url_flag} or as {dns_flag}, one of the two")
    if scheme not in ("http", "https"):
        raise RolloutError(f"metrics scheme {scheme!r}: http or https")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise RolloutError(f"{url_flag} {url!r}: an http(s):// URL of a server's /metrics")
    return Targets(urls=urls, dns=dns, port=port, scheme=scheme, tls_name=tls_name)


def from_env(environ: Mapping[str, str] = os.environ) -> Settings:
    """The Job's settings; RolloutError (one line naming the variable) when one is wrong."""

    def need(key: str, variable: str) -> str:
        value = environ.get(variable, "")
        if not value:
            raise RolloutError(f"{variable} is required ({key})")
        return value

    port_text = environ.get(ENV["metrics_port"], "8080")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise RolloutError(f"{ENV['metrics_port']}={port_text!r}: a port number")
    try:
        raw = json.loads(environ.get(ENV["plan"], "{}"))
    except ValueError as exc:
        raise RolloutError(f"{ENV['plan']}: not JSON ({exc})") from None
    plan = parse_plan(raw, ENV["plan"])
    urls = tuple(u.strip() for u in environ.get(ENV["metrics_urls"], "").split(",") if u.strip())
    found = targets(
        urls,
        environ.get(ENV["metrics_dns"]) or None,
        int(port_text),
        environ.get(ENV["metrics_scheme"], "http"),
        ENV["metrics_urls"],
        ENV["metrics_dns"],
        environ.get(ENV["tls_server_name"]) or None,
    )
    return Settings(
        model=need("the registered model", ENV["model"]),
        registry_uri=need("the registry", TRACKING_URI_ENV),
        plan=plan,
        actor=environ.get(ENV["actor"]) or "rollout-job",
        targets=found,
        service_url=environ.get(ENV["service_url"]) or None,
        token_file=Path(environ[ENV["token_file"]]) if environ.get(ENV["token_file"]) else None,
        ca_file=Path(environ[ENV["ca_file"]]) if environ.get(ENV["ca_file"]) else None,
        record=environ.get(RECORD_ENV) or None,
    )


def scraper(settings: Settings) -> Scraper:
    """The servers' ``/metrics``, over HTTPS verified with ``ca_file`` against the targets' TLS name."""
    return Scraper(settings.targets, token_file=settings.token_file, tls=_tls(settings))


def service(settings: Settings) -> ServiceClient | None:
    """The inference Service (the labelled set), verified as the servers' ``/metrics`` are."""
    if settings.service_url is None:
        return None
    return ServiceClient(settings.service_url, settings.token_file, _tls(settings), settings.targets.tls_name)


def _tls(settings: Settings) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(settings.ca_file) if settings.ca_file else None)


def run(settings: Settings, scratch: Path) -> Result:
    """Build the rollout from ``settings`` and run it; RolloutError/ValueError/RegistryError: bad input."""
    client = RegistryClient(settings.registry_uri)
    labelled_service = service(settings)
    if settings.plan.labelled_set is not None and labelled_service is None:
        raise RolloutError("the plan's labelledSet is sent through the V2 API: the service URL is required")
    labelled = (
        LabelledSet.load(settings.plan.labelled_set, client, scratch) if settings.plan.labelled_set else None
    )
    who = identity(client, settings.actor)
    journal = open_journal(client, settings.record, who) if settings.record else None
    rollout = Rollout(
        client,
        settings.model,
        settings.plan,
        scraper(settings),
        str(who),
        labelled_service,
        labelled,
        journal=journal,
    )
    return rollout.run()


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: once, as an exception the rollout ends on (a second one must not cut its cleanup short)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated(f"terminated ({signal.Signals(signum).name})")


def outcome(settings: Settings) -> int:
    """Run and report: the exit code, the reason on stderr."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with tempfile.TemporaryDirectory(prefix="rollout-") as scratch:
            result = run(settings, Path(scratch))
    except (RolloutError, RegistryError, RecordError, ValueError, OSError) as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Terminated as exc:  # past the steps (the bake): what was recorded says how far it got
        print(f"error: {settings.model}: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    finally:
        signal.signal(signal.SIGTERM, previous)
    line = f"{settings.model}: {result.reason}"
    print(line if result.ok else f"error: {line}", file=sys.stdout if result.ok else sys.stderr)
    return EXIT_OK if result.ok else EXIT_STOPPED


def main(environ: Mapping[str, str] = os.environ) -> int:
    try:
        settings = from_env(environ)
    except PlanError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RolloutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return outcome(settings)
