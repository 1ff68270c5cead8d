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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, NoReturn

import typer

from components.config import (
    ConfigError,
    PlatformConfig,
    RegistryWorkloadConfig,
    approval_required,
    parse_stack_config,
)
from components.handle import ROLLOUT_USER
from mlplatform.errors import EXIT_BAD_INPUT, EXIT_FINDING, InputError, exit_with
from workloads.registry import approval, lock, operations, rollout
from workloads.registry.client import TRACKING_URI_ENV, RegistryClient, RegistryError
from workloads.registry.lineage import TRAINED_BY_TAG
from workloads.registry.record import (
    RECORD_ENV,
    Event,
    Identity,
    Journal,
    Kind,
    RecordError,
    identity,
    open_journal,
    open_record,
    version_digest,
)

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


def _failed(exc: RegistryError) -> NoReturn:
    exit_with([str(exc).splitlines()[0] if str(exc) else "registry call failed"])


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """A registry's refusal or a record that cannot be read or written: one line and exit 2."""
    try:
        yield
    except RegistryError as exc:
        _failed(exc)
    except RecordError as exc:
        exit_with([str(exc)])


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
                    "last_rollout": version.tags.get(lock.OUTCOME_TAG, ""),
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
            f"code={row['code_version']}  image={row['image']}  last_rollout={row['last_rollout'] or '-'}"
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


Record = Annotated[
    str | None,
    typer.Option(
        "--record",
        envvar=RECORD_ENV,
        help=(
            "The lifecycle record (s3://BUCKET/PREFIX, azblob://ACCOUNT/CONTAINER/PREFIX or a directory) "
            "every move, request and review is appended to."
        ),
    ),
]
Stack = Annotated[
    str | None,
    typer.Option(help="The stack whose workloads.registry rules apply (tolerance, approval, approvers)."),
]
Version = Annotated[str, typer.Argument(help="The registry version number.")]


@dataclass(frozen=True)
class Session:
    """One command's registry, caller (the registry's authenticated user) and record."""

    client: RegistryClient
    who: Identity
    journal: Journal | None

    def events(self, name: str) -> list[Event]:
        return self.journal.record.read(name) if self.journal is not None else []


def _session(
    registry_uri: str | None, actor: str | None, record: str | None, *, need_record: bool
) -> Session:
    client = _client(registry_uri)
    with _one_line_errors():
        who = identity(client, _actor(actor))
        if record is None:
            if need_record:
                exit_with([f"this needs the lifecycle record: give --record DIR or ${RECORD_ENV}"])
            return Session(client, who, None)
        # Checked before the command acts (Record.ensure_ready): a record that cannot take the event
        # refuses the command with nothing done, rather than after an alias moved.
        journal = open_journal(client, record, who)
        journal.record.ensure_ready()
        return Session(client, who, journal)


def _version_number(version: str) -> None:
    if not version.isdigit():
        exit_with([f"VERSION must be a registry version number, got {version!r}"])


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
    stack: Stack = None,
    force: Annotated[
        bool, typer.Option("--force", help="Skip the checks and the approval (the approver role only).")
    ] = False,
    actor: Actor = None,
    record: Record = None,
) -> None:
    """Make VERSION the champion, recording the current one as previous-champion."""
    _version_number(version)
    config = stack_config(stack) if stack else None
    rules = config.workloads.registry if config else None
    if tolerance is None:
        tolerance = rules.promote_tolerance if rules else DEFAULT_TOLERANCE
    policy = _policy(config)
    session = _session(registry_uri, actor, record, need_record=policy.required)
    events = session.events(name)
    # Who trained it, where an approval on the record is to be judged (approval.py ``_reviews``).
    reviewed = policy.required and not force and any(e.action == approval.APPROVE for e in events)
    with _one_line_errors():
        trained_by = session.client.get_version(name, version).tags.get(TRAINED_BY_TAG) if reviewed else None
        # The record's events count for the version it is now (approval.py ``_names``), not its number.
        digest = version_digest(session.client, name, version)
    refused = approval.promotion_refusal(events, version, digest, session.who, policy, force, trained_by)
    if refused is not None:
        exit_with([f"{name}: {refused}"], EXIT_FINDING)
    with _one_line_errors():
        decision = operations.promote(
            session.client,
            name,
            version,
            metric=metric,
            tolerance=tolerance,
            force=force,
            actor=str(session.who),
            journal=session.journal,
            verdict=approval.rollout_verdict(events, version, digest, policy.rollout_user),
        )
    _report(name, decision)


def stack_config(stack: str) -> PlatformConfig:
    """The stack's config, its file read and validated as ``plan`` does; an unknown stack or an invalid
    file is one line per problem, exit 2."""
    # Only here: the stack reader brings the Pulumi program's modules, which list and rollback never need.
    from mlplatform.plan import resolve_target
    from mlplatform.stackyaml import load

    try:
        target = resolve_target(stack)
        document = load(target.stack_file)
        raw = document.get("config") if isinstance(document, dict) else None
        return parse_stack_config(raw if isinstance(raw, dict) else {}, target.stack_file.name)
    except (InputError, ConfigError) as exc:
        exit_with(exc.problems)


def _policy(config: PlatformConfig | None) -> approval.Policy:
    """The stack's promotion rules: approval as the tier resolves it, the approver role, and the user its
    rollout Job runs as where the registry authenticates it (components/kubernetes/workloads.py
    ``registry_users``)."""
    if config is None:
        return approval.Policy()
    registry = config.workloads.registry
    authenticated = registry.enabled and registry.auth and config.workloads.inference is not None
    return approval.Policy(
        required=approval_required(config),
        approvers=tuple(registry.approvers),
        rollout_user=ROLLOUT_USER if authenticated else None,
    )


@app.command()
def rollback(
    name: Annotated[str, typer.Argument(help="The registered model.")],
    registry_uri: RegistryUri = None,
    actor: Actor = None,
    record: Record = None,
) -> None:
    """Move champion back to previous-champion (a second rollback undoes the first)."""
    session = _session(registry_uri, actor, record, need_record=False)
    with _one_line_errors():
        decision = operations.rollback(session.client, name, actor=str(session.who), journal=session.journal)
    _report(name, decision, refused_code=EXIT_BAD_INPUT)


@app.command("request-promotion")
def request_promotion(
    name: Annotated[str, typer.Argument(help="The registered model.")],
    version: Version,
    reason: Annotated[str, typer.Option(help="Why this version should serve.")] = "",
    registry_uri: RegistryUri = None,
    actor: Actor = None,
    record: Record = None,
) -> None:
    """Ask for VERSION to become the champion; an approver reviews it (mlplatform models approve)."""
    _version_number(version)
    session = _session(registry_uri, actor, record, need_record=True)
    assert session.journal is not None
    with _one_line_errors():
        session.client.get_version(name, version)
        champion = session.client.alias_or_none(name, rollout.CHAMPION)
        versions = {approval.CANDIDATE: version, **({"champion": champion.version} if champion else {})}
        session.journal.append(name, approval.REQUEST, versions, reason=reason)
    typer.echo(f"{name}: promotion of version {version} requested by {session.who}")


def _review(
    action: str,
    name: str,
    version: str,
    reason: str,
    stack: str,
    registry_uri: str | None,
    actor: str | None,
    record: str | None,
) -> None:
    _version_number(version)
    policy = _policy(stack_config(stack))
    session = _session(registry_uri, actor, record, need_record=True)
    assert session.journal is not None
    with _one_line_errors():
        trained_by = session.client.get_version(name, version).tags.get(TRAINED_BY_TAG)
        digest = version_digest(session.client, name, version)
        refused = approval.review_refusal(
            session.events(name), version, digest, session.who, policy, trained_by
        )
        if refused is not None:
            exit_with([f"{name}: {refused}"], EXIT_FINDING)
        session.journal.append(name, action, {approval.CANDIDATE: version}, reason=reason)
    typer.echo(f"{name}: version {version}: {action}d by {session.who}")


@app.command()
def approve(
    name: Annotated[str, typer.Argument(help="The registered model.")],
    version: Version,
    stack: Annotated[str, typer.Option(help="The stack whose approver role applies.")],
    reason: Annotated[str, typer.Option(help="What was checked.")] = "",
    registry_uri: RegistryUri = None,
    actor: Actor = None,
    record: Record = None,
) -> None:
    """Approve VERSION's promotion request (an approver other than who trained or requested it)."""
    _review(approval.APPROVE, name, version, reason, stack, registry_uri, actor, record)


@app.command()
def reject(
    name: Annotated[str, typer.Argument(help="The registered model.")],
    version: Version,
    stack: Annotated[str, typer.Option(help="The stack whose approver role applies.")],
    reason: Annotated[str, typer.Option(help="Why not (required).")] = "",
    registry_uri: RegistryUri = None,
    actor: Actor = None,
    record: Record = None,
) -> None:
    """Reject VERSION's promotion request, saying why."""
    if not reason.strip():
        exit_with(["--reason is required: a rejection says why"])
    _review(approval.REJECT, name, version, reason, stack, registry_uri, actor, record)


@app.command("set-challenger")
def set_challenger(
    name: Annotated[str, typer.Argument(help="The registered model.")],
    version: Version,
    registry_uri: RegistryUri = None,
    actor: Actor = None,
    record: Record = None,
) -> None:
    """Point @challenger at VERSION (what the next rollout rolls out); refused while a rollout runs."""
    _version_number(version)
    session = _session(registry_uri, actor, record, need_record=False)
    with _one_line_errors():
        session.client.get_version(name, version)
        operations.ensure_free(session.client, name, None)
        move = rollout.AliasMove(rollout.CHALLENGER, version)
        operations.move_aliases(session.client, name, [move], actor=str(session.who), action="set-challenger")
        if session.journal is not None:
            session.journal.append(name, Kind.SET_CHALLENGER, {rollout.CHALLENGER: version})
    typer.echo(f"{name}: {rollout.CHALLENGER} -> version {version}")


@app.command()
def history(
    name: Annotated[str, typer.Argument(help="The registered model.")],
    record: Record = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per event.")] = False,
) -> None:
    """Every recorded move, request, review and rollout step of NAME, oldest first, with who and why."""
    if record is None:
        exit_with([f"give the lifecycle record as --record DIR or ${RECORD_ENV}"])
    try:
        events = open_record(record).read(name)
    except RecordError as exc:
        exit_with([str(exc)])
    if not events:
        exit_with([f"{name}: nothing recorded in {record}"])
    for event in events:
        if as_json:
            typer.echo(event.model_dump_json())
            continue
        who = event.by if event.authenticated else f"{event.by} (unauthenticated)"
        versions = " ".join(f"{role}={v}" for role, v in event.versions.items())
        typer.echo(f"{event.at}  {event.action:<18} {who:<24} {versions}  {event.reason}".rstrip())


def _report(name: str, decision: rollout.Decision, refused_code: int = EXIT_FINDING) -> None:
    if decision.refused:
        exit_with([f"{name}: {decision.refused}"], refused_code)
    if decision.note:
        typer.echo(f"{name}: {decision.note}")
    for move in decision.moves:
        typer.echo(f"{name}: {move.alias} -> version {move.version}")
