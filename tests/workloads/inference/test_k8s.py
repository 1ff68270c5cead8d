"""The inference service's Kubernetes objects: schema-valid, checkov-clean, locked down, wired together;
and the rollout's room beside it (issue 29)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from components.handle import Fabric, PoolHandle, PoolKind, Taint
from tests.linters import (
    checkov_kubernetes,
    needs_checkov,
    unexplained_skips,
    validate_strictly,
    write_objects,
)
from workloads.inference.config import ServeConfig
from workloads.inference.k8s import InferenceServiceSpec, RolloutJob, inference_objects

REPO = Path(__file__).resolve().parents[3]
DIGEST = "sha256:" + "0123456789abcdef" * 4

CPU_POOL = PoolHandle(
    name="cpu-inference",
    kind=PoolKind.CPU,
    instance_type="m7i.2xlarge",
    gpus_per_node=0,
    fabric=Fabric.NONE,
    fabric_devices_per_node=0,
    vcpus=8,
    memory_gib=32,
    labels={"ml-platform/pool": "cpu-inference"},
    taints=(Taint("ml-platform/dedicated", "inference"),),
)


def make_spec(**changes: Any) -> InferenceServiceSpec:
    spec = InferenceServiceSpec(
        name="digits",
        image=f"registry.example/ml-platform/inference@{DIGEST}",
        model_name="digits",
        model_version="1",
        model_volume={"persistentVolumeClaim": {"claimName": "artifacts", "readOnly": True}},
        pool=CPU_POOL,
        labels={"project": "ml-platform", "environment": "dev", "data-classification": "internal"},
    )
    return dataclasses.replace(spec, **changes)


FULL = make_spec(auth_secret="digits-token", tls_secret="digits-tls", min_replicas=4, max_replicas=8)
PLAN = '{"steps": ["shadow", 5, 25, 50], "windowSeconds": 300}'
FOLLOWING = make_spec(
    model_version=None,
    model_volume=None,
    registry_uri="http://registry.ml-registry.svc.cluster.local:5000",
    registry_secret="registry-client",
    auth_secret="digits-token",
    tls_secret="digits-tls",
    rollout=RolloutJob(plan=PLAN, deadline_s=7200, registry_secret="registry-rollout", ca_secret="digits-ca"),
)
SPECS = {"minimal": make_spec(), "auth-tls": FULL, "registry-rollout": FOLLOWING}


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_every_object_is_valid_for_kubernetes_1_31(spec: InferenceServiceSpec) -> None:
    for obj in inference_objects(spec):
        validate_strictly(obj, "1.31")
        assert obj["metadata"]["namespace"] == "ml-inference"
        assert obj["metadata"]["labels"]["environment"] == "dev"


def test_objects_and_their_wiring() -> None:
    objects = inference_objects(FULL)
    kinds = [o["kind"] for o in objects]
    assert kinds == [
        "ServiceAccount",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ]
    [deployment] = by_kind(objects, "Deployment")
    [service] = by_kind(objects, "Service")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SERVE_MODEL_DIR"] == "/mnt/artifacts/models/digits/1"
    assert env["SERVE_AUTH_TOKEN_FILE"] == "/var/run/secrets/ml-platform/auth/token"
    [hpa] = by_kind(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (4, 8)
    # The HPA owns the replica count: a Deployment that also states it is reset (or conflicts on
    # .spec.replicas) at every server-side apply after a scale (kubernetes.io, "Horizontal Pod
    # Autoscaling", migrating to autoscaling; pulumi/pulumi-kubernetes#2491; cluster review D2).
    assert "replicas" not in deployment["spec"]


def test_the_deployments_selector_is_the_one_it_was_created_with() -> None:
    """apps/v1: "a Deployment's label selector is immutable after it gets created" (kubernetes.io
    "Deployments", label selector updates). The replica-share canary's removal keeps the stable track's
    selector, so the next ``pulumi up`` updates the Deployment instead of replacing it."""
    [deployment] = by_kind(inference_objects(FOLLOWING), "Deployment")
    assert deployment["metadata"]["name"] == "digits"
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/instance": "digits",
        "ml-platform/track": "stable",
    }


def test_one_slow_readiness_answer_does_not_drop_a_pod() -> None:
    """A single probe timing out under CPU load must not take a busy pod out of the Service (cluster
    review D6): three consecutive misses, not one."""
    container = by_kind(inference_objects(FULL), "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["failureThreshold"] >= 3


def test_pods_are_locked_down_and_land_on_their_pool() -> None:
    deployment = by_kind(inference_objects(FULL), "Deployment")[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    security = container["securityContext"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsUser"] >= 10000
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "model", "mountPath": "/mnt/artifacts", "readOnly": True} in container["volumeMounts"]
    assert container["image"].endswith(DIGEST)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTPS"}
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "2Gi"}
    assert pod["nodeSelector"] == {"ml-platform/pool": "cpu-inference"}
    assert pod["tolerations"] == [
        {"key": "ml-platform/dedicated", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }


def test_network_policy_admits_the_service_port_only_and_no_egress() -> None:
    spec = make_spec(ingress_namespaces=("ml-gateway",))
    policy = by_kind(inference_objects(spec), "NetworkPolicy")[0]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["egress"] == []
    assert policy["ingress"] == [
        {
            "ports": [{"port": 8080, "protocol": "TCP"}],
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ml-gateway"}}}],
        }
    ]


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"image": "registry.example/inference:1.0"}, "pinned by digest"),
        ({"namespace": "default"}, "other than 'default'"),
        ({"min_replicas": 3, "max_replicas": 2}, "min_replicas <= max_replicas"),
        ({"port": 80}, "port must be 1024-65535"),
        ({"run_as_user": 1000}, "run_as_user must be >= 10000"),
        ({"pool": dataclasses.replace(CPU_POOL, kind=PoolKind.GPU)}, "gpu pool"),
        ({"rollout": RolloutJob(plan=None, deadline_s=600, registry_secret=None)}, "needs registry_uri"),
        ({"name": "d" * 45}, "at most 44 characters"),
        ({"name": "Digits_Service"}, "DNS label"),
        ({"cpu_request": "1"}, "Guaranteed QoS"),
        ({"memory_request": "1Gi"}, "Guaranteed QoS"),
        ({"cpu_request": "two", "cpu_limit": "two"}, "not a CPU quantity"),
        ({"workers": 3}, r"workers must be 1\.\.2, one per whole CPU"),
        ({"workers": 2, "cpu_request": "1500m", "cpu_limit": "1500m"}, r"workers must be 1\.\.1"),
    ],
)
def test_bad_specs_are_refused_with_the_reason(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        make_spec(**changes)


@needs_checkov
def test_checkov_finds_nothing_unexplained(tmp_path: Path) -> None:
    write_objects((obj for spec in SPECS.values() for obj in inference_objects(spec)), tmp_path)
    results = checkov_kubernetes(tmp_path)
    failed = [(f["check_id"], f["resource"]) for f in results["failed_checks"]]
    assert failed == []
    assert unexplained_skips(results) == []


def test_guaranteed_qos_and_onnx_runtime_threads_from_the_request() -> None:
    """Kubernetes gives a pod the Guaranteed QoS class only when every container's requests equal its
    limits for CPU and memory (Kubernetes docs, "Configure Quality of Service for Pods"); ONNX Runtime
    sizes its pool to the host's cores unless told (REFERENCE.md), so the server gets the request."""
    for cpu, threads in (("2", 2), ("1500m", 1), ("500m", 1), ("4", 4)):
        spec = make_spec(cpu_request=cpu, cpu_limit=cpu)
        container = by_kind(inference_objects(spec), "Deployment")[0]["spec"]["template"]["spec"][
            "containers"
        ][0]
        resources = container["resources"]
        assert resources["requests"] == resources["limits"] == {"cpu": cpu, "memory": "2Gi"}
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["SERVE_THREADS"] == str(threads)
        assert env["SERVE_WORKERS"] == "1"


def test_workers_split_the_cpu_request() -> None:
    """N worker processes each get an equal share of the request's whole CPUs for ONNX Runtime, so
    workers x threads never exceeds the CPU limit the CFS quota enforces."""
    for cpu, workers, threads in (("4", 4, 1), ("4", 2, 2), ("3", 2, 1)):
        spec = make_spec(cpu_request=cpu, cpu_limit=cpu, workers=workers)
        container = by_kind(inference_objects(spec), "Deployment")[0]["spec"]["template"]["spec"][
            "containers"
        ][0]
        config = ServeConfig.from_env({e["name"]: e["value"] for e in container["env"]})
        assert (config.workers, config.threads) == (workers, threads)


def test_drain_and_shutdown_fit_in_the_grace_period() -> None:
    """The kubelet SIGKILLs at terminationGracePeriodSeconds, counted from the start of the pre-stop hook
    (Kubernetes docs, "Pod Lifecycle: Termination of Pods"): pre-stop sleep, then the server's drain,
    then uvicorn's shutdown must all end before it."""
    pod = by_kind(inference_objects(make_spec()), "Deployment")[0]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    config = ServeConfig.from_env({**env, "SERVE_MODEL_DIR": "/m"})
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert (
        pre_stop + config.drain_timeout_s + config.shutdown_timeout_s < pod["terminationGracePeriodSeconds"]
    )


def test_deployments_following_an_alias_skip_pulumis_await_and_pinned_ones_are_awaited() -> None:
    """pulumi-kubernetes waits for a Deployment's pods to be ready unless it carries
    ``pulumi.com/skipAwait: "true"`` (pulumi-kubernetes pkg/metadata; REFERENCE.md). Following an alias,
    the pods wait unready until a version is promoted outside ``pulumi up`` (docs/registry.md), so a first
    ``pulumi up`` must not wait for them; a pinned version is awaited as before."""
    [deployment] = by_kind(inference_objects(FOLLOWING), "Deployment")
    assert deployment["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    for spec in (make_spec(), FULL):
        for pinned in by_kind(inference_objects(spec), "Deployment"):
            assert "pulumi.com/skipAwait" not in pinned["metadata"].get("annotations", {})
