"""``mlplatform models``: the registry's versions with their lineage, promote and rollback.

Talks to the MLflow server at ``--registry-uri`` (default ``$MLFLOW_TRACKING_URI``) over its REST API
(``workloads.registry``). ``promote`` moves ``champion`` (what serving follows) and records the champion
it replaces as ``previous-champion``; ``rollback`` moves ``champion`` back to it. Every move tags the
version with who (``--actor``, default ``$USER``), when and how.

``promote``'s tolerance is the stack's (``--stack STACK``: ``workloads.registry.promoteTolerance``), unless
``--tolerance`` overrides it; with neither, the stack key's default.

Exit codes: 0 done (or nothing to do), 1 a promotion refused by the metric gate, 2 bad input (an
unknown model or version, no previous champion to roll back to, an unreachable registry, a bad flag,
an unknown or invalid stack), each as one line on stderr.
"""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from components.config import ConfigError, RegistryWorkloadConfig, parse_stack_config
from mlplatform.errors import EXIT_BAD_INPUT, EXIT_FINDING, InputError, exit_with
from workloads.registry import operations, rollout
from workloads.registry.client import TRACKING_URI_ENV, RegistryClient, RegistryError

app = typer.Typer(
    help="List, promote and roll back registered model versions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

RegistryUri = Annotated[
    str | None, typer.Option("--registry-uri", envvar=TRACKING_URI_ENV, help="The MLflow server.")
]
Actor = Annotated[str | None, typer.Option(help="Who moves the alias (default: $USER).")]
# The metric promote compares, and by how much a challenger may fall short of the champion on it: the
# stack sets the tolerance (workloads.registry.promoteTolerance); this is that key's default.
DEFAULT_METRIC = "test_accuracy"
DEFAULT_TOLERANCE: float = RegistryWorkloadConfig.model_fields["promote_tolerance"].default


@app.callback()
def _models() -> None:
    # A callback keeps `models` a group (see charts_cmd.py).
    pass


def _client(registry_uri: str | None) -> RegistryClient:
    if not registry_uri:
        exit_with([f"--registry-uri (or ${TRACKING_URI_ENV}) is required"])
    try:
        return RegistryClient(registry_uri)
    except ValueError as exc:
        exit_with([f"--registry-uri: {exc}"])


def _actor(actor: str | None) -> str:
    who = actor or os.environ.get("USER") or os.environ.get("LOGNAME")
    if not who:
        exit_with(["--actor is required when $USER is not set (every alias move records who made it)"])
    return who


def _failed(exc: RegistryError) -> None:
    exit_with([str(exc).splitlines()[0] if str(exc) else "registry call failed"])


@app.command("list")
def list_versions(
    name: Annotated[str, typer.Argument(help="The registered model.")],
    registry_uri: RegistryUri = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per version.")] = False,
) -> None:
    """Every version of NAME, newest first: aliases, run, dataset, code, image and test metric."""
    client = _client(registry_uri)
    try:
        versions = [client.get_version(name, v.version) for v in client.search_versions(name)]
        if not versions:
            _no_versions(client, name)
        rows = []
        for version in versions:
            run = client.get_run(version.run_id) if version.run_id else {}
            data = run.get("data", {})
            params = {p["key"]: p["value"] for p in data.get("params", ())}
            tags = {t["key"]: t["value"] for t in data.get("tags", ())}
            metrics = {m["key"]: m["value"] for m in data.get("metrics", ())}
            rows.append(
                {
                    "version": version.version,
                    "aliases": list(version.aliases),
                    "run_id": version.run_id,
                    "trained_as": version.tags.get("mlplatform.model_version", ""),
                    "dataset_sha256": params.get("dataset_sha256", ""),
                    "code_version": tags.get("mlplatform.code_version", ""),
                    "image": tags.get("mlplatform.image", ""),
                    DEFAULT_METRIC: metrics.get(DEFAULT_METRIC),
                    "alias_moves": {
                        k: v for k, v in version.tags.items() if k.startswith(rollout.TAG_PREFIX)
                    },
                }
            )
    except RegistryError as exc:
        _failed(exc)
    for row in rows:
        if as_json:
            typer.echo(json.dumps(row, sort_keys=True))
            continue
        metric = row[DEFAULT_METRIC]
        typer.echo(
            f"{row['version']:>4}  {','.join(row['aliases']) or '-':<28} "
            f"{DEFAULT_METRIC}={metric if metric is None else f'{metric:.4f}'}  run={row['run_id']}  "
            f"trained_as={row['trained_as']}  dataset={str(row['dataset_sha256'])[:12]}  "
            f"code={row['code_version']}  image={row['image']}"
        )


def _no_versions(client: RegistryClient, name: str) -> None:
    """Exit 2 with one line: NAME is not a registered model (naming those that are), or has no version."""
    try:
        client.registered_model(name)
    except RegistryError as exc:
        if not exc.not_found:
            raise
        known = client.model_names()
        shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "") if known else "none"
        exit_with([f"{name}: no such registered model (the registry has: {shown})"])
    exit_with([f"{name}: a registered model without versions (mlplatform train registers one)"])


@app.command()
def promote(
    name: Annotated[str, typer.Argument(help="The registered model.")],
    version: Annotated[str, typer.Argument(help="The version to make champion.")],
    registry_uri: RegistryUri = None,
    metric: Annotated[
        str, typer.Option(help="Compared with the champion's; higher is better.")
    ] = DEFAULT_METRIC,
    tolerance: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="How far below the champion's metric the version may be (default: the stack's).",
            show_default=False,
        ),
    ] = None,
    stack: Annotated[
        str | None,
        typer.Option(help="Take the tolerance from this stack (workloads.registry.promoteTolerance)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Promote whatever the metric says.")] = False,
    actor: Actor = None,
) -> None:
    """Make VERSION the champion, recording the current one as previous-champion."""
    if not version.isdigit():
        exit_with([f"VERSION must be a registry version number, got {version!r}"])
    if tolerance is None:
        tolerance = stack_tolerance(stack) if stack else DEFAULT_TOLERANCE
    client, who = _client(registry_uri), _actor(actor)
    try:
        decision = operations.promote(
            client, name, version, metric=metric, tolerance=tolerance, force=force, actor=who
        )
    except RegistryError as exc:
        _failed(exc)
    _report(name, decision)


def stack_tolerance(stack: str) -> float:
    """The stack's ``workloads.registry.promoteTolerance``, its file read and validated as ``plan`` does; an
    unknown stack or an invalid file is one line per problem, exit 2."""
    # Only here: the stack reader brings the Pulumi program's modules, which list and rollback never need.
    from mlplatform.plan import resolve_target
    from mlplatform.stackyaml import load

    try:
        target = resolve_target(stack)
        document = load(target.stack_file)
        raw = document.get("config") if isinstance(document, dict) else None
        config = parse_stack_config(raw if isinstance(raw, dict) else {}, target.stack_file.name)
    except (InputError, ConfigError) as exc:
        exit_with(exc.problems)
    return config.workloads.registry.promote_tolerance


@app.command()
def rollback(
    name: Annotated[str, typer.Argument(help="The registered model.")],
    registry_uri: RegistryUri = None,
    actor: Actor = None,
) -> None:
    """Move champion back to previous-champion (a second rollback undoes the first)."""
    client, who = _client(registry_uri), _actor(actor)
    try:
        decision = operations.rollback(client, name, actor=who)
    except RegistryError as exc:
        _failed(exc)
    _report(name, decision, refused_code=EXIT_BAD_INPUT)


def _report(name: str, decision: rollout.Decision, refused_code: int = EXIT_FINDING) -> None:
    if decision.refused:
        exit_with([f"{name}: {decision.refused}"], refused_code)
    if decision.note:
        typer.echo(f"{name}: {decision.note}")
    for move in decision.moves:
        typer.echo(f"{name}: {move.alias} -> version {move.version}")
