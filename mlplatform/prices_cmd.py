"""``mlplatform prices refresh``: rebuild the price snapshot from the clouds' public price APIs.

Run it on a machine that reaches ``pricing.us-east-1.amazonaws.com`` and ``prices.azure.com``; the rows
it cannot refresh keep their price or their reason, and are listed (``mlplatform.prices_refresh``).
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Annotated

import typer

from mlplatform.errors import InputError, exit_with
from mlplatform.prices_refresh import Transport, refresh, urllib_transport
from mlplatform.pricing import SNAPSHOT, load_snapshot, write_rows

app = typer.Typer(
    add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True, help="The price snapshot."
)


@app.callback()
def _prices() -> None:
    # A callback keeps `prices` a group (see charts_cmd.py): without it `prices refresh` is refused.
    pass


@app.command("refresh")
def refresh_command(
    snapshot: Annotated[Path, typer.Option("--prices", help="The price snapshot to rebuild.")] = SNAPSHOT,
) -> None:
    """Ask the AWS Price List and Azure Retail Prices APIs for every row, in its own region."""
    run_refresh(snapshot, urllib_transport)


def run_refresh(snapshot: Path, transport: Transport) -> None:
    try:
        current = load_snapshot(snapshot)
        outcome = refresh(list(current.rows), transport, datetime.datetime.now(datetime.UTC).date())
    except InputError as error:
        exit_with(error.problems)
    write_rows(outcome.rows, snapshot)
    typer.echo(f"{snapshot}: {len(outcome.updated)} rows refreshed, {len(outcome.kept)} kept as they were")
    for label in outcome.kept:
        typer.echo(f"  kept (no rule, or no price in the API's answer): {label}")
