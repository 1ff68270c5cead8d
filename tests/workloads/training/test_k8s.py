"""training_job_objects: the Job, Service and NetworkPolicy, checked as the cluster and checkov see them."""

from __future__ import annotations

import dataclasses
import os
import subprocess
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
from workloads.training.config import ConfigError
from workloads.training.k8s import RENDEZVOUS_PORT, TrainingJobSpec, training_job_objects
from workloads.training.sizing import aks_reserved, eks_reserved, pod_size

REPO = Path(__file__).resolve().parents[3]
DIGEST = "registry.example.com/ml-platform/training@sha256:" + "0123456789abcdef" * 4
GPU_TAINT = (Taint("nvidia.com/gpu", "true"),)
POOLS = {
    "cpu": PoolHandle("cpu", PoolKind.CPU, "m7i.4xlarge", 0, Fabric.NONE, 0, 16, 64),
    "gpu": PoolHandle("gpu", PoolKind.GPU, "g6e.12xlarge", 4, Fabric.NONE, 0, 48, 384, taints=GPU_TAINT),
    "efa": PoolHandle("efa", PoolKind.GPU, "p4d.24xlarge", 8, Fabric.EFA, 4, 96, 1152, taints=GPU_TAINT),
    "p5": PoolHandle("p5", PoolKind.GPU, "p5.48xlarge", 8, Fabric.EFA, 32, 192, 2048, taints=GPU_TAINT),
    "p5en": PoolHandle("p5en", PoolKind.GPU, "p5en.48xlarge", 8, Fabric.EFA, 16, 192, 2048, taints=GPU_TAINT),
    "ib": PoolHandle(
        "ib",
        PoolKind.GPU,
        "Standard_ND96isr_H100_v5",
        8,
        Fabric.INFINIBAND,
        8,
        96,
        1900,
        taints=(Taint("nvidia.com/gpu", "present"),),
    ),
}


def make_spec(pool: str = "efa", **changes: Any) -> TrainingJobSpec:
    handle = POOLS[pool]
    base = TrainingJobSpec(
        name="digits",
        run_id="r20250101a",
        namespace="ml-training",
        image=DIGEST,
        pool=handle,
        service_account="training",
        output_volume={"persistentVolumeClaim": {"claimName": "training-output"}},
        nodes=2,
        nproc_per_node=max(1, handle.gpus_per_node),
        cpu=8,
        memory_gib=64,
        shm_gib=8,
        trainer_args=("--batch-size", "128"),
    )
    return dataclasses.replace(base, **changes)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def trainer(job: dict[str, Any]) -> dict[str, Any]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_objects_validate_strictly_against_kubernetes_1_31(pool: str) -> None:
    for obj in training_job_objects(make_spec(pool)):
        validate_strictly(obj, "1.31")


def test_indexed_job_named_by_run_and_not_awaited_by_pulumi() -> None:
    spec = make_spec()
    job = by_kind(training_job_objects(spec))["Job"]
    assert job["metadata"]["name"] == "digits-r20250101a"
    assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert job["metadata"]["namespace"] == "ml-training"
    assert (job["spec"]["completionMode"], job["spec"]["completions"], job["spec"]["parallelism"]) == (
        "Indexed",
        2,
        2,
    )
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    other = by_kind(training_job_objects(dataclasses.replace(spec, run_id="r2")))["Job"]
    assert other["metadata"]["name"] == "digits-r2", "a new run id is a new Job (Job specs are immutable)"


def test_headless_service_resolves_every_pod_for_c10d_rendezvous() -> None:
    objects = by_kind(training_job_objects(make_spec()))
    service, job = objects["Service"], objects["Job"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in service["spec"]["ports"]] == [RENDEZVOUS_PORT]
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    policy = objects["NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"] == service["spec"]["selector"]


def run_command_line(job: dict[str, Any], index: int, tmp_path: Path) -> list[str]:
    """Run the container's real shell line with a stand-in ``torchrun`` that prints the argv it gets."""
    fake = tmp_path / "torchrun"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    fake.chmod(0o755)
    # The one-off trainer preflight before torchrun (tests/workloads/training/test_exit_codes.py).
    preflight = tmp_path / "python"
    preflight.write_text("#!/bin/sh\nexit 0\n")
    preflight.chmod(0o755)
    command = trainer(job)["command"]
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": str(index)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=10, check=True)
    return done.stdout.splitlines()


def test_pod_zero_hosts_the_store_and_all_pods_run_the_trainer(tmp_path: Path) -> None:
    job = by_kind(training_job_objects(make_spec()))["Job"]
    host, peer = run_command_line(job, 0, tmp_path), run_command_line(job, 1, tmp_path)
    # Rendezvous timeouts outlast a late pod 0 and a peer stuck in NCCL (cluster review B2).
    timeouts = "read_timeout=900,join_timeout=1800"
    assert f"--rdzv-conf=is_host=1,{timeouts}" in host and f"--rdzv-conf=is_host=0,{timeouts}" in peer
    assert "--rdzv-endpoint=digits-r20250101a-0.digits-r20250101a.ml-training.svc:29400" in host
    assert {"--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d", "--max-restarts=3"} <= set(host)
    trainer_argv = host[host.index("-m") :]
    assert trainer_argv[:2] == ["-m", "workloads.training"]
    assert {"--output=/mnt/output", "--model-version=r20250101a", "--epochs=20", "128"} <= set(trainer_argv)
    env = {e["name"]: e["value"] for e in trainer(job)["env"]}
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


@pytest.mark.parametrize(
    ("pool", "devices"),
    [
        ("cpu", {}),
        ("gpu", {"nvidia.com/gpu": "4"}),
        ("efa", {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "4", "hugepages-2Mi": "5120Mi"}),
        ("ib", {"nvidia.com/gpu": "8", "rdma/shared_ib": "1"}),
    ],
)
def test_fabric_resources_land_in_requests_and_limits(pool: str, devices: dict[str, str]) -> None:
    job = by_kind(training_job_objects(make_spec(pool)))["Job"]
    resources = trainer(job)["resources"]
    assert resources["requests"] == resources["limits"] == {"cpu": "8", "memory": "64Gi", **devices}
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"ml-platform/pool": pool}
    assert pod["tolerations"] == POOLS[pool].tolerations()


def test_fabric_environment_and_capabilities_per_pool() -> None:
    envs = {}
    for pool in POOLS:
        job = by_kind(training_job_objects(make_spec(pool)))["Job"]
        envs[pool] = {e["name"]: e["value"] for e in trainer(job)["env"]}
        security = trainer(job)["securityContext"]
        added = security["capabilities"].get("add", [])
        assert added == (["IPC_LOCK"] if pool == "ib" else [])
        # A capability added to a non-root container never reaches its effective set (no ambient
        # capabilities: kubernetes/kubernetes#56374): the InfiniBand trainer runs as UID 0, everything
        # else dropped; the others stay UID 10001 (cluster review A4).
        assert security["runAsUser"] == (0 if pool == "ib" else 10001)
        assert security["runAsNonRoot"] is (pool != "ib")
        assert security["allowPrivilegeEscalation"] is False and security["capabilities"]["drop"] == ["ALL"]
    assert "NCCL_SOCKET_IFNAME" not in envs["cpu"]
    assert envs["efa"]["FI_PROVIDER"] == "efa"
    assert envs["ib"]["NCCL_IB_DISABLE"] == "0"
    assert all(envs[p]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" for p in ("gpu", "efa", "ib"))


def test_tmp_holds_compile_caches() -> None:
    """/tmp holds HOME, the inductor and Triton caches and NCCL logs; an overflow is an eviction the
    podFailurePolicy ignores (DisruptionTarget), a recreate loop (cluster review D10)."""
    job = by_kind(training_job_objects(make_spec("efa")))["Job"]
    [tmp] = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "tmp"]
    assert tmp["emptyDir"]["sizeLimit"] == "16Gi"


def test_pod_is_hardened() -> None:
    pod = by_kind(training_job_objects(make_spec()))["Job"]["spec"]["template"]["spec"]
    context = pod["containers"][0]["securityContext"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsUser"] >= 10000 and context["runAsUser"] >= 10000
    assert context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"]
    assert context["capabilities"]["drop"] == ["ALL"]
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["output"]["persistentVolumeClaim"] == {"claimName": "training-output"}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/dev/shm", "/tmp", "/mnt/output"} <= mounts


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"namespace": "default"}, ValueError, "not be 'default'"),
        ({"image": "registry.example.com/training:latest"}, ValueError, "must be pinned"),
        ({"image": "registry.example.com/training"}, ValueError, "must be pinned"),
        ({"run_id": "Run_1"}, ValueError, "not a DNS label"),
        ({"nproc_per_node": 16}, ValueError, "exceeds the pool's 8 GPUs"),
        ({"shm_gib": 64}, ValueError, "below memory_gib"),
        ({"cpu": 200}, ValueError, "cannot fit a p4d.24xlarge node"),
        ({"output_mount_path": "out"}, ValueError, "must be absolute"),
        ({"trainer_args": ("--epochs", "0")}, ConfigError, "--epochs"),
    ],
)
def test_bad_specs_are_rejected_at_construction(
    changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make_spec(**changes)


@needs_checkov
def test_checkov_passes_with_only_documented_skips(tmp_path: Path) -> None:
    for pool in ("cpu", "gpu", "efa", "ib"):
        write_objects(training_job_objects(make_spec(pool)), tmp_path, prefix=f"{pool}-")
    results = checkov_kubernetes(tmp_path)
    failed = [(c["check_id"], c["file_path"]) for c in results["failed_checks"]]
    assert failed == []
    skipped = {(c["check_id"], c["resource"].split(".")[0]) for c in results["skipped_checks"]}
    # The InfiniBand trainer's IPC_LOCK, which takes effect only as UID 0 (kubernetes#56374).
    assert skipped == {
        ("CKV_K8S_25", "Job"),
        ("CKV_K8S_37", "Job"),
        ("CKV_K8S_23", "Job"),
        ("CKV_K8S_40", "Job"),
    }
    assert {Path(c["file_path"]).name.split("-")[0] for c in results["skipped_checks"]} == {"ib"}
    assert unexplained_skips(results) == []
    assert len(results["passed_checks"]) > 100


@pytest.mark.parametrize("pool", ["p5", "p5en", "ib"])
def test_gpu_pod_asks_for_most_of_its_node(pool: str) -> None:
    """One pod per node: the derived size is at least a quarter of the node (in fact most of it)."""
    spec = make_spec(pool, cpu=None, memory_gib=None, shm_gib=None, nproc_per_node=None)
    job = by_kind(training_job_objects(spec))["Job"]
    requests = trainer(job)["resources"]["requests"]
    node = POOLS[pool]
    cpu, memory_gib = int(requests["cpu"]), int(requests["memory"].removesuffix("Gi"))
    print(f"{node.instance_type}: {cpu}/{node.vcpus} CPUs, {memory_gib}/{node.memory_gib} GiB")
    assert 4 * cpu >= node.vcpus and 4 * memory_gib >= node.memory_gib
    assert cpu < node.vcpus and memory_gib < node.memory_gib, "room is left for kubelet and DaemonSets"
    assert requests["nvidia.com/gpu"] == "8"
    env = {e["name"]: e["value"] for e in trainer(job)["env"]}
    assert env["OMP_NUM_THREADS"] == str(cpu // 8)
    host = run_command_line(job, 0, Path(os.environ.get("TMPDIR", "/tmp")))
    assert "--nproc-per-node=8" in host, "one process per GPU"
    shm = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}["dshm"]["emptyDir"]
    assert shm["sizeLimit"] == f"{memory_gib // 4}Gi"


def test_reservations_follow_the_documented_formulas() -> None:
    """EKS AMI: 6% + 1% + 2 x 0.5% + 0.25% per further core, 11 MiB x pods + 255 MiB. AKS: the CPU table
    (740m at 64 cores, used above it) and min(20 MB x pods + 50 MB, 25% of memory)."""
    assert eks_reserved(4, 16384) == pytest.approx((60 + 10 + 10, 11 * 250 + 255))
    assert eks_reserved(192, 0)[0] == pytest.approx(60 + 10 + 10 + 188 * 2.5)
    assert aks_reserved(4, 16384) == (140, 4096), "25% of a small node is less than 20 MB x 250 + 50"
    assert aks_reserved(96, 1900 * 1024) == (740, 5050)
    assert aks_reserved(12, 0)[0] == 260, "between rows the next larger row applies"


def test_efa_huge_pages_come_off_pod_memory() -> None:
    """Pre-allocated huge pages are not allocatable memory; the headroom share of them stays free too."""
    lost = pod_size(POOLS["p5"]).memory_gib - pod_size(POOLS["p5"], 5120).memory_gib
    assert lost in (4, 5)


def test_stack_overrides_win_over_the_derived_size() -> None:
    spec = make_spec("p5", cpu=48, memory_gib=256, shm_gib=32)
    assert trainer(by_kind(training_job_objects(spec))["Job"])["resources"]["requests"]["cpu"] == "48"
    with pytest.raises(ValueError, match="below memory_gib"):
        make_spec("p5", memory_gib=None, shm_gib=2000)


def test_losing_any_pod_restarts_its_index_and_bad_input_fails_at_once() -> None:
    """Per-index budgets (Job API, GA in 1.33): one lost pod costs each index one restart, never the
    Job-wide backoffLimit once per pod; exit 2 (bad input, changed recipe) fails the Job without retries."""
    job = by_kind(training_job_objects(make_spec(max_restarts=5)))["Job"]["spec"]
    assert "backoffLimit" not in job
    assert (job["backoffLimitPerIndex"], job["maxFailedIndexes"]) == (5, 0)
    fail_job, ignore = job["podFailurePolicy"]["rules"]
    assert fail_job == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [2]},
    }
    assert ignore["action"] == "Ignore"
    assert ignore["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]


@pytest.mark.parametrize(
    ("pool", "network"), [("efa", "Libfabric"), ("ib", "IB"), ("gpu", None), ("cpu", None)]
)
def test_fabric_pools_make_the_trainer_insist_on_their_network(pool: str, network: str | None) -> None:
    argv = make_spec(pool).trainer_argv()
    assert [a for a in argv if a.startswith("--expect-network")] == (
        [f"--expect-network={network}"] if network else []
    )


def test_dataset_egress_is_https_to_the_named_ranges_only() -> None:
    closed = by_kind(training_job_objects(make_spec()))["NetworkPolicy"]["spec"]["egress"]
    assert not any("ipBlock" in peer for rule in closed for peer in rule["to"]), "no egress by default"
    spec = make_spec(dataset_egress_cidrs=("52.95.0.0/16",))
    egress = by_kind(training_job_objects(spec))["NetworkPolicy"]["spec"]["egress"]
    assert egress[-1] == {
        "to": [{"ipBlock": {"cidr": "52.95.0.0/16"}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }


def test_a_recreated_pod_waits_longer_for_its_peers_than_they_wait_in_a_collective() -> None:
    """After a node loss the survivors sit in a collective until the process-group timeout, then exit and
    are recreated; the recreated pod 0 waits ``join_timeout`` for them (torch dynamic_rendezvous, default
    600 s): it must outlast the collective timeout (cluster review B2)."""
    from workloads.training.distributed import PROCESS_GROUP_TIMEOUT
    from workloads.training.k8s import RDZV_JOIN_TIMEOUT_S

    assert 2 * PROCESS_GROUP_TIMEOUT.total_seconds() <= RDZV_JOIN_TIMEOUT_S


def test_the_job_hands_the_trainer_its_registry_and_the_image_it_runs_in() -> None:
    """The trainer registers in the registry named by MLflow's own ``MLFLOW_TRACKING_URI`` and records
    the image reference (pinned by digest) in the run's lineage (workloads/registry/lineage.py)."""

    def env(spec: TrainingJobSpec) -> dict[str, Any]:
        job = by_kind(training_job_objects(spec))["Job"]
        return {e["name"]: e["value"] for e in trainer(job)["env"]}

    registry = "http://registry.ml-registry.svc.cluster.local:5000"
    assert env(make_spec("cpu", registry_uri=registry))["MLFLOW_TRACKING_URI"] == registry
    assert env(make_spec("cpu"))["MLPLATFORM_IMAGE"] == DIGEST
    assert "MLFLOW_TRACKING_URI" not in env(make_spec("cpu")), "no registry: the trainer registers nothing"
