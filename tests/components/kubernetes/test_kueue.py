"""Kueue on the shipped stacks: flavors per pool, quotas equal to the pools at full size, queues per
training namespace, priorities, and a queued training Job — judged against Kueue 0.19.2's own CRDs and
chart (charts/kueue-0.19.2.tgz; kubernetes-sigs/kueue at v0.19.2)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from components.config import PLATFORM_KEY, ConfigError, Priority, parse_stack_config
from components.kubernetes import helm_engine, kueue
from components.kubernetes.charts import cache_dir
from mlplatform.plan import Plan, all_stack_targets
from mlplatform.report import kubernetes_objects
from tests.stack_variants import plan_config, template, with_teams

STACKS = [t.stack for t in all_stack_targets()]
KUEUE_KINDS = {"ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"}
CHART = cache_dir() / "kueue-0.19.2.tgz"
needs_chart = pytest.mark.skipif(not CHART.exists(), reason=f"the kueue chart is not at {CHART}")


def _of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def _by_name(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in _of(objects, kind)}


def _stack_config(stack: str) -> dict[str, Any]:
    body: dict[str, Any] = template(stack)[PLATFORM_KEY]
    return body


def _quota(queue: dict[str, Any], flavor: str, resource: str) -> str:
    [group] = queue["spec"]["resourceGroups"]
    [entry] = [f for f in group["flavors"] if f["name"] == flavor]
    [quota] = [r["nominalQuota"] for r in entry["resources"] if r["name"] == resource]
    return str(quota)


def _queued_pools(stack: str) -> list[dict[str, Any]]:
    """The pools training may use: every GPU pool and the training run's pool."""
    body = _stack_config(stack)
    training = body["workloads"]["training"]["pool"]
    return [p for p in body["nodePools"] if p["kind"] == "gpu" or p["name"] == training]


@pytest.mark.parametrize("stack", STACKS)
def test_platform_queue_holds_every_training_pool_at_full_size(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    """Only training pools are lent: a Job without a nodeSelector is placed by Kueue on any flavor of
    its queue, so the system and inference pools must not be one (cluster review D11)."""
    objects = kubernetes_objects(planned(stack))
    pools = _queued_pools(stack)
    flavors = _by_name(objects, "ResourceFlavor")
    assert set(flavors) == {f"pool-{p['name']}" for p in pools}
    body = _stack_config(stack)
    serving = {body["workloads"]["inference"]["pool"], "system"} - {body["workloads"]["training"]["pool"]}
    assert not {f"pool-{name}" for name in serving} & set(flavors)
    queue = _by_name(objects, "ClusterQueue")[kueue.PLATFORM_QUEUE]
    total_gpus = 0
    for pool in pools:
        gpus = int(_quota(queue, f"pool-{pool['name']}", "nvidia.com/gpu"))
        assert flavors[f"pool-{pool['name']}"]["spec"]["nodeLabels"] == {"ml-platform/pool": pool["name"]}
        total_gpus += gpus
    # e.g. aws-enterprise-prod: its GPU pool's maxSize nodes times 8 GPUs.
    catalog_gpus = sum(_gpus(stack, p) * p["maxSize"] for p in pools)
    assert total_gpus == catalog_gpus > 0


def _gpus(stack: str, pool: dict[str, Any]) -> int:
    from components.catalog import catalog
    from components.handle import Cloud

    cloud = Cloud(stack.split("-", maxsplit=1)[0])
    return catalog(cloud)[pool["instanceType"]].gpus


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_and_spot_flavors_admit_only_jobs_that_tolerate_their_taints(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    objects = kubernetes_objects(planned(stack))
    flavors = _by_name(objects, "ResourceFlavor")
    for pool in _queued_pools(stack):
        taints = {t["key"] for t in flavors[f"pool-{pool['name']}"]["spec"].get("nodeTaints", [])}
        if pool["kind"] == "gpu":
            assert "nvidia.com/gpu" in taints
        if pool.get("spot") and stack.startswith("azure"):
            assert "kubernetes.azure.com/scalesetpriority" in taints


def test_smb_stacks_have_a_spot_flavor(planned: Callable[[str], Plan]) -> None:
    for stack in ("aws-smb-dev", "azure-smb-dev"):
        spot_pools = [p["name"] for p in _stack_config(stack)["nodePools"] if p.get("spot")]
        assert spot_pools, stack
        flavors = _by_name(kubernetes_objects(planned(stack)), "ResourceFlavor")
        assert {f"pool-{name}" for name in spot_pools} <= set(flavors)


@pytest.mark.parametrize("stack", STACKS)
def test_training_job_is_queued_and_covered(stack: str, planned: Callable[[str], Plan]) -> None:
    objects = kubernetes_objects(planned(stack))
    jobs = _training_jobs(objects)
    assert jobs
    # The run and, on fabric stacks, the fabric tests that gate it.
    for job in jobs:
        _assert_queued_and_covered(objects, job)


def _assert_queued_and_covered(objects: list[dict[str, Any]], job: dict[str, Any]) -> None:
    labels = job["metadata"]["labels"]
    assert labels[kueue.QUEUE_LABEL] == kueue.QUEUE_NAME
    assert labels[kueue.PRIORITY_LABEL] == "production"
    # Kueue's webhook suspends the Job itself; a suspend written here would re-suspend a running Job
    # at the next server-side apply.
    assert "suspend" not in job["spec"]
    namespace = job["metadata"]["namespace"]
    [local] = [q for q in _of(objects, "LocalQueue") if q["metadata"]["namespace"] == namespace]
    assert local["metadata"]["name"] == kueue.QUEUE_NAME
    assert local["spec"]["clusterQueue"] == kueue.PLATFORM_QUEUE
    [ns] = [o for o in _of(objects, "Namespace") if o["metadata"]["name"] == namespace]
    assert ns["metadata"]["labels"][kueue.QUEUED_NAMESPACE_LABEL] == "required"
    # Every resource the Job's pods request is covered by the queue (or excluded from Kueue's
    # accounting), or Kueue never admits it.
    [group] = _by_name(objects, "ClusterQueue")[kueue.PLATFORM_QUEUE]["spec"]["resourceGroups"]
    for resource in _requested(job):
        assert resource in group["coveredResources"] or resource.startswith(kueue.EXCLUDED_RESOURCE_PREFIXES)


def _training_jobs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our training Jobs: the run and the fabric tests (the charts bring Helm hook Jobs of their own)."""
    return [o for o in _of(objects, "Job") if "ml-platform/run-id" in o["metadata"].get("labels", {})]


def _requested(job: dict[str, Any]) -> Iterator[str]:
    spec = job["spec"]["template"]["spec"]
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        resources = container.get("resources", {})
        yield from {**resources.get("limits", {}), **resources.get("requests", {})}


@pytest.fixture(scope="module")
def team_objects(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[dict[str, Any]]]:
    """``team_objects(stack)`` → the objects of the template with the README's teams (nlp; vision with a
    GPU borrowing limit of 16: tests/stack_variants.py ``with_teams``), planned once per test run (the
    teams' tests plan it too)."""
    directory: Path = tmp_path_factory.mktemp("teams")

    @functools.cache
    def objects(stack: str) -> list[dict[str, Any]]:
        return kubernetes_objects(plan_config(with_teams(stack), directory, stack, shared=True))

    return objects


def cel_violations(schema: dict[str, Any], value: Any, path: str = "") -> Iterator[str]:
    """Every ``x-kubernetes-validations`` rule of an openAPIV3Schema evaluated with ``self`` bound to
    the value at its node, as the API server does on create (rules reading ``oldSelf`` are transition
    rules and do not run on create: kubernetes.io, "Validation rules")."""
    import celpy
    from celpy.adapter import json_to_cel

    env = celpy.Environment()
    for rule in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"]:
            continue
        result = env.program(env.compile(rule["rule"])).evaluate({"self": json_to_cel(value)})
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            yield f"{path or '.'}: {rule.get('message', rule['rule'])} ({result!r})"
    if isinstance(value, dict):
        for key, child in value.items():
            sub = schema.get("properties", {}).get(key) or schema.get("additionalProperties")
            if isinstance(sub, dict):
                yield from cel_violations(sub, child, f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, child in enumerate(value):
            yield from cel_violations(schema["items"], child, f"{path}[{index}]")


def _cel_problems(objects: list[dict[str, Any]]) -> list[str]:
    crds = {
        (f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"]): v["schema"]["openAPIV3Schema"]
        for crd in _of(objects, "CustomResourceDefinition")
        for v in crd["spec"]["versions"]
    }
    return [
        f"{obj['kind']} {obj['metadata']['name']}{problem}"
        for obj in objects
        if obj["kind"] in KUEUE_KINDS
        for problem in cel_violations(crds[(obj["apiVersion"], obj["kind"])], obj)
    ]


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-enterprise-prod"])
def test_team_queues_pass_the_cel_rules_of_kueues_crds(
    stack: str, team_objects: Callable[[str], list[dict[str, Any]]]
) -> None:
    """Kueue 0.19.2's ClusterQueue CRD refuses reclaimWithinCohort=Never with a borrowWithinCohort
    policy (charts/kueue CRDs, ClusterQueuePreemption; cluster review A2): team queues are created."""
    objects = team_objects(stack)
    assert {"team-nlp", "team-vision"} <= set(_by_name(objects, "ClusterQueue"))
    assert _cel_problems(objects) == []


def test_the_cel_walk_catches_the_rule_team_queues_broke(planned: Callable[[str], Plan]) -> None:
    objects = copy.deepcopy(kubernetes_objects(planned("aws-smb-dev")))
    queue = _by_name(objects, "ClusterQueue")[kueue.PLATFORM_QUEUE]
    queue["spec"]["preemption"]["reclaimWithinCohort"] = "Never"
    [problem] = _cel_problems(objects)
    assert "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never" in problem


def test_teams_borrow_from_the_cohort_through_their_own_queues(
    team_objects: Callable[[str], list[dict[str, Any]]],
) -> None:
    objects = team_objects("aws-enterprise-prod")
    queues = _by_name(objects, "ClusterQueue")
    assert set(queues) == {kueue.PLATFORM_QUEUE, "team-nlp", "team-vision"}
    assert {q["spec"]["cohortName"] for q in queues.values()} == {kueue.COHORT}
    vision = queues["team-vision"]
    [group] = vision["spec"]["resourceGroups"]
    for flavor in group["flavors"]:
        for entry in flavor["resources"]:
            assert entry["nominalQuota"] == "0"
            if entry["name"] == "nvidia.com/gpu":
                assert entry["borrowingLimit"] == "16"
    assert vision["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "team-vision"}
    }
    # A borrowing team run preempts only work below research priority.
    threshold = vision["spec"]["preemption"]["borrowWithinCohort"]["maxPriorityThreshold"]
    assert threshold < kueue.PRIORITY_VALUES[Priority.RESEARCH]
    local = {(q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in _of(objects, "LocalQueue")}
    assert {("team-nlp", "team-nlp"), ("team-vision", "team-vision")} <= local
    namespaces = {o["metadata"]["name"]: o for o in _of(objects, "Namespace")}
    for team in ("team-nlp", "team-vision"):
        assert namespaces[team]["metadata"]["labels"][kueue.QUEUED_NAMESPACE_LABEL] == "required"


@pytest.mark.parametrize(
    ("teams", "expected"),
    [
        (["nlp", "nlp"], "team names must be unique; repeated: nlp"),
        ([{"name": "nlp", "gpuBorrowingLimit": -1}], "kubernetes.teams[0].gpuBorrowingLimit"),
        ([{"name": "NLP"}], "kubernetes.teams[0].name"),
    ],
)
def test_bad_team_config_is_one_line_naming_the_key(teams: list[Any], expected: str) -> None:
    config = copy.deepcopy(template("aws-smb-dev"))
    config[PLATFORM_KEY].setdefault("kubernetes", {})["teams"] = teams
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(config, "Pulumi.aws-smb-dev.yaml")
    assert any(expected in problem for problem in raised.value.problems), raised.value.problems


def test_queueing_off_leaves_jobs_unqueued(tmp_path: Path) -> None:
    config = copy.deepcopy(template("aws-smb-dev"))
    config[PLATFORM_KEY].setdefault("kubernetes", {})["kueue"] = False
    objects = kubernetes_objects(plan_config(config, tmp_path, "aws-smb-dev"))
    assert not [o for o in objects if o["kind"] in KUEUE_KINDS]
    [job] = _training_jobs(objects)
    assert kueue.QUEUE_LABEL not in job["metadata"]["labels"]


@functools.cache
def _chart_documents() -> list[dict[str, Any]]:
    """The chart rendered with our values, once per process (four tests read it; none changes it)."""
    rendered, _ = helm_engine.render(CHART, kueue.chart_values(), kueue.RELEASE, kueue.NAMESPACE)
    return [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]


@needs_chart
@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-enterprise-prod", "azure-smb-dev"])
def test_kueue_objects_match_the_crds_kueue_ships(stack: str, planned: Callable[[str], Plan]) -> None:
    crds = {
        d["spec"]["names"]["kind"]: d for d in _chart_documents() if d["kind"] == "CustomResourceDefinition"
    }
    objects = [o for o in kubernetes_objects(planned(stack)) if o["kind"] in KUEUE_KINDS]
    assert {o["kind"] for o in objects} == KUEUE_KINDS
    for obj in objects:
        group, version = obj["apiVersion"].split("/")
        crd = crds[obj["kind"]]
        assert crd["spec"]["group"] == group
        [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
        assert served["served"] and served["storage"], (
            f"{obj['kind']} {version} is not Kueue's stored version"
        )
        jsonschema.validate(obj, served["schema"]["openAPIV3Schema"])


@needs_chart
def test_chart_renders_our_configuration_and_a_restricted_controller() -> None:
    documents = _chart_documents()
    [config_map] = [
        d for d in documents if d["kind"] == "ConfigMap" and "controller_manager_config.yaml" in d["data"]
    ]
    rendered = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    # The chart adds its own certificate settings; every key of ours reaches the controller unchanged.
    ours = kueue.manager_config()
    assert {key: rendered[key] for key in ours} == ours
    [deployment] = [d for d in documents if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    # Pod Security "restricted" (kueue-system is not privileged): non-root, seccomp, no escalation, drop ALL.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert [d for d in documents if d["kind"] == "PodDisruptionBudget"]


@needs_chart
def test_our_manager_configuration_keeps_every_default_of_the_chart() -> None:
    """The chart's manager configuration is one YAML string: ours replaces it whole, so it must keep
    each key of the default (values.yaml ``managerConfig.controllerManagerConfigYaml`` at 0.19.2)."""
    import tarfile

    with tarfile.open(CHART) as archive:
        member = archive.extractfile("kueue/values.yaml")
        assert member is not None
        values = yaml.safe_load(member.read())
    default = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    ours = kueue.manager_config()
    for key, value in default.items():
        if key == "integrations":
            assert set(ours[key]["frameworks"]) <= set(value["frameworks"])
        else:
            assert ours[key] == value, key
    # Every values key we set exists in the chart's values.yaml.
    assert _unknown_keys(kueue.chart_values(), values) == []


def _unknown_keys(ours: dict[str, Any], chart: dict[str, Any], path: str = "") -> list[str]:
    unknown = []
    for key, value in ours.items():
        if key not in chart:
            unknown.append(f"{path}{key}")
        elif isinstance(value, dict) and isinstance(chart[key], dict) and chart[key]:
            unknown += _unknown_keys(value, chart[key], f"{path}{key}.")
    return unknown


def _minutes(duration: str) -> float:
    assert duration.endswith("m"), duration
    return float(duration[:-1])


def test_a_run_waiting_for_nodes_or_recovering_one_is_not_evicted_sooner_than_kueues_default() -> None:
    """Kueue 0.19.2 defaults both waitForPodsReady.timeout and recoveryTimeout to 30 minutes
    (apis/config/v1beta2/defaults.go: DefaultWaitForPodsReadyTimeout = 30 * time.Minute; recovery from
    the timeout); a fresh p5en/ND96 node and a multi-GB image take that long (cluster review D1)."""
    wait = kueue.manager_config()["waitForPodsReady"]
    assert _minutes(wait["timeout"]) >= 30
    assert _minutes(wait["recoveryTimeout"]) >= 30


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-enterprise-prod"])
def test_fabric_quota_is_what_one_training_pod_per_node_asks(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    """Earlier review D7 (review wt-cluster2 D3): the ``rdma/shared_ib`` quota was 8 per node while each
    pod asks for 1 (one shared slot exposes every HCA). The quota of each fabric resource is the training
    pod's request times the pool's nodes, in the pod's own unit."""
    objects = kubernetes_objects(planned(stack))
    queue = _by_name(objects, "ClusterQueue")[kueue.PLATFORM_QUEUE]
    [job] = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"].startswith("digits-")]
    requests = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    pool = job["spec"]["template"]["spec"]["nodeSelector"]["ml-platform/pool"]
    [nodes] = [p["maxSize"] for p in _queued_pools(stack) if p["name"] == pool]
    fabric = {"aws": "vpc.amazonaws.com/efa", "azure": "rdma/shared_ib"}[stack.split("-", maxsplit=1)[0]]
    assert int(_quota(queue, f"pool-{pool}", fabric)) == int(requests[fabric]) * nodes
