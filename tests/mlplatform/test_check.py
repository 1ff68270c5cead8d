"""``mlplatform check --all`` judges every stack it can plan: one stack's bad config is reported (exit 2)
without hiding the others' findings, and the SARIF log stays valid SARIF 2.1.0 pointing at the stack-file
line of the value a finding is about."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import jsonschema
from rich.console import Console
from typer.testing import CliRunner

from mlplatform.analyzer import PackInfo, StackReport, Violation
from mlplatform.check import _print
from mlplatform.cli import app

# The official SARIF 2.1.0 schema (OASIS), the format GitHub code scanning reads; source in data/README.md.
SARIF_SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())

PROGRAM = 'import pulumi_aws.ecr as ecr\necr.Repository("images")\n'
OUT_OF_REGION = "config:\n  case:owner: data-team\n  aws:region: eu-west-1\n"


def _program(directory: Path, stacks: dict[str, str]) -> Path:
    directory.mkdir()
    (directory / "Pulumi.yaml").write_text("name: case\nruntime: python\n")
    (directory / "__main__.py").write_text(PROGRAM)
    for stack, text in stacks.items():
        (directory / f"Pulumi.{stack}.yaml").write_text(text)
    return directory


def test_a_stack_with_bad_config_does_not_stop_the_others_being_judged(tmp_path: Path) -> None:
    program = _program(tmp_path / "program", {"eu": OUT_OF_REGION, "broken": "config: [not, a, mapping]\n"})
    sarif_file, json_file = tmp_path / "out" / "check.sarif", tmp_path / "out" / "check.json"
    result = CliRunner().invoke(
        app,
        ["check", "--all", "--program", str(program), "--sarif", str(sarif_file), "--json", str(json_file)],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 2, result.output
    # Progress on stderr as each stack is planned and judged, then the one error line.
    progress, error = result.stderr.splitlines()[:-1], result.stderr.splitlines()[-1]
    assert progress[0] == f"[1/2] {program}:broken: not planned (bad config)"
    assert re.fullmatch(rf"\[2/2\] {program}:eu: planned 3 resources in [0-9.]+ s", progress[1])
    assert re.fullmatch(
        rf"\[2/2\] {program}:eu: judged in [0-9.]+ s: [0-9]+ mandatory, [0-9]+ advisory", progress[2]
    )
    assert error == "error: Pulumi.broken.yaml: config: expected a mapping"
    assert "uae-residency" in result.stdout and f"not judged, bad config: {program}:broken" in result.stdout

    sarif = json.loads(sarif_file.read_text())
    assert not list(jsonschema.Draft4Validator(SARIF_SCHEMA).iter_errors(sarif))
    run = sarif["runs"][0]
    [invocation] = run["invocations"]
    assert invocation["executionSuccessful"] is False
    assert [n["message"]["text"] for n in invocation["toolExecutionNotifications"]] == [
        "Pulumi.broken.yaml: config: expected a mapping"
    ]
    residency = [r for r in run["results"] if r["ruleId"] == "uae-residency"]
    assert residency, run["results"]
    for found in residency:
        physical = found["locations"][0]["physicalLocation"]
        assert physical["artifactLocation"]["uri"].endswith("Pulumi.eu.yaml")
        assert physical["region"] == {"startLine": 3}, "the line of aws:region, the value the finding quotes"
    assert json.loads(json_file.read_text())["errors"] == ["Pulumi.broken.yaml: config: expected a mapping"]


def test_a_finding_about_no_config_value_points_at_the_top_of_the_stack_file(tmp_path: Path) -> None:
    program = _program(tmp_path / "program", {"eu": OUT_OF_REGION})
    sarif_file = tmp_path / "check.sarif"
    result = CliRunner().invoke(
        app, ["check", "--all", "--program", str(program), "--sarif", str(sarif_file)]
    )
    assert result.exit_code == 1, result.output
    sarif = json.loads(sarif_file.read_text())
    assert not list(jsonschema.Draft4Validator(SARIF_SCHEMA).iter_errors(sarif))
    [tags] = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "mandatory-tags"]
    assert tags["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}
    assert sarif["runs"][0]["invocations"] == [
        {"executionSuccessful": True, "toolExecutionNotifications": []}
    ]


WORKLOAD = """
import pulumi
pulumi.CustomResource("kubernetes:apps/v1:Deployment", "web", {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "apps"},
    "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "registry.example.ae/web:1.0",
                                  "securityContext": {"runAsUser": 1000}}]}}}})
"""


def test_numbers_in_findings_are_written_as_the_manifest_wrote_them(tmp_path: Path) -> None:
    """The engine sends every number as a float; a finding quotes runAsUser 1000, not 1000.0, in the
    list, the JSON and the SARIF alike."""
    program = _program(tmp_path / "program", {"dev": OUT_OF_REGION})
    (program / "__main__.py").write_text(WORKLOAD)
    json_file = tmp_path / "check.json"
    result = CliRunner().invoke(
        app,
        ["check", "--program", str(program), "--stack", "dev", "--json", str(json_file)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code in (0, 1), result.output
    messages = [v["message"] for v in json.loads(json_file.read_text())["stacks"][0]["violations"]]
    assert any("runAsUser is 1000," in m for m in messages), messages
    assert not any("1000.0" in m for m in messages) and "1000.0" not in result.stdout
    assert "runAsUser is 1000," in result.stdout


def _violation(policy: str, urn: str, level: str = "advisory") -> Violation:
    return Violation(policy, level, "low", urn, "kubernetes:apps/v1:Deployment", urn, f"{urn}: a finding")


def test_advisories_on_chart_objects_are_one_line_per_chart_and_policy() -> None:
    """Third-party templates are counted per chart and policy; the platform's own objects and every
    mandatory finding keep their detail (the JSON and SARIF keep each one: they read the report)."""
    charts = {f"chart-{i}": "gpu-operator v26.7.0" for i in range(8)} | {"kueue-0": "kueue 0.19.2"}
    violations = (
        *[_violation("k8s-workload-baseline", urn) for urn in charts],
        *[_violation("internet-egress", f"chart-{i}") for i in range(3)],
        _violation("flow-denied", "kueue-0", "mandatory"),
        _violation("k8s-workload-baseline", "ours"),
    )
    report = StackReport("s", "p", "s", None, 30, violations, charts)
    pack = PackInfo("pack", "1.0", "", Path("policies"), ())
    console = Console(width=80, record=True, file=io.StringIO())
    _print(pack, [report], console)
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert "  advisory k8s-workload-baseline: gpu-operator v26.7.0 (8 objects)" in lines
    assert "  advisory k8s-workload-baseline: kueue 0.19.2 (1 object)" in lines
    assert "  advisory internet-egress: gpu-operator v26.7.0 (3 objects)" in lines
    assert "  mandatory flow-denied" in lines and "    kueue-0: a finding" in lines
    assert "    ours: a finding" in lines
    assert "1 mandatory and 13 advisory violations in 1 stack" in lines
