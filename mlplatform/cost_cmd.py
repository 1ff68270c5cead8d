"""``mlplatform cost``: what stacks cost a month before ``pulumi up``, priced from the plan ``check`` judges.

Stacks are planned (as ``plan`` does; by name or ``--stack-file``), or read from plan files ``mlplatform plan
--json`` wrote (``--plan``, to reuse a plan CI already made). Each estimate prints its floor, expected and
ceiling figures, per item and per stack, the items not priced and why, and the price snapshot's age.
``--json`` writes the same for CI. Exit 0, or 2 on bad input; judging a figure against a budget is the policy
pack's (``budget-ceiling``).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from components.config import ConfigError
from mlplatform.costing import Estimate, Item, Money, estimate, no_priced_items
from mlplatform.errors import InputError, exit_with
from mlplatform.graph import Plan
from mlplatform.parallel import spread
from mlplatform.plan import Target, resolve_target, run_plan
from mlplatform.plan_cmd import unrendered_or_exit
from mlplatform.pricing import SNAPSHOT, Snapshot, load_snapshot
from mlplatform.report import output_problems

_FIGURES = ("floor", "expected", "ceiling")


def read_plan(path: Path) -> Plan:
    """A plan file ``mlplatform plan --json`` wrote; bad files are one line each."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        return Plan.from_dict(document)
    except OSError as error:
        raise InputError([f"--plan {path}: cannot read ({error.strerror})"]) from None
    except (ValueError, KeyError, TypeError) as error:
        raise InputError(
            [f"--plan {path}: not a plan written by `mlplatform plan --json` ({error})"]
        ) from None


def plan_each(targets: list[Target]) -> list[Plan | InputError]:
    """Each stack's plan, or why it cannot be planned (as ``plan_or_exit`` says it)."""
    planned: list[Plan | InputError] = []
    for target in targets:
        try:
            planned.append(run_plan(target))
        except (InputError, ConfigError) as error:
            planned.append(InputError(error.problems))
    return planned


def cost(
    stacks: Annotated[
        list[str] | None, typer.Argument(help="Stack names, e.g. aws-smb-dev.", show_default=False)
    ] = None,
    stack_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--stack-file",
            help="A stack file (Pulumi.<stack>.yaml) anywhere (repeatable).",
            show_default=False,
        ),
    ] = None,
    plan_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--plan", help="A plan file from `mlplatform plan --json` (repeatable).", show_default=False
        ),
    ] = None,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the estimates as JSON.", show_default=False)
    ] = None,
    prices: Annotated[Path, typer.Option("--prices", help="The price snapshot (CSV).")] = SNAPSHOT,
    allow_unrendered: Annotated[
        bool, typer.Option("--allow-unrendered", help="Go on past a Helm release that cannot be rendered.")
    ] = False,
) -> None:
    """Price stacks a month: floor, expected and ceiling per item and per stack, with what is unpriced."""
    if not stacks and not plan_files and not stack_files:
        exit_with(["name a stack, or pass --stack-file PATH, or --plan FILE (from `mlplatform plan --json`)"])
    unwritable = output_problems({"--json": json_file}, {})
    if unwritable:
        exit_with(unwritable)
    try:
        snapshot = load_snapshot(prices)
        plans = [read_plan(path) for path in plan_files or []]
        targets = [resolve_target(stack) for stack in stacks or []]
        targets += [resolve_target(stack_file=path) for path in stack_files or []]
    except InputError as error:
        exit_with(error.problems)
    for planned in spread(targets, plan_each):  # stacks planned side by side (mlplatform.parallel)
        if isinstance(planned, InputError):
            exit_with(planned.problems)
        unrendered_or_exit(planned, allow_unrendered)
        plans.append(planned)
    today = datetime.datetime.now(datetime.UTC).date()
    estimates = [estimate(plan, snapshot) for plan in plans]
    console = Console()
    for result in estimates:
        print_estimate(result, snapshot, today, console)
    if json_file is not None:
        json_file.write_text(json.dumps([to_json(e, snapshot, today) for e in estimates], indent=2) + "\n")
        console.print(f"wrote {json_file}")


def print_estimate(result: Estimate, snapshot: Snapshot, today: datetime.date, console: Console) -> None:
    console.print(Text(f"{result.stack} ({result.cloud}, {result.region})", style="bold"))
    table = Table(box=None, padding=(0, 1), pad_edge=False)
    table.add_column("item (USD a month)", ratio=1, min_width=30)
    for figure in _FIGURES:
        table.add_column(figure, justify="right", no_wrap=True)
    table.add_column("src", justify="right", no_wrap=True)
    sources: dict[str, int] = {}
    for item in sorted(result.priced, key=lambda i: -(i.ceiling.high if i.ceiling else 0.0)):
        refs = [sources.setdefault(f"{row.source} ({row.date})", len(sources) + 1) for row in item.rows]
        table.add_row(
            item.what,
            *(getattr(item, figure).text() for figure in _FIGURES),
            ",".join(str(ref) for ref in refs),
        )
    totals = [result.total(figure) for figure in _FIGURES]
    if result.priced:
        table.add_row("total (priced items)", *(t.text() if t else "" for t in totals), "", style="bold")
    else:
        table.add_row(f"total: {no_priced_items(result)}", "", "", "", "", style="bold")
    console.print(table)
    for source, ref in sources.items():
        console.print(f"  [{ref}] {source}", soft_wrap=True, markup=False)
    unpriced = result.unpriced
    if unpriced:
        console.print(Text(f"not priced ({len(unpriced)}): left out of the totals", style="bold"))
        for item in unpriced:
            console.print(f"  {item.what} ({item.resource or 'stack'}): {item.unpriced}", soft_wrap=True)
    console.print(f"no charge of their own: {len(result.free)} resources (--json lists each, with why)")
    judged = result.budget_verdict()
    if judged is not None:
        ceiling, verdict = judged
        console.print(
            f"budget: ${result.budget:,.0f} a month; the policy pack judges the node pools' ceiling "
            f"${ceiling:,.0f}: {verdict} (budget-ceiling; the fixed items above are not judged against it)",
            soft_wrap=True,
        )
    console.print(snapshot.age_line(today, result.rows()))


def _rounded(value: Money | None) -> dict[str, float] | None:
    return None if value is None else {"low": round(value.low, 2), "high": round(value.high, 2)}


def _money(item: Item, figure: str) -> dict[str, float] | None:
    return _rounded(getattr(item, figure))


def to_json(result: Estimate, snapshot: Snapshot, today: datetime.date) -> dict[str, Any]:
    return {
        "stack": result.stack,
        "cloud": result.cloud,
        "region": result.region,
        "currency": "USD",
        # null when nothing is priced: never a $0 that reads as a cost.
        "totals": {figure: _rounded(result.total(figure)) for figure in _FIGURES},
        "budget": result.budget,
        "budgetJudged": None
        if (judged := result.budget_verdict()) is None
        else {"poolsCeiling": round(judged[0], 2), "verdict": judged[1]},
        "prices": {
            "snapshot": str(snapshot.path),
            "asOf": snapshot.oldest(result.rows()).isoformat(),
            "ageDays": (today - snapshot.oldest(result.rows())).days,
        },
        "items": [
            {
                "resource": item.resource,
                "type": item.type,
                "what": item.what,
                **{figure: _money(item, figure) for figure in _FIGURES},
                "unpriced": item.unpriced,
                "usage": item.usage,
                "sources": [{"source": row.source, "date": row.date.isoformat()} for row in item.rows],
            }
            for item in result.items
        ],
        "free": [{"resource": f.resource, "type": f.type, "reason": f.reason} for f in result.free],
    }
