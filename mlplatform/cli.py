"""The ``mlplatform`` command: plan, check, new-stack, train and serve.

Exit codes are the contract CI relies on: 0 ok, 1 a finding (a policy violation), 2 bad input (config or
flags), each problem on one line of stderr.
"""

from __future__ import annotations

import typer

from mlplatform.charts_cmd import app as charts_app
from mlplatform.check import check
from mlplatform.newstack import new_stack
from mlplatform.plan_cmd import plan
from mlplatform.serve_cmd import serve
from mlplatform.train_cmd import TRAIN_CONTEXT, train

app = typer.Typer(
    name="mlplatform",
    help="Plan, check and run the ML platform offline; the same program `pulumi up` deploys.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.command("plan")(plan)
app.command("check")(check)
app.command("new-stack")(new_stack)
app.command("train", context_settings=TRAIN_CONTEXT)(train)
app.command("serve")(serve)
app.add_typer(charts_app, name="charts")


def main() -> None:
    app()
