"""`mlplatform new-stack` ends with the real next steps (issue 41: it said `pulumi up` next): the
placeholders, plan, check, the state backend, doctor, then phase one and two for a private cluster, in
the order of docs/stacks.md, each `mlplatform` line a command the CLI accepts."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform.cli import app
from tests.mlplatform.pages import cli_problem


def _next_steps(tmp_path: Path, name: str, cloud: str, tier: str) -> list[str]:
    result = CliRunner().invoke(
        app, ["new-stack", name, "--cloud", cloud, "--tier", tier, "--env", "prod", "--dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"wrote {tmp_path / f'Pulumi.{name}.yaml'}; next:"
    return lines[1:]


def _first(lines: list[str], text: str) -> int:
    return next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize(
    ("cloud", "login"), [("aws", "pulumi login 's3://"), ("azure", "pulumi login 'azblob://")]
)
def test_an_enterprise_stack_is_told_the_offline_steps_then_state_then_two_phases(
    tmp_path: Path, cloud: str, login: str
) -> None:
    lines = _next_steps(tmp_path, "team2-prod", cloud, "enterprise")
    order = [
        "replace the placeholders",
        "mlplatform check",
        login,
        "pulumi stack init team2-prod --secrets-provider",
        "mlplatform doctor",
        "kubernetes: {enabled: false}",
        "pulumi preview --policy-pack policies && pulumi up",
        "phase two",
    ]
    positions = [_first(lines, text) for text in order]
    assert positions == sorted(positions), lines
    assert _first(lines, "pulumi up") > _first(lines, "mlplatform check")


def test_an_smb_stack_brings_both_layers_up_at_once(tmp_path: Path) -> None:
    lines = _next_steps(tmp_path, "team3-dev", "azure", "smb")
    assert not [line for line in lines if "enabled: false" in line or "phase" in line]
    assert _first(lines, "cluster.publicAccessCidrs") > _first(lines, "pulumi up") > _first(lines, "doctor")


def test_every_mlplatform_command_it_prints_is_one_the_cli_accepts(tmp_path: Path) -> None:
    lines = _next_steps(tmp_path, "team2-prod", "aws", "enterprise")
    commands = []
    for line in lines:
        for part in line.split(": ", 1)[-1].split(" && "):
            words = shlex.split(part)
            if words[:1] == ["mlplatform"]:
                commands.append(words[: words.index("warns")] if "warns" in words else words)
    assert {words[1] for words in commands} == {"plan", "check", "doctor"}
    for words in commands:
        assert cli_problem(words[1:]) is None, words
