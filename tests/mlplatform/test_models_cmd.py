"""``mlplatform models promote``'s tolerance: the stack's ``workloads.registry.promoteTolerance``
(``--stack``), overridden by ``--tolerance``; an unknown stack or a bad value is one line, exit 2
(the CLI's contract, README "The CLI")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import mlplatform.models_cmd
import mlplatform.plan
from components.config import PLATFORM_KEY
from mlplatform.cli import app
from mlplatform.plan import Target, resolve_target
from tests.stack_variants import template
from workloads.registry import operations, rollout
from workloads.registry.record import Identity

URI = "http://127.0.0.1:9"  # never called: promote is replaced below


@pytest.fixture
def tolerances(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The tolerance each promotion was decided with."""
    seen: list[float] = []

    def promote(*_args: Any, tolerance: float, **_kwargs: Any) -> rollout.Decision:
        seen.append(tolerance)
        return rollout.Decision(moves=())

    monkeypatch.setattr(operations, "promote", promote)
    # Nobody to ask who the caller is: a registry without authentication.
    monkeypatch.setattr(
        mlplatform.models_cmd, "identity", lambda _client, declared: Identity(declared, False)
    )
    return seen


def _stack_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tolerance: object) -> None:
    """``--stack custom`` resolves to a copy of a template with ``promoteTolerance``."""
    config = template("aws-smb-dev")
    config[PLATFORM_KEY].setdefault("workloads", {})["registry"] = {"promoteTolerance": tolerance}
    path = tmp_path / "Pulumi.custom.yaml"
    path.write_text(yaml.safe_dump({"config": config}))

    def resolve(stack: str | None = None, **_: Any) -> Target:
        return resolve_target(stack_file=path) if stack == "custom" else resolve_target(stack)

    monkeypatch.setattr(mlplatform.plan, "resolve_target", resolve)


def _promote(*args: str) -> Any:
    return CliRunner().invoke(
        app, ["models", "promote", "digits-mlp", "2", "--registry-uri", URI, "--actor", "t", *args]
    )


def test_the_stack_sets_the_tolerance_and_the_flag_overrides_it(
    tolerances: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _stack_file(monkeypatch, tmp_path, 0.05)
    assert _promote("--stack", "custom").exit_code == 0
    assert _promote("--stack", "custom", "--tolerance", "0.2").exit_code == 0
    assert _promote("--stack", "aws-smb-dev").exit_code == 0  # the key's default
    assert _promote().exit_code == 0
    assert tolerances == [0.05, 0.2, 0.01, 0.01]


def test_an_unknown_stack_is_one_line(tolerances: list[float]) -> None:
    result = _promote("--stack", "aws-enterprise-dv")
    assert result.exit_code == 2 and tolerances == []
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: unknown stack 'aws-enterprise-dv'; did you mean aws-enterprise-dev?")


@pytest.mark.parametrize("value", [1.5, -0.1, "one percent"])
def test_a_bad_stack_tolerance_is_one_line_naming_the_key(
    value: object, tolerances: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _stack_file(monkeypatch, tmp_path, value)
    result = _promote("--stack", "custom")
    assert result.exit_code == 2 and tolerances == []
    [line] = result.output.strip().splitlines()
    assert line.startswith(
        f"error: Pulumi.custom.yaml: {PLATFORM_KEY}.workloads.registry.promoteTolerance: "
    ), line


def test_an_enterprise_promotion_needs_the_record_of_its_approval(
    tolerances: list[float], tmp_path: Path
) -> None:
    """``promotionApproval`` unset is required on enterprise (issue 40): without the lifecycle record there
    is no approval to check (exit 2); with it and no approved request, refused (exit 1), nothing moved."""
    without = _promote("--stack", "aws-enterprise-dev")
    assert without.exit_code == 2 and tolerances == []
    assert (
        without.output.strip()
        == "error: this needs the lifecycle record: give --record DIR or $MLPLATFORM_RECORD"
    )
    waiting = _promote("--stack", "aws-enterprise-dev", "--record", str(tmp_path / "record"))
    assert waiting.exit_code == 1 and tolerances == []
    assert "version 2 needs an approved promotion request" in waiting.output
