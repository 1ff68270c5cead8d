"""Monitoring: kube-prometheus-stack scraping the GPU operator's DCGM exporter and the inference
service, with alert rules for idle GPUs, GPU errors and a failing or drifting inference service.

Rules are a PrometheusRule object (built here, applied after the chart that installs its CRD), so they
are reviewed, exported and policy-checked like every other object.
"""

from __future__ import annotations

import json
import re
from typing import Any

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

RELEASE = "kube-prometheus-stack"
# The prometheus-operator pods and its admission webhook's port, which kube-apiserver calls
# (kube-prometheus-stack 88.5.3: templates/prometheus-operator/service.yaml selector, targetPort
# ``https`` = containerPort prometheusOperator.tls.internalPort, 10250 in values.yaml).
OPERATOR_BACKEND = ApiServerBackend({"app": f"{RELEASE}-operator", "release": RELEASE}, (10250,))
# A Secret in the monitoring namespace holding ``ca.crt``, the CA that signed the inference service's
# certificate, so Prometheus verifies what it scrapes over TLS (README: "Monitoring").
INFERENCE_CA_SECRET = "inference-ca"
# A copy of ml-inference's `inference-auth` Secret (key `token`) in monitoring, for the scrape.
INFERENCE_AUTH_SECRET = "inference-auth"
# Where the Prometheus operator mounts prometheusSpec.secrets (kube-prometheus-stack values.yaml).
_SECRETS_DIR = "/etc/prometheus/secrets"
_SECRET_PATH = re.compile(re.escape(_SECRETS_DIR) + r"/([^/]+)/")


def _endpoints_job(job: str, namespace: str, keep_service: str, scheme: str = "http") -> dict[str, Any]:
    """Scrape every endpoint of one Service, labelled with the pod it came from."""
    return {
        "job_name": job,
        "scheme": scheme,
        "kubernetes_sd_configs": [{"role": "endpoints", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_service_name"], "regex": keep_service, "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
    }


def prometheus_chart(handle: ClusterHandle, scrape_jobs: list[dict[str, Any]]) -> Chart:
    """kube-prometheus-stack (prometheus-community), with our scrape jobs and rule selection open to
    PrometheusRule objects outside the chart. Secrets the jobs' TLS settings name are mounted. The node
    exporter runs on every node, so it tolerates every pool's taints."""
    secrets = sorted({name for job in scrape_jobs for name in _SECRET_PATH.findall(json.dumps(job))})
    return Chart(
        release=RELEASE,
        pin=pin("kube-prometheus-stack", handle.kubernetes_version),
        namespace=MONITORING_NAMESPACE,
        values={
            "prometheus": {
                "prometheusSpec": {
                    "retention": "15d",
                    "ruleSelectorNilUsesHelmValues": False,
                    "serviceMonitorSelectorNilUsesHelmValues": False,
                    "additionalScrapeConfigs": scrape_jobs,
                    "secrets": secrets,
                }
            },
            # Grafana's chart default admin password is public; teams attach their managed Grafana
            # (Amazon Managed Grafana / Azure Managed Grafana) to this Prometheus instead.
            "grafana": {"enabled": False},
            "prometheus-node-exporter": {
                "tolerations": tolerations(handle.pools),
                "resources": resources("250m", "180Mi", "10m", "32Mi"),
                "containerSecurityContext": RESTRICTED_CONTAINER,
            },
            "kube-state-metrics": {"resources": resources("500m", "512Mi", "10m", "64Mi")},
            "prometheusOperator": {
                "resources": resources("500m", "512Mi", "100m", "128Mi"),
                "admissionWebhooks": {"patch": {"resources": resources("100m", "128Mi", "10m", "32Mi")}},
            },
        },
        api_server_backend=OPERATOR_BACKEND,
    )


def gpu_scrape_job() -> dict[str, Any]:
    return _endpoints_job("dcgm-exporter", GPU_OPERATOR_NAMESPACE, "nvidia-dcgm-exporter")


def inference_scrape_job(namespace: str, service: str, tls: bool, auth: bool) -> dict[str, Any]:
    """The inference service's /metrics: over TLS verified with its CA, and with the service's bearer
    token where /v1 needs one (the service guards /metrics with the same token: drift leaks inputs)."""
    job = _endpoints_job("inference", namespace, service, "https" if tls else "http")
    if tls:
        job["tls_config"] = {
            "ca_file": f"{_SECRETS_DIR}/{INFERENCE_CA_SECRET}/ca.crt",
            "server_name": f"{service}.{namespace}.svc",
        }
    if auth:
        job["authorization"] = {
            "type": "Bearer",
            "credentials_file": f"{_SECRETS_DIR}/{INFERENCE_AUTH_SECRET}/token",
        }
    return job


def inference_rules(drift_threshold: float) -> list[dict[str, Any]]:
    """Alerts on the inference service's own metrics (workloads/inference/metrics.py, drift.py)."""
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
    ]


def _rule(alert: str, expr: str, for_: str, severity: str, summary: str) -> dict[str, Any]:
    return {
        "alert": alert,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {"summary": summary},
    }


GPU_RULES = [
    _rule(
        "GPUAllocatedButIdle",
        'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""}) < 5',
        "30m",
        "warning",
        "GPUs held by {{ $labels.namespace }}/{{ $labels.pod }} have been under 5% busy for 30 minutes",
    ),
    _rule(
        "GPUXidError",
        "max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS) > 0",
        "1m",
        "critical",
        "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID error {{ $value }}",
    ),
    _rule(
        "GPUDoubleBitEccError",
        "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0",
        "0m",
        "critical",
        "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} had uncorrectable ECC errors: drain the node",
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
