"""`mlplatform plan` runs any Pulumi Python program under the real SDK's mocks and records what the
engine would see: the graph with parents and providers (default providers synthesized from config),
inputs in wire form, outputs with secrets marked, and Kubernetes objects as manifests."""

from __future__ import annotations

import io
import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from mlplatform.cli import app
from mlplatform.plan import REPO_ROOT, SECRET_SIG, Plan, resolve_target, run_plan
from mlplatform.report import print_tree
from mlplatform.summary import print_summary, summarize

PROGRAM = """
import pulumi
import pulumi_aws.s3 as s3
import pulumi_kubernetes as k8s

class Store(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("demo:index:Store", name, None, opts)
        self.bucket = s3.Bucket(f"{name}-bucket", tags={"owner": pulumi.Config().require("owner")},
                                opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})

store = Store("data")
cluster = k8s.Provider("cluster", kubeconfig=pulumi.Output.secret("apiVersion: v1"))
pulumi.CustomResource("kubernetes:core/v1:Namespace", "team-a",
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
    opts=pulumi.ResourceOptions(provider=cluster))
pulumi.CustomResource("kubernetes:core/v1:ConfigMap", "settings",
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team-a"},
     "data": {"replicas": "3"}},
    opts=pulumi.ResourceOptions(provider=cluster))
pulumi.export("bucket", store.bucket.bucket)
pulumi.export("token", pulumi.Output.secret("s3cr3t"))
"""


@pytest.fixture()
def program(tmp_path: Path) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: demo\nruntime: python\n")
    (tmp_path / "__main__.py").write_text(textwrap.dedent(PROGRAM))
    (tmp_path / "Pulumi.dev.yaml").write_text(
        "config:\n  aws:region: me-central-1\n  demo:owner: data-team\n"
    )
    return tmp_path


def test_any_program_is_planned_with_graph_providers_and_wire_inputs(program: Path) -> None:
    plan = run_plan(resolve_target(stack="dev", program=program))
    by_name = {r.name: r for r in plan.resources}
    assert by_name["demo-dev"].type == "pulumi:pulumi:Stack"
    assert by_name["data"].parent == by_name["demo-dev"].urn and not by_name["data"].custom
    bucket = by_name["data-bucket"]
    assert bucket.parent == by_name["data"].urn
    assert bucket.inputs["tags"] == {"owner": "data-team"}
    default = plan.providers()[bucket.provider or ""]
    assert default.type == "pulumi:providers:aws" and default.inputs["region"] == "me-central-1"
    namespace = by_name["team-a"]
    assert plan.providers()[namespace.provider or ""].name == "cluster"
    assert by_name["cluster"].inputs["kubeconfig"][SECRET_SIG]
    assert plan.outputs["token"] == {SECRET_SIG: "1b47061264138c4ac30d75fd1eb44270", "value": "s3cr3t"}
    assert plan.outputs["bucket"].startswith("data-bucket")


def test_plans_in_one_process_do_not_leak_into_each_other(program: Path) -> None:
    first = run_plan(resolve_target(stack="dev", program=program))
    second = run_plan(resolve_target(stack="dev", program=program))
    assert sorted(r.urn for r in first.resources) == sorted(r.urn for r in second.resources)
    assert len(first.resources) == len(second.resources) == 7


def test_cli_writes_json_graph_and_manifests(program: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = CliRunner().invoke(
        app,
        [
            "plan",
            "--program",
            str(program),
            "--stack",
            "dev",
            "--json",
            str(out / "plan.json"),
            "--manifests",
            str(out / "m"),
            "--tree",
        ],
        catch_exceptions=False,
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "aws:s3:Bucket" in result.stdout and "[secret]" in result.stdout and "s3cr3t" not in result.stdout
    graph = json.loads((out / "plan.json").read_text())
    assert set(graph) == {"project", "stack", "resources", "outputs"}
    assert {"urn", "type", "name", "parent", "custom", "provider", "inputs"} <= set(graph["resources"][0])
    config_map = yaml.safe_load((out / "m" / "team-a" / "configmap-settings.yaml").read_text())
    assert config_map == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "team-a"},
        "data": {"replicas": "3"},
    }
    assert (
        yaml.safe_load((out / "m" / "_cluster" / "namespace-team-a.yaml").read_text())["kind"] == "Namespace"
    )


def test_program_errors_and_bad_flags_exit_2(program: Path) -> None:
    (program / "Pulumi.broken.yaml").write_text("config: [not, a, mapping]\n")
    runner = CliRunner()
    broken = runner.invoke(app, ["plan", "--program", str(program), "--stack", "broken"])
    assert broken.exit_code == 2 and "config: expected a mapping" in broken.stderr
    missing = runner.invoke(app, ["plan", "no-such-stack"])
    assert missing.exit_code == 2 and "unknown stack 'no-such-stack'; stacks: aws-" in missing.stderr
    clash = runner.invoke(app, ["plan", "a", "--stack", "b"])
    assert clash.exit_code == 2 and "two stack names" in clash.stderr
    blocker = program / "not-a-folder"
    blocker.write_text("")
    unwritable = runner.invoke(
        app, ["plan", "--program", str(program), "--stack", "dev", "-q", "--json", f"{blocker}/p.json"]
    )
    assert unwritable.exit_code == 2
    assert unwritable.stderr == f"error: --json {blocker}/p.json: {blocker} is a file, not a folder\n"
    (program / "__main__.py").write_text("import pulumi\n\nsettings = {}\nsettings['replicas']\n")
    crashed = runner.invoke(app, ["plan", "--program", str(program), "--stack", "dev"])
    assert crashed.exit_code == 2
    assert crashed.stderr.strip() == "error: __main__.py:4: KeyError: 'replicas'"


def test_new_stack_writes_a_valid_renamed_template_and_never_overwrites(tmp_path: Path) -> None:
    runner = CliRunner()
    args = [
        "new-stack",
        "aws-smb-staging",
        "--cloud",
        "aws",
        "--tier",
        "smb",
        "--env",
        "staging",
        "--dir",
        str(tmp_path),
    ]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    written = tmp_path / "Pulumi.aws-smb-staging.yaml"
    text = written.read_text()
    assert "environment: staging" in text and "pulumi stack init aws-smb-staging" in text
    assert "awskms://alias/ml-platform-state?region=me-central-1" in first.stdout
    plan = run_plan(resolve_target(stack_file=written))
    assert plan.stack == "aws-smb-staging"
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "already exists" in again.stderr
    assert written.read_text() == text


def _one_line_exit_2(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip()


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (
            ("  ml-platform:platform:", "  ml-platform:platfrom:"),
            "error: Pulumi.aws-smb-dev.yaml: ml-platform:platfrom: unknown key; "
            "did you mean ml-platform:platform?",
        ),
        (
            ("  aws:region:", "  aws:regoin:"),
            "error: Pulumi.aws-smb-dev.yaml: aws:regoin: unknown key; did you mean aws:region?",
        ),
        (
            ("    cloud: aws", "    cloud: gcp"),
            "error: Pulumi.aws-smb-dev.yaml: ml-platform:platform.cloud: 'gcp' is not a cloud; "
            "one of: aws, azure",
        ),
    ],
)
def test_a_misspelt_key_or_cloud_is_one_line_naming_it(
    edit: tuple[str, str], line: str, tmp_path: Path
) -> None:
    text = (REPO_ROOT / "stacks" / "Pulumi.aws-smb-dev.yaml").read_text()
    assert edit[0] in text
    stack_file = tmp_path / "Pulumi.aws-smb-dev.yaml"
    stack_file.write_text(text.replace(edit[0], edit[1], 1))
    assert _one_line_exit_2(["plan", "--stack-file", str(stack_file)]) == line


def test_an_unknown_stack_is_named_with_the_closest_one() -> None:
    assert (
        _one_line_exit_2(["plan", "aws-smb-devv"])
        == "error: unknown stack 'aws-smb-devv'; did you mean aws-smb-dev?"
    )


def test_a_stack_file_of_another_stack_is_refused() -> None:
    other = REPO_ROOT / "stacks" / "Pulumi.azure-smb-dev.yaml"
    assert _one_line_exit_2(["plan", "aws-smb-dev", "--stack-file", str(other)]) == (
        f"error: {other} is stack 'azure-smb-dev', not 'aws-smb-dev'; give one or the other (--stack renames)"
    )


def test_a_stack_with_no_stack_file_has_empty_config(program: Path) -> None:
    """Pulumi: a stack that was never given config has none; it is not an unknown stack."""
    (program / "__main__.py").write_text(
        "import pulumi\npulumi.export('owner', pulumi.Config().get('owner') or 'unset')\n"
    )
    plan = run_plan(resolve_target(stack="fresh", program=program))
    assert plan.stack == "fresh" and plan.outputs == {"owner": "unset"}
    result = CliRunner().invoke(app, ["plan", "--program", str(program), "--stack", "fresh", "-q"])
    assert result.exit_code == 0, result.output


def test_new_stack_with_a_bad_environment_names_the_flag(tmp_path: Path) -> None:
    args = ["new-stack", "x", "--cloud", "aws", "--tier", "smb", "--env", "Bad Env", "--dir", str(tmp_path)]
    assert _one_line_exit_2(args) == (
        "error: --env 'Bad Env': lowercase letters, digits and '-', starting with a letter and ending with a "
        "letter or digit, 10 characters at most"
    )
    assert not list(tmp_path.iterdir())


# root may write anywhere, a folder of mode 0500 included.
_AS_ROOT = pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a read-only folder")


@pytest.mark.parametrize(
    ("flag", "where", "says"),
    [
        ("--manifests", "file", "is a file; name a folder"),
        ("--manifests", "file/below", "is a file, not a folder"),
        ("--json", "folder", "is a folder; name a file"),
        ("--json", "file/plan.json", "is a file, not a folder"),
        pytest.param("--json", "locked/plan.json", "is not writable", marks=_AS_ROOT),
        pytest.param("--manifests", "locked/m", "is not writable", marks=_AS_ROOT),
    ],
)
def test_output_paths_are_checked_before_any_work(program: Path, flag: str, where: str, says: str) -> None:
    """A path that cannot be written is one line and exit 2 before the program runs (its crash, below,
    is never reached), not a traceback after the whole plan."""
    (program / "__main__.py").write_text("raise SystemExit('the program ran')\n")
    (program / "file").write_text("")
    (program / "folder").mkdir()
    (program / "locked").mkdir(mode=0o500)
    path = program / where
    result = CliRunner().invoke(app, ["plan", "--program", str(program), "--stack", "dev", flag, str(path)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {flag} {path}: ")
    assert says in result.stderr


def _words(text: str) -> list[str]:
    return [word.strip("│├└─ ") for word in text.split() if word.strip("│├└─ ")]


def _render(print_to: Callable[[Console], None], width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    print_to(console)
    return console.export_text()


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-enterprise-prod"])
@pytest.mark.parametrize("view", ["summary", "tree"])
def test_plan_output_breaks_no_word_at_80_columns(
    planned: Callable[[str], Plan], stack: str, view: str
) -> None:
    """At 80 columns a line wraps between words only: every word printed is a whole word of the
    unwrapped output, or its start followed by an ellipsis (the whole of it is in --json)."""
    plan = planned(stack)

    def show(console: Console) -> None:
        if view == "tree":
            print_tree(plan, console)
        else:
            print_summary(summarize(plan, stack), console)

    whole = set(_words(_render(show, 2000)))
    narrow = _render(show, 80)
    assert max(len(line.rstrip()) for line in narrow.splitlines()) <= 80
    broken = [
        word
        for word in _words(narrow)
        if word not in whole and not (word.endswith("…") and any(w.startswith(word[:-1]) for w in whole))
    ]
    assert broken == []


def test_the_summary_says_pools_gpus_endpoints_and_storage(planned: Callable[[str], Plan]) -> None:
    """What a person wants first (issue 27): per pool the type, GPUs, spot, min/max and the GPUs that
    run even when idle (min nodes x GPUs per node); the API's reach; storage and its size."""
    aws = summarize(planned("aws-enterprise-prod"), "aws-enterprise-prod")
    gpu = next(p for p in aws.pools if p.name == "gpu-efa")
    assert (gpu.instance_type, gpu.gpus_per_node, gpu.spot, gpu.min_size, gpu.max_size) == (
        "p5en.48xlarge",
        8,
        False,
        2,
        4,
    )
    assert gpu.always_on_gpus == 16
    assert "Kubernetes API: private (inside the VPC)" in aws.endpoints
    assert any(e.startswith("Service ml-inference/inference: https 8080") for e in aws.endpoints)
    assert any("FSx for Lustre" in s and "4800 GiB" in s for s in aws.storage)
    azure = summarize(planned("azure-smb-dev"), "azure-smb-dev")
    spot = next(p for p in azure.pools if p.name == "gpu")
    assert spot.spot and spot.gpus_per_node == 1 and spot.always_on_gpus == 0
    assert any(e.startswith("Kubernetes API: public, from ") for e in azure.endpoints)
    assert any("Azure Files share" in s and "NFS, 100 GiB" in s for s in azure.storage)
    assert azure.counts[0].startswith(f"{len(planned('azure-smb-dev').resources)} in all: ")
    total = _render(lambda console: print_summary(aws, console), 80).splitlines()
    assert [line.split() for line in total if line.startswith("all ")] == [["all", "16"]]
    text = _render(lambda console: print_summary(azure, console), 80)
    assert "pulumi:pulumi:Stack" not in text and len(text.splitlines()) < 30


def test_plans_in_one_process_each_run_on_a_loop_of_their_own_and_leave_no_thread(program: Path) -> None:
    """Pulumi's runtime awaits on the thread's current event loop (``pulumi.runtime.sync_await``) and
    makes its resource calls on that loop's default executor. ``asyncio.run`` leaves the thread with no
    loop, so a second plan after it failed with "There is no current event loop"; then, given a loop
    each time and none closed, every plan left 6 executor threads behind (a suite worker plans a hundred
    stacks). Plans around an ``asyncio.run`` now run, and leave the process's threads as they were."""
    import asyncio
    import threading

    async def nothing() -> None:
        return None

    target = resolve_target(stack="dev", program=program)
    run_plan(target)
    before = threading.active_count()
    for _ in range(3):
        asyncio.run(nothing())
        assert run_plan(target).outputs["bucket"].startswith("data-bucket")
    assert threading.active_count() == before


def test_an_output_made_outside_a_plan_does_not_hold_up_the_next(program: Path) -> None:
    """Pulumi waits, at the end of a program, for every output it tracks (``wait_for_rpcs``), and tracked
    outputs made anywhere in the process in one set: a test's ``Output.from_input`` (here, before a plan
    on another event loop) stalled the next plan for good, every thread idle, as a suite worker hung in
    CI. Each plan now waits only for its own outputs. The plan runs in a thread so that a regression
    fails here instead of hanging the run."""
    import asyncio
    import threading

    import pulumi

    loop = asyncio.new_event_loop()  # the test's own: an earlier asyncio.run may have left none
    asyncio.set_event_loop(loop)
    try:
        made_outside = pulumi.Output.from_input("an output made by a test, outside any plan")
        planned: list[Plan] = []
        target = resolve_target(stack="dev", program=program)
        worker = threading.Thread(target=lambda: planned.append(run_plan(target)), daemon=True)
        worker.start()
        worker.join(timeout=120)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert planned, "the plan did not finish in 120 s"
    assert planned[0].outputs["bucket"].startswith("data-bucket")
    assert made_outside is not None
