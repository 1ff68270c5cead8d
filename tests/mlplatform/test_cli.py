"""The command itself: what the infrastructure install can run, which extra a command needs, and usage
errors in the project's one-line style (exit 2, no usage text, no panel, no traceback)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform.cli import app
from mlplatform.plan import REPO_ROOT

# The train and serve extras' imports (pyproject.toml): none may load on the infrastructure path.
HEAVY = ("torch", "numpy", "onnx", "onnxruntime", "onnxscript", "sklearn", "fastapi", "uvicorn", "starlette")

BLOCKED_RUN = """
import importlib.abc, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {heavy!r}:
            raise ImportError(f"blocked: {{name}} imported on the infrastructure path")
        return None

sys.meta_path.insert(0, Blocker())
sys.argv = ["mlplatform", *sys.argv[1:]]
from mlplatform.cli import main
main()
"""


def _run_blocked(*args: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(BLOCKED_RUN.format(heavy=set(HEAVY)))
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


# `plan` and `check` are not here: `make test` runs them after the suite (test-infra) in the install
# itself (build/infra-venv from requirements.txt, none of these packages in it), every stack planned and
# `check --all`, as CI does.
@pytest.mark.parametrize(
    "args",
    [
        ["new-stack", "aws-smb-x", "--cloud", "aws", "--tier", "smb", "--env", "staging", "--dir", "{tmp}"],
        ["doctor", "aws-smb-dev"],
    ],
)
def test_the_infrastructure_path_imports_no_workload_packages(args: list[str], tmp_path: object) -> None:
    """What `pulumi up` installs (requirements.txt: the infra extra) runs the CLI's other infrastructure
    verbs; a blocked import of torch, numpy, onnx, FastAPI or uvicorn fails the command."""
    result = _run_blocked(*(arg.format(tmp=tmp_path) for arg in args))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "blocked" not in result.stderr


def test_a_missing_extra_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = metadata.version

    def version(name: str) -> str:
        if name == "torch":
            raise metadata.PackageNotFoundError(name)
        return installed(name)

    monkeypatch.setattr(metadata, "version", version)
    result = CliRunner().invoke(app, ["train", "--local"])
    assert result.exit_code == 2
    assert result.stderr == "error: mlplatform train needs the train extra: pip install -e '.[train]'\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["new-stack"],
            "error: mlplatform new-stack: Missing argument 'name'. (see mlplatform new-stack --help)",
        ),
        (
            ["new-stack", "x", "--tier", "smb", "--env", "dev"],
            "error: mlplatform new-stack: Missing option '--cloud'. Choose from: aws, azure "
            "(see mlplatform new-stack --help)",
        ),
        (
            ["new-stack", "x", "--cloud", "gcp", "--tier", "smb", "--env", "dev"],
            "error: mlplatform new-stack: Invalid value for '--cloud': 'gcp' is not one of 'aws', 'azure'. "
            "(see mlplatform new-stack --help)",
        ),
        (
            ["new-stack", "Team2_prod", "--cloud", "aws", "--tier", "smb", "--env", "dev"],
            "error: stack name 'Team2_prod': lowercase letters, digits and '-', starting with a letter, "
            "25 characters at most (it names the stack's cloud resources)",
        ),
        (["plan", "--bogus"], "error: mlplatform plan: No such option: --bogus (see mlplatform plan --help)"),
        (["plna"], "error: mlplatform: No such command 'plna'. Did you mean 'plan'? (see mlplatform --help)"),
        (["--bogus"], "error: mlplatform: No such option: --bogus (see mlplatform --help)"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], line: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == line + "\n" and not result.stdout


def test_help_lists_every_verb_and_shows_flags_as_flags() -> None:
    top = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert top.exit_code == 0
    assert all(verb in top.stdout for verb in ("plan", "check", "new-stack", "train", "serve"))
    check = CliRunner().invoke(app, ["check", "--help"], env={"COLUMNS": "80"})
    [all_line] = [line for line in check.stdout.splitlines() if "--all " in line]
    assert "<bool>" not in all_line and "Every stack of the program." in all_line


def test_output_reads_at_80_columns(tmp_path: Path) -> None:
    """Findings and the plan tree fit 80 columns with every policy name and type token whole, the Helm
    releases' advisories grouped into one (an empty chart cache leaves every release unrendered), and
    tree names without their parent's repeated prefix."""
    check = CliRunner().invoke(
        app,
        ["check", "aws-smb-dev", "--allow-unrendered"],
        env={"COLUMNS": "80", "MLPLATFORM_CHARTS": str(tmp_path)},
    )
    assert check.exit_code == 0, check.output
    lines = check.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert [line.strip() for line in lines if "k8s-unrendered-content" in line] == [
        "advisory k8s-unrendered-content"
    ]
    assert "(kubernetes:helm.sh/v3:Release)" in check.stdout
    plan = CliRunner().invoke(app, ["plan", "aws-smb-dev", "--tree"], env={"COLUMNS": "80"})
    assert plan.exit_code == 0, plan.output
    assert max(len(line.rstrip()) for line in plan.stdout.splitlines()) <= 80
    assert "── aws ml-platform:aws:Platform" in plan.stdout
    assert "aws-smb-dev-aws-cluster" not in plan.stdout
    # Type tokens as the SDK's module and kind (the full token is in --json), so they stay whole.
    assert "aws:vpc:SecurityGroupIngressRule" in plan.stdout


def test_version_is_the_installed_distributions() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"mlplatform {metadata.version('ml-platform')}\n"


def test_every_command_the_readme_and_the_messages_name_exists() -> None:
    """A documented command that does not exist (once, `mlplatform charts pull`) sends a user nowhere:
    each `mlplatform VERB [SUBCOMMAND]` in README.md, docs/, examples/ and the program's messages is a
    real command, and each `make TARGET` they name is a Makefile target."""
    from mlplatform.cli import VERBS
    from mlplatform.plan import REPO_ROOT

    pages = [REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md", REPO_ROOT / "benchmarks" / "README.md"]
    pages += sorted((REPO_ROOT / "docs").glob("*.md")) + sorted((REPO_ROOT / "examples").rglob("*.md"))
    assert len(pages) > 10, "the docs/ pages are read"
    sources = [*pages, REPO_ROOT / "Makefile", REPO_ROOT / ".github/workflows/policy.yml"]
    sources += sorted((REPO_ROOT / "examples").rglob("Dockerfile"))
    for package in ("components", "mlplatform", "policies/mlplatform_policies", "workloads"):
        sources += sorted((REPO_ROOT / package).rglob("*.py"))
    named = {
        (path.name, match.group(1), match.group(2))
        for path in sources
        for match in re.finditer(
            r"(?<![\w/.-])mlplatform ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", path.read_text()
        )
    }
    assert named
    for where, verb, sub in named:
        assert verb in VERBS, f"{where}: mlplatform {verb}"
        if verb == "charts":  # a group: its subcommand must exist too
            group = VERBS[verb].load()
            assert sub in group.commands, f"{where}: mlplatform {verb} {sub}"
    targets = set(re.findall(r"(?m)^([a-z][a-z-]*):", (REPO_ROOT / "Makefile").read_text()))
    for page in pages:
        for target in re.findall(r"(?:`|^)make ([a-z][a-z-]*)", page.read_text(), re.MULTILINE):
            assert target in targets, f"{page.name}: make {target}"


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    """One bad input per verb, and the start of the one line it must give."""
    a_file = tmp / "a-file"
    a_file.write_text("")
    return [
        (["plan", "aws-smb-dev", "--manifests", str(a_file)], f"error: --manifests {a_file}: is a file"),
        (["check", "aws-smb-dev", "--sarif", str(tmp)], f"error: --sarif {tmp}: is a folder"),
        (["check", "aws-smb-dev", "--json", f"{a_file}/x.json"], f"error: --json {a_file}/x.json: "),
        (["new-stack", "x", "--cloud", "aws", "--tier", "smb", "--env", "Prod_1"], "error: --env 'Prod_1': "),
        (
            [
                "new-stack",
                "x",
                "--cloud",
                "aws",
                "--tier",
                "smb",
                "--env",
                "dev",
                "--dir",
                f"{a_file}/s",
            ],
            f"error: --dir {a_file}/s: {a_file} is a file, not a folder",
        ),
        (["train", "--local", "--epochs", "0"], "error: argument --epochs: invalid positive integer"),
        (["train", "--local", "--output", f"{a_file}/out"], f"error: --output {a_file}/out is not writable"),
        (["serve", "--model", str(tmp / "none")], f"error: {tmp / 'none'}: not a directory"),
        (["charts", "pull", "--dest", str(a_file)], f"error: --dest {a_file}: is a file"),
        (["fabric-test", "--local", "--nproc", "1"], "error: --nproc must be at least 2"),
        (["rollout", "m", "--stack", "nope", "--metrics-dns", "pods"], "error: --stack nope: no stacks/"),
        (
            ["plan", "--stack-file", str(a_file)],
            f"error: {a_file}: a stack file is named Pulumi.<stack>.yaml",
        ),
    ]


def test_every_verb_gives_bad_input_one_line_and_exit_2(tmp_path: Path) -> None:
    """Through the console script, as a user runs it (issue 27): exit 2, exactly one line on stderr, no
    traceback, for each verb."""
    mlplatform = str(Path(sys.executable).with_name("mlplatform"))
    for args, line in _bad_inputs(tmp_path):
        done = subprocess.run(
            [mlplatform, *args], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path
        )
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(line), (args, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr


def _rule(makefile: str, target: str) -> tuple[list[str], str]:
    """A Makefile rule's prerequisites and its recipe (the tab-indented lines after it)."""
    match = re.search(rf"^{re.escape(target)}:([^\n]*)\n((?:\t[^\n]*\n)*)", makefile, re.MULTILINE)
    assert match, target
    return match.group(1).replace("|", " ").split(), match.group(2)


def test_make_demo_installs_only_what_planning_and_checking_need() -> None:
    """`make demo` (issue 27): the infrastructure install and the pack's venv, no torch (the full install)
    and no checkov; it prints the findings, then ends with each stack's summary."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    prerequisites, recipe = _rule(makefile, "demo")
    assert prerequisites == ["setup-policy"]
    policy, _ = _rule(makefile, "setup-policy")
    assert "$(CHECKOV_VENV)/$(STAMP)" not in policy and "$(BIN)/$(STAMP)" not in policy
    _, install = _rule(makefile, "$(BIN)/$(STAMP)-infra")
    assert "-e '.[infra]'" in install and "[infra," not in install
    verbs = re.findall(r"mlplatform (\w+)", recipe)
    assert verbs == ["check", "plan"] and recipe.index("mlplatform check") < recipe.index("mlplatform plan")


def test_every_verb_with_subcommands_stays_a_group() -> None:
    """typer runs a one-command Typer app as that command (typer.main.get_command), so `prices refresh`
    or `charts pull` would be refused with "unexpected extra argument" unless the app is a group."""
    import importlib

    import typer
    from typer.core import TyperGroup

    from mlplatform.cli import VERBS

    for verb in VERBS.values():
        if verb.function != "app":
            continue
        command = typer.main.get_command(getattr(importlib.import_module(verb.module), verb.function))
        assert isinstance(command, TyperGroup), f"mlplatform {verb.name} is not a group of subcommands"
