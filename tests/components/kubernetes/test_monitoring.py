"""Monitoring where the tier asks for it: DCGM and the inference service scraped (over verified TLS
when the service serves TLS), and alert rules for GPUs and the service applied after the chart."""

from __future__ import annotations

from collections.abc import Callable

from components.kubernetes.monitoring import INFERENCE_AUTH_SECRET, INFERENCE_CA_SECRET
from mlplatform.plan import Plan
from mlplatform.report import HELM_RELEASE, kubernetes_objects


def _prometheus(plan: Plan) -> dict[str, object] | None:
    releases = [r for r in plan.by_type(HELM_RELEASE) if r.inputs["chart"] == "kube-prometheus-stack"]
    return releases[0].inputs if releases else None


def test_enterprise_scrapes_gpus_and_tls_inference_and_alerts(planned: Callable[[str], Plan]) -> None:
    plan = planned("aws-enterprise-prod")
    release = _prometheus(plan)
    assert release is not None
    spec = release["values"]["prometheus"]["prometheusSpec"]  # type: ignore[index]
    jobs = {job["job_name"]: job for job in spec["additionalScrapeConfigs"]}
    assert set(jobs) == {"dcgm-exporter", "inference"}
    assert jobs["inference"]["scheme"] == "https"
    assert jobs["inference"]["tls_config"]["ca_file"].endswith(f"/{INFERENCE_CA_SECRET}/ca.crt")
    assert "insecure_skip_verify" not in jobs["inference"]["tls_config"]
    # The service guards /metrics with its bearer token (drift reveals what it was sent): the scrape
    # presents the token, mounted from its Secret beside the CA.
    assert jobs["inference"]["authorization"] == {
        "type": "Bearer",
        "credentials_file": f"/etc/prometheus/secrets/{INFERENCE_AUTH_SECRET}/token",
    }
    assert spec["secrets"] == [INFERENCE_AUTH_SECRET, INFERENCE_CA_SECRET]
    (rules,) = [
        o
        for o in kubernetes_objects(plan)
        if (o["kind"], o["metadata"]["name"]) == ("PrometheusRule", "ml-platform")
    ]
    alerts = {rule["alert"] for group in rules["spec"]["groups"] for rule in group["rules"]}
    assert {"GPUAllocatedButIdle", "GPUXidError", "InferenceErrorsHigh", "InferenceInputDrift"} <= alerts
    rule_resource = next(r for r in plan.resources if r.type.endswith(":PrometheusRule"))
    chart = next(r for r in plan.by_type(HELM_RELEASE) if r.inputs["chart"] == "kube-prometheus-stack")
    assert chart.urn in rule_resource.dependencies


def test_smb_runs_no_monitoring_stack(planned: Callable[[str], Plan]) -> None:
    plan = planned("aws-smb-dev")
    assert _prometheus(plan) is None
    assert not [o for o in kubernetes_objects(plan) if o["kind"] == "PrometheusRule"]
