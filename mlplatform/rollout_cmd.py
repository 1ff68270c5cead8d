"""``mlplatform rollout NAME``: shadow, then rising shares of traffic to ``@challenger``, each judged on a
window of the servers' metrics; promotion when every step passes, then a bake (docs/delivery.md).
``mlplatform rollout abort|pause|resume NAME`` act on a running one (workloads/delivery/control.py);
``rollout start NAME`` is ``rollout NAME`` (for a model named like a subcommand).

The plan comes from ``--plan FILE`` (YAML or JSON, the plan's camelCase keys) or from a stack's
``ml-platform:platform`` → ``workloads.inference.rollout`` (``--stack``); the run itself is
workloads/delivery/launch.py's, the same as the cluster Job's. Exit codes of ``rollout NAME``: 0 promoted,
or passed and handed over to a promotion (``promote: false``); 1 stopped or rolled back (the reason on
stderr); 2 bad input, one line naming the flag or key. ``abort|pause|resume``: 0 done (its line on
stdout), 2 bad input, a refusal or a registry or record error (one line).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from components.config import ConfigError, parse_stack_config, rollout_plan
from mlplatform.errors import InputError, exit_with
from mlplatform.stackyaml import load
from workloads.delivery import control
from workloads.delivery.launch import Settings, outcome, targets
from workloads.delivery.plan import PlanError, RolloutPlan, parse_plan
from workloads.delivery.runner import RolloutError
from workloads.registry.client import TRACKING_URI_ENV, RegistryClient, RegistryError
from workloads.registry.record import RECORD_ENV, Kind, RecordError, identity, open_journal
from workloads.registry.rollout import CHALLENGER, CHAMPION

STACKS = Path(__file__).resolve().parents[1] / "stacks"
PLAN_PATH = ("ml-platform:platform", "workloads", "inference", "rollout")


def _stack_plan(stack: str) -> RolloutPlan:
    path = STACKS / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise InputError([f"--stack {stack}: no {path.relative_to(STACKS.parent)}"])
    document: Any = load(path)
    node = document.get("config") if isinstance(document, dict) else None
    where = f"{path.name}: {PLAN_PATH[0]}.{'.'.join(PLAN_PATH[1:])}"
    for key in PLAN_PATH:
        if not isinstance(node, dict) or key not in node:
            raise InputError([f"{where}: not set (the stack names no rollout plan)"])
        node = node[key]
    if not isinstance(node, dict):
        raise InputError([f"{where}: a mapping of the plan's keys"])
    parse_plan(node, where)  # the plan's own problems, each naming its key
    try:  # the stack's rules on it: ``promote`` unset is false where approval is required
        return rollout_plan(parse_stack_config(document["config"], path.name))
    except ConfigError as exc:
        raise InputError(exc.problems) from None


def _file_plan(path: Path) -> RolloutPlan:
    raw = load(path)  # JSON is YAML
    if raw is not None and not isinstance(raw, dict):
        raise InputError([f"--plan {path}: a mapping of the plan's keys"])
    return parse_plan(raw, f"--plan {path.name}")


class _StartByDefault(TyperGroup):
    """``rollout NAME ...`` runs ``start``; ``rollout abort|pause|resume|start NAME`` their command."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["start", *args]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_StartByDefault,
    help="Roll a challenger out, gated; abort, pause or resume a running rollout.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

RegistryUri = Annotated[
    str | None, typer.Option("--registry-uri", envvar=TRACKING_URI_ENV, help="The MLflow server.")
]
Name = Annotated[str, typer.Argument(help="The registered model.")]
Actor = Annotated[str | None, typer.Option(help="Who acts (default: $USER).")]
Record = Annotated[
    str | None,
    typer.Option(
        "--record",
        envvar=RECORD_ENV,
        help=(
            "The lifecycle record (s3://BUCKET/PREFIX, azblob://ACCOUNT/CONTAINER/PREFIX or a directory) "
            "to append to."
        ),
    ),
]


def _who(actor: str | None) -> str:
    who = actor or os.environ.get("USER") or os.environ.get("LOGNAME")
    if not who:
        raise InputError(["--actor is required when $USER is not set (every alias move records who)"])
    return who


def _control(action: str, name: str, registry_uri: str | None, actor: str | None, record: str | None) -> None:
    """One control command as the registry's authenticated user, appended to the record if one is given:
    its line on stdout; bad input, a refusal or a registry error: one line, exit 2.

    With ``--record`` the record is checked before anything is done (opened, its store's lock rule read:
    ``Record.ensure_ready``), so a wrong or unreadable record refuses the command with the traffic as it
    was. The event is appended after the action, since it carries what the action found (the line); an
    append refused then (a write right the check cannot see, such as the key's) is one line saying the
    action was taken and is not on the record, exit 2 (review 35b A1: an abort done but unrecorded must
    not look like either a success or a refusal)."""
    try:
        if not registry_uri:
            raise InputError([f"--registry-uri (or ${TRACKING_URI_ENV}) is required"])
        client = RegistryClient(registry_uri)
        who = identity(client, _who(actor))
        journal = None
        if record is not None:
            try:
                journal = open_journal(client, record, who)
                journal.record.ensure_ready()
            except RecordError as exc:
                raise RecordError(f"{exc}; nothing done, {name}'s rollout is as it was") from None
        acts = {"abort": control.abort, "pause": control.pause, "resume": control.resume}
        line = acts[action](client, name, str(who))
        if journal is not None:
            champion = client.alias_or_none(name, CHAMPION)
            challenger = client.alias_or_none(name, CHALLENGER)
            versions = {r: v.version for r, v in ((CHAMPION, champion), (CHALLENGER, challenger)) if v}
            try:
                journal.append(name, Kind(f"rollout-{action}"), versions, reason=line)
            except RecordError as exc:
                raise RecordError(f"{line}; done but NOT on the lifecycle record: {exc}") from None
        typer.echo(line)
    except InputError as exc:
        exit_with(exc.problems)
    except (control.ControlError, RegistryError, RecordError, ValueError) as exc:
        exit_with([str(exc).splitlines()[0]])


@app.command()
def abort(name: Name, registry_uri: RegistryUri = None, actor: Actor = None, record: Record = None) -> None:
    """Send NAME's traffic back to @champion now and stop its rollout (a dead one's lock is cleared)."""
    _control("abort", name, registry_uri, actor, record)


@app.command()
def pause(name: Name, registry_uri: RegistryUri = None, actor: Actor = None, record: Record = None) -> None:
    """Hold NAME's running rollout at its current step once that step passes (still judged)."""
    _control("pause", name, registry_uri, actor, record)


@app.command()
def resume(name: Name, registry_uri: RegistryUri = None, actor: Actor = None, record: Record = None) -> None:
    """Let NAME's paused rollout go on."""
    _control("resume", name, registry_uri, actor, record)


@app.command("start")
def rollout(
    name: Annotated[str, typer.Argument(help="The registered model: its @challenger is rolled out.")],
    registry_uri: RegistryUri = None,
    metrics_url: Annotated[
        list[str] | None, typer.Option("--metrics-url", help="A server's /metrics URL (repeat for each).")
    ] = None,
    metrics_dns: Annotated[
        str | None, typer.Option(help="A name resolving to every server (a headless Service).")
    ] = None,
    metrics_port: Annotated[int, typer.Option(min=1, max=65535, help="With --metrics-dns.")] = 8080,
    metrics_scheme: Annotated[str, typer.Option(help="With --metrics-dns: http or https.")] = "http",
    service_url: Annotated[
        str | None, typer.Option(help="The inference Service, for the plan's labelled set (V2 API).")
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option(help="The servers' bearer token, for /metrics and the V2 API.")
    ] = None,
    ca_file: Annotated[
        Path | None, typer.Option(help="CA bundle the servers' certificates chain to.")
    ] = None,
    tls_server_name: Annotated[
        str | None,
        typer.Option(
            help="The name the servers' certificate is issued for (on the cluster:"
            " inference.ml-inference.svc), checked whatever address --metrics-url, --metrics-dns or"
            " --service-url connects to."
        ),
    ] = None,
    plan: Annotated[Path | None, typer.Option("--plan", help="The plan, YAML or JSON.")] = None,
    stack: Annotated[str | None, typer.Option(help="Read the plan from stacks/Pulumi.<stack>.yaml.")] = None,
    actor: Annotated[str | None, typer.Option(help="Who rolls out (default: $USER).")] = None,
    record: Record = None,
) -> None:
    """Roll NAME's @challenger out step by step; promote it (or, with promote: false, hand it over to a
    promotion), or send traffic back to @champion."""
    try:
        if (plan is None) == (stack is None):
            raise InputError(["give the plan as --plan FILE or --stack STACK, one of the two"])
        chosen = _file_plan(plan) if plan is not None else _stack_plan(str(stack))
        if not registry_uri:
            raise InputError([f"--registry-uri (or ${TRACKING_URI_ENV}) is required"])
        who = _who(actor)
        for flag, path in (("--token-file", token_file), ("--ca-file", ca_file)):
            if path is not None and not path.is_file():
                raise InputError([f"{flag} {path}: no such file"])
        found = targets(
            tuple(metrics_url or ()),
            metrics_dns,
            metrics_port,
            metrics_scheme,
            "--metrics-url",
            "--metrics-dns",
            tls_server_name,
        )
    except (InputError, PlanError) as exc:
        exit_with(exc.problems)
    except RolloutError as exc:
        exit_with([str(exc)])
    settings = Settings(name, registry_uri, chosen, who, found, service_url, token_file, ca_file, record)
    raise typer.Exit(outcome(settings))
