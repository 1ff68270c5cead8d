"""The governed lifecycle (issue 40) against a real MLflow 3.17.2 on loopback (conftest.py): the trial's
defects (``../shared/reviews/lifecycle.md``), each as the user meets it through ``mlplatform models``."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from mlplatform.cli import app
from tests.workloads.delivery.fleet import champion_and_challenger
from workloads.registry.client import RegistryClient


def _models(registry_uri: str, *args: str) -> Any:
    return CliRunner().invoke(app, ["models", *args, "--registry-uri", registry_uri])


def test_listing_an_unknown_model_is_one_line_naming_those_that_exist(registry_uri: str) -> None:
    """Trial defect 7: ``models list digits-mlp`` exited 0 with no output."""
    champion_and_challenger(RegistryClient(registry_uri), "lifecycle-listed")
    result = _models(registry_uri, "list", "lifecycle-listd")
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: lifecycle-listd: no such registered model (the registry has: ")
    assert "lifecycle-listed" in line
