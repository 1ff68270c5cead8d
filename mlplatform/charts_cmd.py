"""``mlplatform charts pull``: the packaged charts that ``plan`` and ``check`` render from.

The pinned charts ship in the repository's ``charts/``, each with its sha256 in ``charts/index.json``.
A pinned chart missing from the folder (a new pin) is pulled from its repository at exactly its version
with Helm's own client (helm-python-sdk), then verified: it loads as a chart, and its name and version
are the pin's. Only a verified package is moved into the folder, so a half-downloaded or wrong chart
never stands in for the pinned one. Charts already present are verified, not pulled again, against the
digest the folder's index.json records too. A pulled package has no recorded digest to meet: upstream
archives differ byte for byte from the shipped ones (charts/README.md), so record its sha256, source,
tag, commit and license in index.json when you add it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from components.kubernetes import helm_engine
from components.kubernetes.charts import CHARTS_ENV, PINS, ChartError, ChartPin, cache_dir, verify
from mlplatform.errors import exit_with
from mlplatform.report import output_problems

app = typer.Typer(
    help="The packaged Helm charts plan and check render from.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _charts() -> None:
    # A callback keeps `charts` a group: typer runs a one-command app as that command, which made
    # `mlplatform charts pull` fail with "unexpected extra argument (pull)".
    pass


def pull_chart(chart_pin: ChartPin, directory: Path) -> Path:
    """The pinned chart in ``directory``, pulled and verified if it is not there yet."""
    target = directory / chart_pin.file
    if target.is_file():
        verify(target, chart_pin.chart, chart_pin.version)
        return target
    with tempfile.TemporaryDirectory() as scratch:
        try:
            helm_engine.pull(
                chart_pin.reference,
                None if chart_pin.oci else chart_pin.repo,
                chart_pin.version,
                Path(scratch),
            )
        except helm_engine.HelmError as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ChartError(
                f"{chart_pin.chart} {chart_pin.version}: cannot pull from {chart_pin.repo} ({reason})"
            ) from None
        pulled = Path(scratch) / chart_pin.file
        if not pulled.is_file():
            raise ChartError(f"{chart_pin.chart} {chart_pin.version}: {chart_pin.repo} sent no {pulled.name}")
        verify(pulled, chart_pin.chart, chart_pin.version)
        directory.mkdir(parents=True, exist_ok=True)
        shutil.move(pulled, target)
    return target


@app.command("pull")
def pull(
    dest: Annotated[
        Path | None,
        typer.Option(
            "--dest", help=f"The chart folder (default: ${CHARTS_ENV}, else the repository's charts/)."
        ),
    ] = None,
) -> None:
    """Verify every pinned chart in the folder; pull each one missing at its pinned version."""
    if dest is not None and not dest.exists():
        # The folder holds charts to verify: one that is not there is a typo, not ten failed pulls.
        exit_with([f"--dest {dest}: no such folder; create it first, or leave --dest out for charts/"])
    directory = (dest or cache_dir()).resolve()
    unwritable = output_problems({}, {"--dest": directory})
    if unwritable:
        exit_with(unwritable)
    problems: list[str] = []
    for chart_pin in PINS:
        try:
            path = pull_chart(chart_pin, directory)
        except ChartError as error:
            problems.append(str(error))
            continue
        typer.echo(f"{chart_pin.chart} {chart_pin.version}: {path}")
    if problems:
        exit_with(problems)
