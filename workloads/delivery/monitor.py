"""The drift monitor: one window per run, judged against calibrated thresholds, acted on when sustained.

Each run (the CronJob's schedule, or ``--every`` seconds locally) is one window:

1. the champion of the model (``@champion``) and its training histograms (its ``metadata.json``);
2. every server's per-version drift gauges (``/metrics``: rows in the window, each feature's PSI against
   that version's own reference; workloads/inference/drift.py), read with the rollout's scraper;
3. each server's largest PSI against the threshold calibrated for its row count at the policy's false-alarm
   rate (trigger.null_threshold). With S servers each is tested at ``falseAlarmRate / S`` (Bonferroni:
   the chance that any of S tests at level a/S alarms is at most a; Dunn, "Multiple comparisons among
   means", JASA 56 (1961) 52-64), so the window as a whole keeps the stated rate;
4. the decision (trigger.decide: k of the last m windows since the last retrain, a cooldown, a rate
   limit) from the windows and retrains already on the model's lifecycle record: the record is the
   monitor's only state, so a CronJob pod holds none and a replay decides the same;
5. where the champion's metadata.json records a ``confidence_reference`` (its test split's confidences,
   beside the PSI reference), the label-free accuracy estimate over the same windows (estimate.py, as
   NannyML's CBPE), recorded as ``estimated`` and never mixed with the labelled accuracy; a fall of more
   than ``estimatedDrop`` below the estimate on the test split is a warning on stderr and on the record,
   and counts as a breach towards the k of m only with ``actOnEstimate`` and no labels in the window;
6. the decision appended to the record with its numbers, whatever it is ("none", "cooling-down" and
   "rate-limited" included), and on ``retrain`` the training launched (``Launcher``) and its end recorded.

A retrain that fails is recorded and ends there: the retrain's time counts for the cooldown and the rate
limit whatever its outcome, so no failure retriggers another, and a model that is worse stops at the
rollout's first gate (docs/delivery.md), never promoted by the monitor.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from workloads.artifacts import ModelMetadata
from workloads.delivery import contract
from workloads.delivery.estimate import calibrate, estimate, live_counts, reference_accuracy
from workloads.delivery.launch import targets
from workloads.delivery.plan import MonitorPolicy, PlanError, parse_policy
from workloads.delivery.runner import LabelledSet, RolloutError, ServiceClient
from workloads.delivery.scrape import Scraper, Snapshot, confidence_cells, drift_window, total
from workloads.delivery.trigger import (
    Action,
    Decision,
    TriggerPolicy,
    Window,
    decide,
    null_threshold,
)
from workloads.registry import operations
from workloads.registry.client import TRACKING_URI_ENV, RegistryClient, RegistryError
from workloads.registry.lineage import TRIGGER_ENV
from workloads.registry.record import (
    RECORD_ENV,
    Event,
    Identity,
    Journal,
    Kind,
    RecordError,
    identity,
    open_journal,
)
from workloads.registry.rollout import CHAMPION, PREVIOUS_CHAMPION

# Record actions: one per window, and the retrain's end.
WINDOW_ACTION = Kind.DRIFT_WINDOW
RETRAIN_ACTION = Kind.RETRAIN
ENV = contract.MONITOR_ENV
EXIT_OK, EXIT_BAD_INPUT = 0, 2


def _trigger_policy(policy: MonitorPolicy) -> TriggerPolicy:
    return TriggerPolicy(
        false_alarm_rate=policy.false_alarm_rate,
        k=policy.k,
        m=policy.m,
        cooldown_s=policy.cooldown_seconds,
        max_actions=policy.max_retrains,
        per_s=policy.per_seconds,
    )


@dataclass(frozen=True)
class Launched:
    """How a retrain ended: ``ok`` and one line saying what it left (the version it registered);
    ``finished`` False: submitted (the cluster runs it; the version it registers is on its own record)."""

    ok: bool
    detail: str
    finished: bool = True


class Launcher(Protocol):
    def launch(self, model: str, dataset: str | None, trigger: str) -> Launched: ...


@dataclass(frozen=True)
class ProcessLauncher:
    """The training entry point as a local process (``python -m workloads.training ...`` or
    ``mlplatform train --local``), the dataset appended as ``--dataset``, the trigger in TRIGGER_ENV; in
    the monitor's process group, so it dies with the monitor."""

    command: tuple[str, ...]
    timeout_s: float = 3600

    def launch(self, model: str, dataset: str | None, trigger: str) -> Launched:
        argv = [*self.command, *(("--dataset", dataset) if dataset else ())]
        try:
            done = subprocess.run(
                argv,
                env={**os.environ, TRIGGER_ENV: trigger},
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Launched(False, f"training did not run to its end: {exc}")
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [""]
        if done.returncode != 0:
            return Launched(False, f"training exited {done.returncode}: {last[0][:300]}")
        return Launched(True, "training finished")


# The pod's own ServiceAccount token and the cluster's CA, where the kubelet projects them (kubernetes.io,
# "Accessing the Kubernetes API from a Pod"), and the API server's address it sets in every container.
SERVICE_ACCOUNT_DIR = Path(contract.SERVICE_ACCOUNT_DIR)
API_HOST_ENV, API_PORT_ENV = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"


@dataclass(frozen=True)
class KubernetesLauncher:
    """The training workload's Job, created through the Kubernetes API (``POST /apis/batch/v1/namespaces/
    NS/jobs``) as the monitor's ServiceAccount, whose Role allows that and nothing else.

    ``job`` is the Job object the platform built (components/kubernetes/workloads.py ``retrain_job``, the
    training run's own builder): suspended, labelled with the training namespace's LocalQueue, so Kueue
    admits it like any run; its dataset is the stack's ``driftMonitor.dataset``. The only edit here is the
    trigger (``TRIGGER_ENV``, the decision's record event) on each container, which the trainer tags on
    the run and the version it registers. One retrain Job at a time: its name is fixed, so while the last
    one is kept (``ttlSecondsAfterFinished``) the API refuses another (409), recorded as a failed
    launch. The monitor cannot read Jobs: how the run ends is on the registry (its ``@challenger``)."""

    job: Mapping[str, Any]
    api: str
    token_file: Path
    tls: ssl.SSLContext | None = None
    timeout_s: float = 30.0

    @property
    def where(self) -> str:
        meta = self.job.get("metadata", {})
        return f"Job {meta.get('namespace')}/{meta.get('name')}"

    def body(self, trigger: str) -> dict[str, Any]:
        job: dict[str, Any] = json.loads(json.dumps(self.job))
        for container in job["spec"]["template"]["spec"]["containers"]:
            env = [e for e in container.get("env", []) if e.get("name") != TRIGGER_ENV]
            container["env"] = [*env, {"name": TRIGGER_ENV, "value": trigger}]
        return job

    def launch(self, model: str, dataset: str | None, trigger: str) -> Launched:
        namespace = self.job["metadata"]["namespace"]
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            return Launched(False, f"{self.where} not created: token {self.token_file}: {exc.strerror}")
        request = urllib.request.Request(
            f"{self.api.rstrip('/')}/apis/batch/v1/namespaces/{namespace}/jobs",
            data=json.dumps(self.body(trigger)).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.tls) as response:
                created = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return Launched(False, f"{self.where} not created: {_api_status(exc)}")
        except (OSError, ValueError) as exc:
            return Launched(False, f"{self.where} not created: the API server at {self.api}: {exc}")
        meta = created.get("metadata", {})
        queues = [v for k, v in meta.get("labels", {}).items() if k.endswith("/queue-name")]
        queued = f"in LocalQueue {queues[0]}" if queues else "in no queue"
        held = "suspended until Kueue admits it" if created.get("spec", {}).get("suspend") else "running"
        return Launched(True, f"{self.where} created {queued}, {held} (uid {meta.get('uid')})", False)


def _api_status(exc: urllib.error.HTTPError) -> str:
    """The API server's ``Status`` (reason and message) of a refused request, in one line."""
    try:
        status = json.loads(exc.read() or b"{}")
    except ValueError:
        status = {}
    reason = status.get("reason") or exc.reason
    return f"HTTP {exc.code} {reason}: {status.get('message', '')}".rstrip(": ")


def _at(event: Event) -> float:
    return datetime.fromisoformat(event.at).timestamp()


def own(events: Sequence[Event], who: Identity) -> list[Event]:
    """The events ``who`` appended, as the registry authenticated it or not (review rev40d A1): the record is
    the monitor's state, and a window or retrain another identity appended (the registry refuses those kinds
    from anyone but the drift monitor's user) is not the monitor's."""
    return [e for e in events if e.by == who.name and e.authenticated == who.authenticated]


def history(events: Sequence[Event]) -> tuple[list[Window], list[float]]:
    """The windows and the retrains' times on a model's record (oldest first)."""
    windows = [
        Window(
            _at(e),
            int(e.numbers["samples"]),
            float(e.numbers["maxPsi"]),
            float(e.numbers["threshold"]),
            bool((e.numbers.get("estimated") or {}).get("counted", False)),
        )
        for e in events
        if e.action == WINDOW_ACTION and e.numbers.get("maxPsi") is not None
    ]
    retrains = [
        _at(e) for e in events if e.action == WINDOW_ACTION and e.numbers.get("decision") == "retrain"
    ]
    return windows, retrains


@dataclass
class Monitor:
    """One model's monitor; ``tick`` is one window."""

    client: RegistryClient
    journal: Journal
    model: str
    policy: MonitorPolicy
    scraper: Scraper
    # None: decisions are recorded, a retrain is not started (recorded as such).
    launcher: Launcher | None
    service: ServiceClient | None = None
    labelled: LabelledSet | None = None
    clock: Callable[[], float] = time.time
    _references: dict[str, ModelMetadata] = field(default_factory=dict)
    _thresholds: dict[tuple[str, int, int], float] = field(default_factory=dict)
    _calibrations: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)

    def _metadata(self, version: str) -> ModelMetadata:
        if version not in self._references:
            source = self.client.get_version(self.model, version).source
            raw = self.client.read_artifact(f"{source}/metadata.json")
            self._references[version] = ModelMetadata.model_validate_json(raw)
        return self._references[version]

    def _threshold(self, version: str, samples: int, servers: int) -> float:
        key = (version, samples, servers)
        if key not in self._thresholds:
            reference = [h.counts for h in self._metadata(version).reference_histograms]
            rate = self.policy.false_alarm_rate / servers
            self._thresholds[key] = null_threshold(reference, samples, rate)
        return self._thresholds[key]

    def _estimated(self, version: str, snapshot: Snapshot, urls: Sequence[str]) -> dict[str, Any] | None:
        """The label-free estimate of ``version`` over the servers' windows at ``urls`` (estimate.py),
        calibrated on the reference its metadata.json records; None when it records none."""
        reference = self._metadata(version).confidence_reference
        if reference is None:
            return None
        if version not in self._calibrations:
            self._calibrations[version] = calibrate(reference)
        calibrated = self._calibrations[version]
        cells: dict[tuple[int, int], float] = {}
        for url in urls:
            for cell, rows in confidence_cells(snapshot.get(url, {}), self.model, version).items():
                cells[cell] = cells.get(cell, 0.0) + rows
        found = estimate(live_counts(cells, calibrated.shape), calibrated)
        if found is None:
            return None
        expected = reference_accuracy(reference, calibrated)
        drop = found.accuracy < expected - self.policy.estimated_drop
        return {
            "accuracy": round(found.accuracy, 6),
            "stderr": round(found.stderr, 6),
            "rows": found.rows,
            "referenceAccuracy": round(expected, 6),
            "calibratedOn": reference.split,
            "drop": drop,
            # A breach towards k of m: only where the stack says so and no labels judged this window.
            "counted": drop and self.policy.act_on_estimate and self.labelled is None,
        }

    def tick(self) -> Event:
        """Read the servers, decide, record, and act on a retrain."""
        champion = self.client.version_by_alias(self.model, CHAMPION).version
        snapshot = self.scraper.snapshot()
        events = own(self.journal.record.read(self.model), self.journal.who)
        measured = self._fresh(snapshot, champion, events)
        servers: list[dict[str, Any]] = [
            {
                "url": url,
                "responses": responses,
                "samples": n,
                "maxPsi": round(psi, 6),
                "threshold": round(self._threshold(champion, n, len(measured)), 6),
            }
            for url, responses, n, psi in measured
        ]
        numbers: dict[str, Any] = {"servers": servers, "unreachable": list(self.scraper.unreachable)}
        now = self.clock()
        numbers |= self._labelled(champion, events)
        if self.labelled is not None:  # its requests moved the counters: the next window starts after them
            after = self.scraper.snapshot()
            for server in servers:
                served = [after.get(server["url"], {})]
                server["responses"] = int(
                    total(served, contract.VERSION_RESPONSES, model=self.model, version=champion)
                )
        windows, retrains = history(events)
        if not servers:
            reason = (
                f"no server has enough rows of version {champion} in its drift window, or answered it "
                "since the last window"
            )
            return self._append(champion, Decision(Action.NONE, reason, 0, 0), numbers)
        # The window's evidence: the server furthest past (or closest to) its own threshold.
        worst = max(servers, key=lambda s: s["maxPsi"] / s["threshold"])
        numbers.update(worst)
        estimated = self._estimated(champion, snapshot, [s["url"] for s in servers])
        if estimated is not None:
            numbers["estimated"] = estimated
        counted = estimated is not None and estimated["counted"]
        window = Window(now, int(worst["samples"]), worst["maxPsi"], worst["threshold"], counted)
        decision = decide([*windows, window], retrains, now, _trigger_policy(self.policy))
        event = self._append(champion, decision, numbers)
        if decision.action is Action.RETRAIN:
            self._retrain(champion, event)
        return event

    def _fresh(
        self, snapshot: Snapshot, champion: str, events: Sequence[Event]
    ) -> list[tuple[str, int, int, float]]:
        """Each server with a PSI for ``champion`` that answered it since the last window (its responses
        counter moved; a restart resets it, and its window is new): url, responses, rows, largest PSI. A
        server with no new traffic would show the last window's rows again, counted twice."""
        last = next(
            (
                e
                for e in reversed(events)
                if e.action == WINDOW_ACTION and e.versions.get(CHAMPION) == champion
            ),
            None,
        )
        before = {s.get("url"): s.get("responses") for s in (last.numbers.get("servers", []) if last else [])}
        found = []
        for url, series in sorted(snapshot.items()):
            [(samples, psi)] = drift_window({url: series}, self.model, champion).servers
            responses = int(total([series], contract.VERSION_RESPONSES, model=self.model, version=champion))
            if psi is not None and responses != before.get(url):
                found.append((url, responses, samples, psi))
        return found

    def _labelled(self, champion: str, events: Sequence[Event]) -> dict[str, Any]:
        """The champion's labelled accuracy; below the previous champion's on the same labels by more than
        the tolerance, a rollback (recorded by operations.rollback on the journal)."""
        if self.service is None or self.labelled is None:
            return {}
        accuracy = self.service.accuracy(self.model, champion, self.labelled)
        found: dict[str, Any] = {
            "labelledAccuracy": round(accuracy, 6),
            "labelledRows": len(self.labelled.y),
            "labelsDigest": self.labelled.digest,
        }
        previous = self.client.alias_or_none(self.model, PREVIOUS_CHAMPION)
        prior = next(
            (
                float(e.numbers["labelledAccuracy"])
                for e in reversed(events)
                if e.action == WINDOW_ACTION
                and previous is not None
                and e.versions.get(CHAMPION) == previous.version
                and e.numbers.get("labelsDigest") == self.labelled.digest
            ),
            None,
        )
        if previous is None or prior is None:
            return found
        found["previousChampionAccuracy"] = prior
        tolerance = self.policy.accuracy_tolerance
        if accuracy >= prior - tolerance:
            return found
        why = (
            f"rollback (drift monitor): labelled accuracy {accuracy:.4f} of version {champion} is below "
            f"the previous champion {previous.version}'s {prior:.4f} on the same labels by more than "
            f"{tolerance}"
        )
        try:
            operations.rollback(
                self.client,
                self.model,
                actor=str(self.journal.who),
                action=why,
                journal=self.journal,
                restore_only=True,
            )
            found["rolledBack"] = True
        except RegistryError as exc:  # a rollout holds the model: its gates judge, recorded here
            found["rolledBack"] = False
            found["rollbackRefused"] = str(exc).splitlines()[0]
        return found

    def _append(self, champion: str, decision: Decision, numbers: dict[str, Any]) -> Event:
        numbers = {
            **numbers,
            "decision": str(decision.action),
            "breaches": decision.breaches,
            "windows": decision.windows,
            "k": self.policy.k,
            "m": self.policy.m,
            "falseAlarmRate": self.policy.false_alarm_rate,
        }
        reason = f"{decision.action}: {decision.reason}"
        estimated = numbers.get("estimated")
        if estimated is not None:
            reason += f"; {self._estimate_line(estimated)}"
        alarm = decision.action is not Action.NONE or (estimated is not None and estimated["drop"])
        print(f"{self.model}: {reason}", file=sys.stderr if alarm else sys.stdout)
        return self.journal.append(
            self.model, WINDOW_ACTION, {CHAMPION: champion}, reason=reason, numbers=numbers
        )

    def _estimate_line(self, estimated: Mapping[str, Any]) -> str:
        """The estimate as the record's reason and the log say it: marked an estimate, never an accuracy."""
        line = (
            "estimated accuracy (CBPE, from confidences, not labels) "
            f"{estimated['accuracy']:.4f} ± {estimated['stderr']:.4f} over {estimated['rows']} rows, "
            f"{estimated['referenceAccuracy']:.4f} on the test split"
        )
        if not estimated["drop"]:
            return line
        why = (
            "counted as a breach (driftMonitor.actOnEstimate)"
            if estimated["counted"]
            else "labels judged this window: not acted on"
            if self.labelled is not None
            else "recorded and warned only (driftMonitor.actOnEstimate is off)"
        )
        return f"{line}: WARNING estimated drop of more than {self.policy.estimated_drop:g}, {why}"

    def _retrain(self, champion: str, trigger: Event) -> None:
        started = self.clock()
        name = f"{trigger.model}/{WINDOW_ACTION}/{trigger.at}"
        result = (
            self.launcher.launch(self.model, self.policy.dataset, name)
            if self.launcher is not None
            else Launched(False, f"not launched: no training command ({ENV['launch']}); retrain by hand")
        )
        numbers: dict[str, Any] = {
            "ok": result.ok,
            "finished": result.finished,
            "seconds": round(self.clock() - started, 3),
            "dataset": self.policy.dataset,
            "trigger": name,
        }
        versions = {CHAMPION: champion}
        if result.ok and result.finished:
            challenger = self.client.alias_or_none(self.model, "challenger")
            if challenger is not None:
                versions["challenger"] = challenger.version
        detail = (
            f"{result.detail}; @challenger {versions.get('challenger', 'unchanged')}"
            if result.ok and result.finished
            else result.detail
        )
        outcome = (
            "failed; no retry before the cooldown"
            if not result.ok
            else "registered; the rollout's gates judge it"
            if result.finished
            else "submitted; the run registers @challenger, the rollout's gates judge it"
        )
        self.journal.append(
            self.model, RETRAIN_ACTION, versions, reason=f"{outcome}: {detail}", numbers=numbers
        )


@dataclass(frozen=True)
class Settings:
    model: str
    registry_uri: str
    record: str
    policy: MonitorPolicy
    scraper: Scraper
    launcher: Launcher | None
    service: ServiceClient | None


def from_env(environ: Mapping[str, str]) -> Settings:
    """The CronJob's settings; RolloutError or PlanError (one line naming the variable or key)."""

    def need(variable: str) -> str:
        value = environ.get(variable, "")
        if not value:
            raise RolloutError(f"{variable} is required")
        return value

    for variable in (ENV["policy"], ENV["launch"]):
        try:
            json.loads(environ.get(variable) or "{}")
        except ValueError as exc:
            raise RolloutError(f"{variable}: not JSON ({exc})") from None
    launcher: Launcher | None = None
    if environ.get(ENV["launch"]) and environ.get(ENV["retrain_job"]):
        raise RolloutError(f"{ENV['launch']} or {ENV['retrain_job']}: one way to retrain, not both")
    if environ.get(ENV["launch"]):
        command = json.loads(environ[ENV["launch"]])
        if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
            raise RolloutError(f"{ENV['launch']}: a JSON list of strings, the training command")
        launcher = ProcessLauncher(tuple(command))
    elif environ.get(ENV["retrain_job"]):
        launcher = kubernetes_launcher(Path(environ[ENV["retrain_job"]]), environ)
    port = environ.get(ENV["metrics_port"], "8080")
    if not port.isdigit():
        raise RolloutError(f"{ENV['metrics_port']}={port!r}: a port number")
    urls = tuple(u.strip() for u in environ.get(ENV["metrics_urls"], "").split(",") if u.strip())
    dns = environ.get(ENV["metrics_dns"]) or None
    scheme = environ.get(ENV["metrics_scheme"]) or "http"
    tls_name = environ.get(ENV["tls_server_name"]) or None
    found = targets(urls, dns, int(port), scheme, ENV["metrics_urls"], ENV["metrics_dns"], tls_name)
    policy = parse_policy(json.loads(environ.get(ENV["policy"]) or "{}"), ENV["policy"])
    service_url = environ.get(ENV["service_url"]) or None
    if policy.labelled_set is not None and service_url is None:
        raise RolloutError(
            f"{ENV['policy']}.labelledSet is sent through the V2 API: {ENV['service_url']} is required"
        )
    token = Path(environ[ENV["token_file"]]) if environ.get(ENV["token_file"]) else None
    ca_file = environ.get(ENV["ca_file"]) or None
    try:
        tls = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise RolloutError(f"{ENV['ca_file']}={ca_file}: {getattr(exc, 'strerror', None) or exc}") from None
    return Settings(
        model=need(ENV["model"]),
        registry_uri=need(TRACKING_URI_ENV),
        record=need(RECORD_ENV),
        policy=policy,
        scraper=Scraper(found, token_file=token, tls=tls),
        launcher=launcher,
        service=ServiceClient(service_url, token, tls, tls_name) if service_url else None,
    )


def kubernetes_launcher(
    job_file: Path, environ: Mapping[str, str], account: Path = SERVICE_ACCOUNT_DIR
) -> KubernetesLauncher:
    """The in-cluster launcher: the Job at ``job_file`` (JSON), the API server the kubelet names, the
    pod's token and the cluster's CA under ``account``; RolloutError (one line) when one is missing or
    wrong."""
    variable = ENV["retrain_job"]
    try:
        job = json.loads(job_file.read_text())
    except OSError as exc:
        raise RolloutError(f"{variable}={job_file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise RolloutError(f"{variable}={job_file}: not JSON ({exc})") from None
    if not (
        isinstance(job, dict)
        and job.get("kind") == "Job"
        and job.get("metadata", {}).get("namespace")
        and job.get("metadata", {}).get("name")
    ):
        raise RolloutError(f"{variable}={job_file}: not a batch/v1 Job with a name and a namespace")
    host, port = environ.get(API_HOST_ENV), environ.get(API_PORT_ENV, "443")
    if not host:
        raise RolloutError(f"{variable}: {API_HOST_ENV} is not set (the API server; in a pod, the kubelet)")
    ca_file = account / "ca.crt"
    try:
        tls = ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise RolloutError(
            f"{variable}: the cluster CA {ca_file}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    address = f"[{host}]" if ":" in host else host
    return KubernetesLauncher(job, f"https://{address}:{port}", account / "token", tls)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.delivery.monitor", description=__doc__)
    parser.add_argument("--every", type=float, default=0.0, help="seconds between windows; 0: one window")
    args = parser.parse_args(argv)
    try:
        settings = from_env(environ)
        client = RegistryClient(settings.registry_uri)
        journal = open_journal(client, settings.record, identity(client, "drift-monitor"))
        monitor = Monitor(
            client, journal, settings.model, settings.policy, settings.scraper, settings.launcher
        )
        with tempfile.TemporaryDirectory(prefix="monitor-") as scratch:
            if settings.policy.labelled_set is not None:
                monitor.service = settings.service
                monitor.labelled = LabelledSet.load(settings.policy.labelled_set, client, Path(scratch))
            while True:
                monitor.tick()
                if args.every <= 0:
                    return EXIT_OK
                time.sleep(args.every)
    except PlanError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (RolloutError, RegistryError, RecordError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
