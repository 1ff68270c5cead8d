"""What the inference server and the rollout agree on: registry tags, HTTP headers and metric names.

The rollout never talks to the servers to change what they do. It sets two tags on the registered model
(the split and the shadow sample) and moves aliases; every server replica polls them with the
``@champion`` alias it follows and applies them itself, so the split is the same on every replica,
whatever the replica count or the HPAs do, and the rollout needs no Kubernetes rights at all: its
registry identity may move aliases and set tags on the model, nothing else. It reads what happened from
the servers' ``/metrics``, where every series names the version that answered and its role.

A server loads the ``@challenger`` version beside the champion only while the split or the shadow sample
is above 0, and unloads it when both return to 0.
"""

from __future__ import annotations

from typing import Final, Literal

from workloads.registry.rollout import CHALLENGER, CHAMPION

Role = Literal["champion", "challenger"]
ROLES: Final[tuple[Role, ...]] = (CHAMPION, CHALLENGER)  # type: ignore[assignment]

# Registered-model tags (MLflow ``registered_model_tags``), integers as strings.
SPLIT_TAG: Final = "mlplatform.delivery.challenger-percent"  # 0..99: requests answered by @challenger
SHADOW_TAG: Final = "mlplatform.delivery.shadow-percent"  # 0..100: champion requests copied to it
SPLIT_RANGE: Final = (0, 99)
SHADOW_RANGE: Final = (0, 100)

# Request header: requests with the same key go to the same version (at a fixed split).
ROUTING_KEY_HEADER: Final = "x-routing-key"
# Response header on every prediction: the registry version that answered.
VERSION_HEADER: Final = "x-model-version"

# Prediction routes (/v1/predict, /v2/.../infer) after routing, labels model, version, role.
VERSION_RESPONSES: Final = "inference_version_responses_total"  # + code
VERSION_ERRORS: Final = "inference_version_errors_total"  # + reason (the server's ERROR_REASONS)
VERSION_LATENCY: Final = "inference_version_request_duration_seconds"  # histogram

# Shadow copies to the challenger, labels model, version (the challenger's).
SHADOW_REQUESTS: Final = "inference_shadow_requests_total"  # + outcome: compared, dropped, failed
SHADOW_AGREED: Final = "inference_shadow_agreed_total"  # compared requests whose every row's label agreed
SHADOW_DIFFERENCE: Final = "inference_shadow_output_difference"  # histogram: max |score difference|
SHADOW_LATENCY: Final = "inference_shadow_duration_seconds"  # histogram, + role: a shadow batch's run on each
SHADOW_OUTCOMES: Final = ("compared", "dropped", "failed")

# The setting each server applies now, labels model (and version: the challenger's, "" when none loaded).
SPLIT_APPLIED: Final = "inference_delivery_challenger_percent"
SHADOW_APPLIED: Final = "inference_delivery_shadow_percent"

# Drift, per loaded version (workloads/inference/drift.py): inference_drift_psi{model,version,feature},
# inference_drift_window_samples{model,version}; PSI is absent below the minimum sample count (500).
DRIFT_PSI: Final = "inference_drift_psi"
DRIFT_SAMPLES: Final = "inference_drift_window_samples"
# The same window's predictions per (predicted class, confidence bin), labels model, version, class, bin:
# the bins' indices into the version's ``confidence_reference`` (workloads/confidence.py).
CONFIDENCE_ROWS: Final = "inference_confidence_window_rows"
# The label-free accuracy estimate over the same window (workloads/delivery/estimate.py, NannyML's CBPE),
# labels model, version, estimate="cbpe": only once the window holds the minimum rows PSI needs. The
# accuracy the version's calibration estimates on the window's rows, the rows it counted, and the same
# estimate on the version's own test split (what an unchanged window estimates). Pooled over servers
# as sum(accuracy * rows) / sum(rows): the drift monitor's estimate over the same windows.
ESTIMATED_ACCURACY: Final = "inference_estimated_accuracy"
ESTIMATED_ROWS: Final = "inference_estimated_accuracy_rows"
ESTIMATED_REFERENCE: Final = "inference_estimated_accuracy_reference"
ESTIMATE_METHOD: Final = "cbpe"

# The rollout's lock and lease, an operator's pause and abort, each version's outcome: workloads/registry/
# lock.py (the registry's own alias moves read them too). A share counts only while the lease is current.

# The drift monitor's variables (workloads/delivery/monitor.py), which its CronJob sets
# (workloads/inference/k8s.py).
MONITOR_ENV = {
    "model": "MONITOR_MODEL",
    "metrics_urls": "MONITOR_METRICS_URLS",  # comma-separated
    "metrics_dns": "MONITOR_METRICS_DNS",
    "metrics_port": "MONITOR_METRICS_PORT",
    "metrics_scheme": "MONITOR_METRICS_SCHEME",
    # The servers' bearer token and the CA of their certificate, issued for this name (the rollout's).
    "token_file": "MONITOR_TOKEN_FILE",
    "ca_file": "MONITOR_CA_FILE",
    "tls_server_name": "MONITOR_TLS_SERVER_NAME",
    "policy": "MONITOR_POLICY",  # the stack's driftMonitor, JSON, camelCase keys
    "launch": "MONITOR_LAUNCH",  # the training command, a JSON list; the dataset is appended
    # Or, in the cluster: the file holding the training Job to create through the Kubernetes API.
    "retrain_job": "MONITOR_RETRAIN_JOB",
    "service_url": "MONITOR_SERVICE_URL",  # the inference Service, for the labelled set
}

# Where the kubelet projects a pod's ServiceAccount token and the cluster's CA (kubernetes.io, "Accessing the
# Kubernetes API from a Pod"): the drift monitor's retrain launcher reads them there.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
