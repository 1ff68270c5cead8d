"""``mlplatform check --all`` judges every stack it can plan: one stack's bad config is reported (exit 2)
without hiding the others' findings, and the SARIF log stays valid SARIF 2.1.0 pointing at the stack-file
line of the value a finding is about."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from typer.testing import CliRunner

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
    assert result.stderr == "error: Pulumi.broken.yaml: config: expected a mapping\n"
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
