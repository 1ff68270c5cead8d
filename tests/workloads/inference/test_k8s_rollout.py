"""The rollout's room beside the inference service (issue 29): a suspended CronJob as its Job template,
the headless Service it reads every server through, its identity and its NetworkPolicy. Each rule names
the contract it comes from."""

from __future__ import annotations

import calendar
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from components.kubernetes.monitoring import inference_service_monitor
from components.kubernetes.registry import ROLLOUT_SECRET
from judges.kube import labels_match, pods, service_selects
from judges.pod_security import judge_pod_security
from mlplatform.evidence import documented_exemptions
from mlplatform.graph import Plan, PlannedResource
from tests.workloads.inference.test_k8s import FOLLOWING, PLAN, by_kind, make_spec
from workloads.inference.k8s import PRE_APPROVED_REASON, RolloutJob, inference_objects


def cron_job() -> dict[str, Any]:
    [found] = by_kind(inference_objects(FOLLOWING), "CronJob")
    return found


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_a_cron_job_needs_a_schedule_even_when_suspended() -> None:
    """batch/v1 CronJobSpec: ``schedule`` is required and ``suspend`` only stops subsequent executions
    (Kubernetes API reference, CronJob v1 batch); the schema kubernetes-validate ships refuses it absent."""
    cron = cron_job()
    assert cron["spec"]["suspend"] is True
    kubernetes_validate.validate(cron, "1.31", strict=True)
    unscheduled = json.loads(json.dumps(cron))
    del unscheduled["spec"]["schedule"]
    with pytest.raises(kubernetes_validate.ValidationError, match="schedule"):
        kubernetes_validate.validate(unscheduled, "1.31", strict=True)


def test_the_schedule_is_a_real_date_so_the_controller_reads_it_as_valid() -> None:
    """The CronJob controller reports a schedule whose next two times coincide (a date that never
    occurs, "31 2") as invalid on every sync (kubernetes/kubernetes pkg/controller/cronjob/utils.go
    ``mostRecentScheduleTime``): standard five fields, a day that exists in its month."""
    minute, hour, day, month, weekday = cron_job()["spec"]["schedule"].split()
    assert (int(minute), int(hour), weekday) == (0, 0, "*")
    assert 1 <= int(day) <= calendar.monthrange(2025, int(month))[1]


def test_one_try_a_deadline_and_a_time_to_live() -> None:
    """A failed rollout has already moved traffic: the Job controller must not start it again
    (``backoffLimit: 0``: the Job fails at its first failed pod, kubernetes.io "Jobs", pod backoff failure
    policy), the pod is not restarted in place (``restartPolicy: Never``), a wedged one is stopped
    (``activeDeadlineSeconds``) and a finished Job is cleaned up (``ttlSecondsAfterFinished``)."""
    job = cron_job()["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    assert job["activeDeadlineSeconds"] == 7200
    assert job["ttlSecondsAfterFinished"] > 0


def test_the_rollout_runs_the_inference_image_with_its_settings() -> None:
    pod = cron_job()["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [server] = by_kind(inference_objects(FOLLOWING), "Deployment")
    [container] = pod["containers"]
    assert container["image"] == server["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"] == ["python", "-m", "workloads.delivery"]
    env = env_of(container)
    assert env == {
        "MLFLOW_TRACKING_URI": "http://registry.ml-registry.svc.cluster.local:5000",
        "ROLLOUT_MODEL": "digits",
        "ROLLOUT_METRICS_DNS": "digits-pods.ml-inference.svc.cluster.local",
        "ROLLOUT_METRICS_PORT": "8080",
        "ROLLOUT_METRICS_SCHEME": "https",
        "ROLLOUT_SERVICE_URL": "https://digits.ml-inference.svc.cluster.local:8080",
        "HOME": "/tmp",
        "MLFLOW_TRACKING_USERNAME_FILE": "/var/run/secrets/registry-client/username",
        "MLFLOW_TRACKING_PASSWORD_FILE": "/var/run/secrets/registry-client/password",
        "ROLLOUT_TOKEN_FILE": "/var/run/secrets/ml-platform/auth/token",
        "ROLLOUT_CA_FILE": "/var/run/secrets/ml-platform/ca/ca.crt",
        "ROLLOUT_TLS_SERVER_NAME": "digits.ml-inference.svc",
        "ROLLOUT_PLAN": PLAN,
    }
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"registry-client": "registry-rollout", "auth": "digits-token", "ca": "digits-ca"}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/var/run/secrets/registry-client", "/var/run/secrets/ml-platform/auth", "/tmp"} <= mounts
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]


def test_without_auth_or_tls_the_rollout_gets_no_secret_for_them() -> None:
    plain = make_spec(
        model_version=None,
        model_volume=None,
        registry_uri="http://registry.ml-registry.svc.cluster.local:5000",
        rollout=RolloutJob(plan=None, deadline_s=600, registry_secret=None),
    )
    [cron] = by_kind(inference_objects(plain), "CronJob")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    env = env_of(pod["containers"][0])
    assert env["ROLLOUT_SERVICE_URL"].startswith("http://")
    assert env["ROLLOUT_METRICS_SCHEME"] == "http"
    assert not {
        "ROLLOUT_TOKEN_FILE",
        "ROLLOUT_CA_FILE",
        "ROLLOUT_TLS_SERVER_NAME",
        "ROLLOUT_PLAN",
        "MLFLOW_TRACKING_PASSWORD_FILE",
    } & set(env)
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]


def test_the_rollout_pod_is_restricted_and_holds_no_api_token() -> None:
    """Pod Security "restricted" (the judge, on the namespace the platform labels restricted), and no
    Kubernetes API token: the rollout needs no API right (workloads/delivery/contract.py)."""
    objects = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": "ml-inference",
                "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
            },
        },
        *inference_objects(FOLLOWING),
    ]
    assert [str(f) for f in judge_pod_security(objects) if f.mandatory] == []
    [account] = [a for a in by_kind(objects, "ServiceAccount") if a["metadata"]["name"] == "rollout"]
    assert account["automountServiceAccountToken"] is False
    pod = cron_job()["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "rollout" and pod["automountServiceAccountToken"] is False


def test_the_headless_service_lists_every_ready_server_and_nothing_else() -> None:
    """``clusterIP: None`` makes a Service headless: DNS answers with the ready endpoints' own addresses
    (kubernetes.io "Service", headless Services; "DNS for Services and Pods"); with
    ``publishNotReadyAddresses: false`` a starting or draining pod is not among them."""
    objects = inference_objects(FOLLOWING)
    services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
    headless = services["digits-pods"]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is False
    assert "type" not in headless["spec"]
    selected = [
        p.owner.kind for p in pods(objects) if service_selects(headless["spec"]["selector"], p.labels)
    ]
    assert selected == ["Deployment"], "the servers only, never the rollout's own pod"
    assert headless["spec"]["ports"][0]["targetPort"] == "http"


def test_one_service_per_server_for_prometheus() -> None:
    """The ServiceMonitor selects Services by the service's instance label; a second Service carrying it
    would make Prometheus scrape every pod twice and double every rate."""
    monitor = inference_service_monitor("ml-inference", "digits", tls=True, auth_secret="digits-token")
    selected = [
        s["metadata"]["name"]
        for s in by_kind(inference_objects(FOLLOWING), "Service")
        if labels_match(monitor["spec"]["selector"], s["metadata"]["labels"])
    ]
    assert selected == ["digits"]


def test_the_servers_admit_the_rollout_where_ingress_is_restricted() -> None:
    spec = make_spec(
        model_version=None,
        model_volume=None,
        registry_uri="http://registry.ml-registry.svc.cluster.local:5000",
        ingress_namespaces=("ml-gateway",),
        rollout=RolloutJob(plan=None, deadline_s=600, registry_secret=None),
    )
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(inference_objects(spec), "NetworkPolicy")}
    [rule] = policies["digits"]["ingress"]
    assert {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/instance": "digits-rollout",
                "app.kubernetes.io/component": "rollout",
            }
        }
    } in rule["from"]
    rollout = policies["digits-rollout"]
    assert rollout["ingress"] == []
    assert rollout["egress"] == [
        {
            "to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "digits"}}}],
            "ports": [{"port": 8080, "protocol": "TCP"}],
        }
    ]


def test_a_pinned_version_gets_no_rollout() -> None:
    kinds = {o["kind"] for spec in (make_spec(),) for o in inference_objects(spec)}
    assert "CronJob" not in kinds
    assert [s["metadata"]["name"] for s in by_kind(inference_objects(make_spec()), "Service")] == ["digits"]


def test_the_rollout_has_time_to_send_the_traffic_back_when_it_is_stopped() -> None:
    """A Job past ``activeDeadlineSeconds``, a deleted Job and a drained node all end the pod the same way:
    SIGTERM, then SIGKILL once ``terminationGracePeriodSeconds`` has passed (kubernetes.io "Pod Lifecycle",
    termination of Pods; default 30 s). The rollout's SIGTERM handler needs that time to set the split and
    shadow back to 0 and record why, so the pod states it; and the cluster autoscaler does not evict a pod
    annotated ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`` to remove its node
    (cluster-autoscaler FAQ, "What types of pods can prevent CA from removing a node?")."""
    template = cron_job()["spec"]["jobTemplate"]["spec"]["template"]
    assert template["spec"]["terminationGracePeriodSeconds"] >= 60
    assert template["metadata"]["annotations"] == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def test_jobs_made_from_the_template_are_kept_as_long_as_their_ttl_says() -> None:
    """The CronJob controller deletes the oldest finished Jobs it owns beyond ``successfulJobsHistoryLimit``
    and ``failedJobsHistoryLimit`` (defaults 3 and 1) on every sync, suspended or not (kubernetes.io
    "CronJob", jobs history limits; pkg/controller/cronjob/cronjob_controllerv2.go ``cleanupFinishedJobs``),
    and it owns the Jobs ``kubectl create job --from=cronjob/...`` makes: with the defaults, the second
    failed rollout's log would delete the first's days before its ttl. Explicit limits keep ten of each."""
    cron = cron_job()
    assert cron["spec"]["successfulJobsHistoryLimit"] == 10
    assert cron["spec"]["failedJobsHistoryLimit"] == 10
    kubernetes_validate.validate(cron, "1.31", strict=True)


def test_the_rollout_pod_asks_for_no_cloud_identity() -> None:
    """On Azure the platform labels the inference pods ``azure.workload.identity/use: "true"`` (their
    ServiceAccount names a client id) so the webhook injects the identity; the rollout needs none (only
    the registry, with its own credentials) and its ServiceAccount names no client id, so its pods must
    not ask for one."""
    azure = dataclasses.replace(FOLLOWING, pod_labels={"azure.workload.identity/use": "true"})
    objects = inference_objects(azure)
    [cron] = by_kind(objects, "CronJob")
    [server] = by_kind(objects, "Deployment")
    assert (
        "azure.workload.identity/use"
        not in cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    )
    assert server["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"] == "true"


def test_the_page_matches_the_job_it_describes() -> None:
    """docs/delivery.md names every variable the Job gets, and asks the user to create no Secret the stack
    already makes (the rollout's registry Secret comes with its user, components/kubernetes/workloads.py)."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "delivery.md").read_text()
    [container] = cron_job()["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert [name for name in env_of(container) if name != "HOME" and f"`{name}`" not in page] == []
    created = re.findall(r"create secret generic ([a-z0-9-]+)", page)
    assert ROLLOUT_SECRET not in created


def test_a_declared_pre_approved_path_is_an_exemption_the_evidence_pack_lists() -> None:
    """Issue 40 item 3 ("a pre-approved automatic path ... declared in the stack"); review rev40b A4: the
    auditor's exceptions register names every way past the promotion approval, with its reason."""
    assert FOLLOWING.rollout is not None
    why = "the rollout's gates are this stack's declared pre-approved promotion path"
    rollout = dataclasses.replace(FOLLOWING.rollout, pre_approved=why)
    declared = dataclasses.replace(FOLLOWING, rollout=rollout)
    [cron] = by_kind(inference_objects(declared), "CronJob")
    assert cron["metadata"]["annotations"] == {PRE_APPROVED_REASON: why}
    resource = PlannedResource(
        "urn:pulumi:s::p::kubernetes:batch/v1:CronJob::rollout",
        "kubernetes:batch/v1:CronJob",
        "rollout",
        None,
        True,
        None,
        cron,
    )
    assert documented_exemptions(Plan("p", "s", [resource])) == ((resource.urn, PRE_APPROVED_REASON, why),)
    assert "annotations" not in cron_job()["metadata"], "none where nothing is declared"
