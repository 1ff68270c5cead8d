"""``mlplatform rollout NAME``: shadow, then rising shares of traffic to ``@challenger``, each judged on a
window of the servers' metrics; promotion when every step passes, then a bake (docs/delivery.md).

The plan comes from ``--plan FILE`` (YAML or JSON, the plan's camelCase keys) or from a stack's
``ml-platform:platform`` → ``workloads.inference.rollout`` (``--stack``); the run itself is
workloads/delivery/launch.py's, the same as the cluster Job's. Exit codes: 0 promoted, 1 stopped or
rolled back (the reason on stderr), 2 bad input, one line naming the flag or key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from mlplatform.errors import InputError, exit_with
from mlplatform.stackyaml import load
from workloads.delivery.launch import Settings, outcome, targets
from workloads.delivery.plan import PlanError, RolloutPlan, parse_plan
from workloads.delivery.runner import RolloutError
from workloads.registry.client import TRACKING_URI_ENV

STACKS = Path(__file__).resolve().parents[1] / "stacks"
PLAN_PATH = ("ml-platform:platform", "workloads", "inference", "rollout")


def _stack_plan(stack: str) -> RolloutPlan:
    path = STACKS / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise InputError([f"--stack {stack}: no {path.relative_to(STACKS.parent)}"])
    node: Any = load(path)
    node = node.get("config") if isinstance(node, dict) else None
    where = f"{path.name}: {PLAN_PATH[0]}.{'.'.join(PLAN_PATH[1:])}"
    for key in PLAN_PATH:
        if not isinstance(node, dict) or key not in node:
            raise InputError([f"{where}: not set (the stack names no rollout plan)"])
        node = node[key]
    if not isinstance(node, dict):
        raise InputError([f"{where}: a mapping of the plan's keys"])
    return parse_plan(node, where)


def _file_plan(path: Path) -> RolloutPlan:
    raw = load(path)  # JSON is YAML
    if raw is not None and not isinstance(raw, dict):
        raise InputError([f"--plan {path}: a mapping of the plan's keys"])
    return parse_plan(raw, f"--plan {path.name}")


def rollout(
    name: Annotated[str, typer.Argument(help="The registered model: its @challenger is rolled out.")],
    registry_uri: Annotated[
        str | None, typer.Option("--registry-uri", envvar=TRACKING_URI_ENV, help="The MLflow server.")
    ] = None,
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
) -> None:
    """Roll NAME's @challenger out step by step; promote it, or send traffic back to @champion."""
    try:
        if (plan is None) == (stack is None):
            raise InputError(["give the plan as --plan FILE or --stack STACK, one of the two"])
        chosen = _file_plan(plan) if plan is not None else _stack_plan(str(stack))
        if not registry_uri:
            raise InputError([f"--registry-uri (or ${TRACKING_URI_ENV}) is required"])
        who = actor or os.environ.get("USER") or os.environ.get("LOGNAME")
        if not who:
            raise InputError(["--actor is required when $USER is not set (every alias move records who)"])
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
    settings = Settings(name, registry_uri, chosen, who, found, service_url, token_file, ca_file)
    raise typer.Exit(outcome(settings))
