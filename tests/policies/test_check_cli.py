"""``mlplatform check`` through the CLI: exit 0 clean, 1 on a mandatory violation, 2 on bad input; the
table, JSON and SARIF outputs carry the same findings and name the pack's version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform.cli import app
from mlplatform.plan import REPO_ROOT

from .conftest import AWS, KUBERNETES, write_program
from .test_compliant import KUBERNETES_PLATFORM

VIOLATING = """
import pulumi_aws.ecr as ecr
ecr.Repository("images", region="eu-west-1")
"""


def _check(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["check", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ([], "name a stack"),
        (["--all", "aws-smb-dev"], "--all judges every stack"),
        (["--stack-file", "Pulumi.x.yaml", "aws-smb-dev"], "--stack-file names its stack"),
        (["no-such-stack", "--program", str(REPO_ROOT / "tests")], "no Pulumi.yaml"),
        (["--policy-config", "/nonexistent/config.json", "--stack-file", "x"], "no such stack file"),
    ],
)
def test_bad_flags_exit_2_with_one_line_per_problem(args: list[str], problem: str) -> None:
    code, _, stderr = _check(*args)
    assert code == 2 and problem in stderr, stderr


def test_bad_policy_config_exits_2(tmp_path: Path) -> None:
    program = write_program(tmp_path / "program", VIOLATING, AWS)
    config = tmp_path / "policy.json"
    config.write_text('{"uae-residency": "strict"}')
    code, _, stderr = _check("--program", str(program), "--stack", "test", "--policy-config", str(config))
    assert code == 2 and "enforcementLevel 'strict' is not one of" in stderr


def test_violation_exits_1_with_table_json_and_sarif(tmp_path: Path) -> None:
    program = write_program(tmp_path / "program", VIOLATING, AWS)
    json_file, sarif_file = tmp_path / "out" / "check.json", tmp_path / "out" / "check.sarif"
    code, stdout, _ = _check(
        "--program", str(program), "--stack", "test", "--json", str(json_file), "--sarif", str(sarif_file)
    )
    assert code == 1
    assert (
        "policy pack ml-platform-uae v0.1.0" in stdout and "uae-residency" in stdout and "eu-west-1" in stdout
    )
    report = json.loads(json_file.read_text())
    assert report["pack"]["version"] == "0.1.0" and report["summary"]["mandatory"] >= 1
    [violation] = [v for v in report["stacks"][0]["violations"] if v["policy"] == "uae-residency"]
    assert violation["name"] == "images" and violation["enforcement"] == "mandatory"
    sarif = json.loads(sarif_file.read_text())
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    assert run["tool"]["driver"]["name"] == "ml-platform-uae" and run["tool"]["driver"]["version"] == "0.1.0"
    rules = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    [result] = [r for r in run["results"] if r["ruleId"] == "uae-residency"]
    assert rules[result["ruleIndex"]] == "uae-residency" and result["level"] == "error"
    location = result["locations"][0]
    assert location["physicalLocation"]["artifactLocation"]["uri"].endswith("Pulumi.test.yaml")
    assert location["logicalLocations"][0]["fullyQualifiedName"].endswith("::images")


def test_clean_stack_exits_0(tmp_path: Path) -> None:
    program = write_program(tmp_path / "program", KUBERNETES_PLATFORM, KUBERNETES)
    # Its gpu-operator release names a chart version not in charts/: judged without its objects.
    code, stdout, stderr = _check(
        "--program", str(program), "--stack-file", str(program / "Pulumi.test.yaml"), "--allow-unrendered"
    )
    assert code == 0, stdout + stderr
    assert "0 mandatory and 1 advisory violations in 1 stack" in stdout


HOST_NETWORK_POD = """
from pulumi_kubernetes.apps.v1 import Deployment
from pulumi_kubernetes.core.v1 import Namespace

IMAGE = "registry.example.ae/agent@sha256:" + "0" * 64
Namespace("apps", metadata={"name": "apps", "labels": {"pod-security.kubernetes.io/enforce": "baseline"}})
Deployment(
    "agent",
    metadata={"name": "agent", "namespace": "apps"},
    spec={
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"hostNetwork": True, "containers": [{"name": "agent", "image": IMAGE}]},
        },
    },
)
"""


def test_the_behaviour_judges_report_beside_the_pack(tmp_path: Path) -> None:
    """A hostNetwork pod in a baseline namespace: Pod Security admission would refuse it; check says so
    as a mandatory finding on the Deployment's resource, in the table, the JSON and the SARIF."""
    program = write_program(tmp_path / "program", HOST_NETWORK_POD, KUBERNETES)
    json_file, sarif_file = tmp_path / "check.json", tmp_path / "check.sarif"
    code, stdout, _ = _check(
        "--program", str(program), "--stack", "test", "--json", str(json_file), "--sarif", str(sarif_file)
    )
    assert code == 1 and "pod-security" in stdout
    [finding] = [
        v
        for v in json.loads(json_file.read_text())["stacks"][0]["violations"]
        if v["policy"] == "pod-security"
    ]
    assert finding["enforcement"] == "mandatory" and finding["name"] == "agent"
    assert finding["type"] == "kubernetes:apps/v1:Deployment" and finding["urn"].endswith("::agent")
    assert (
        finding["message"]
        == "apps/agent: namespace apps enforces baseline: hostNetwork: true (Host Namespaces)"
    )
    results = json.loads(sarif_file.read_text())["runs"][0]["results"]
    assert [r["level"] for r in results if r["ruleId"] == "pod-security"] == ["error"]


def test_a_plan_written_elsewhere_is_judged_by_pack_and_judges(tmp_path: Path) -> None:
    """``check --plan`` judges the JSON ``mlplatform plan --json`` wrote, as it judges the stack."""
    program = write_program(tmp_path / "program", HOST_NETWORK_POD, KUBERNETES)
    plan_file = tmp_path / "plan.json"
    planned = CliRunner().invoke(
        app, ["plan", "--program", str(program), "--stack", "test", "--json", str(plan_file)]
    )
    assert planned.exit_code == 0, planned.output
    json_file = tmp_path / "check.json"
    code, stdout, _ = _check("--plan", str(plan_file), "--json", str(json_file))
    assert code == 1 and "pod-security" in stdout
    [report] = json.loads(json_file.read_text())["stacks"]
    assert report["label"] == str(plan_file) and report["stack"] == "test"
    assert any(v["policy"] == "pod-security" and v["name"] == "agent" for v in report["violations"])


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read"),
        ("{not json", "not JSON"),
        ('{"project": "p"}', "not a plan written by mlplatform plan --json"),
    ],
)
def test_a_plan_file_that_is_not_one_exits_2_naming_it(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    plan_file = tmp_path / "plan.json"
    if content is not None:
        plan_file.write_text(content)
    code, _, stderr = _check("--plan", str(plan_file))
    assert code == 2 and f"--plan {plan_file}: {problem}" in stderr, stderr


def test_previous_judges_the_day2_update_and_a_bad_previous_exits_2(tmp_path: Path) -> None:
    """``check --previous`` (the plan the stack last applied): a Deployment whose selector changed since is
    replaced by pulumi-kubernetes (forceNew ``.spec.selector``, deleted first: an outage; judges/
    immutable.py); a missing file is one line, exit 2; so is --previous with more than one stack."""
    program = write_program(tmp_path / "program", HOST_NETWORK_POD, KUBERNETES)
    plan_file, previous = tmp_path / "plan.json", tmp_path / "previous.json"
    planned = CliRunner().invoke(
        app, ["plan", "--program", str(program), "--stack", "test", "--json", str(plan_file)]
    )
    assert planned.exit_code == 0, planned.output
    text = plan_file.read_text()
    assert '"app": "agent"' in text
    previous.write_text(text.replace('"app": "agent"', '"app": "agent-v1"'))
    json_file = tmp_path / "check.json"
    _check("--plan", str(plan_file), "--previous", str(previous), "--json", str(json_file))
    [report] = json.loads(json_file.read_text())["stacks"]
    found = [v for v in report["violations"] if v["policy"] == "replaced-on-update"]
    assert [v["name"] for v in found] == ["agent"], found
    assert "spec.selector changed" in found[0]["message"] and "an outage" in found[0]["message"]
    _check("--plan", str(plan_file), "--previous", str(plan_file), "--json", str(json_file))
    stacks = json.loads(json_file.read_text())["stacks"]
    assert not [v for v in stacks[0]["violations"] if v["policy"] == "replaced-on-update"]

    missing = tmp_path / "missing.json"
    code, _, stderr = _check("--plan", str(plan_file), "--previous", str(missing))
    assert (
        code == 2
        and stderr.strip() == f"error: --previous {missing}: cannot read (No such file or directory)"
    )
    code, _, stderr = _check("--plan", str(plan_file), "--plan", str(plan_file), "--previous", str(plan_file))
    assert code == 2 and "--previous compares one stack's plans" in stderr, stderr
