"""The newcomer trial's partial and poor bad-input cases (shared/reviews/newcomer.md, section 5), each
answered with one clear line naming what is wrong and exit 2, none of them planning a stack or starting a
server. The stack-file cases (sp15, sp22, sp26, sp49, sp66) are files of the broken-stack corpus
(tests/components/broken_stacks, test_config.py); the HTTP cases (h11, h17, h18) run against the shared
server in tests/workloads/inference/test_server.py; plan --json's order in test_diagram.py."""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from components.config import PLATFORM_KEY, ConfigError, namespace_keys, not_public, parse_stack_config
from mlplatform.cli import app
from mlplatform.plan import REPO_ROOT
from tests.stack_variants import template
from workloads.inference.server import waiting_line
from workloads.registry.client import UNREACHABLE, ModelRef, RegistryError

SMB = REPO_ROOT / "stacks" / "Pulumi.aws-smb-dev.yaml"
BROKEN = REPO_ROOT / "tests" / "components" / "broken_stacks"


def _new_stack(*args: str) -> Callable[[Path], list[str]]:
    return lambda tmp: ["new-stack", *args, "--dir", str(tmp / "stacks")]


def _in(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _model_folder(tmp: Path) -> list[str]:
    (tmp / "digits" / "1").mkdir(parents=True)
    (tmp / "digits" / "1" / "metadata.json").write_text("{}")
    return ["serve", "--model", str(tmp / "digits")]


def _not_pem(tmp: Path) -> list[str]:
    (tmp / "1").mkdir()
    (tmp / "1" / "metadata.json").write_text("{}")
    pem = _in(tmp, "cert.pem", "not a certificate\n")
    return ["serve", "--model", str(tmp / "1"), "--tls-cert-file", str(pem), "--tls-key-file", str(pem)]


_ENV_RULE = "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit, "
_ENV_RULE += "10 characters at most"

# (review id, the command for a scratch folder, the one line expected on stderr: a regular expression)
CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    (
        "n04",
        _new_stack("t-dev", "--cloud", "aws", "--tier", "smb", "--env", "Prod"),
        f"--env 'Prod': {_ENV_RULE}",
    ),
    ("n16", _new_stack("t-dev", "--cloud", "aws", "--tier", "smb", "--env", ""), f"--env '': {_ENV_RULE}"),
    ("n17", _new_stack("t-dev", "--cloud", "aws", "--tier", "smb", "--env", "my env"), "--env 'my env': "),
    # The flag is blamed, not the file that was never written.
    (
        "n18",
        _new_stack("t-dev", "--cloud", "aws", "--tier", "smb", "--env", "production-eu"),
        "--env 'producti",
    ),
    (
        "n13b",
        _new_stack("-team3", "--cloud", "aws", "--tier", "smb", "--env", "dev"),
        "mlplatform new-stack: '-team3' is not an option; a name or value cannot start with '-'",
    ),
    ("sp05", lambda tmp: ["plan", "--stack-file", str(tmp)], "--stack-file .*: is a folder; name a Pulumi"),
    (
        "p40d",
        lambda tmp: ["plan", "stacks/Pulumi.aws-smb-dev.yaml"],
        "'stacks/Pulumi.aws-smb-dev.yaml' is a path, not a stack name; plan a file with --stack-file stacks/",
    ),
    (
        "c06",
        lambda tmp: [
            "check",
            "aws-smb-dev",
            "--policy-config",
            str(_in(tmp, "c.json", '{"no-such": "mandatory"}')),
        ],
        "policy config: unknown policy 'no-such'",
    ),
    (
        "c06b",
        lambda tmp: [
            "check",
            "aws-smb-dev",
            "--policy-config",
            str(_in(tmp, "c.json", '{"all": "sometimes"}')),
        ],
        "policy config: all: enforcementLevel 'sometimes' is not one of",
    ),
    ("s08", _not_pem, r"--tls-cert-file: not a PEM certificate and matching private key$"),
    (
        "s21",
        _model_folder,
        r"digits: a model's folder, not one version; versions found: 1 \(e\.g\. .*digits/1\)",
    ),
    (
        "f04",
        lambda tmp: ["fabric-test", "--local", "--max-bytes", "100TiB"],
        "--max-bytes '100TiB': unit 'TiB' is not one of KiB, MiB, GiB",
    ),
    (
        "ch01",
        lambda tmp: ["charts", "pull", "--dest", str(tmp / "no" / "such")],
        "--dest .*/no/such: no such folder; create it first",
    ),
    # docs/inference.md: `mlplatform serve` takes the SERVE_* settings as flags; a bad one names its flag.
    (
        "serve-flags",
        lambda tmp: ["serve", "--model", str(tmp), "--idle-timeout-s", "0"],
        "--idle-timeout-s: ",
    ),
    (
        "serve-flags",
        lambda tmp: ["serve", "--model", str(tmp), "--body-timeout-s", "301"],
        "--body-timeout-s: ",
    ),
    (
        "serve-flags",
        lambda tmp: ["serve", "--model", str(tmp), "--choice-budget-s", "-1"],
        "--choice-budget-s: ",
    ),
    (
        "serve-flags",
        lambda tmp: ["serve", "--model", str(tmp), "--drift-min-samples", "5000"],
        "--drift-min-samples: must not exceed the drift window 1000",
    ),
]


@pytest.mark.parametrize(("case", "command", "line"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_case_is_one_clear_line_and_exit_2(
    case: str, command: Callable[[Path], list[str]], line: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, command(tmp_path))
    assert result.exit_code == 2, (case, result.output)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output, (case, result.stderr)
    assert re.search(line, result.stderr.removeprefix("error: ").strip()), (case, result.stderr)
    # Nothing half-done: no stack file written, no count that reads like a pass.
    assert not (tmp_path / "stacks").exists() and "violations in" not in result.stdout


def test_c09_a_check_that_judged_no_stack_prints_no_pass_looking_count() -> None:
    result = CliRunner().invoke(app, ["check", "--stack-file", str(BROKEN / "Pulumi.bad-tier.yaml")])
    assert result.exit_code == 2, result.output
    assert "violations in" not in result.stdout and "not judged, bad config: bad-tier" in result.stdout


def test_serve_help_lists_every_setting_the_docs_promise_as_a_flag() -> None:
    """docs/inference.md names each SERVE_* variable and says `mlplatform serve` takes the same as flags."""
    promised = set(re.findall(r"`SERVE_([A-Z_]+)`", (REPO_ROOT / "docs" / "inference.md").read_text()))
    result = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    flags = set(re.findall(r"--([a-z][a-z-]+)", result.stdout))
    # SERVE_MODEL_DIR is --model (a folder or a models:/ URI).
    missing = {v for v in promised if v.lower().replace("_", "-") not in flags and v != "MODEL_DIR"}
    assert not missing, missing


def test_s20_a_registry_it_cannot_reach_is_not_called_a_missing_alias() -> None:
    ref = ModelRef.parse("models:/digits@champion")
    down = RegistryError(
        "registry http://127.0.0.1:19999 unreachable: [Errno 111] Connection refused", UNREACHABLE
    )
    assert waiting_line(ref, down) == (
        "waiting for models:/digits@champion: the registry cannot be reached (not up yet, or a wrong "
        "registry URI)"
    )
    missing = RegistryError("Registered model alias champion not found.", "INVALID_PARAMETER_VALUE", 400)
    assert "no version has that alias yet" in waiting_line(ref, missing)


def test_sp58_the_phase_two_error_points_at_a_heading_that_exists() -> None:
    config = copy.deepcopy(template("aws-enterprise-prod"))
    config[PLATFORM_KEY]["cluster"].pop("privateAccessCidrs", None)
    config[PLATFORM_KEY]["cluster"].pop("privateAccessSecurityGroups", None)
    config[PLATFORM_KEY].setdefault("kubernetes", {})["enabled"] = True
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(config, "Pulumi.aws-enterprise-prod.yaml")
    [line] = [p for p in raised.value.problems if "privateAccessCidrs" in p]
    page, heading = re.findall(r"\((docs/[a-z]+\.md), [\"']([^\"']+)[\"']\)", line)[0]
    assert re.search(rf"^#+ {re.escape(heading)}$", (REPO_ROOT / page).read_text(), re.M), line


def test_the_keys_each_provider_reads_come_from_its_installed_sdk() -> None:
    """pulumi_aws/config/vars.py and pulumi_azure_native/config/vars.py, read, not typed by hand."""
    keys = namespace_keys()
    assert {"region", "profile", "defaultTags", "assumeRoles"} <= keys["aws"]
    assert {"location", "subscriptionId", "tenantId"} <= keys["azure-native"]
    assert keys["ml-platform"] == {"platform"}


@pytest.mark.parametrize("stack", ["aws-smb-dev", "azure-smb-dev"])
@pytest.mark.parametrize(
    ("cidr", "said"),
    [
        ("10.40.0.0/16", "is a private (RFC 1918) range"),
        ("100.64.1.0/24", "is carrier-grade NAT's shared range (RFC 6598)"),
        ("169.254.0.0/16", "is a link-local range"),
        ("8.0.0.0/6", "holds a private (RFC 1918) range"),
    ],
)
def test_a_public_allow_list_refuses_non_public_ranges_on_both_clouds(
    stack: str, cidr: str, said: str
) -> None:
    """One rule for both clouds (components/config.not_public): a range no internet caller comes from."""
    config = copy.deepcopy(template(stack))
    config[PLATFORM_KEY]["cluster"]["publicAccessCidrs"] = ["94.200.0.0/16", cidr]
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(config, f"Pulumi.{stack}.yaml")
    assert raised.value.problems == [
        f"Pulumi.{stack}.yaml: {PLATFORM_KEY}.cluster.publicAccessCidrs: {cidr} {said}; a public endpoint "
        "sees callers' public addresses: list your NAT's or office's public range"
    ]
    assert (
        not_public("94.200.0.0/16") is None and not_public("203.0.113.0/24") is None
    )  # placeholders: warned


@pytest.mark.parametrize(
    ("python", "says"),
    [
        ("python9", "error: python9 not found (or it does not run); ml-platform needs Python 3.11"),
        ("false", "error: false not found (or it does not run)"),  # a shim that exits non-zero (mk02s)
    ],
)
def test_mk01_make_names_a_python_it_cannot_run(python: str, says: str) -> None:
    done = subprocess.run(
        ["make", "-s", "python", f"PYTHON={python}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.startswith(says), done.stderr
