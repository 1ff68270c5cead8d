"""Issue 40's drift monitor with real parts on loopback: MLflow 3.17.2 with its basic-auth app and the
registry's authorization function (conftest.py ``auth_registry_uri``), two inference servers following
``@champion`` (``python -m workloads.inference``), the monitor (workloads/delivery/monitor.py; once as its
CronJob's command, then its windows in this process) as the stack's drift monitor user, and, as the
launcher, the real training entry point (``python -m workloads.training``) as bob, on the "newest" dataset
(drift_data.py). The retrained version then goes through the approval and the promotion's gate as people
do (``mlplatform models``, a stack requiring approval: conftest.py ``governed_stack``), and the registry
refuses the monitor any move of ``@champion`` but a rollback.

Each window sends every server exactly its drift window's rows (``SERVE_DRIFT_WINDOW``), so windows do
not overlap; steady windows are drawn from the champion's own training split (the reference), shifted
ones are the same rows inverted (16 - pixel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from components.handle import MONITOR_USER
from mlplatform.cli import app
from tests.workloads.inference.conftest import held_out, model_dir  # noqa: F401  (the session's model)
from tests.workloads.inference.serving import Server, serve_alias, wait_ready
from workloads.delivery.monitor import (
    ENV,
    RETRAIN_ACTION,
    WINDOW_ACTION,
    Monitor,
    ProcessLauncher,
    main,
)
from workloads.delivery.plan import PlanError, parse_policy
from workloads.delivery.runner import LabelledSet, ServiceClient
from workloads.delivery.scrape import Scraper, Targets
from workloads.registry.client import TRACKING_URI_ENV, RegistryClient, RegistryError
from workloads.registry.lineage import TRIGGER_TAG, experiment_name
from workloads.registry.record import RECORD_ENV, Event, Journal, identity, open_record
from workloads.registry.rollout import CHALLENGER, CHAMPION
from workloads.registry.server.launch import AuthApi, User, bootstrap_users
from workloads.training.tasks import Split

from .conftest import ADMIN_PASSWORD, PASSWORDS, admin_client, as_user, named_version, register_version

pytestmark = pytest.mark.slow

NAME = "drift-digits"
ROWS = 200  # each server's drift window, and the rows every window sends it
CHUNK = 32  # the servers' default max_instances
DATASET = "tests.workloads.registry.drift_data:inverted_digits"
# k of m small so the test is short; a cooldown far longer than the test: one retrain per cooldown.
K = 2
POLICY: dict[str, object] = {
    "k": K,
    "m": 3,
    "cooldownSeconds": 3600,
    "falseAlarmRate": 0.01,
    "dataset": DATASET,
}
# Enough unchanged windows that a rule without calibration would fire on some (a fixed "PSI > 0.1" fires
# on every one at 200 rows: docs/lifecycle.md), few enough to keep the module fast.
STEADY_WINDOWS = 5
FLAPPING_WINDOWS = 4
# How often the servers read @champion: each read is authenticated, and MLflow's basic-auth app checks the
# password's scrypt hash on every request (about 0.1 s of CPU here), so a tight poll would cost more CPU
# than the rest of the test.
POLL_S = 2.0
# Who acts: bob trains (the retrain runs as him), the servers read, the monitor is the stack's user.
READER = "drift-reader"
CREDENTIALS = {**PASSWORDS, READER: "drift-reader-password", MONITOR_USER: "drift-monitor-password"}


def _login(user: str) -> dict[str, str]:
    return {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": CREDENTIALS[user]}


@pytest.fixture
def registry_uri(auth_registry_uri: str) -> str:
    """The users as the stack makes them (the launcher's ``bootstrap_users``): bob (EDIT on the model and
    its experiment, as training), the monitor (EDIT: it rolls back; a restorer for the registry), the
    approvers alice and carol, a reader for the servers."""
    model = ((NAME, "EDIT"),)
    bootstrap_users(
        AuthApi(auth_registry_uri, ADMIN_PASSWORD),
        [
            User("bob", CREDENTIALS["bob"], model, ((experiment_name(NAME), "EDIT"),)),
            User(MONITOR_USER, CREDENTIALS[MONITOR_USER], model),
            *(User(user, CREDENTIALS[user], model) for user in ("alice", "carol")),
            User(READER, CREDENTIALS[READER]),
        ],
    )
    return auth_registry_uri


@pytest.fixture
def servers(registry_uri: str, model_dir: Path, tmp_path: Path) -> Iterator[list[Server]]:  # noqa: F811
    """``NAME`` v1 as the champion, served by two real servers with a ``ROWS``-row drift window."""
    admin = admin_client(registry_uri)
    version = register_version(admin, NAME, named_version(model_dir, tmp_path / "v1", NAME))
    admin.set_alias(NAME, CHAMPION, version)
    env = {"PATH": "/usr/bin:/bin", "SERVE_DRIFT_WINDOW": str(ROWS), "SERVE_DRIFT_MIN_SAMPLES": str(ROWS)}
    env |= _login(READER)
    started: list[Server] = []
    try:
        for index in range(2):
            (tmp_path / f"s{index}").mkdir()
            started.append(
                serve_alias(env, registry_uri, f"models:/{NAME}@champion", POLL_S, tmp_path / f"s{index}")
            )
        for server in started:
            wait_ready(server)
        yield started
    finally:
        for server in started:
            server.terminate()


def _send(servers: list[Server], split: Split, rng: np.random.Generator, *, shifted: bool) -> None:
    """One window: ``ROWS`` rows to every server, from the reference (the training split) or inverted."""
    for server in servers:
        rows = split.x_train[rng.integers(0, len(split.x_train), ROWS)]
        rows = 16 - rows if shifted else rows
        with server.client() as http:
            for start in range(0, ROWS, CHUNK):
                answer = http.post("/v1/predict", json={"instances": rows[start : start + CHUNK].tolist()})
                assert answer.status_code == 200, answer.text


def _await_serving(servers: list[Server], version: str, deadline_s: float = 30) -> None:
    """Until every server answers for ``version`` (it follows @champion every ``POLL_S``)."""
    deadline = time.monotonic() + deadline_s
    for server in servers:
        with server.client() as http:
            while http.get(f"/v2/models/{NAME}/versions/{version}").status_code != 200:
                assert time.monotonic() < deadline, f"{server.url} does not serve version {version}"
                time.sleep(0.05)


def _monitor(
    registry_uri: str,
    servers: list[Server],
    split: Split,
    rng: np.random.Generator,
    tmp_path: Path,
) -> Monitor:
    """The monitor, its first window run through the CronJob's own command and variables, the next ones
    in this process; the labels that arrive: the champion's held-out rows and their labels."""
    client = RegistryClient(registry_uri, environ=_login(MONITOR_USER))
    record = tmp_path / "record"
    metrics = [f"{server.url}/metrics" for server in servers]
    # The retrain runs as bob, as the training Job runs as training's user.
    trainer = [f"{k}={v}" for k, v in _login("bob").items()]
    training = [
        "env",
        *trainer,
        sys.executable,
        "-m",
        "workloads.training",
        "--output",
        str(tmp_path / "retrain"),
    ]
    # One epoch: a real run of the trainer (it registers a version with its metrics), at its least cost.
    training += ["--epochs", "1", "--model-name", NAME, "--registry-uri", registry_uri]
    labels = tmp_path / "labels.npz"
    np.savez(labels, x=split.x_test, y=split.y_test)
    policy = {**POLICY, "labelledSet": str(labels)}
    _send(servers, split, rng, shifted=False)
    env = {
        ENV["model"]: NAME,
        ENV["metrics_urls"]: ",".join(metrics),
        ENV["policy"]: json.dumps(policy),
        ENV["service_url"]: servers[0].url,
        ENV["launch"]: json.dumps(training),
        TRACKING_URI_ENV: registry_uri,
        RECORD_ENV: str(record),
        **_login(MONITOR_USER),
    }
    command = [sys.executable, "-m", "workloads.delivery.monitor"]
    cron = subprocess.run(
        command, env={**os.environ, **env}, check=False, capture_output=True, text=True, timeout=60
    )
    assert cron.returncode == 0, cron.stderr
    assert cron.stdout.startswith(f"{NAME}: none: 0 of the last 1 windows breach"), cron.stdout
    journal = Journal(client, open_record(str(record)), identity(client, "drift-monitor"))
    scraper = Scraper(Targets(urls=tuple(metrics)))
    launcher = ProcessLauncher(tuple(training))
    monitor = Monitor(client, journal, NAME, parse_policy(policy, "test"), scraper, launcher)
    monitor.service = ServiceClient(servers[0].url)
    monitor.labelled = LabelledSet.load(str(labels), client, tmp_path)
    return monitor


def _decisions(events: list[Event]) -> list[str]:
    return [str(e.numbers["decision"]) for e in events if e.action == WINDOW_ACTION]


def _the_change_waits_for_a_second_person_and_the_gate(
    monitor: Monitor, governed_stack: str, registry_uri: str, record: Path
) -> None:
    """What happens to the retrained ``@challenger`` before it may become ``@champion``."""
    version = monitor.client.version_by_alias(NAME, CHALLENGER).version
    stack = ("--stack", governed_stack)
    # The monitor cannot skip the gates and the approval: the registry refuses it @champion on what it
    # retrained (it may only roll back: workloads/registry/server/guard.py).
    with pytest.raises(RegistryError) as skipped:
        monitor.client.set_alias(NAME, CHAMPION, version)
    assert skipped.value.status == 403
    assert f"user {MONITOR_USER} may only roll 'champion' of registered model {NAME!r} back" in str(
        skipped.value
    )
    # The change, as people make it on a stack requiring approval: an approver asks, neither who trained
    # the version (bob) nor who asked (carol) may approve, another approver (alice) does; the promotion's
    # gate then stops the retrained version (its accuracy compares with nothing the champion was
    # measured on), and only the approver role may force it past, recorded as such.
    asked = as_user("carol", registry_uri, record, "request-promotion", NAME, version, "--reason", "drift")
    assert asked.exit_code == 0, asked.output
    for user, why in (
        ("bob", "bob is not in the approver role"),
        ("carol", "carol requested this promotion"),
    ):
        refused = as_user(user, registry_uri, record, "approve", NAME, version, *stack)
        assert refused.exit_code == 1 and why in refused.output, refused.output
    approved = as_user("alice", registry_uri, record, "approve", NAME, version, *stack, "--reason", "ok")
    assert approved.exit_code == 0, approved.output
    gated = as_user("carol", registry_uri, record, "promote", NAME, version, *stack)
    assert gated.exit_code == 1, gated.output
    assert "version 1 records no dataset digest, so its test_accuracy compares with nothing" in gated.output
    assert monitor.client.version_by_alias(NAME, CHAMPION).version == "1"


def test_steady_traffic_triggers_nothing_shifted_traffic_one_retrain_and_flapping_no_more(
    registry_uri: str,
    servers: list[Server],
    held_out: Split,  # noqa: F811
    governed_stack: str,
    tmp_path: Path,
) -> None:
    client = RegistryClient(registry_uri, environ=_login(READER))
    record = tmp_path / "record"
    rng = np.random.default_rng(0)
    monitor = _monitor(registry_uri, servers, held_out, rng, tmp_path)
    journal = monitor.journal

    # Steady traffic from the reference distribution, window after window: nothing.
    for _ in range(STEADY_WINDOWS - 1):
        _send(servers, held_out, rng, shifted=False)
        monitor.tick()
    steady = journal.record.read(NAME)
    assert _decisions(steady) == ["none"] * STEADY_WINDOWS
    assert all(len(e.numbers["servers"]) == 2 and e.numbers["samples"] == ROWS for e in steady)
    # No traffic since: the servers' windows still hold the last rows, which are not a new window.
    idle = monitor.tick()
    assert idle.numbers["servers"] == [] and "since the last window" in idle.reason

    # Shifted traffic: exactly one retrain, within k windows, on the dataset source; it registers
    # @challenger with the decision as its trigger.
    for _ in range(K):
        _send(servers, held_out, rng, shifted=True)
        monitor.tick()
    events = journal.record.read(NAME)
    assert _decisions(events)[STEADY_WINDOWS + 1 :] == ["none", "retrain"]
    [retrain] = [e for e in events if e.action == RETRAIN_ACTION]
    assert retrain.numbers["ok"] is True, retrain.reason
    assert retrain.numbers["dataset"] == DATASET
    challenger = client.version_by_alias(NAME, CHALLENGER)
    assert retrain.versions == {CHAMPION: "1", CHALLENGER: challenger.version}
    assert challenger.tags[TRIGGER_TAG] == retrain.numbers["trigger"]
    assert client.version_by_alias(NAME, CHAMPION).version == "1", "the monitor never promotes"

    # Flapping around the threshold, and the shift going on: breaches, but cooling down; no second retrain.
    for index in range(FLAPPING_WINDOWS):
        _send(servers, held_out, rng, shifted=index % 2 == 0)
        monitor.tick()
    events = journal.record.read(NAME)
    after = _decisions(events)[STEADY_WINDOWS + 1 + K :]
    assert "retrain" not in after and "cooling-down" in after, after
    assert sum(e.action == RETRAIN_ACTION for e in events) == 1

    _the_change_waits_for_a_second_person_and_the_gate(monitor, governed_stack, registry_uri, record)
    # Made champion by the approver role (--force), and labels of the original traffic arrive: below the
    # previous champion's accuracy on the same labels, so the monitor rolls back.
    promoted = as_user(
        "alice",
        registry_uri,
        record,
        "promote",
        NAME,
        challenger.version,
        "--stack",
        governed_stack,
        "--force",
    )
    assert promoted.exit_code == 0, promoted.output
    _await_serving(servers, "2")
    _send(servers, held_out, rng, shifted=False)
    judged = monitor.tick()
    new, old = judged.numbers["labelledAccuracy"], judged.numbers["previousChampionAccuracy"]
    print(f"labelled accuracy of the retrained champion vs the previous one: {new} vs {old}")
    assert judged.numbers["rolledBack"] is True, judged.numbers
    assert new < old - 0.01
    assert client.version_by_alias(NAME, CHAMPION).version == "1"
    events = journal.record.read(NAME)
    [rollback] = [e for e in events if e.action == "rollback"]
    assert (
        rollback.versions,
        rollback.by,
        rollback.authenticated,
        "labelled accuracy" in rollback.reason,
    ) == (
        {CHAMPION: "1"},
        MONITOR_USER,
        True,
        True,
    )
    assert [(e.action, e.by) for e in events if e.action in ("request-promotion", "approve", "promote")] == [
        ("request-promotion", "carol"),
        ("approve", "alice"),
        ("promote", "alice"),
    ]

    # Every decision, with who and why, through the command a user runs.
    shown = CliRunner().invoke(app, ["models", "history", NAME, "--record", str(record)])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert len(lines) == len(events)
    assert sum("cooling-down: " in line and "cooling down" in line for line in lines) == after.count(
        "cooling-down"
    )
    assert any(line.split()[1] == RETRAIN_ACTION and "registered" in line for line in lines)


def test_a_bad_policy_key_is_one_line_naming_it() -> None:
    with pytest.raises(PlanError) as caught:
        parse_policy({"k": 4, "m": 3}, "workloads.inference.driftMonitor")
    assert caught.value.problems == [
        "workloads.inference.driftMonitor: k (4) must not exceed m (3): k breaches among the last m windows"
    ]
    with pytest.raises(PlanError) as caught:
        parse_policy({"falseAlarmRate": 2}, "workloads.inference.driftMonitor")
    assert caught.value.problems == [
        "workloads.inference.driftMonitor.falseAlarmRate: Input should be less than 1"
    ]


@pytest.mark.parametrize(
    ("variables", "line"),
    [
        ({ENV["launch"]: "python -m workloads.training"}, "MONITOR_LAUNCH: not JSON"),
        ({ENV["launch"]: '"train"'}, "MONITOR_LAUNCH: a JSON list of strings, the training command"),
        ({ENV["policy"]: '{"cooldownSecond": 60}'}, "MONITOR_POLICY.cooldownSecond: unknown key"),
        (
            {ENV["policy"]: '{"labelledSet": "l.npz"}'},
            "MONITOR_POLICY.labelledSet is sent through the V2 API",
        ),
        ({ENV["model"]: ""}, "MONITOR_MODEL is required"),
    ],
)
def test_a_bad_variable_is_one_line_naming_it_and_exit_2(
    variables: dict[str, str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CronJob's bad input: one line naming the variable or key, exit 2, nothing read or written."""
    env = {
        ENV["model"]: NAME,
        ENV["metrics_urls"]: "http://127.0.0.1:9/metrics",
        ENV["launch"]: '["true"]',
        TRACKING_URI_ENV: "http://127.0.0.1:9",
        RECORD_ENV: "/nonexistent/record",
        **variables,
    }
    assert main([], env) == 2
    [shown] = capsys.readouterr().err.splitlines()
    assert shown.startswith(f"error: {line}"), shown
