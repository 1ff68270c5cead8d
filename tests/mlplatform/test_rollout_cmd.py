"""``mlplatform rollout`` and the Job's ``python -m workloads.delivery``: bad input is one line and exit 2,
a stopped rollout exit 1 with its reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform.cli import app
from mlplatform.rollout_cmd import _stack_plan
from tests.workloads.delivery.fleet import Fleet, MetricsServer, champion_and_challenger
from tests.workloads.delivery.test_plan import WHERE
from tests.workloads.registry.conftest import registry_uri
from workloads.delivery import contract
from workloads.delivery.launch import main
from workloads.registry.client import RegistryClient

pytestmark = pytest.mark.slow

__all__ = ["registry_uri"]
REPO = Path(__file__).resolve().parents[2]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app, ["rollout", *args], env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9", "USER": "tester"}
    )
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["m", "--metrics-url", "http://x/metrics"], "give the plan as --plan FILE or --stack STACK"),
        (["m", "--plan", "{plan}"], "give the servers' metrics as --metrics-url or as --metrics-dns"),
        (
            ["m", "--plan", "{plan}", "--metrics-url", "x:9/metrics"],
            "--metrics-url 'x:9/metrics': an http(s)://",
        ),
        (
            ["m", "--stack", "aws-smb-dev", "--metrics-dns", "pods"],
            "Pulumi.aws-smb-dev.yaml: ml-platform:platform.workloads.inference.rollout: not set",
        ),
        (["m", "--plan", "{bad}", "--metrics-dns", "pods"], "--plan bad.yaml.steps: [1]: 5 after 25"),
        (["m", "--stack", "nope", "--metrics-dns", "pods"], "--stack nope: no stacks/Pulumi.nope.yaml"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], line: str) -> None:
    (tmp_path / "plan.yaml").write_text("steps: [shadow, 5]\n")
    (tmp_path / "bad.yaml").write_text("steps: [25, 5]\n")
    args = [a.format(plan=tmp_path / "plan.yaml", bad=tmp_path / "bad.yaml") for a in args]
    code, output = invoke(*args)
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {line}"), output


def test_a_stacks_plan_does_not_promote_where_approval_is_required_unless_it_says_so() -> None:
    """Review rev40b A4: ``--stack`` reads the plan with the stack's rules, as the planned Job's
    ``ROLLOUT_PLAN``: aws-enterprise-prod requires approval (enterprise) and declares no ``promote``."""
    assert _stack_plan("aws-enterprise-prod").promote is False


def test_the_job_refuses_bad_variables_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"ROLLOUT_MODEL": "m", "MLFLOW_TRACKING_URI": "http://127.0.0.1:9", "ROLLOUT_METRICS_DNS": "pods"}
    assert main({**env, "ROLLOUT_PLAN": json.dumps({"steps": [5, "shadow"]})}) == 2
    assert capsys.readouterr().err == (
        "error: ROLLOUT_PLAN.steps: [1]: shadow comes first, before any live traffic\n"
    )
    assert main({**env, "ROLLOUT_METRICS_PORT": "http"}) == 2
    assert capsys.readouterr().err == "error: ROLLOUT_METRICS_PORT='http': a port number\n"
    assert main({k: v for k, v in env.items() if k != "ROLLOUT_MODEL"}) == 2
    assert capsys.readouterr().err == "error: ROLLOUT_MODEL is required (the registered model)\n"
    assert WHERE  # the plan's own lines are tested in tests/workloads/delivery/test_plan.py


def test_the_job_changes_nothing_when_no_server_answers(registry_uri: str) -> None:
    """End to end through ``python -m workloads.delivery``; trial defect 8: a mistyped metrics URL moved the
    real servers to shadow, waited twice ``applyTimeoutSeconds`` and recorded ``stopped`` on the challenger.
    Every server's ``/metrics`` must answer before a tag is set: exit 2, one line, nothing changed."""
    client = RegistryClient(registry_uri)
    name = "rollout-job-test"
    champion_and_challenger(client, name)
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO),
        "ROLLOUT_MODEL": name,
        "MLFLOW_TRACKING_URI": registry_uri,
        "ROLLOUT_METRICS_URLS": "http://127.0.0.1:9/metrics",
        "ROLLOUT_PLAN": json.dumps(
            {"steps": ["shadow", 50], "applyTimeoutSeconds": 1, "bake": {"seconds": 0}}
        ),
        "ROLLOUT_ACTOR": "job-test",
    }
    done = subprocess.run(
        [sys.executable, "-m", "workloads.delivery"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {name}: nothing changed, the servers' metrics do not answer: "), line
    assert "127.0.0.1:9" in line
    assert client.registered_model(name).tags == {}
    assert "mlplatform.delivery.outcome" not in client.get_version(name, "2").tags


def test_a_job_terminated_mid_window_sends_the_traffic_back_and_says_why(
    registry_uri: str, tmp_path: Path
) -> None:
    """SIGTERM is how a Job's pod ends on its deadline, on ``kubectl delete job`` and on a node drain (then
    SIGKILL after the grace period): the rollout, mid-window at shadow 20 %, sets the split and shadow
    back to 0 at once, records why on the challenger, frees the model, and exits 1."""
    client = RegistryClient(registry_uri)
    name = "rollout-sigterm-test"
    champion_and_challenger(client, name)
    fleet = Fleet(client, name, [MetricsServer()])
    stop = threading.Event()

    def serve() -> None:  # the server polls the registry and answers, in real time
        while not stop.wait(0.3):
            fleet.tick(0.3)

    ticker = threading.Thread(target=serve, daemon=True)
    ticker.start()
    log = tmp_path / "rollout.log"
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(REPO),
        "ROLLOUT_MODEL": name,
        "MLFLOW_TRACKING_URI": registry_uri,
        "ROLLOUT_METRICS_URLS": fleet.urls[0],
        "ROLLOUT_PLAN": json.dumps(
            {"steps": ["shadow", 50], "windowSeconds": 600, "applyTimeoutSeconds": 60, "bake": {"seconds": 0}}
        ),
        "ROLLOUT_ACTOR": "job-test",
    }
    try:
        with log.open("w") as sink:
            job = subprocess.Popen([sys.executable, "-m", "workloads.delivery"], env=env, stderr=sink)
        deadline = time.monotonic() + 90
        while "shadow: applied on 1 servers" not in log.read_text():
            assert job.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert client.registered_model(name).tags[contract.SHADOW_TAG] == "20"
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=30) == 1, log.read_text()
    finally:
        stop.set()
        ticker.join()
        fleet.close()
        if job.poll() is None:
            job.kill()
    assert "error: rollout-sigterm-test: stopped at shadow: terminated (SIGTERM)" in log.read_text()
    assert client.registered_model(name).tags == {contract.SPLIT_TAG: "0", contract.SHADOW_TAG: "0"}
    tags = client.get_version(name, "2").tags
    assert (tags["mlplatform.delivery.outcome"], tags["mlplatform.delivery.result"]) == (
        "stopped",
        "stopped at shadow: terminated (SIGTERM)",
    )
