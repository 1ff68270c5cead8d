"""Helm releases rendered offline from the chart cache, on the real stack templates: the values we set
exist in the chart at its pinned version, the objects the charts create are in the plan, and the
chart-level defects stay fixed (NicClusterPolicy, spot tolerations, versions, ordering)."""

from __future__ import annotations

import http.server
import io
import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from components.kubernetes.charts import (
    CHARTS_ENV,
    PINS,
    RELEASE_NAME,
    ChartError,
    ChartPin,
    cache_dir,
    chart_values,
    pinned,
    recorded_digest,
    verify,
)
from mlplatform.charts_cmd import pull_chart
from mlplatform.cli import app
from mlplatform.plan import Plan, PlannedResource, all_stack_targets, resolve_target, run_plan
from mlplatform.rendering import unrendered, unrendered_problems
from mlplatform.report import HELM_RELEASE, as_applied, kubernetes_objects
from tests.http_stub import InThread, base_url, loopback

STACKS = [t.stack for t in all_stack_targets()]
# Values whose contents are free-form in the chart (Kubernetes objects or maps the chart passes on
# as they are), so keys below them are not the chart's to declare.
FREE_FORM = frozenset(
    {
        "tolerations",
        "nodeSelector",
        "extraArgs",
        "annotations",
        "resources",
        "securityContext",
        "containerSecurityContext",
        "additionalScrapeConfigs",
        "affinity",
        # Copied into the Alertmanager object (templates/alertmanager/alertmanager.yaml), which
        # test_manifests validates against the operator's CRD.
        "alertmanagerConfigMatcherStrategy",
        # StorageSpecs (empty maps in values.yaml), copied into the Alertmanager and Prometheus objects;
        # test_monitoring checks the rendered objects' claims.
        "storage",
        "storageSpec",
        # policy-controller: written as they are into its ConfigMap's data
        # (templates/webhook/configmap-policy-controller.yaml) and into a container's securityContext,
        # ``enabled`` omitted (templates/webhook/deployment_webhook.yaml, cleanup-leases.yaml).
        "configData",
        "podSecurityContext",
        # policy-controller: the webhook's extra labels, a map whose keys are label names (``{}`` in
        # values.yaml), each written as it is onto its objects and the webhook's pods (templates/
        # _helpers.tpl "policy-controller.labels": range $key, $value := .Values.webhook.customLabels).
        "customLabels",
    }
)


def _releases(plan: Plan) -> list[PlannedResource]:
    return plan.by_type(HELM_RELEASE)


def _unknown_keys(ours: Any, chart: Any, path: str) -> Iterator[str]:
    """Keys we set that the chart's values.yaml (subcharts' included) does not have."""
    if not isinstance(ours, Mapping):
        return
    for key, value in ours.items():
        here = f"{path}.{key}" if path else key
        if not isinstance(chart, Mapping) or key not in chart:
            yield here
        elif key not in FREE_FORM:
            yield from _unknown_keys(value, chart[key], here)


@pytest.mark.parametrize("stack", STACKS)
def test_every_values_key_we_set_exists_in_the_chart_at_its_version(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    """network-operator v24.10.0 removed deployCR, ofedDriver and rdmaSharedDevicePlugin; Helm ignores
    keys a chart does not read, so only this walk catches a release configured with nothing."""
    for release in _releases(planned(stack)):
        inputs = as_applied(release.inputs)
        chart_pin = pinned(inputs["chart"], inputs["version"])
        assert chart_pin is not None, f"{release.name}: {inputs['chart']} {inputs['version']} is not pinned"
        defaults = chart_values(cache_dir() / chart_pin.file)
        assert list(_unknown_keys(inputs["values"], defaults, "")) == [], release.name


def test_the_walk_catches_the_removed_network_operator_keys() -> None:
    defaults = chart_values(cache_dir() / "network-operator-26.4.1.tgz")
    ours = {"nfd": {"enabled": False}, "deployCR": True, "rdmaSharedDevicePlugin": {"deploy": True}}
    assert list(_unknown_keys(ours, defaults, "")) == ["deployCR", "rdmaSharedDevicePlugin"]


def _kinds(plan: Plan) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in kubernetes_objects(plan)}


def test_aws_enterprise_prod_plans_what_its_charts_install(planned: Callable[[str], Plan]) -> None:
    objects = _kinds(planned("aws-enterprise-prod"))
    assert ("ClusterPolicy", "cluster-policy") in objects
    assert ("DaemonSet", "aws-efa-k8s-device-plugin") in objects
    assert ("Deployment", "cluster-autoscaler-aws-cluster-autoscaler") in objects
    assert ("Deployment", "kube-prometheus-stack-operator") in objects
    assert ("CustomResourceDefinition", "prometheusrules.monitoring.coreos.com") in objects
    efa = objects[("DaemonSet", "aws-efa-k8s-device-plugin")]
    assert efa["metadata"]["namespace"] == "kube-system"
    assert efa["metadata"]["annotations"][RELEASE_NAME] == "aws-efa-k8s-device-plugin"


def test_azure_enterprise_prod_adds_network_operator_and_its_nic_cluster_policy(
    planned: Callable[[str], Plan],
) -> None:
    plan = planned("azure-enterprise-prod")
    objects = _kinds(plan)
    assert ("Deployment", "network-operator") in objects
    assert ("CustomResourceDefinition", "nicclusterpolicies.mellanox.com") in objects
    policy = objects[("NicClusterPolicy", "nic-cluster-policy")]
    assert "rdma/shared_ib" not in str(policy) and '"resourceName": "shared_ib"' in str(policy)
    # The GPU operator loads nvidia-peermem against the containerized MOFED, not a host one.
    driver = objects[("ClusterPolicy", "cluster-policy")]["spec"]["driver"]
    assert driver["rdma"] == {"enabled": True, "useHostMofed": False}
    # Order: network-operator after the GPU operator (its NodeFeatureRules need NFD's CRD), the
    # NicClusterPolicy after network-operator (its CRD).
    releases = {r.name.rsplit("-k8s-", 1)[1]: r for r in _releases(plan)}
    assert releases["gpu-operator"].urn in releases["network-operator"].dependencies
    [nic] = plan.by_type("kubernetes:mellanox.com/v1alpha1:NicClusterPolicy")
    assert releases["network-operator"].urn in nic.dependencies


def test_gpu_operands_on_aks_spot_pools_tolerate_the_spot_taint(planned: Callable[[str], Plan]) -> None:
    """azure-smb-dev's GPU pool is spot: AKS taints it kubernetes.azure.com/scalesetpriority=spot."""
    objects = _kinds(planned("azure-smb-dev"))
    keys = {
        t["key"] for t in objects[("ClusterPolicy", "cluster-policy")]["spec"]["daemonsets"]["tolerations"]
    }
    assert {"nvidia.com/gpu", "kubernetes.azure.com/scalesetpriority"} <= keys
    worker = objects[("DaemonSet", "gpu-operator-node-feature-discovery-worker")]
    assert "kubernetes.azure.com/scalesetpriority" in str(worker["spec"]["template"]["spec"]["tolerations"])


@pytest.mark.parametrize("stack", [s for s in STACKS if s.startswith("aws")])
def test_cluster_autoscaler_matches_the_control_plane_minor(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    """REFERENCE.md (EKS): cluster-autoscaler should match the control plane's minor version."""
    plan = planned(stack)
    minor = plan.outputs["kubernetesVersion"]
    image = _kinds(plan)[("Deployment", "cluster-autoscaler-aws-cluster-autoscaler")]["spec"]["template"][
        "spec"
    ]["containers"][0]["image"]
    assert image.rsplit(":", 1)[1].removeprefix("v").startswith(f"{minor}."), image


def test_efa_plugin_knows_p6_b200() -> None:
    """aws/eks-charts: p6-b200 EFA devices need aws-efa-k8s-device-plugin chart v0.5.10 or later."""
    [efa] = [p for p in PINS if p.chart == "aws-efa-k8s-device-plugin"]
    assert tuple(int(x) for x in efa.version.removeprefix("v").split(".")) >= (0, 5, 10)


@pytest.mark.parametrize("stack", ["aws-smb-dev", "azure-smb-dev"])
def test_releases_wait_for_the_cpu_pools(stack: str, planned: Callable[[str], Plan]) -> None:
    """A single-phase `pulumi up` must not start Helm's wait before any node can run the pods (a
    component in depends_on stands for its resources: the engine gets the agent pools themselves)."""
    plan = planned(stack)
    pools = {
        r.urn
        for r in plan.resources
        if (r.type == "aws:eks/nodeGroup:NodeGroup" and r.name.endswith("-cpu-ng"))
        or r.type == "azure-native:containerservice:AgentPool"
    }
    assert pools
    for release in _releases(plan):
        assert pools <= set(release.dependencies), release.name


def test_a_missing_chart_is_one_line_and_leaves_the_release_unrendered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CHARTS_ENV, str(tmp_path))
    plan = run_plan(resolve_target("azure-smb-dev"))
    assert {r.name for r in unrendered(plan.resources)} == {r.name for r in _releases(plan)}
    assert not [o for o in kubernetes_objects(plan) if RELEASE_NAME in o["metadata"].get("annotations", {})]
    lines = unrendered_problems(plan.resources)
    assert len(lines) == len(_releases(plan))
    gpu = "Helm release azure-smb-dev-k8s-gpu-operator is not rendered: chart gpu-operator v26.7.0"
    assert any(line.startswith(f"{gpu} is not in {tmp_path}") for line in lines), lines
    assert all(f"`mlplatform charts pull --dest {tmp_path}`" in line for line in lines), lines


@pytest.mark.parametrize("verb", ["plan", "check"])
def test_plan_and_check_refuse_a_release_they_cannot_render_unless_allowed(
    verb: str, tmp_path: Path, planned: Callable[[str], Plan]
) -> None:
    """A plan that silently lacks a chart's objects judges less than the platform: exit 2, one line
    per release naming it; --allow-unrendered makes each line a warning."""
    env = {CHARTS_ENV: str(tmp_path)}
    refused = CliRunner().invoke(app, [verb, "aws-smb-dev"], env=env)
    assert refused.exit_code == 2, refused.output
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error: ")]
    releases = [r.name for r in _releases(planned("aws-smb-dev"))]
    assert len(errors) == len(releases) and releases
    for name in releases:
        assert any(f"Helm release {name} is not rendered: " in line for line in errors), (name, errors)
    allowed = CliRunner().invoke(app, [verb, "aws-smb-dev", "--allow-unrendered"], env=env)
    assert allowed.exit_code == 0, allowed.output
    warnings = [line for line in allowed.stderr.splitlines() if "is not rendered: " in line]
    assert len(warnings) == len(releases) and all(line.startswith("warning: ") for line in warnings)


def test_the_shipped_charts_are_the_pinned_ones_with_their_recorded_digests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From a fresh clone every pinned chart is in the repository's charts/ (no ../shared, no
    network), each the package index.json records (sha256, source, tag, commit, license), and the
    licenses allow shipping them (Apache-2.0, its text beside them)."""
    folder = Path(__file__).resolve().parents[3] / "charts"
    monkeypatch.delenv(CHARTS_ENV, raising=False)
    assert cache_dir() == folder
    index = {e["file"]: e for e in json.loads((folder / "index.json").read_text())}
    for chart_pin in PINS:
        assert chart_pin.file in index, chart_pin.file
        verify(folder / chart_pin.file, chart_pin.chart, chart_pin.version)
    for entry in index.values():
        assert recorded_digest(folder / entry["file"]) == entry["sha256"]
        assert entry["license"].startswith("Apache-2.0"), entry
        assert {"source", "tag", "commit"} <= entry.keys()
    assert {p.name for p in folder.glob("*.tgz")} == set(index)
    assert "Apache License" in (folder / "LICENSE-Apache-2.0").read_text()


def test_verify_refuses_a_package_swapped_in_place(tmp_path: Path) -> None:
    """Same chart, same version, other bytes: the digest index.json records catches it."""
    shutil.copy(cache_dir() / "index.json", tmp_path)
    swapped = tmp_path / "cluster-autoscaler-9.51.0.tgz"
    original = (cache_dir() / swapped.name).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(original)) as archive, tarfile.open(swapped, "w:gz") as copy:
        for member in archive.getmembers():
            copy.addfile(member, archive.extractfile(member) if member.isfile() else None)
    with pytest.raises(ChartError, match=r"sha256 [0-9a-f]{64}, but index\.json records"):
        verify(swapped, "cluster-autoscaler", "9.51.0")


def test_verify_refuses_a_package_that_is_not_the_pinned_chart(tmp_path: Path) -> None:
    wrong = tmp_path / "cluster-autoscaler-9.51.0.tgz"
    shutil.copy(cache_dir() / "cluster-autoscaler-9.53.0.tgz", wrong)
    with pytest.raises(
        ChartError, match=r"holds cluster-autoscaler 9\.53\.0, expected cluster-autoscaler 9\.51\.0"
    ):
        verify(wrong, "cluster-autoscaler", "9.51.0")
    broken = tmp_path / "broken.tgz"
    broken.write_bytes(b"not a chart")
    with pytest.raises(ChartError, match="not a loadable Helm chart"):
        verify(broken, "metrics-server", "3.13.1")


@pytest.fixture
def chart_repo(tmp_path: Path) -> Iterator[str]:
    """A real Helm chart repository (index.yaml by Helm's own indexer) on a local HTTP socket."""
    served = tmp_path / "repo"
    served.mkdir()
    shutil.copy(cache_dir() / "metrics-server-3.13.1.tgz", served)
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(served))  # noqa: E731
    with InThread(loopback(handler)) as server:
        url = base_url(server)
        # Helm's indexer in a process of its own, as the product keeps Go out of its processes (helm_engine).
        index = "import sys, helm_python; helm_python.repo_index_generate(sys.argv[1], base_url=sys.argv[2])"
        subprocess.run([sys.executable, "-c", index, str(served), url], check=True)
        yield url


def test_pull_fetches_the_pinned_version_and_verifies_it(chart_repo: str, tmp_path: Path) -> None:
    chart_pin = ChartPin("metrics-server", "3.13.1", chart_repo, "test")
    pulled = pull_chart(chart_pin, tmp_path / "cache")
    assert pulled == tmp_path / "cache" / "metrics-server-3.13.1.tgz"
    assert pulled.read_bytes() == (cache_dir() / "metrics-server-3.13.1.tgz").read_bytes()


def test_pull_of_a_version_the_repository_lacks_is_one_line(chart_repo: str, tmp_path: Path) -> None:
    with pytest.raises(ChartError, match=r"^metrics-server 9\.9\.9: cannot pull from http://127\.0\.0\.1"):
        pull_chart(ChartPin("metrics-server", "9.9.9", chart_repo, "test"), tmp_path)
    assert not list(tmp_path.glob("*.tgz"))
