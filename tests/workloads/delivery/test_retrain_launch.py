"""The drift monitor's retrain in the cluster (issue 40, docs/lifecycle.md): on a retrain decision it creates
the training workload's Job, built by the platform's own training builder and carried in a ConfigMap,
through the Kubernetes API as its own ServiceAccount, whose one right is ``create`` on batch Jobs in the
training namespace.

The API server here is a small HTTPS server on loopback speaking the Kubernetes API for what the monitor
sends (``POST /apis/batch/v1/namespaces/NS/jobs``; ``Status`` bodies on refusal, kubernetes.io "API
Concepts"): it authenticates the bearer token and authorizes with the planned Roles and bindings (RBAC's
rules: kubernetes.io "Using RBAC Authorization"). The client is the monitor's own, unchanged: token and
CA read from the pod's projected files, the server's certificate verified for the address the kubelet
gives (``KUBERNETES_SERVICE_HOST``)."""

from __future__ import annotations

import json
import shutil
import ssl
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from components.config import PLATFORM_KEY
from judges.cel import judge_cel
from judges.kube import CARRIED_KEY as JUDGED_KEY
from judges.kube import CARRIED_LABEL as JUDGED_LABEL
from judges.kube import carried
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects
from tests.certificates import self_signed
from tests.http_stub import InThread, base_url, loopback
from tests.stack_variants import template
from workloads.delivery.monitor import (
    API_HOST_ENV,
    API_PORT_ENV,
    KubernetesLauncher,
    from_env,
    kubernetes_launcher,
)
from workloads.delivery.runner import RolloutError
from workloads.inference.k8s import CARRIED_KEY, CARRIED_LABEL
from workloads.registry.lineage import TRIGGER_ENV

STACK = "aws-enterprise-prod"
MONITOR = ("ml-inference", "drift-monitor")
TOKEN = "monitor-token-" + uuid.uuid4().hex


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


@pytest.fixture(scope="module")
def objects(planned: Callable[[str], Plan]) -> list[dict[str, Any]]:
    return kubernetes_objects(planned(STACK))


@pytest.fixture(scope="module")
def retrain_job(objects: list[dict[str, Any]]) -> dict[str, Any]:
    carrier = _named(objects, "ConfigMap", "inference-drift-monitor-retrain")
    job: dict[str, Any] = json.loads(carrier["data"][CARRIED_KEY])
    return job


def _rules(objects: list[dict[str, Any]], namespace: str, account: str) -> list[tuple[str | None, Any]]:
    """Every rule a ServiceAccount holds in the plan, with the namespace it applies in (None: cluster)."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}
    found: list[tuple[str | None, Any]] = []
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == account and s.get("namespace") == namespace
            for s in binding.get("subjects") or []
        ):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace")
        role = roles.get((ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"]))
        found += [(scope, rule) for rule in (role or {}).get("rules", [])]
    return found


def _allows(
    rules: list[tuple[str | None, Any]], verb: str, group: str, resource: str, namespace: str
) -> bool:
    """RBAC's union of rules (no deny): a rule matches on its API group, resource and verb, ``*`` any."""

    def has(values: list[str], value: str) -> bool:
        return value in values or "*" in values

    return any(
        (scope is None or scope == namespace)
        and has(rule.get("apiGroups", []), group)
        and has(rule.get("resources", []), resource)
        and has(rule.get("verbs", []), verb)
        for scope, rule in rules
    )


@dataclass
class ApiServer:
    """The Kubernetes API for creating Jobs, on loopback over TLS; what it was sent is kept."""

    rules: list[tuple[str | None, Any]]
    url: str = ""
    created: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Mapping[str, str]]] = field(default_factory=list)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _handler(api: ApiServer) -> type[BaseHTTPRequestHandler]:
    user = f"system:serviceaccount:{MONITOR[0]}:{MONITOR[1]}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, code: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            api.requests.append(("POST", self.path, dict(self.headers)))
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._answer(401, _status(401, "Unauthorized", "Unauthorized"))
                return
            parts = self.path.strip("/").split("/")
            if parts[:3] != ["apis", "batch", "v1"] or len(parts) != 6 or parts[5] != "jobs":
                self._answer(
                    404, _status(404, "NotFound", "the server could not find the requested resource")
                )
                return
            namespace = parts[4]
            if not _allows(api.rules, "create", "batch", "jobs", namespace):
                message = (
                    f'jobs.batch is forbidden: User "{user}" cannot create resource "jobs" in API group '
                    f'"batch" in the namespace "{namespace}"'
                )
                self._answer(403, _status(403, "Forbidden", message))
                return
            name = body["metadata"]["name"]
            if body["metadata"].get("namespace", namespace) != namespace:
                self._answer(400, _status(400, "BadRequest", "the namespace of the object does not match"))
                return
            if (namespace, name) in api.created:
                self._answer(409, _status(409, "AlreadyExists", f'jobs.batch "{name}" already exists'))
                return
            body["metadata"] |= {"uid": str(uuid.uuid4()), "namespace": namespace}
            api.created[(namespace, name)] = body
            self._answer(201, body)

    return Handler


@pytest.fixture(scope="module")
def api_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The API server's certificate for its address, as a cluster's is for the ``kubernetes`` Service IP."""
    return self_signed(tmp_path_factory.mktemp("api-tls"), "/CN=kube-apiserver", "IP:127.0.0.1")


@pytest.fixture
def api(objects: list[dict[str, Any]], api_cert: tuple[Path, Path]) -> Iterator[ApiServer]:
    state = ApiServer(_rules(objects, *MONITOR))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(*api_cert)
    with InThread(loopback(_handler(state), tls)) as server:
        state.url = base_url(server, "https")
        yield state


@pytest.fixture
def pod(
    tmp_path: Path, objects: list[dict[str, Any]], api: ApiServer, api_cert: tuple[Path, Path]
) -> tuple[Path, dict[str, str]]:
    """The monitor pod's files (its ServiceAccount's token and the cluster CA, the retrain Job from its
    ConfigMap) and the address the kubelet sets."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN)
    shutil.copy(api_cert[0], account / "ca.crt")
    carrier = _named(objects, "ConfigMap", "inference-drift-monitor-retrain")
    (tmp_path / CARRIED_KEY).write_text(carrier["data"][CARRIED_KEY])
    host, port = api.url.removeprefix("https://").split(":")
    return account, {API_HOST_ENV: host, API_PORT_ENV: port, "job": str(tmp_path / CARRIED_KEY)}


def _launcher(pod: tuple[Path, dict[str, str]]) -> KubernetesLauncher:
    account, environ = pod
    return kubernetes_launcher(Path(environ["job"]), environ, account)


def test_a_retrain_creates_the_planned_job_queued_and_suspended_as_the_monitor(
    retrain_job: dict[str, Any], api: ApiServer, pod: tuple[Path, dict[str, str]]
) -> None:
    """The Job created is the one the plan carries (the training builder's), with only the trigger added
    (the trainer tags it on the run and the version); in the training namespace's LocalQueue and
    suspended, so Kueue admits it (Kueue docs, "Run a Kubernetes Job"); sent with the pod's token."""
    launched = _launcher(pod).launch("digits-mlp", None, "digits-mlp/drift-window/2026-11-29T10:00:00")
    assert launched.ok and not launched.finished, launched.detail
    assert "Job ml-training/digits-mlp-retrain created in LocalQueue default" in launched.detail
    assert "suspended until Kueue admits it" in launched.detail
    [(method, path, headers)] = api.requests
    assert (method, path) == ("POST", "/apis/batch/v1/namespaces/ml-training/jobs")
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    sent = api.created[("ml-training", "digits-mlp-retrain")]
    assert sent["spec"]["suspend"] is True
    assert sent["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    for container in sent["spec"]["template"]["spec"]["containers"]:
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[TRIGGER_ENV] == "digits-mlp/drift-window/2026-11-29T10:00:00"
        container["env"] = [e for e in container["env"] if e["name"] != TRIGGER_ENV]
    sent["metadata"].pop("uid")
    assert sent == retrain_job


def test_one_retrain_job_at_a_time_a_second_is_refused_and_said_so(
    api: ApiServer, pod: tuple[Path, dict[str, str]]
) -> None:
    """Its name is fixed: while the last retrain's Job is kept, the API answers 409 AlreadyExists, which
    the monitor records as a failed launch (no retry before the cooldown)."""
    launcher = _launcher(pod)
    assert launcher.launch("digits-mlp", None, "first").ok
    second = launcher.launch("digits-mlp", None, "second")
    assert not second.ok
    assert second.detail == (
        "Job ml-training/digits-mlp-retrain not created: HTTP 409 AlreadyExists: "
        'jobs.batch "digits-mlp-retrain" already exists'
    )


def test_the_monitors_role_is_create_on_jobs_in_the_training_namespace_and_nothing_else(
    objects: list[dict[str, Any]],
    api: ApiServer,
    pod: tuple[Path, dict[str, str]],
    retrain_job: dict[str, Any],
) -> None:
    """Least privilege (kubernetes.io "RBAC Good Practices": minimal permissions, no wildcards, namespaced
    Roles over ClusterRoles): one Role in ml-training, one rule, and no other binding to the account."""
    rules = _rules(objects, *MONITOR)
    assert rules == [("ml-training", {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]})]
    for verb in ("get", "list", "watch", "update", "patch", "delete", "deletecollection"):
        assert not _allows(rules, verb, "batch", "jobs", "ml-training"), verb
    assert not _allows(rules, "create", "", "pods", "ml-training")
    assert not _allows(rules, "create", "batch", "jobs", "ml-inference")
    assert not _allows(rules, "create", "batch", "cronjobs", "ml-training")
    # Elsewhere, the API refuses it: a Job aimed at its own namespace is Forbidden, in one line.
    account, _ = pod
    job = {**retrain_job, "metadata": {**retrain_job["metadata"], "namespace": "ml-inference"}}
    elsewhere = KubernetesLauncher(job, api.url, account / "token", _launcher(pod).tls)
    refused = elsewhere.launch("digits-mlp", None, "x")
    assert not refused.ok
    assert refused.detail.startswith(
        "Job ml-inference/digits-mlp-retrain not created: HTTP 403 Forbidden: jobs.batch is forbidden: "
        'User "system:serviceaccount:ml-inference:drift-monitor" cannot create resource "jobs"'
    )


def test_the_monitor_pod_gets_a_projected_token_and_reaches_only_the_api_server_beyond_its_servers(
    objects: list[dict[str, Any]],
) -> None:
    """The ServiceAccount still automounts nothing; the monitor's pod alone projects its token, the
    cluster CA and namespace where the launcher reads them, and its NetworkPolicy adds the API server's
    private endpoint (the VPC, port 443) beside the record store's."""
    account = _named(objects, "ServiceAccount", "drift-monitor")
    assert account["automountServiceAccountToken"] is False
    cron = _named(objects, "CronJob", "inference-drift-monitor")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [api_volume] = [v for v in pod["volumes"] if v["name"] == "kube-api-access"]
    sources = api_volume["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    [container] = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/var/run/secrets/kubernetes.io/serviceaccount"]["readOnly"] is True
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["MONITOR_RETRAIN_JOB"] == "/etc/ml-platform/retrain/" + CARRIED_KEY
    policy = _named(objects, "NetworkPolicy", "inference-drift-monitor")
    blocks = [r for r in policy["spec"]["egress"] if "ipBlock" in (r.get("to") or [{}])[0]]
    vpc = template(STACK)[PLATFORM_KEY]["network"]["cidr"]
    api_rule = {"to": [{"ipBlock": {"cidr": vpc}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    assert api_rule in blocks
    annotations = cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["reaches.ml-platform.io/kubernetes-api"] == f"{vpc}:443"
    # Beside it, only the record store's (S3 and STS): test_registry_wiring.py.
    assert len(blocks) == len(annotations) and all(k.startswith("reaches.") for k in annotations)


def test_the_carried_job_is_judged_and_a_planted_unqueued_one_is_refused(
    objects: list[dict[str, Any]],
) -> None:
    """What the monitor creates must pass what ``pulumi up`` would: the judges read the Job out of its
    ConfigMap (judges/kube.py ``carried``). Planted: the same Job without the queue label, which the
    training namespace's admission policy refuses (components/kubernetes/kueue.py), is a mandatory
    finding; the shipped one is not."""
    assert (JUDGED_LABEL, JUDGED_KEY) == (CARRIED_LABEL, CARRIED_KEY)
    [job] = carried(objects)
    assert job["kind"] == "Job" and job["metadata"]["name"] == "digits-mlp-retrain"

    def refused(judged: list[dict[str, Any]]) -> list[str]:
        findings = judge_cel([*judged, *carried(judged)])
        return [str(f) for f in findings if f.mandatory and "digits-mlp-retrain" in str(f)]

    assert refused(objects) == []
    planted = json.loads(json.dumps(job))
    planted["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    carrier = _named(objects, "ConfigMap", "inference-drift-monitor-retrain")
    replanted = {**carrier, "data": {CARRIED_KEY: json.dumps(planted)}}
    findings = refused([replanted if o is carrier else o for o in objects])
    assert any("kueue.x-k8s.io/queue-name" in f for f in findings), findings


def test_a_bad_retrain_setting_is_one_line_naming_it(
    tmp_path: Path, pod: tuple[Path, dict[str, str]]
) -> None:
    account, environ = pod
    (tmp_path / "pod.json").write_text(json.dumps({"kind": "Pod", "metadata": {"name": "x"}}))
    with pytest.raises(RolloutError, match=r"^MONITOR_RETRAIN_JOB=.*pod.json: not a batch/v1 Job"):
        kubernetes_launcher(tmp_path / "pod.json", environ, account)
    with pytest.raises(RolloutError, match=r"^MONITOR_RETRAIN_JOB: KUBERNETES_SERVICE_HOST is not set"):
        kubernetes_launcher(Path(environ["job"]), {}, account)
    with pytest.raises(RolloutError, match=r"^MONITOR_LAUNCH or MONITOR_RETRAIN_JOB: one way to retrain"):
        from_env({"MONITOR_LAUNCH": '["true"]', "MONITOR_RETRAIN_JOB": environ["job"]})
