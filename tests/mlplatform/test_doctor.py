"""`mlplatform doctor` (issue 41): one line per prerequisite of the offline and the deploy path, found on
a PATH of stub executables and a HOME of credential files; nothing goes over the network."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform import doctor
from mlplatform.cli import app

# What each stub answers when asked its version, as the real CLI words it.
STUBS = {
    "pulumi": "v3.200.0",
    "aws": "aws-cli/2.31.0 Python/3.13.7 Linux/6.8 exe/x86_64",
    "az": "",
    "kubelogin": "kubelogin version v0.2.10",
    "kubectl": "Client Version: v1.35.0",
}


def _stub(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def machine(tmp_path: Path) -> tuple[Path, Path]:
    """A PATH folder (empty) and a HOME folder (empty)."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "home").mkdir()
    return tmp_path / "bin", tmp_path / "home"


def _ready(bin_dir: Path, home: Path) -> None:
    """Every tool, docker with buildx, AWS and Azure logins, and an S3 state backend in me-central-1."""
    for name, answer in STUBS.items():
        _stub(bin_dir, name, f"echo '{answer}'")
    _stub(
        bin_dir,
        "docker",
        '[ "$1 $2" = "buildx version" ] && echo "github.com/docker/buildx v0.29.0" || exit 1',
    )
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("[default]\naws_access_key_id = AKIAEXAMPLE\n")
    (home / ".azure").mkdir()
    (home / ".azure" / "azureProfile.json").write_text(json.dumps({"subscriptions": [{"id": "s"}]}))
    (home / ".pulumi").mkdir()
    state = "s3://team-state?region=me-central-1&awssdk=v2"
    (home / ".pulumi" / "credentials.json").write_text(json.dumps({"current": state, "accessTokens": {}}))


def _run(args: list[str], bin_dir: Path, home: Path, **env: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["doctor", *args], env={"PATH": str(bin_dir), "HOME": str(home), **env})
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout.splitlines()


def _line(lines: list[str], what: str) -> str:
    """The line of ``what``: two spaces, the status in 8 columns, then its name."""
    [line] = [line for line in lines if line.startswith("  ") and line[10:].startswith(f"{what} ")]
    return line


def test_a_ready_machine_is_ok_on_every_line(machine: tuple[Path, Path]) -> None:
    bin_dir, home = machine
    _ready(bin_dir, home)
    code, lines = _run(["--deploy"], bin_dir, home)
    assert code == 0, lines
    checks = [line for line in lines if line.startswith("  ")]
    assert {line.split()[0] for line in checks} == {"ok"}, checks
    for what in ("Python 3.11", "pulumi", "aws", "AWS credentials", "az", "kubelogin", "Azure credentials"):
        assert _line(lines, what)
    assert "v3.200.0" in _line(lines, "pulumi") and "v0.29.0" in _line(lines, "docker buildx")
    assert "region me-central-1" in _line(lines, "state backend")
    assert lines[-1] == "offline path ready; deploy path ready"


def test_a_bare_machine_says_what_to_do_on_each_line_and_the_offline_path_still_passes(
    machine: tuple[Path, Path],
) -> None:
    """Nothing installed, no login: each deploy prerequisite is `missing` with what to do; plan and check
    still run here, so exit 0, and 1 with --deploy (the gate for a deploy runner)."""
    bin_dir, home = machine
    code, lines = _run([], bin_dir, home)
    assert code == 0
    assert "not on PATH: install the Pulumi CLI" in _line(lines, "pulumi")
    assert "aws configure" in _line(lines, "AWS credentials") and "az login" in _line(
        lines, "Azure credentials"
    )
    assert "buildx" in _line(lines, "docker buildx") and "pulumi login" in _line(lines, "state backend")
    deploy = lines[lines.index(next(line for line in lines if line.startswith("deploy:"))) + 1 : -1]
    assert deploy and all(line.split()[0] == "missing" for line in deploy), deploy
    assert lines[-1] == "offline path ready; deploy path not ready (see above)"
    assert _run(["--deploy"], bin_dir, home)[0] == 1


def test_a_stack_checks_its_own_cloud_only(machine: tuple[Path, Path]) -> None:
    bin_dir, home = machine
    _ready(bin_dir, home)
    code, lines = _run(["azure-smb-dev", "--deploy"], bin_dir, home)
    assert "for azure-smb-dev (azure, smb)" in lines[3]
    assert not [line for line in lines if line[10:].startswith(("aws ", "AWS "))]
    # The S3 backend is in me-central-1, not in the Azure stack's UAE regions.
    assert _line(lines, "state backend").split()[0] == "missing" and code == 1
    code, lines = _run(
        ["azure-smb-dev"], bin_dir, home, PULUMI_BACKEND_URL="azblob://state?storage_account=st1"
    )
    assert code == 0
    assert "az storage account show -n st1 --query location: one of uaenorth, uaecentral" in _line(
        lines, "state backend"
    )


@pytest.mark.parametrize(
    ("url", "status", "says"),
    [
        ("s3://b?region=me-central-1", doctor.Status.OK, "region me-central-1"),
        ("s3://b?region=eu-west-1", doctor.Status.MISSING, "is in eu-west-1; keep state in me-central-1"),
        ("s3://b", doctor.Status.MISSING, "no ?region="),
        ("https://api.pulumi.com", doctor.Status.MISSING, "outside the UAE"),
        ("file:///srv/state", doctor.Status.UNKNOWN, "keep it in me-central-1"),
        (None, doctor.Status.MISSING, "not logged in"),
    ],
)
def test_the_state_backend_is_judged_by_its_region(url: str | None, status: doctor.Status, says: str) -> None:
    finding = doctor.state_backend(url, ("me-central-1",))
    assert finding.status is status and says in finding.detail


def test_the_backend_is_found_where_pulumi_looks_first(tmp_path: Path) -> None:
    """PULUMI_BACKEND_URL over credentials.json's `current` (PULUMI_HOME, else ~/.pulumi)."""
    (tmp_path / "credentials.json").write_text(json.dumps({"current": "s3://from-file"}))
    assert doctor.backend_url({"PULUMI_HOME": str(tmp_path)}, Path("/nonexistent")) == "s3://from-file"
    env = {"PULUMI_HOME": str(tmp_path), "PULUMI_BACKEND_URL": "s3://from-env"}
    assert doctor.backend_url(env, Path("/nonexistent")) == "s3://from-env"
    assert doctor.backend_url({}, tmp_path / "nohome") is None


def test_a_tool_that_hangs_is_reported_not_waited_for(
    machine: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, home = machine
    _stub(bin_dir, "pulumi", "exec sleep 30")
    monkeypatch.setattr(doctor, "VERSION_TIMEOUT_S", 0.5)
    code, lines = _run([], bin_dir, home)
    assert code == 0 and "version failed" in _line(lines, "pulumi")


def test_another_python_fails_the_offline_path() -> None:
    [python, _] = doctor.offline({}, (3, 12, 1))
    assert python.status is doctor.Status.MISSING and "make PYTHON=python3.11 setup" in python.detail


def test_a_bad_stack_is_one_line_and_exit_2(machine: tuple[Path, Path]) -> None:
    bin_dir, home = machine
    result = CliRunner().invoke(app, ["doctor", "aws-smb-dve"], env={"PATH": str(bin_dir), "HOME": str(home)})
    assert result.exit_code == 2
    assert result.stderr == "error: unknown stack 'aws-smb-dve'; did you mean aws-smb-dev?\n"
