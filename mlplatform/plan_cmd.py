"""``mlplatform plan``: run the real program offline under Pulumi's mocks and show what it would do."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from components.config import ConfigError
from mlplatform.costing import estimate, summary_line
from mlplatform.diagram import write_diagram
from mlplatform.errors import InputError, exit_with, warn
from mlplatform.plan import Plan, Target, resolve_target, run_plan
from mlplatform.pricing import load_snapshot
from mlplatform.rendering import unrendered_problems
from mlplatform.report import output_problems, print_tree, write_json, write_manifests
from mlplatform.summary import print_summary, summarize

StackArg = Annotated[
    str | None, typer.Argument(help="A stack name, e.g. aws-enterprise-prod.", show_default=False)
]
StackFileOpt = Annotated[
    Path | None,
    typer.Option("--stack-file", help="A stack file (Pulumi.<stack>.yaml) anywhere.", show_default=False),
]
ProgramOpt = Annotated[
    Path | None,
    typer.Option(
        "--program", help="Any Pulumi Python project directory (default: this one).", show_default=False
    ),
]
StackOpt = Annotated[
    str | None, typer.Option("--stack", help="Stack name, with --program.", show_default=False)
]
AllowUnrenderedOpt = Annotated[
    bool,
    typer.Option(
        "--allow-unrendered",
        help="Warn, instead of failing, on a Helm release whose chart cannot be rendered.",
    ),
]


def unrendered_or_exit(result: Plan, allowed: bool) -> None:
    """A release that cannot be rendered: exit 2, one line each, or a warning each when ``allowed``
    (its objects are then neither exported nor judged)."""
    problems = unrendered_problems(result.resources)
    if problems and not allowed:
        exit_with([f"{line} (--allow-unrendered goes on without its objects)" for line in problems])
    warn(problems)


def target_from_flags(
    stack: str | None, stack_file: Path | None, program: Path | None, stack_opt: str | None
) -> Target:
    """The one way every verb turns its stack flags into a Target (exit 2 on nonsense)."""
    if stack is not None and stack_opt is not None and stack != stack_opt:
        exit_with([f"two stack names given: {stack!r} and --stack {stack_opt!r}"])
    try:
        target = resolve_target(stack_opt or stack, stack_file, program)
    except InputError as exc:
        exit_with(exc.problems)
    if stack is not None and stack_file is not None and stack_file.name != f"Pulumi.{stack}.yaml":
        # As `check`: the file names its stack; only --stack renames it, on purpose.
        named = stack_file.name.removeprefix("Pulumi.").rsplit(".", 1)[0]
        exit_with(
            [f"{stack_file} is stack {named!r}, not {stack!r}; give one or the other (--stack renames)"]
        )
    return target


def plan_or_exit(target: Target) -> Plan:
    """Plan, turning bad config (ours, or any program's RunError) into exit 2 with one line each."""
    try:
        return run_plan(target)
    except (InputError, ConfigError) as exc:
        exit_with(exc.problems)


def cost_line(result: Plan) -> str:
    """The plan summary's cost line (``mlplatform cost`` gives the items); a snapshot that cannot be read
    is said, not fatal: the plan stands without it."""
    try:
        snapshot = load_snapshot()
    except InputError as error:
        return f"cost: not estimated ({'; '.join(error.problems)})"
    return summary_line(estimate(result, snapshot), datetime.datetime.now(datetime.UTC).date(), snapshot)


def plan(
    stack: StackArg = None,
    stack_file: StackFileOpt = None,
    program: ProgramOpt = None,
    stack_opt: StackOpt = None,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the full resource graph as JSON.", show_default=False)
    ] = None,
    manifests: Annotated[
        Path | None,
        typer.Option(
            "--manifests",
            help="Write every Kubernetes object as YAML, a folder per namespace.",
            show_default=False,
        ),
    ] = None,
    diagram: Annotated[
        Path | None,
        typer.Option(
            "--diagram",
            help="Draw the platform (network, cluster, pools, stores, registry, workloads, flows) as SVG.",
            show_default=False,
        ),
    ] = None,
    tree: Annotated[
        bool, typer.Option("--tree", help="Print every resource as a tree, a count by type and the outputs.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the last line.")] = False,
    allow_unrendered: AllowUnrenderedOpt = False,
) -> None:
    """Plan one stack offline: its node pools, endpoints, storage and resource counts (--tree: all)."""
    target = target_from_flags(stack, stack_file, program, stack_opt)
    unwritable = output_problems({"--json": json_file, "--diagram": diagram}, {"--manifests": manifests})
    if unwritable:
        exit_with(unwritable)
    result = plan_or_exit(target)
    unrendered_or_exit(result, allow_unrendered)
    warn(result.warnings)
    console = Console()
    if tree and not quiet:
        print_tree(result, console)
    elif not quiet:
        print_summary(summarize(result, target.label), console)
        console.print(cost_line(result))
    if json_file is not None:
        write_json(result, json_file)
        console.print(f"wrote {json_file}")
    if diagram is not None:
        write_diagram(result, target.label, diagram)
        console.print(f"wrote {diagram}")
    if manifests is not None:
        written = write_manifests(result, manifests)
        console.print(f"wrote {len(written)} Kubernetes objects under {manifests}")
    console.print(f"{target.label}: {len(result.resources)} resources planned")
