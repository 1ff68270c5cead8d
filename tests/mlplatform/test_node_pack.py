"""``mlplatform check --policy-pack DIR`` runs any CrossGuard pack, Node ones too, as the Pulumi CLI does:
``node_pack/`` is built like Pulumi's AWSGuard (policies declared advisory, the pack constructed with
``{all: "mandatory"}``), so its findings are mandatory unless the user's policy config says otherwise.

The pack's dependencies come from its committed lockfile (``npm ci`` in a temporary copy); without npm,
or without the npm registry, the test that needs them is skipped with the reason."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform.cli import app

PACK = Path(__file__).parent / "node_pack"
PROGRAM = 'import pulumi_aws.ecr as ecr\necr.Repository("images", region="eu-west-1")\n'
_UNREACHABLE = ("ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNREFUSED", "ECONNRESET", "network")


@pytest.fixture(scope="module")
def node_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node and npm are not installed")
    pack = tmp_path_factory.mktemp("node") / "pack"
    shutil.copytree(PACK, pack)
    installed = subprocess.run(
        [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
        cwd=pack,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if installed.returncode != 0 and any(word in installed.stderr for word in _UNREACHABLE):
        pytest.skip(f"the npm registry cannot be reached: {installed.stderr.strip().splitlines()[-1]}")
    assert installed.returncode == 0, installed.stderr
    return pack


@pytest.fixture()
def program(tmp_path: Path) -> Path:
    directory = tmp_path / "program"
    directory.mkdir()
    (directory / "Pulumi.yaml").write_text("name: case\nruntime: python\n")
    (directory / "__main__.py").write_text(PROGRAM)
    (directory / "Pulumi.test.yaml").write_text("config:\n  aws:region: me-central-1\n")
    return directory


def _check(program: Path, pack: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app,
        ["check", "--program", str(program), "--stack", "test", "--policy-pack", str(pack), *args],
        env={"COLUMNS": "200"},
    )
    return result.exit_code, result.stdout, result.stderr


def test_a_node_pack_judges_with_its_initial_config(node_pack: Path, program: Path, tmp_path: Path) -> None:
    code, stdout, stderr = _check(program, node_pack, "--json", str(tmp_path / "check.json"))
    assert code == 1, stdout + stderr
    assert "policy pack node-test-pack v0.1.0" in stdout
    [violation] = json.loads((tmp_path / "check.json").read_text())["stacks"][0]["violations"]
    assert violation["policy"] == "region-allowed" and violation["name"] == "images"
    assert violation["enforcement"] == "mandatory", "the pack's initialConfig {all: mandatory} applies"
    assert violation["message"] == "region is eu-west-1; allowed: me-central-1"


def test_the_users_policy_config_overrides_the_packs_initial_config(
    node_pack: Path, program: Path, tmp_path: Path
) -> None:
    config = tmp_path / "policy.json"
    config.write_text('{"region-allowed": "advisory"}')
    code, stdout, stderr = _check(program, node_pack, "--policy-config", str(config))
    assert code == 0, stdout + stderr
    assert "0 mandatory and 1 advisory violations in 1 stack" in stdout


def test_a_node_pack_without_its_dependencies_is_one_line(program: Path, tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(PACK, pack)
    code, _, stderr = _check(program, pack)
    assert code == 2
    assert stderr == f"error: {pack}: the pack's dependencies are not installed; run `npm ci` there\n"


def test_a_node_pack_without_node_is_one_line(program: Path, tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(PACK, pack)
    result = CliRunner().invoke(
        app,
        ["check", "--program", str(program), "--stack", "test", "--policy-pack", str(pack)],
        env={"PATH": str(tmp_path / "empty")},
    )
    assert result.exit_code == 2
    assert result.stderr == f"error: {pack}: a nodejs policy pack needs node, which is not on PATH\n"
