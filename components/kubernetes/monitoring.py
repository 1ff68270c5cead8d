"""Monitoring: kube-prometheus-stack scraping the GPU operator's DCGM exporter and the inference
service, with alert rules for idle GPUs, GPU errors and a failing or drifting inference service.

Rules are a PrometheusRule object (built here, applied after the chart that installs its CRD), so they
are reviewed, exported and policy-checked like every other object.
"""

from __future__ import annotations

from typing import Any

from components.config import AlertingConfig, AlertReceiver
from components.handle import ClusterHandle
from components.kubernetes.addons import (
    GPU_OPERATOR_NAMESPACE,
    MONITORING_NAMESPACE,
    RESTRICTED_CONTAINER,
    ApiServerBackend,
    Chart,
    resources,
    tolerations,
)
from components.kubernetes.charts import pin
from components.kubernetes.objects import MANAGED_BY, Object
from workloads.delivery.contract import (
    ESTIMATE_METHOD,
    ESTIMATED_ACCURACY,
    ESTIMATED_REFERENCE,
    ESTIMATED_ROWS,
)
from workloads.delivery.plan import MonitorPolicy
from workloads.inference.k8s import INSTANCE_LABEL

RELEASE = "kube-prometheus-stack"
# The prometheus-operator pods and its admission webhook's port, which kube-apiserver calls
# (kube-prometheus-stack 88.5.3: templates/prometheus-operator/service.yaml selector, targetPort
# ``https`` = containerPort prometheusOperator.tls.internalPort, 10250 in values.yaml).
OPERATOR_BACKEND = ApiServerBackend({"app": f"{RELEASE}-operator", "release": RELEASE}, (10250,))
# A Secret in the inference namespace holding ``ca.crt``, the CA that signed the inference service's
# certificate, so Prometheus verifies what it scrapes over TLS (docs/inference.md).
INFERENCE_CA_SECRET = "inference-ca"
# Control-plane components a managed cluster does not expose (EKS, AKS: prometheus-community/helm-charts
# #3368, #4106), and kube-proxy, which EKS binds to 127.0.0.1 and AKS with Cilium does not run: their
# ServiceMonitors and the chart's "...Down" alerts on them (critical, absent(up)) would fire for ever.
# Disabling a component also drops its rules (templates/prometheus/rules-1.14: each gated on
# ``.Values.<component>.enabled``).
_UNSCRAPEABLE = ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")
# The Alertmanager configuration the platform writes (an AlertmanagerConfig in the monitoring
# namespace, which with this matcher strategy receives every alert: crd-alertmanagers.yaml,
# alertmanagerConfigMatcherStrategy "OnNamespaceExceptForAlertmanagerNamespace").
ALERT_ROUTING = "ml-platform"


def _endpoints_job(job: str, namespace: str, keep_service: str) -> dict[str, Any]:
    """Scrape every endpoint of one Service, labelled with the node it runs on."""
    return {
        "job_name": job,
        "kubernetes_sd_configs": [{"role": "endpoints", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_service_name"], "regex": keep_service, "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }


# Persistent volumes for Prometheus's TSDB and Alertmanager's state, so a restart or reschedule keeps
# the series (and every ``for:`` window) and the silences (review wt-cluster2 D2).
PROMETHEUS_DISK_GIB = 100
ALERTMANAGER_DISK_GIB = 5


def _volume(gib: int) -> dict[str, Any]:
    """A StorageSpec (monitoring.coreos.com/v1) claiming a ReadWriteOnce volume of the cluster's default
    StorageClass (none named: the encrypted gp3 default on EKS, managed-csi on AKS)."""
    return {
        "volumeClaimTemplate": {
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{gib}Gi"}}}
        }
    }


def prometheus_chart(handle: ClusterHandle, scrape_jobs: list[dict[str, Any]]) -> Chart:
    """kube-prometheus-stack (prometheus-community), with our scrape jobs and rule, ServiceMonitor and
    AlertmanagerConfig selection open to objects outside the chart. The node exporter runs on every
    node, so it tolerates every pool's taints. Prometheus mounts no Secret: a scrape's credentials come
    through its ServiceMonitor, so a missing one disables that scrape, not Prometheus."""
    return Chart(
        release=RELEASE,
        pin=pin("kube-prometheus-stack", handle.kubernetes_version),
        namespace=MONITORING_NAMESPACE,
        values={
            "prometheus": {
                "prometheusSpec": {
                    "retention": "15d",
                    # Blocks are deleted once they pass this size too (WAL and head chunks count), so
                    # the volume never fills (Prometheus docs, "Storage": --storage.tsdb.retention.size,
                    # units powers of 2).
                    "retentionSize": f"{PROMETHEUS_DISK_GIB * 8 // 10}GB",
                    "storageSpec": _volume(PROMETHEUS_DISK_GIB),
                    "resources": resources("2", "8Gi", "500m", "4Gi"),
                    "ruleSelectorNilUsesHelmValues": False,
                    "serviceMonitorSelectorNilUsesHelmValues": False,
                    "additionalScrapeConfigs": scrape_jobs,
                }
            },
            "alertmanager": {
                "alertmanagerSpec": {
                    "alertmanagerConfigMatcherStrategy": {
                        "type": "OnNamespaceExceptForAlertmanagerNamespace"
                    },
                    # Silences and the notification log survive a restart (they live in its data dir).
                    "storage": _volume(ALERTMANAGER_DISK_GIB),
                    "resources": resources("200m", "256Mi", "50m", "128Mi"),
                }
            },
            **{component: {"enabled": False} for component in _UNSCRAPEABLE},
            # Grafana's chart default admin password is public; teams attach their managed Grafana
            # (Amazon Managed Grafana / Azure Managed Grafana) to this Prometheus instead.
            "grafana": {"enabled": False},
            "prometheus-node-exporter": {
                "tolerations": tolerations(handle.pools),
                "resources": resources("250m", "180Mi", "10m", "32Mi"),
                "containerSecurityContext": RESTRICTED_CONTAINER,
            },
            "kube-state-metrics": {
                "resources": resources("500m", "512Mi", "10m", "64Mi"),
                # No ``secrets`` collector, so its ClusterRole gets no list/watch on every Secret (the
                # chart grants it from the collector list: kube-state-metrics 8.4.0
                # templates/role.yaml; judge secrets-cluster-wide). Its kube_secret_* series go.
                "collectorsExclude": ["secrets"],
            },
            "prometheusOperator": {
                "resources": resources("500m", "512Mi", "100m", "128Mi"),
                "admissionWebhooks": {"patch": {"resources": resources("100m", "128Mi", "10m", "32Mi")}},
            },
        },
        api_server_backend=OPERATOR_BACKEND,
    )


def gpu_scrape_job() -> dict[str, Any]:
    """The DCGM exporter, the one job that scrapes it (the GPU operator's own ServiceMonitor is off,
    addons.gpu_operator). ``honor_labels``: the exporter labels each GPU's series with the ``namespace``,
    ``pod`` and ``container`` holding it; without it Prometheus renames them ``exported_*`` (Prometheus
    scrape_config docs, ``honor_labels``; NVIDIA/dcgm-exporter#85). No ``pod`` target label: a GPU no
    pod holds must carry none, not the exporter's."""
    return {
        **_endpoints_job("dcgm-exporter", GPU_OPERATOR_NAMESPACE, "nvidia-dcgm-exporter"),
        "honor_labels": True,
    }


def inference_service_monitor(namespace: str, service: str, tls: bool, auth_secret: str | None) -> Object:
    """The inference service's /metrics, through a ServiceMonitor in its own namespace: over TLS verified
    with its CA, and with the service's bearer token where /v1 needs one (the service guards /metrics
    with the same token: drift leaks inputs). The Secrets are read by the operator from that namespace
    (monitoring.coreos.com/v1 ServiceMonitor ``authorization.credentials``, ``tlsConfig.ca.secret``)."""
    endpoint: dict[str, Any] = {
        "port": "https" if tls else "http",
        "path": "/metrics",
        "scheme": "https" if tls else "http",
    }
    if tls:
        endpoint["tlsConfig"] = {
            "ca": {"secret": {"name": INFERENCE_CA_SECRET, "key": "ca.crt"}},
            "serverName": f"{service}.{namespace}.svc",
        }
    if auth_secret is not None:
        endpoint["authorization"] = {"type": "Bearer", "credentials": {"name": auth_secret, "key": "token"}}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": service, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {
            "selector": {"matchLabels": {INSTANCE_LABEL: service}},
            "endpoints": [endpoint],
        },
    }


def alert_routing(alerting: AlertingConfig) -> Object:
    """Every alert to the stack's receiver, its URL read by the operator from the Secret the stack
    names (AlertmanagerConfig v1alpha1: webhookConfigs[].urlSecret, slackConfigs[].apiURL); the chart's
    always-firing Watchdog and InfoInhibitor go nowhere."""
    url = {"name": alerting.secret, "key": "url"}
    target = (
        {"webhookConfigs": [{"urlSecret": url, "sendResolved": True}]}
        if alerting.receiver is AlertReceiver.WEBHOOK
        else {"slackConfigs": [{"apiURL": url, "sendResolved": True}]}
    )
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {"name": ALERT_ROUTING, "namespace": MONITORING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "spec": {
            "route": {
                "receiver": "platform",
                "groupBy": ["alertname", "namespace"],
                "routes": [
                    {
                        "receiver": "silenced",
                        "matchers": [
                            {"name": "alertname", "value": "Watchdog|InfoInhibitor", "matchType": "=~"}
                        ],
                    }
                ],
            },
            "receivers": [{"name": "platform", **target}, {"name": "silenced"}],
        },
    }


# Where the alert on the label-free estimate points its reader (its section says what the estimate is and
# when it is wrong).
ESTIMATE_DOCS = 'docs/lifecycle.md, "The label-free estimate (where labels lag)"'


def estimated_drop_expr(drop: float) -> str:
    """The estimated accuracy drop of each model version, pooled over the servers as the drift monitor
    pools their windows (the estimate is linear in the rows: sum(accuracy * rows) / sum(rows) is the
    estimate over every server's rows), below the same estimate on the version's test split by more than
    ``drop``. The series are the servers' (workloads/inference/drift.py), absent below the minimum rows."""
    only = f'{{estimate="{ESTIMATE_METHOD}"}}'
    rows = f"{ESTIMATED_ROWS}{only}"
    return (
        f"max by (model, version) ({ESTIMATED_REFERENCE}{only})"
        f" - sum by (model, version) ({ESTIMATED_ACCURACY}{only} * {rows})"
        f" / sum by (model, version) ({rows})"
        f" > {drop:g}"
    )


def inference_rules(drift_threshold: float, monitor: MonitorPolicy) -> list[dict[str, Any]]:
    """Alerts on the inference service's own metrics (workloads/inference/metrics.py, drift.py).

    ``monitor``: the stack's ``driftMonitor`` (its defaults where the stack runs none: the servers
    export the estimate either way). The estimated drop holds for as long as ``k`` of the monitor's
    windows can take (the longest time ``k`` consecutive windows of its schedule cover: ``k`` times the
    interval on a regular schedule) before it fires: as long as the monitor can need for its ``k``
    breaches, so the alert is no faster than the monitor and never a single noisy window's."""
    sustained = monitor.sustained_seconds()
    return [
        _rule(
            "InferenceErrorsHigh",
            'sum(rate(inference_responses_total{code=~"5.."}[5m]))'
            " / sum(rate(inference_responses_total[5m])) > 0.01",
            "10m",
            "critical",
            "More than 1% of inference responses are server errors",
        ),
        _rule(
            "InferenceInputDrift",
            f"max by (feature) (inference_drift_psi) > {drift_threshold}",
            "30m",
            "warning",
            "Input feature {{ $labels.feature }} drifted from the training distribution (PSI {{ $value }})",
        ),
        _rule(
            "InferenceEstimatedAccuracyDrop",
            estimated_drop_expr(monitor.estimated_drop),
            f"{sustained // 60}m",
            "warning",
            "The ESTIMATED accuracy of {{ $labels.model }} version {{ $labels.version }} (from its"
            f" confidences, no labels) is more than {monitor.estimated_drop:g} below its estimate on the"
            " test split",
            "An estimate (CBPE), not a measured accuracy: it holds only while the model's confidences stay"
            " calibrated on the new inputs and the same inputs keep their labels (no concept drift);"
            " labels, where they arrive, judge. The drift monitor records each window's estimate"
            f" (mlplatform models history). See {ESTIMATE_DOCS}.",
        ),
    ]


def _rule(
    alert: str, expr: str, for_: str, severity: str, summary: str, description: str | None = None
) -> dict[str, Any]:
    return {
        "alert": alert,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, **({"description": description} if description else {})},
    }


XID_WINDOW = "5m"
GPU_RULES = [
    _rule(
        "GPUAllocatedButIdle",
        'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{namespace!="", pod!=""}) < 5',
        "30m",
        "warning",
        "GPUs held by {{ $labels.namespace }}/{{ $labels.pod }} have been under 5% busy for 30 minutes",
    ),
    # DCGM_FI_DEV_XID_ERRORS is a gauge holding the last XID seen ("Value of the last XID error
    # encountered", dcgm-exporter etc/dcp-metrics-included.csv) and stays there until the exporter or
    # driver restarts (NVIDIA/dcgm-exporter#500, NVIDIA/DCGM#277): alert when it changes to a non-zero
    # value, so one XID fires once and resolves after the window; a restart's drop to 0 does not fire.
    _rule(
        "GPUXidError",
        "max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS > 0"
        f" and changes(DCGM_FI_DEV_XID_ERRORS[{XID_WINDOW}]) > 0)",
        "0m",
        "critical",
        "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID error {{ $value }}",
    ),
    # Uncorrectable memory errors, as H100/H200 report them: row remapping. dcgm-exporter's default
    # counters leave the ECC fields commented out and export these (NVIDIA/dcgm-exporter
    # etc/dcp-metrics-included.csv, the file the GPU operator mounts; cluster review B4).
    _rule(
        "GPUUncorrectableMemoryError",
        "increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[10m]) > 0 or DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
        "0m",
        "critical",
        "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} remapped memory rows for uncorrectable errors"
        " (or failed to): drain the node",
    ),
    _rule(
        "GPUHot",
        "max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP) > 85",
        "10m",
        "warning",
        "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} has run above 85 C for 10 minutes",
    ),
]


def alert_rules(groups: dict[str, list[dict[str, Any]]]) -> Object:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "ml-platform", "namespace": MONITORING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "spec": {"groups": [{"name": name, "rules": rules} for name, rules in groups.items() if rules]},
    }
