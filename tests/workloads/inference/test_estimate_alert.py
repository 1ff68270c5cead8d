"""Issue 40: the alert on the label-free estimate, judged by Prometheus's own rule evaluator on what real
servers export.

Two real inference servers (the trainer's digits model, whose metadata.json records its test split's
confidences) each answer half of the validation split (rows the calibration never saw), then the same
rows with Gaussian pixel noise (sigma 0.5: the true accuracy falls, tests/workloads/registry/
test_estimate.py measures by how much). After each, both /metrics are scraped, and every sample of the
estimate's series goes to ``promtool test rules`` (Debian's prometheus 2.42 package) as a series held for
an hour, with the stack's rule (components/kubernetes/monitoring.py): unchanged rows fire nothing; noisy
rows are pending before the rule's ``for:`` (k of the monitor's windows) and fire after it. The pooled
estimate the expression computes is the drift monitor's (the same cells summed over the servers,
workloads/delivery/estimate.py): a threshold just under it fires, just over it does not.

What this leaves untested: Prometheus's scrape itself (the ServiceMonitor's TLS and token: test_monitoring
checks the object) and Alertmanager's routing of the alert (test_monitoring checks the AlertmanagerConfig).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from components.kubernetes.monitoring import inference_rules
from tests.linters import needs_promtool, promtool
from tests.workloads.digits_model import MODEL_NAME
from workloads.artifacts import load_metadata
from workloads.delivery.contract import ESTIMATED_ACCURACY, ESTIMATED_REFERENCE, ESTIMATED_ROWS
from workloads.delivery.estimate import calibrate, estimate, live_counts, reference_accuracy
from workloads.delivery.plan import MonitorPolicy
from workloads.delivery.scrape import confidence_cells
from workloads.training.tasks import Split

from .serving import Launch, Server, metric_samples

ALERT = "InferenceEstimatedAccuracyDrop"
NOISE = 0.5
CHUNK = 32
# The series are held this long (minutes), past the rule's ``for:`` (45 minutes by default).
HELD_MIN = 90
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _send(server: Server, rows: np.ndarray) -> None:
    with server.client() as http:
        for start in range(0, len(rows), CHUNK):
            answer = http.post("/v1/predict", json={"instances": rows[start : start + CHUNK].tolist()})
            assert answer.status_code == 200, answer.text


def _scrape(servers: list[Server]) -> list[tuple[str, Samples]]:
    return [(server.url, metric_samples(server)) for server in servers]


def _series(scraped: list[tuple[str, Samples]]) -> list[dict[str, str]]:
    """Every estimate sample as promtool's input series, labelled with its target as Prometheus would
    (``instance``, ``job``), its value held for HELD_MIN minutes."""
    series = []
    for url, samples in scraped:
        for (name, labels), value in samples.items():
            if name not in (ESTIMATED_ACCURACY, ESTIMATED_ROWS, ESTIMATED_REFERENCE):
                continue
            target = {**dict(labels), "instance": url.removeprefix("http://"), "job": "inference"}
            selector = ",".join(f'{k}="{v}"' for k, v in sorted(target.items()))
            series.append({"series": f"{name}{{{selector}}}", "values": f"{value!r}+0x{HELD_MIN}"})
    return series


def _monitor_estimate(scraped: list[tuple[str, Samples]], version_dir: Path) -> tuple[float, float]:
    """The drift monitor's estimate over the same windows (monitor.Monitor._estimated): every server's
    confidence cells summed, the version's calibration applied; and the test split's own estimate."""
    reference = load_metadata(version_dir).confidence_reference
    assert reference is not None
    calibrated = calibrate(reference)
    cells: dict[tuple[int, int], float] = {}
    for _, samples in scraped:
        for cell, rows in confidence_cells(samples, MODEL_NAME, "1").items():
            cells[cell] = cells.get(cell, 0.0) + rows
    found = estimate(live_counts(cells, calibrated.shape), calibrated)
    assert found is not None
    return found.accuracy, reference_accuracy(reference, calibrated)


def _fires(scraped: list[tuple[str, Samples]], policy: MonitorPolicy, tmp: Path, *, expected: bool) -> None:
    """promtool's verdict on the rule over the scraped samples: pending (never firing) before ``for:``,
    firing after it exactly when ``expected``."""
    [rule] = [r for r in inference_rules(0.2, policy) if r["alert"] == ALERT]
    (tmp / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "inference", "rules": [rule]}]}))
    held = int(rule["for"].removesuffix("m"))
    labels = {"model": MODEL_NAME, "version": "1", "severity": "warning"}
    annotations = {
        key: text.replace("{{ $labels.model }}", MODEL_NAME).replace("{{ $labels.version }}", "1")
        for key, text in rule["annotations"].items()
    }
    firing: list[dict[str, Any]] = (
        [{"exp_labels": labels, "exp_annotations": annotations}] if expected else []
    )
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _series(scraped),
                "alert_rule_test": [
                    {"eval_time": f"{held - 5}m", "alertname": ALERT, "exp_alerts": []},
                    {"eval_time": f"{held + 5}m", "alertname": ALERT, "exp_alerts": firing},
                ],
            }
        ],
    }
    (tmp / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = promtool("test", "rules", "tests.yaml", cwd=tmp)
    assert done.returncode == 0, f"threshold {policy.estimated_drop}:\n{done.stdout}{done.stderr}"


@needs_promtool
def test_the_estimated_drop_alert_fires_on_noisy_traffic_and_not_on_steady(
    launch: Launch, model_dir: Path, held_out: Split, tmp_path: Path
) -> None:
    half = len(held_out.y_val) // 2
    parts = [held_out.x_val[:half], held_out.x_val[half : 2 * half]]
    servers = [launch(model_dir, drift_window=half, drift_min_samples=half) for _ in parts]
    policy = MonitorPolicy()

    for server, rows in zip(servers, parts, strict=True):
        _send(server, rows)
    steady = _scrape(servers)
    accuracy, expected = _monitor_estimate(steady, model_dir)
    print(f"unchanged rows: estimate {accuracy:.4f} over {2 * half} rows, {expected:.4f} on the test split")
    assert len(_series(steady)) == 3 * len(servers), "each server exports its window's estimate"
    _fires(steady, policy, tmp_path, expected=False)

    noise = np.random.default_rng(0).normal(0, NOISE, held_out.x_val.shape).astype(np.float32)
    for server, (start, rows) in zip(servers, [(0, parts[0]), (half, parts[1])], strict=True):
        _send(server, np.clip(rows + noise[start : start + half], 0, 16))
    noisy = _scrape(servers)
    fallen, _ = _monitor_estimate(noisy, model_dir)
    drop = expected - fallen
    print(f"noisy rows: estimate {fallen:.4f}, an estimated drop of {drop:.4f}")
    assert drop > policy.estimated_drop, "the planted drop is past the default estimatedDrop"
    _fires(noisy, policy, tmp_path, expected=True)
    # The expression's pooled estimate is the monitor's: a threshold just under its drop fires, just over
    # it does not.
    for margin, fires in ((-0.002, True), (0.002, False)):
        _fires(noisy, policy.model_copy(update={"estimated_drop": drop + margin}), tmp_path, expected=fires)
