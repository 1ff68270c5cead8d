"""Issue 40, item 1: the drift monitor's label-free accuracy estimate (workloads/delivery/estimate.py, as
NannyML's CBPE), with real parts: the trainer's model (its metadata.json records the test split's
confidences beside the PSI reference), a real inference server exporting its window's confidences, MLflow
3.17.2 (the session's registry), the monitor's windows, and ``mlplatform models history``.

Traffic: the validation split (180 rows the calibration never saw: it is fitted on the test split), then
the same rows with Gaussian pixel noise (sigma 0.5, clipped at 0), which lowers the true accuracy. The true
accuracy of each window is measured from the server's own answers against the rows' labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from mlplatform.cli import app
from tests.workloads.inference.conftest import held_out, launch, model_dir  # noqa: F401
from tests.workloads.inference.serving import Launch, Server
from workloads.artifacts import load_metadata
from workloads.delivery.monitor import WINDOW_ACTION, Monitor, history
from workloads.delivery.plan import parse_policy
from workloads.delivery.scrape import Scraper, Targets
from workloads.delivery.trigger import Action, TriggerPolicy, Window, decide
from workloads.registry.client import RegistryClient
from workloads.registry.record import Event, Journal, identity, open_record
from workloads.registry.rollout import CHAMPION
from workloads.training.tasks import Split

from .conftest import named_version, register_version

NAME = "cbpe-digits"
CHUNK = 32
# |estimate - true accuracy| on an unchanged window of 180 rows: about two of its standard errors
# (sqrt(0.955 * 0.045 / 180) = 0.015), as the estimate's own sampling error says it should be.
TOLERANCE = 0.03
NOISE = 0.5


def _send(server: Server, rows: np.ndarray, labels: np.ndarray) -> float:
    """Every row to the server; the share its answers got right (the window's true accuracy)."""
    right = 0
    with server.client() as http:
        for start in range(0, len(rows), CHUNK):
            answer = http.post("/v1/predict", json={"instances": rows[start : start + CHUNK].tolist()})
            assert answer.status_code == 200, answer.text
            predicted = np.asarray(answer.json()["predictions"])
            right += int((predicted == labels[start : start + CHUNK]).sum())
    return right / len(rows)


def _estimated(event: Event) -> dict[str, Any]:
    estimated = event.numbers["estimated"]
    assert isinstance(estimated, dict)
    return estimated


def test_the_estimate_follows_the_true_accuracy_is_marked_and_shown_in_history(
    registry_uri: str,
    launch: Launch,  # noqa: F811
    model_dir: Path,  # noqa: F811
    held_out: Split,  # noqa: F811
    tmp_path: Path,
) -> None:
    version_dir = named_version(model_dir, tmp_path / "v1", NAME)
    reference = load_metadata(version_dir).confidence_reference
    assert reference is not None and reference.split == "test"
    assert sum(map(sum, reference.rows)) == len(held_out.y_test)
    client = RegistryClient(registry_uri)
    version = register_version(client, NAME, version_dir)
    # The server labels its series with the directory's version: the registry's, as a fresh name's first.
    assert version == load_metadata(version_dir).version
    client.set_alias(NAME, CHAMPION, version)
    rows = len(held_out.y_val)
    server = launch(version_dir, drift_window=rows, drift_min_samples=rows)
    record = tmp_path / "record"
    journal = Journal(client, open_record(str(record)), identity(client, "drift-monitor"))
    scraper = Scraper(Targets(urls=(f"{server.url}/metrics",)))
    monitor = Monitor(client, journal, NAME, parse_policy({}, "test"), scraper, None)

    # Rows like the reference's: the estimate is within the tolerance of what the answers really scored.
    true_steady = _send(server, held_out.x_val, held_out.y_val)
    steady = monitor.tick()
    estimated = _estimated(steady)
    print(f"unchanged window: true accuracy {true_steady:.4f}, estimated {estimated}")
    assert estimated["rows"] == rows and estimated["calibratedOn"] == "test"
    assert abs(float(estimated["accuracy"]) - true_steady) <= TOLERANCE
    assert estimated["drop"] is False and estimated["counted"] is False
    assert "labelledAccuracy" not in steady.numbers, "no labels: nothing is measured, only estimated"

    # Noisy rows: the true accuracy falls, and so does the estimate, past the default estimatedDrop;
    # recorded and warned, not acted on (driftMonitor.actOnEstimate is off by default).
    noisy = np.random.default_rng(0).normal(0, NOISE, held_out.x_val.shape)
    true_shifted = _send(server, np.clip(held_out.x_val + noisy, 0, 16).astype(np.float32), held_out.y_val)
    shifted = monitor.tick()
    fallen = _estimated(shifted)
    print(f"noisy window: true accuracy {true_shifted:.4f}, estimated {fallen}")
    assert true_shifted < true_steady - 0.1
    assert float(fallen["accuracy"]) < float(estimated["accuracy"]) - 0.05
    assert fallen["drop"] is True and fallen["counted"] is False
    assert "estimated drop" in shifted.reason and "recorded and warned only" in shifted.reason
    assert history([steady, shifted])[0][-1].estimated_drop is False, (
        "an estimate the stack does not act on is no breach on replay"
    )

    # A stack that acts on it (driftMonitor.actOnEstimate), no labels: the drop counts as a breach, on
    # the record, and so on replay.
    monitor.policy = parse_policy({"actOnEstimate": True}, "test")
    _send(server, np.clip(held_out.x_val + noisy[::-1], 0, 16).astype(np.float32), held_out.y_val)
    acted = monitor.tick()
    assert _estimated(acted)["counted"] is True and "counted as a breach" in acted.reason
    assert history([steady, shifted, acted])[0][-1].estimated_drop is True

    # What a user reads: every window, its estimate marked as one.
    shown = CliRunner().invoke(app, ["models", "history", NAME, "--record", str(record)])
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.output.splitlines() if WINDOW_ACTION in line]
    marked = "estimated accuracy (CBPE, from confidences, not labels)"
    assert len(lines) == 3 and all(marked in line for line in lines)
    assert f"{float(fallen['accuracy']):.4f}" in lines[1] and "WARNING estimated drop" in lines[1]


@pytest.mark.parametrize("act", [True, False])
def test_a_sustained_estimated_drop_counts_towards_k_of_m_only_where_the_stack_acts_on_it(act: bool) -> None:
    """The K of M, cooldown and rate limit are the drift trigger's own: an estimated drop the stack acts on
    is one more kind of breach (trigger.Window), nothing else."""
    policy = TriggerPolicy(k=3, m=5)
    windows = [Window(float(at), 500, 0.01, 0.05, estimated_drop=act) for at in range(3)]
    decision = decide(windows, [], 3.0, policy)
    assert decision.action is (Action.RETRAIN if act else Action.NONE)
    assert decide(windows, [2.5], 3.0, policy).action is Action.NONE, "windows before a retrain do not count"
    cooling = decide(
        [*windows, *(Window(float(at), 500, 0.01, 0.05, act) for at in (4, 5, 6))], [3.5], 7.0, policy
    )
    assert cooling.action is (Action.COOLING_DOWN if act else Action.NONE)
