"""The day-2 runbooks of docs/operations.md, each exercised where the mocks allow (the others: the
tests each section names)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from components.aws import platform as aws_platform
from components.aws.preflight import SUPPORT_WARNING_DAYS
from components.catalog.aws import EKS_ADDON_VERSIONS, EKS_STANDARD_SUPPORT_END
from components.config import PLATFORM_KEY, ConfigError, parse_stack_config
from components.kubernetes import workloads
from components.kubernetes.registry import MLFLOW_VERSION, RegistrySpec
from judges import Subject
from judges.immutable import REPLACED, judge_immutable
from mlplatform.cli import app
from mlplatform.graph import PlannedResource
from mlplatform.plan import Plan, resolve_target, run_plan
from mlplatform.report import kubernetes_objects, write_json
from tests.stack_variants import input_diff, plan_config, template, with_teams


def _refused(stack: str, version: str) -> list[str]:
    body: dict[str, Any] = template(stack)
    body[PLATFORM_KEY].setdefault("cluster", {})["kubernetesVersion"] = version
    with pytest.raises(ConfigError) as refused:
        parse_stack_config(body, stack)
    return refused.value.problems


@pytest.mark.parametrize(
    ("stack", "missing"),
    [
        ("aws-enterprise-prod", ("the cluster-autoscaler chart", "the EKS add-ons")),
        ("azure-enterprise-prod", ("the cluster-autoscaler chart",)),
    ],
)
def test_upgrading_to_1_36_names_every_pin_it_still_needs(stack: str, missing: tuple[str, ...]) -> None:
    """ "Upgrade Kubernetes by one minor": 1.35 → 1.36 is refused, in one line under
    ``cluster.kubernetesVersion``, until every per-minor pin has a 1.36 row; the line names them (the
    cluster-autoscaler chart for 1.36, not in charts/; on AWS the EKS add-on versions too); on Azure a
    second line says the AKS calendar has no 1.36 row. Nothing else refuses the edit."""
    problems = _refused(stack, "1.36")
    assert all(f"{PLATFORM_KEY}.cluster.kubernetesVersion: " in p for p in problems), problems
    pins = next(p for p in problems if "1.36 is not pinned in" in p)
    assert "pinned everywhere: " in pins and "1.35" in pins
    named = pins.split(" is not pinned in ", 1)[1].split("; pinned everywhere", 1)[0]
    assert [part.split(" (")[0] for part in named.split("), ")] == list(missing)
    # On Azure the AKS calendar (components/azure/versions.py) has no 1.36 row either, and says so.
    calendar = [p for p in problems if "AKS does not support 1.36" in p]
    assert len(calendar) == (1 if stack.startswith("azure-") else 0)
    assert len(problems) == 1 + len(calendar), "nothing else refuses the upgrade"


# The node groups', cluster's and add-ons' update in place (pulumi-aws marks a property that replaces with
# "Changing this value will force a new ..."; none of these three says so): UpdateClusterVersion,
# UpdateAddon and UpdateNodegroupVersion, which rolls the group's nodes (EKS user guide, "Update a
# managed node group").
_ONE_MINOR_CLOUD_CHANGES = {
    "aws:eks/cluster:Cluster": ["version"],
    "aws:eks/addon:Addon": ["addonVersion"],
    "aws:eks/nodeGroup:NodeGroup": ["version"],
}


def test_upgrading_aws_from_1_34_to_1_35_updates_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Upgrade Kubernetes by one minor", as an upgrade (review 38, third review B1): aws-smb-dev at
    1.34, on a day inside 1.34's EKS standard support (it ends 2026-12-02: EKS_STANDARD_SUPPORT_END),
    then ``kubernetesVersion`` raised to 1.35 as the runbook says. ``mlplatform check --previous`` on
    the two plans: the cluster's version, every EKS add-on's version and every node group's version
    update in place (the runbook's steps 1-3), the cluster-autoscaler release moves from chart 9.53.0
    (app 1.34.2) to 9.59.0 (app 1.35.0) (step 4), nothing is added, deleted or replaced, and nothing is
    mandatory."""
    end = datetime.date.fromisoformat(EKS_STANDARD_SUPPORT_END["1.34"])
    # A preview inside 1.34's support, far enough ahead of its end that no warning is said.
    monkeypatch.setattr(
        aws_platform, "today", lambda: end - datetime.timedelta(days=SUPPORT_WARNING_DAYS + 1)
    )
    stack = "aws-smb-dev"
    plans: dict[str, Plan] = {}
    for version in ("1.34", "1.35"):
        config = template(stack)
        config[PLATFORM_KEY].setdefault("cluster", {})["kubernetesVersion"] = version
        directory = tmp_path / version
        directory.mkdir()
        plans[version] = plan_config(config, directory, stack)
        write_json(plans[version], tmp_path / f"{version}.json")
    before, after = plans["1.34"], plans["1.35"]
    old, new = ({r.urn: r for r in p.resources} for p in (before, after))
    assert old.keys() == new.keys(), "nothing added or deleted"
    cloud = {
        new[u].name: (new[u].type, list(input_diff(old[u].inputs, new[u].inputs)))
        for u in new
        if not new[u].type.startswith("kubernetes:") and list(input_diff(old[u].inputs, new[u].inputs))
    }
    assert all(paths == _ONE_MINOR_CLOUD_CHANGES.get(kind) for kind, paths in cloud.values()), cloud
    kinds = [kind for kind, _ in cloud.values()]
    assert kinds.count("aws:eks/cluster:Cluster") == 1
    assert kinds.count("aws:eks/nodeGroup:NodeGroup") == len(after.by_type("aws:eks/nodeGroup:NodeGroup"))
    addons = {
        str(r.inputs["addonName"]): r.inputs.get("addonVersion") for r in after.by_type("aws:eks/addon:Addon")
    }
    assert {a: v for a, v in addons.items() if v is not None} == EKS_ADDON_VERSIONS["1.35"]
    assert kinds.count("aws:eks/addon:Addon") == len(addons)
    [autoscaler] = [
        r for r in after.by_type("kubernetes:helm.sh/v3:Release") if r.name.endswith("cluster-autoscaler")
    ]
    assert (old[autoscaler.urn].inputs["version"], autoscaler.inputs["version"]) == ("9.53.0", "9.59.0")
    # In the cluster only the autoscaler's release and its objects change (its image and chart label).
    changed = {
        new[u].name
        for u in new
        if new[u].type.startswith("kubernetes:") and list(input_diff(old[u].inputs, new[u].inputs))
    }
    assert changed and all("cluster-autoscaler" in name for name in changed), changed

    report_file = tmp_path / "check.json"
    checked = CliRunner().invoke(
        app,
        [
            "check",
            "--plan",
            str(tmp_path / "1.35.json"),
            "--previous",
            str(tmp_path / "1.34.json"),
            "--json",
            str(report_file),
        ],
    )
    assert checked.exit_code == 0, checked.output
    [report] = json.loads(report_file.read_text())["stacks"]
    assert [v for v in report["violations"] if v["enforcement"] == "mandatory"] == []
    assert [v for v in report["violations"] if v["policy"] == REPLACED] == []


Objects = dict[Subject, dict[str, Any]]


def _objects(plan: Plan) -> Objects:
    return {Subject.of(o): o for o in kubernetes_objects(plan)}


def _changed(before: Objects, after: Objects) -> set[Subject]:
    return {s for s in before.keys() & after.keys() if list(input_diff(before[s], after[s]))}


def _resource_changes(before: Plan, after: Plan) -> list[str]:
    """The resources other than Kubernetes objects (the cloud's, generated passwords) an update would add,
    delete or update (their inputs differ)."""
    old = {r.urn: r for r in before.resources if not r.type.startswith("kubernetes:")}
    new = {r.urn: r for r in after.resources if not r.type.startswith("kubernetes:")}
    changed = {u for u in old.keys() & new.keys() if list(input_diff(old[u].inputs, new[u].inputs))}
    return sorted(old.keys() ^ new.keys() | changed)


@pytest.mark.parametrize("stack", ["aws-enterprise-prod"])
def test_removing_a_team_deletes_its_namespace_and_objects_and_nothing_else(
    planned: Callable[[str], Plan], tmp_path_factory: pytest.TempPathFactory, stack: str
) -> None:
    """ "Add or remove a team": the stack with the README's teams (nlp, vision), then the entries removed
    (the shipped template). The update deletes each team's namespace with its ResourceQuota, Kueue
    LocalQueue and everything else in it, and the team's ClusterQueue; the registry forgets the team (its
    user, which the servers' launcher then deletes at their start: tests/workloads/registry/
    test_users_bootstrap.py, and its ingress); it adds and replaces nothing, changes nothing else in the
    cluster or the cloud, and the day-2 judge (``check --previous``) finds nothing mandatory."""
    with_them = plan_config(with_teams(stack), tmp_path_factory.mktemp("teams"), stack, shared=True)
    without = planned(stack)
    before, after = _objects(with_them), _objects(without)
    deleted = before.keys() - after.keys()
    teams = {"team-nlp", "team-vision"}
    assert {(s.kind, s.namespace or s.name) for s in deleted} >= {
        (kind, team)
        for team in teams
        for kind in ("Namespace", "ResourceQuota", "LocalQueue", "ClusterQueue")
    }
    # With its last team gone the stack has no team namespace, so the tenancy guard goes too
    # (components/kubernetes/layer.py ``team_guard``: none where there are no teams).
    assert sorted(str(s) for s in deleted if (s.namespace or s.name) not in teams) == [
        "ValidatingAdmissionPolicy ml-platform-tenancy-guard",
        "ValidatingAdmissionPolicyBinding ml-platform-tenancy-guard",
    ]
    assert after.keys() - before.keys() == set()
    # The registry's servers (REGISTRY_USERS), its ingress and its users' passwords drop the teams.
    changed = _changed(before, after)
    assert sorted(map(str, changed)) == [
        "Deployment ml-registry/registry",
        "NetworkPolicy ml-registry/registry",
        "Secret ml-registry/registry-users",
    ]
    for subject in changed:
        assert all(team in json.dumps(before[subject]) for team in teams)
        assert not any(team in json.dumps(after[subject]) for team in teams)
    # The users' passwords Secret is replaced (pulumi-kubernetes: a Secret's data is forceNew): advisory.
    [replaced] = judge_immutable(list(before.values()), list(after.values()))
    assert (replaced.policy, replaced.level, str(replaced.subject)) == (
        REPLACED,
        "advisory",
        "Secret ml-registry/registry-users",
    )
    # The teams' generated registry passwords go with them; the cloud keeps everything.
    gone = _resource_changes(with_them, without)
    assert [urn.rsplit("::", 1)[1] for urn in gone] == [
        f"{stack}-k8s-registry-{team}" for team in sorted(teams)
    ]
    assert all("randomPassword:RandomPassword" in urn for urn in gone)


NEXT_MLFLOW = "3.18.1"  # any later version: the plan names its Job and labels after it


@dataclass(frozen=True)
class _Upgraded(RegistrySpec):
    """``MLFLOW_VERSION`` raised, as the runbook's first step does: the registry's spec with the next
    version."""

    mlflow_version: str = NEXT_MLFLOW


def _resource_of(plan: Plan, subject: Subject) -> PlannedResource:
    """The resource that applies ``subject``."""
    [resource] = [
        r
        for r in plan.resources
        if r.type.startswith("kubernetes:")
        and r.type.rsplit(":", 1)[1] == subject.kind
        and Subject.of(r.inputs) == subject
    ]
    return resource


@pytest.mark.parametrize(("stack", "database"), [("aws-enterprise-prod", True), ("azure-smb-prod", False)])
def test_an_mlflow_upgrade_runs_one_migration_and_rolls_only_the_servers(
    planned: Callable[[str], Plan],
    monkeypatch: pytest.MonkeyPatch,
    stack: str,
    database: bool,
) -> None:
    """ "Upgrade MLflow", plan to plan: the pinned version raised (the registry image's requirements.txt,
    raised with it, changes the same objects' image too). On PostgreSQL the update creates the new
    version's migration Job (``registry-migrate-<version>``; the old version's Job is deleted, never run
    again) and the servers, which wait for it, roll; on SQLite there is no Job, and the servers' pod
    migrates as its init container after ``Recreate`` stopped the old one. Nothing else changes but the
    registry's version label, nothing in the cloud, and the day-2 judge finds nothing."""
    running = planned(stack)  # before the edit: the shared plan is the shipped release's
    monkeypatch.setattr(workloads, "RegistrySpec", _Upgraded)
    upgraded = run_plan(resolve_target(stack))
    before, after = _objects(running), _objects(upgraded)
    server = Subject("Deployment", "ml-registry", "registry")
    job = {
        v: Subject("Job", "ml-registry", f"registry-migrate-{v.replace('.', '-')}")
        for v in (MLFLOW_VERSION, NEXT_MLFLOW)
    }
    if database:
        assert before.keys() - after.keys() == {job[MLFLOW_VERSION]}
        assert after.keys() - before.keys() == {job[NEXT_MLFLOW]}
        assert _resource_of(upgraded, job[NEXT_MLFLOW]).urn in _resource_of(upgraded, server).dependencies
    else:
        assert before.keys() == after.keys() and job[NEXT_MLFLOW] not in after
        pod = after[server]["spec"]["template"]["spec"]
        assert after[server]["spec"]["strategy"] == {"type": "Recreate"}
        assert [c["args"] for c in pod["initContainers"]] == [["upgrade"]]
    assert list(input_diff(before[server]["spec"]["template"], after[server]["spec"]["template"])), (
        "the servers roll onto the new version"
    )
    # Every other object of the registry (its Secrets in the client namespaces too) carries the version
    # label, and changes in that label alone: an update in place, nothing restarts.
    version = "metadata.labels.app.kubernetes.io/version"
    others = {s: list(input_diff(before[s], after[s])) for s in _changed(before, after) - {server}}
    assert others and all(paths == [version] for paths in others.values()), others
    assert judge_immutable(list(before.values()), list(after.values())) == []
    assert _resource_changes(running, upgraded) == []
