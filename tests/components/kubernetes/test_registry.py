"""The model registry's Kubernetes objects (issue 28 part 1), judged against the contracts they meet:

- the Kubernetes schemas (kubernetes-validate, strict) and Pod Security "restricted" (judges.pod_security);
- MLflow 3.17.2's own rules, read from its wheel: the server refuses Host headers outside
  ``MLFLOW_SERVER_ALLOWED_HOSTS`` (mlflow/server/security_utils.py: fnmatch when the entry has ``*``),
  ``/health`` answers without credentials under basic-auth (``_UNPROTECTED_PATH_PREFIXES``), the admin
  password comes from ``MLFLOW_AUTH_ADMIN_PASSWORD`` (mlflow/server/auth/config.py);
- SQLite on a network file system needs exactly one process (sqlite.org/useovernet.html);
- a Job spec is immutable (REFERENCE.md), so the migration Job is named per MLflow version;
- the reachability contract (judges/reachability.py) on a planned stack: removing a client's egress to
  the registry, or the registry's egress to its database, is a mandatory finding.
"""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import pytest

from components.config import PLATFORM_KEY, ConfigError, parse_stack_config
from components.handle import PUBLIC_NETWORK, Fabric, Peer, PoolHandle, PoolKind, RegistryDatabase
from components.kubernetes.layer import registry_namespace
from components.kubernetes.registry import (
    ADMIN_KEYS,
    ADMIN_SECRET,
    MLFLOW_VERSION,
    PORT,
    RegistrySpec,
    allowed_hosts,
    registry_objects,
    tracking_uri,
)
from components.kubernetes.tenancy import NamespaceSpec, PodSecurity, namespace_objects
from components.kubernetes.workloads import transfer_space
from judges.pod_security import judge_pod_security
from judges.reachability import judge_reachability
from mlplatform.judging import cluster_network
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects
from tests.linters import validate_strictly
from tests.stack_variants import template
from workloads.registry.server.launch import ADMIN_FILES

POOL = PoolHandle("system", PoolKind.CPU, "m7i.xlarge", 0, Fabric.NONE, 0, 4, 16)
IMAGE = "reg.example.ae/ml-platform/registry:abc@sha256:" + "a" * 64
DATABASE = RegistryDatabase(
    "db.example.internal", 5432, "mlflow", "mlflow", "arn:aws:secretsmanager:me-central-1:1:secret:x"
)
PEERS = (Peer("database", "10.0.0.0/16", 5432), Peer("s3-and-sts", PUBLIC_NETWORK, 443))


def _spec(**overrides: Any) -> RegistrySpec:
    base: dict[str, Any] = {
        "image": IMAGE,
        "pool": POOL,
        "artifacts_uri": "s3://bucket/registry/",
        "database": DATABASE,
        "store_claim": None,
        "client_namespaces": ("ml-training", "ml-inference"),
        "peers": PEERS,
    }
    if overrides.get("auth", True):
        base["admin"] = ADMIN
    return RegistrySpec(**{**base, **overrides})


ADMIN = {"password": "p" * 32, "flask-secret-key": "k" * 64}
SQLITE = {"database": None, "store_claim": "registry-store", "replicas": 1}


def _all(spec: RegistrySpec) -> list[dict[str, Any]]:
    objects = registry_objects(spec)
    migration = [objects.migration] if objects.migration else []
    return [*objects.egress, *objects.before, *migration, *objects.after]


def _kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind]
    return found


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


@pytest.mark.parametrize("backend", [{}, SQLITE], ids=["postgres", "sqlite"])
def test_objects_validate_and_pods_are_restricted(backend: dict[str, Any]) -> None:
    objects = _all(_spec(**backend))
    for obj in objects:
        validate_strictly(obj, "1.33")
    namespaces = [
        o
        for ns in ("ml-registry", "ml-training", "ml-inference")
        for o in namespace_objects(NamespaceSpec(ns))
    ]
    assert judge_pod_security([*namespaces, *objects]) == []


def test_no_secret_in_the_pod_spec_and_auth_from_the_admin_secret_as_files() -> None:
    """checkov CKV_K8S_35 wants secrets as files; the launcher reads them (tests/workloads/registry)."""
    objects = registry_objects(_spec())
    deployment = _kind(objects.after, "Deployment")["spec"]["template"]["spec"]
    [container] = deployment["containers"]
    env = _env(container)
    assert env["REGISTRY_AUTH"]["value"] == "true"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "admin")
    assert env["REGISTRY_ADMIN_SECRET_DIR"]["value"] == mount["mountPath"] and mount["readOnly"]
    volume = next(v for v in deployment["volumes"] if v["name"] == "admin")
    assert volume["secret"]["secretName"] == ADMIN_SECRET
    assert objects.migration is not None
    for obj in (objects.migration, _kind(objects.after, "Deployment")):
        for variable in obj["spec"]["template"]["spec"]["containers"][0]["env"]:
            assert "valueFrom" not in variable and "PASSWORD" not in variable["name"]
    without = _kind(_all(_spec(auth=False)), "Deployment")["spec"]["template"]["spec"]
    assert "REGISTRY_ADMIN_SECRET_DIR" not in _env(without["containers"][0])
    assert [v["name"] for v in without["volumes"]] == ["tmp"]


def test_the_service_name_and_the_probes_pass_mlflows_host_check() -> None:
    """MLflow compares the Host header with fnmatch against each entry holding ``*``, else exactly."""
    patterns = allowed_hosts("ml-registry").split(",")

    def allowed(host: str) -> bool:
        return any(fnmatch.fnmatch(host, p) if "*" in p else host == p for p in patterns)

    assert allowed(str(urlsplit(tracking_uri()).netloc))
    assert allowed(f"registry.ml-registry.svc:{PORT}")
    assert allowed(f"10.1.2.3:{PORT}") and allowed(f"172.20.0.9:{PORT}")
    assert not allowed(f"evil.example.com:{PORT}")


def test_sqlite_runs_one_process_on_one_pod_that_stops_before_the_next_starts() -> None:
    deployment = _kind(_all(_spec(**SQLITE)), "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    env = _env(deployment["spec"]["template"]["spec"]["containers"][0])
    assert env["REGISTRY_WORKERS"]["value"] == "1"
    assert deployment["spec"]["template"]["spec"]["volumes"][-1]["persistentVolumeClaim"] == {
        "claimName": "registry-store"
    }
    with pytest.raises(ValueError, match="replicas must be 1"):
        _spec(**{**SQLITE, "replicas": 2})


def test_one_migration_job_per_mlflow_version_applied_before_the_servers() -> None:
    objects = registry_objects(_spec())
    assert objects.migration is not None
    assert objects.migration["metadata"]["name"] == f"registry-migrate-{MLFLOW_VERSION.replace('.', '-')}"
    assert objects.migration["spec"]["template"]["spec"]["containers"][0]["args"] == ["upgrade"]
    assert "Deployment" in {o["kind"] for o in objects.after}
    assert "Deployment" not in {o["kind"] for o in objects.before}
    upgraded = registry_objects(replace(_spec(), mlflow_version="3.18.0")).migration
    assert upgraded is not None and upgraded["metadata"]["name"] == "registry-migrate-3-18-0"


def test_on_sqlite_the_servers_pod_migrates_after_the_old_server_is_gone() -> None:
    """Cluster review B-N2: the per-version migration Job opened the SQLite file over NFS while the old
    server still held it (the Job ran before the Deployment rolled). On SQLite there is no Job: the
    server's pod runs ``upgrade`` as its init container, and Recreate stops the old pod first, so one
    process on one host opens the file at a time (sqlite.org/useovernet.html)."""
    objects = registry_objects(_spec(**SQLITE))
    assert objects.migration is None
    deployment = _kind(objects.after, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    (migrate,) = pod["initContainers"]
    assert migrate["args"] == ["upgrade"] and migrate["image"] == pod["containers"][0]["image"]
    store = {m["name"] for m in migrate["volumeMounts"]} & {v["name"] for v in pod["volumes"]}
    assert "store" in store
    # PostgreSQL keeps its awaited Job: servers roll (RollingUpdate) only onto a migrated schema.
    assert (
        "initContainers"
        not in _kind(registry_objects(_spec()).after, "Deployment")["spec"]["template"]["spec"]
    )


def test_ingress_only_from_client_namespaces_and_egress_only_to_its_peers() -> None:
    objects = _all(_spec())
    [policy] = [
        o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == "ml-registry"
    ]
    [rule] = policy["spec"]["ingress"]
    names = [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in rule["from"]]
    assert names == ["ml-training", "ml-inference"] and rule["ports"] == [{"port": PORT, "protocol": "TCP"}]
    blocks = [(r["to"][0]["ipBlock"]["cidr"], r["ports"][0]["port"]) for r in policy["spec"]["egress"]]
    assert blocks == [("10.0.0.0/16", 5432), ("0.0.0.0/0", 443)]
    clients = [o["metadata"]["namespace"] for o in objects if o["metadata"]["name"] == "allow-registry"]
    assert clients == ["ml-training", "ml-inference"]


def _mandatory(objects: list[dict[str, Any]], plan: Plan) -> list[str]:
    return [f.message for f in judge_reachability(objects, cluster_network(plan)) if f.level == "mandatory"]


def _without(plan: Plan, drop: Callable[[dict[str, Any]], bool]) -> list[str]:
    return _mandatory([copy.deepcopy(o) for o in kubernetes_objects(plan) if not drop(o)], plan)


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-smb-dev"])
def test_the_contract_needs_clients_to_reach_the_registry(stack: str, planned: Callable[[str], Plan]) -> None:
    plan = planned(stack)
    assert _without(plan, lambda o: False) == []
    found = _without(
        plan,
        lambda o: (
            o["kind"] == "NetworkPolicy"
            and o["metadata"] == {**o["metadata"], "name": "allow-registry", "namespace": "ml-inference"}
        ),
    )
    assert any("calls the model registry" in m for m in found), found


def test_the_contract_needs_the_registry_to_reach_its_database(planned: Callable[[str], Plan]) -> None:
    plan = planned("aws-enterprise-prod")
    objects = copy.deepcopy(kubernetes_objects(plan))
    [policy] = [
        o
        for o in objects
        if o["kind"] == "NetworkPolicy" and o["metadata"] == {**o["metadata"], "name": "registry"}
    ]
    policy["spec"]["egress"] = [r for r in policy["spec"]["egress"] if r["ports"][0]["port"] != 5432]
    found = _mandatory(objects, plan)
    assert any("reaches database" in m for m in found), found


def _stack(stack: str, **registry: Any) -> dict[str, Any]:
    raw = template(stack)
    raw[PLATFORM_KEY].setdefault("workloads", {})["registry"] = registry
    return raw


@pytest.mark.parametrize(
    ("stack", "registry", "line"),
    [
        (
            "aws-enterprise-prod",
            {"auth": False},
            "workloads.registry.auth: an enterprise registry authenticates",
        ),
        (
            "aws-enterprise-prod",
            {"enabled": True, "promotionApproval": False},
            "workloads.registry.promotionApproval: an enterprise promotion is a change a second person",
        ),
        (
            "aws-smb-dev",
            {"replicas": 2},
            "workloads.registry.replicas: SQLite on the shared file system allows one",
        ),
        ("azure-smb-dev", {"replicas": 3}, "workloads.registry.replicas: SQLite"),
        ("aws-smb-dev", {"memory": "2G"}, "workloads.registry.memory: a Kubernetes memory quantity"),
    ],
)
def test_bad_registry_config_is_one_line_naming_the_key(
    stack: str, registry: dict[str, Any], line: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(_stack(stack, **registry), f"Pulumi.{stack}.yaml")
    [problem] = raised.value.problems
    assert problem.startswith(f"Pulumi.{stack}.yaml: ml-platform:platform.{line}"), problem


def test_an_azure_enterprise_registry_scales_on_its_managed_postgresql() -> None:
    """Azure enterprise stacks get a PostgreSQL flexible server (components/azure/registry_database.py),
    so the one-server SQLite limit no longer applies to them."""
    config = parse_stack_config(
        _stack("azure-enterprise-prod", replicas=3), "Pulumi.azure-enterprise-prod.yaml"
    )
    assert config.workloads.registry.replicas == 3


def test_the_presets_turn_the_registry_on_in_both_tiers() -> None:
    enterprise = parse_stack_config(template("aws-enterprise-prod"), "Pulumi.aws-enterprise-prod.yaml")
    smb = parse_stack_config(template("aws-smb-dev"), "Pulumi.aws-smb-dev.yaml")
    assert enterprise.workloads.registry.enabled and enterprise.workloads.registry.replicas == 2
    assert smb.workloads.registry.enabled and smb.workloads.registry.replicas == 1
    assert enterprise.workloads.registry.auth and smb.workloads.registry.auth


def test_the_registry_namespace_is_restricted_with_room_for_a_surge_pod_and_the_migration() -> None:
    raw = _stack("aws-enterprise-prod", cpu="500m", memory="512Mi", replicas=3)
    spec = registry_namespace(parse_stack_config(raw, "Pulumi.aws-enterprise-prod.yaml"))
    assert spec.name == "ml-registry" and spec.pod_security is PodSecurity.RESTRICTED
    assert spec.quota == {"requests.cpu": "2.5", "requests.memory": "2560Mi", "limits.memory": "2560Mi"}


def test_tmp_holds_a_whole_file_copy_per_concurrent_transfer() -> None:
    """MLflow 3.17.2 proxies S3/Blob artifacts through a whole-file temporary copy (mlflow/server/handlers.py
    uploads, mlflow/server/artifact_router.py downloads; registry review B2): /tmp holds one version per
    inference replica fetching at once, plus an upload; a pod over its emptyDir limit is evicted."""
    config = parse_stack_config(template("aws-enterprise-prod"), "Pulumi.aws-enterprise-prod.yaml")
    inference = config.workloads.inference
    assert inference is not None
    cache_gib = int(inference.model_cache.removesuffix("Gi"))
    size = transfer_space(config)
    assert size.endswith("Mi") and int(size[:-2]) >= max(4, cache_gib * (inference.max_replicas + 1)) * 1024
    pod = _kind(_all(replace(_spec(), tmp_size=size)), "Deployment")["spec"]["template"]["spec"]
    (tmp,) = [v for v in pod["volumes"] if v["name"] == "tmp"]
    assert tmp["emptyDir"]["sizeLimit"] == size


def test_the_stack_makes_the_admin_secret_the_servers_mount() -> None:
    """Cluster review B-N1: ``registry-admin`` was the operator's to create "before the first pulumi up",
    in a namespace that update creates; the stack makes it now, with the keys the launcher reads
    (launch.py ``ADMIN_FILES``), and refuses basic-auth without its values."""
    objects = registry_objects(_spec())
    admin = objects.admin
    assert admin is not None and admin["kind"] == "Secret"
    assert (admin["metadata"]["namespace"], admin["metadata"]["name"]) == ("ml-registry", ADMIN_SECRET)
    assert set(admin["stringData"]) == set(ADMIN_KEYS) == set(ADMIN_FILES)
    assert registry_objects(_spec(auth=False)).admin is None
    with pytest.raises(ValueError, match="admin Secret"):
        _spec(admin={})
