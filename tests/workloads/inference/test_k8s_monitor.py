"""The drift monitor's objects beside the inference service (issue 40, docs/lifecycle.md): a CronJob per
served model, its ServiceAccount and NetworkPolicy; built once by workloads/inference/k8s.py, from the
stack key ``workloads.inference.driftMonitor``. Each rule names the contract it comes from."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

import certifi
import pytest

from components.config import PLATFORM_KEY, ConfigError, parse_stack_config
from components.handle import MONITOR_USER
from components.kubernetes.workloads import MONITOR_SECRET, RECORD_CLAIM, registry_users
from judges.kube import labels_match
from judges.pod_security import judge_pod_security
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects
from tests.linters import validate_strictly
from tests.stack_variants import template
from tests.workloads.inference.test_k8s import FOLLOWING, by_kind, make_spec
from workloads.delivery.monitor import from_env
from workloads.delivery.plan import MonitorPolicy
from workloads.inference.k8s import MONITOR_STARTING_DEADLINE_S, MonitorJob, inference_objects
from workloads.registry.record import RECORD_ENV

POLICY = MonitorPolicy(schedule="*/10 * * * *", k=2, m=4)
MONITORED = dataclasses.replace(
    FOLLOWING,
    monitor=MonitorJob(
        policy=POLICY.model_dump_json(by_alias=True),
        schedule=POLICY.schedule,
        registry_secret="registry-drift-monitor",
        record_claim="lifecycle-record",
        ca_secret="digits-ca",
    ),
)
NAME = "digits-drift-monitor"


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


def _cron(spec: Any = MONITORED) -> dict[str, Any]:
    return _named(inference_objects(spec), "CronJob", NAME)


def _env(pod: dict[str, Any]) -> dict[str, str]:
    [container] = pod["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def test_one_window_per_run_never_two_at_once_and_no_burst_of_stale_runs() -> None:
    """batch/v1 CronJob (kubernetes.io "CronJob"): ``concurrencyPolicy: Forbid`` skips a run while the last
    one is still running (two would read the record before either appends, and could both retrain);
    ``startingDeadlineSeconds``: a run missed by more is skipped, and without it a controller that missed
    more than 100 schedules never starts the CronJob again (CronJob limitations)."""
    cron = _cron()
    validate_strictly(cron, "1.31")
    spec = cron["spec"]
    assert spec["schedule"] == "*/10 * * * *"
    assert spec["concurrencyPolicy"] == "Forbid" and "suspend" not in spec
    assert spec["startingDeadlineSeconds"] == MONITOR_STARTING_DEADLINE_S
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0, "a failed window is not retried with stale counters"
    # A run ends before the next one is due, so Forbid never skips a window for a hung one.
    assert job["activeDeadlineSeconds"] <= 10 * 60
    assert job["ttlSecondsAfterFinished"] > 0


def test_the_cron_jobs_variables_are_the_monitors_own_and_name_every_server() -> None:
    """The monitor parses exactly what the CronJob sets (workloads/delivery/monitor.py ``from_env``): every
    ready server through the headless Service, over TLS against the Service's name, with the servers'
    token; the stack's policy; the record on its claim; no training command (a retrain decision is
    recorded, not launched: docs/lifecycle.md)."""
    pod = _cron()["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    env = _env(pod)
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    ca_file = PurePosixPath(env["MONITOR_CA_FILE"])
    assert secrets[mounts[str(ca_file.parent)]] == "digits-ca"
    # The Secret's file exists only in the pod: here, a CA bundle that does.
    settings = from_env(env | {"MONITOR_CA_FILE": certifi.where()})
    assert settings.policy == POLICY and settings.model == FOLLOWING.model_name
    targets = settings.scraper.targets
    assert targets.dns == f"{FOLLOWING.name}-pods.{FOLLOWING.namespace}.svc.cluster.local"
    assert (targets.scheme, targets.port) == ("https", FOLLOWING.port)
    assert targets.tls_name == f"{FOLLOWING.name}.{FOLLOWING.namespace}.svc"
    assert settings.launcher is None
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims[mounts[env[RECORD_ENV]]] == "lifecycle-record"
    assert secrets["registry-client"] == "registry-drift-monitor"


def test_restricted_no_api_token_and_egress_only_to_the_servers() -> None:
    """Pod Security "restricted" (the judge, on the namespace the platform labels restricted); no
    Kubernetes API token (it reads the servers through DNS, no API right); its NetworkPolicy: nothing in,
    out only to the servers' port, and the servers' own policy admits it (DNS and the registry are the
    namespace's ``allow-dns`` and ``allow-registry``)."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ml-inference", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    objects = [namespace, *inference_objects(MONITORED)]
    assert [str(f) for f in judge_pod_security(objects) if f.mandatory] == []
    account = _named(objects, "ServiceAccount", "drift-monitor")
    assert account["automountServiceAccountToken"] is False
    assert by_kind(objects, "Role") == [] and by_kind(objects, "RoleBinding") == []
    pod_template = _cron()["spec"]["jobTemplate"]["spec"]["template"]
    pod = pod_template["spec"]
    assert pod["serviceAccountName"] == "drift-monitor" and pod["automountServiceAccountToken"] is False
    [container] = pod["containers"]
    assert container["resources"]["requests"] == container["resources"]["limits"]
    policy = _named(objects, "NetworkPolicy", NAME)["spec"]
    assert labels_match(policy["podSelector"], pod_template["metadata"]["labels"])
    assert policy["ingress"] == [] and policy["policyTypes"] == ["Ingress", "Egress"]
    [egress] = policy["egress"]
    assert egress["ports"] == [{"port": FOLLOWING.port, "protocol": "TCP"}]
    [to] = egress["to"]
    servers = _named(objects, "Deployment", FOLLOWING.name)["spec"]["template"]["metadata"]["labels"]
    assert labels_match(to["podSelector"], servers)
    # With callers narrowed to namespaces, the servers' policy still admits the monitor's pods.
    narrowed = inference_objects(dataclasses.replace(MONITORED, ingress_namespaces=("ml-gateway",)))
    [rule] = _named(narrowed, "NetworkPolicy", FOLLOWING.name)["spec"]["ingress"]
    labels = pod_template["metadata"]["labels"]
    assert any(labels_match(f["podSelector"], labels) for f in rule["from"] if "podSelector" in f)
    # Its pods are not the servers': the Service, the PDB and the servers' policy never select them.
    service = _named(objects, "Service", FOLLOWING.name)["spec"]["selector"]
    assert not labels_match({"matchLabels": service}, pod_template["metadata"]["labels"])


def test_without_a_rollout_the_monitor_brings_the_headless_service_it_reads_through() -> None:
    objects = inference_objects(dataclasses.replace(MONITORED, rollout=None))
    assert [s["metadata"]["name"] for s in by_kind(objects, "Service")] == ["digits", "digits-pods"]
    with_rollout = inference_objects(MONITORED)
    assert [s["metadata"]["name"] for s in by_kind(with_rollout, "Service")] == ["digits", "digits-pods"]


def test_a_monitor_needs_the_registry() -> None:
    with pytest.raises(ValueError, match="the drift monitor reads the registry's @champion"):
        make_spec(monitor=MONITORED.monitor)


def test_the_stacks_drift_monitor_reaches_its_cron_job_with_its_own_registry_user(
    planned: Callable[[str], Plan],
) -> None:
    """aws-enterprise-prod ships ``driftMonitor``: its CronJob, its registry user with EDIT on the served
    model (it rolls back), its Secret, and the stack's lifecycle record: the Object-Locked bucket the
    rollout appends to (one history for ``models history``), reached as the rollout reaches it, as its own
    IRSA role; no claim on shared storage."""
    objects = kubernetes_objects(planned("aws-enterprise-prod"))
    cron = _named(objects, "CronJob", "inference-drift-monitor")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    policy = json.loads(_env(pod)["MONITOR_POLICY"])
    assert (policy["k"], policy["m"], policy["schedule"]) == (3, 5, "*/15 * * * *")
    assert cron["spec"]["schedule"] == "*/15 * * * *"
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets["registry-client"] == MONITOR_SECRET
    claims = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert not any(c["metadata"]["name"] == RECORD_CLAIM for c in claims)
    assert not any("persistentVolumeClaim" in v for v in pod["volumes"])
    rollout = _named(objects, "CronJob", "inference-rollout")["spec"]["jobTemplate"]["spec"]["template"]
    rollout_env = _env(rollout["spec"])
    assert _env(pod)[RECORD_ENV] == rollout_env[RECORD_ENV] and rollout_env[RECORD_ENV].startswith("s3://")
    assert _env(pod)["AWS_REGION"] == rollout_env["AWS_REGION"]
    template_annotations = cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["annotations"]
    reaches = {k: v for k, v in rollout["metadata"]["annotations"].items() if k.startswith("reaches.")}
    assert reaches.items() <= template_annotations.items()
    account = _named(objects, "ServiceAccount", "drift-monitor")["metadata"]["annotations"]
    rollout_account = _named(objects, "ServiceAccount", "rollout")["metadata"]["annotations"]
    assert set(account) == {"eks.amazonaws.com/role-arn"}
    assert account["eks.amazonaws.com/role-arn"] != rollout_account["eks.amazonaws.com/role-arn"]
    config = parse_stack_config(template("aws-enterprise-prod"), "Pulumi.aws-enterprise-prod.yaml")
    [user] = [u for u in registry_users(config) if u.username == MONITOR_USER]
    assert user.secret == MONITOR_SECRET and [p for _, p in user.grants] == ["EDIT"]


# A rollout that judges a drift retrain on labelled rows beside the champion (the shipped stack's gates).
LABELLED_ROLLOUT = {"labelledSet": "mlflow-artifacts:/labelled/r.npz", "gates": {"maxAccuracyDrop": 0.01}}
RETRAINS_UNJUDGED = (
    "workloads.inference.rollout.gates.maxAccuracyDrop: the driftMonitor's retrains must be judged beside"
    " the champion on labelled rows: set labelledSet with gates.maxAccuracyDrop"
)
# A floor on the labelled set compares nothing with the champion (review rev40c A3, plants p3 and p5).
FLOOR_ONLY = {"labelledSet": "mlflow-artifacts:/labelled/r.npz", "gates": {"minAccuracy": 0.9}}


def _raw(stack: str, inference: dict[str, Any]) -> dict[str, Any]:
    raw = template(stack)
    raw[PLATFORM_KEY]["workloads"]["registry"] = {}
    raw[PLATFORM_KEY]["workloads"]["inference"] |= inference
    return raw


@pytest.mark.parametrize(
    ("inference", "line"),
    [
        ({"driftMonitor": {"k": 4, "m": 3}}, "workloads.inference.driftMonitor: k (4) must not exceed m (3)"),
        ({"driftMonitor": {"falseAlarmRate": 2}}, "workloads.inference.driftMonitor.falseAlarmRate: Input"),
        ({"driftMonitor": {"estimatedDrop": 0}}, "workloads.inference.driftMonitor.estimatedDrop: Input"),
        ({"driftMonitor": {"actOnEstimate": "yes"}}, "workloads.inference.driftMonitor.actOnEstimate: Input"),
        (
            {"driftMonitor": {"cooldownSecond": 60}},
            "workloads.inference.driftMonitor.cooldownSecond: unknown",
        ),
        (
            {"driftMonitor": {"schedule": "every 15 minutes"}},
            "workloads.inference.driftMonitor.schedule: 'every 15 minutes' is not a cron schedule",
        ),
        (
            {"driftMonitor": {"schedule": "*/15 24 * * *"}},
            "workloads.inference.driftMonitor.schedule: '24' is outside the hour's 0-23",
        ),
        (
            {"driftMonitor": {"schedule": "0 0 30 2 *"}},
            "workloads.inference.driftMonitor.schedule: '0 0 30 2 *' runs less than twice in eight years",
        ),
        (
            {"driftMonitor": {"labelledSet": "/data/labels.npz"}, "rollout": LABELLED_ROLLOUT},
            "workloads.inference.driftMonitor.labelledSet: the driftMonitor Job reads the labelled set",
        ),
        # Review rev40b A3: a retrain disagrees with the stale champion by design, so a rollout judging
        # shadow agreement without a labelled set (the plan's defaults included) can only stop it.
        ({"driftMonitor": {}}, RETRAINS_UNJUDGED),
        ({"driftMonitor": {}, "rollout": {"gates": {"minShadowAgreement": 0.5}}}, RETRAINS_UNJUDGED),
        # Review rev40c C1 (plant p2): no gate at all leaves a retrain to --force.
        ({"driftMonitor": {}, "rollout": {"gates": {"minShadowAgreement": None}}}, RETRAINS_UNJUDGED),
        # Review rev40c A3 (plants p3, p5): a floor alone, even as a declared pre-approved path, passes a
        # retrain worse than the champion.
        ({"driftMonitor": {}, "rollout": FLOOR_ONLY}, RETRAINS_UNJUDGED),
        ({"driftMonitor": {}, "rollout": {**FLOOR_ONLY, "promote": True}}, RETRAINS_UNJUDGED),
        (
            {"modelVersion": "1", "driftMonitor": {}},
            "workloads.inference.driftMonitor: the monitor reads the registry's @champion",
        ),
    ],
)
def test_a_bad_drift_monitor_key_is_one_line_naming_it(inference: dict[str, Any], line: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(_raw("aws-smb-dev", inference), "Pulumi.aws-smb-dev.yaml")
    [problem] = raised.value.problems
    assert problem.startswith(f"Pulumi.aws-smb-dev.yaml: ml-platform:platform.{line}"), problem


@pytest.mark.parametrize(
    "rollout",
    [
        LABELLED_ROLLOUT,
        {**LABELLED_ROLLOUT, "gates": {"maxAccuracyDrop": 0.01, "minShadowAgreement": None}},
        {**LABELLED_ROLLOUT, "gates": {"maxAccuracyDrop": 0.01, "minAccuracy": 0.9}, "promote": True},
    ],
)
def test_a_drift_monitor_with_a_rollout_that_can_pass_its_retrains_is_accepted(
    rollout: dict[str, Any],
) -> None:
    config = parse_stack_config(
        _raw("aws-smb-dev", {"driftMonitor": {}, "rollout": rollout}), "Pulumi.aws-smb-dev.yaml"
    )
    assert config.workloads.inference is not None and config.workloads.inference.drift_monitor is not None
