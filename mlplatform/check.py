"""``mlplatform check``: plan stacks offline and judge them with the real policy pack, as the engine would.

The pack runs in its own virtualenv and answers over Pulumi's Analyzer protocol (``mlplatform.analyzer``),
so the verdict is the one ``pulumi preview --policy-pack policies`` gives, minus what only a real cloud
knows. Every behaviour judge of ``judges.JUDGES`` (docs/judges.md) judges the same plan's Kubernetes
objects and node pools; their findings are reported beside the pack's, at the same levels. ``--plan``
judges a plan JSON that ``mlplatform plan --json`` wrote, instead of planning; ``--skip`` leaves a judge
out. ``--previous FILE`` (the stack's last applied plan JSON) adds the day-2 judge: fields the API
server refuses to change on update. ``--evidence DIR`` writes what an auditor is handed
(mlplatform.evidence). Exit 0 when no mandatory policy is violated, 1 when one is, 2 on bad flags,
config or pack.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from components.config import ConfigError
from mlplatform.analyzer import PackInfo, PolicyPackSession, StackReport, Violation
from mlplatform.analyzer_config import PolicySettings, load_policy_config, reconcile
from mlplatform.errors import EXIT_FINDING, InputError, exit_with, warn
from mlplatform.evidence import (
    audited,
    documented_exemptions,
    evidence_problems,
    plan_digest,
    write_evidence,
)
from mlplatform.graph import HELM_RELEASE
from mlplatform.judging import judge_plan, skipped_judges, transport_exemptions
from mlplatform.mirror import mirror_list, plan_lock_signed, plan_node_os
from mlplatform.parallel import spread
from mlplatform.plan import REPO_ROOT, Plan, Target, all_stack_targets, resolve_target, run_plan
from mlplatform.plan_cmd import AllowUnrenderedOpt, ProgramOpt, StackFileOpt, StackOpt
from mlplatform.rendering import chart_label, unrendered_problems
from mlplatform.report import kubernetes_objects, output_problems, write_document
from mlplatform.sarif import to_sarif
from mlplatform.scan import read_scan

DEFAULT_PACK = REPO_ROOT / "policies"
_STYLES = {"mandatory": "bold red", "advisory": "yellow"}


def check(
    stacks: Annotated[
        list[str] | None, typer.Argument(help="Stack names, e.g. aws-enterprise-prod.", show_default=False)
    ] = None,
    all_stacks: Annotated[bool, typer.Option("--all", help="Every stack of the program.")] = False,
    stack_file: StackFileOpt = None,
    program: ProgramOpt = None,
    stack_opt: StackOpt = None,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the findings as JSON.", show_default=False)
    ] = None,
    sarif_file: Annotated[
        Path | None, typer.Option("--sarif", help="Write the findings as SARIF 2.1.0.", show_default=False)
    ] = None,
    policy_pack: Annotated[
        Path, typer.Option("--policy-pack", help="The policy pack directory (PulumiPolicy.yaml).")
    ] = DEFAULT_PACK,
    policy_config: Annotated[
        Path | None,
        typer.Option(
            "--policy-config",
            help="Policy config JSON, as for pulumi --policy-pack-config.",
            show_default=False,
        ),
    ] = None,
    allow_unrendered: AllowUnrenderedOpt = False,
    skip: Annotated[
        list[str] | None,
        typer.Option("--skip", help="A judge not to run (repeatable), by its name.", show_default=False),
    ] = None,
    plan_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--plan",
            help="A plan JSON written by `mlplatform plan --json` (repeatable): judged as planned elsewhere.",
            show_default=False,
        ),
    ] = None,
    previous_file: Annotated[
        Path | None,
        typer.Option(
            "--previous",
            help=(
                "The plan JSON the stack last applied (`mlplatform plan --json`): judge the day-2 update of"
                " its Kubernetes objects (the cloud layer's replacements: `pulumi preview --diff`)."
            ),
            show_default=False,
        ),
    ] = None,
    evidence_dir: Annotated[
        Path | None,
        typer.Option(
            "--evidence",
            help="Write an evidence directory: manifest, results with passes, exceptions, control matrix.",
            show_default=False,
        ),
    ] = None,
    scan_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--scans",
            help="With --evidence: a summary `mlplatform images scan --json` wrote, recorded in the"
            " evidence (repeatable).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Judge stacks with the policy pack and the judges; exit 1 on any mandatory violation."""
    if plan_files and (stacks or all_stacks or stack_file or program or stack_opt):
        exit_with(["--plan judges plan files; name no stacks, --all, --stack-file or --program with it"])
    skipped = skipped_judges(skip or [])
    # The evidence's digest of a plan file is over the document as the file holds it (an auditor hashes
    # that file), not over its re-serialisation, whose resource order is recomputed from the graph.
    plans = [(f"{path}", *read_plan_file(path)) for path in plan_files or []]
    targets = [] if plans else _targets(stacks or [], all_stacks, stack_file, program, stack_opt)
    if previous_file is not None and len(plans) + len(targets) != 1:
        exit_with(["--previous compares one stack's plans: judge one stack or one --plan with it"])
    previous = None if previous_file is None else read_plan(previous_file, "--previous")
    unwritable = output_problems({"--json": json_file, "--sarif": sarif_file}, {"--evidence": evidence_dir})
    if evidence_dir is not None and not unwritable:
        unwritable = evidence_problems(evidence_dir, policy_pack)  # found before any stack is planned
    if unwritable:
        exit_with(unwritable)
    if scan_files and evidence_dir is None:
        exit_with(["--scans records image scans in the evidence: give --evidence DIR with it"])
    try:
        scans = [(path, read_scan(path)) for path in scan_files or []]  # read before any stack is planned
        given = load_policy_config(policy_config)
        with PolicyPackSession(policy_pack) as session:  # the pack starts while the first stack plans
            reports, unplanned, unrendered = _plan_and_judge(
                session, given, targets, allow_unrendered, skipped, previous
            )
            if plans:
                settings = reconcile(session.info.schemas(), given, session.info.initial_config)
                reports = [
                    _judge(session, label, None, plan, settings, skipped, previous, digest=digest)
                    for label, plan, digest in plans
                ]
            pack = session.info
            if evidence_dir is not None and not unplanned and not unrendered:
                settings = reconcile(pack.schemas(), given, pack.initial_config)
                write_evidence(evidence_dir, pack, reports, settings, skipped, scans)
    except InputError as error:
        exit_with(error.problems)
    console = Console()
    problems = [line for lines in [*unplanned.values(), *unrendered.values()] for line in lines]
    if reports or not problems:
        # With no stack judged, a count of "0 violations in 0 stacks" would read like a pass.
        _print(pack, reports, console)
    if json_file is not None:
        write_document(json_file, _to_json(pack, reports, problems))
        console.print(f"wrote {json_file}")
    if sarif_file is not None:
        write_document(sarif_file, to_sarif(pack, reports, Path.cwd(), problems))
        console.print(f"wrote {sarif_file}")
    if evidence_dir is not None and not problems:
        console.print(f"wrote {evidence_dir}")
    if unplanned:
        console.print(f"not judged, bad config: {', '.join(unplanned)}")
    if unrendered:
        console.print(f"not judged, Helm releases not rendered: {', '.join(unrendered)}")
    if problems:
        exit_with(problems)
    if any(v.mandatory for report in reports for v in report.violations):
        raise typer.Exit(EXIT_FINDING)


def _plan_and_judge(
    session: PolicyPackSession,
    given: Any,
    targets: list[Target],
    allow_unrendered: bool,
    skipped: frozenset[str],
    previous: Plan | None,
) -> tuple[list[StackReport], dict[str, list[str]], dict[str, list[str]]]:
    """Each stack planned, then judged, saying so on stderr as it goes (a stack takes seconds), and each
    one that could not be with its problems: one stack's bad config must not keep the others from being
    judged. A stack with a Helm release that cannot be rendered is not judged either (the pack would see
    less than the platform), unless ``allow_unrendered``. Stacks are shared out over the CPUs
    (mlplatform.parallel): this process judges its share with ``session``, each other process with a
    pack of its own."""
    if given:
        # A config the user wrote is checked against the pack before any planning, not after the first
        # stack's; with none, the pack starts while the first stack plans.
        reconcile(session.info.schemas(), given, session.info.initial_config)
    numbered = [(number, len(targets), target) for number, target in enumerate(targets, 1)]
    outcomes = spread(
        numbered,
        partial(_judge_in_own_pack, session.pack_dir, given, allow_unrendered, skipped, previous),
        partial(_judge_targets, session, given, allow_unrendered, skipped, previous),
    )
    reports = [outcome for outcome in outcomes if isinstance(outcome, StackReport)]
    unplanned = {o.label: o.problems for o in outcomes if isinstance(o, _NotJudged) and not o.unrendered}
    unrendered = {o.label: o.problems for o in outcomes if isinstance(o, _NotJudged) and o.unrendered}
    return reports, unplanned, unrendered


@dataclass(frozen=True)
class _NotJudged:
    """A stack not judged: its config is bad, or (``unrendered``) a Helm release is not rendered."""

    label: str
    problems: list[str]
    unrendered: bool = False


def _judge_in_own_pack(
    pack_dir: Path,
    given: Any,
    allow_unrendered: bool,
    skipped: frozenset[str],
    previous: Plan | None,
    numbered: list[tuple[int, int, Target]],
) -> list[StackReport | _NotJudged]:
    with PolicyPackSession(pack_dir) as session:
        return _judge_targets(session, given, allow_unrendered, skipped, previous, numbered)


def _judge_targets(
    session: PolicyPackSession,
    given: Any,
    allow_unrendered: bool,
    skipped: frozenset[str],
    previous: Plan | None,
    numbered: list[tuple[int, int, Target]],
) -> list[StackReport | _NotJudged]:
    progress = Console(stderr=True, highlight=False)
    outcomes: list[StackReport | _NotJudged] = []
    settings: Mapping[str, PolicySettings] | None = None
    for number, count, target in numbered:
        step = f"[{number}/{count}] {target.label}"
        started = time.monotonic()
        try:
            plan = run_plan(target)
        except (InputError, ConfigError) as error:
            progress.print(f"{step}: not planned (bad config)", markup=False, soft_wrap=True)
            outcomes.append(_NotJudged(target.label, error.problems))
            continue
        problems = unrendered_problems(plan.resources)
        if problems and not allow_unrendered:
            progress.print(
                f"{step}: not judged (a Helm release is not rendered)", markup=False, soft_wrap=True
            )
            lines = [
                f"{target.label}: {line} (--allow-unrendered judges it without its objects)"
                for line in problems
            ]
            outcomes.append(_NotJudged(target.label, lines, unrendered=True))
            continue
        took = time.monotonic() - started
        progress.print(
            f"{step}: planned {len(plan.resources)} resources in {took:.1f} s", markup=False, soft_wrap=True
        )
        warn([f"{target.label}: {line}" for line in [*problems, *plan.warnings]])
        if settings is None:
            settings = reconcile(session.info.schemas(), given, session.info.initial_config)
        started = time.monotonic()
        stack_file = target.stack_file if target.stack_file.is_file() else None
        report = _judge(session, target.label, stack_file, plan, settings, skipped, previous)
        mandatory, advisory = _counts([report])
        took = time.monotonic() - started
        progress.print(
            f"{step}: judged in {took:.1f} s: {mandatory} mandatory, {advisory} advisory",
            markup=False,
            soft_wrap=True,
        )
        outcomes.append(report)
    return outcomes


def _targets(
    stacks: list[str], all_stacks: bool, stack_file: Path | None, program: Path | None, stack_opt: str | None
) -> list[Target]:
    """The stacks the flags name: ``STACK...``, ``--all``, ``--stack-file`` or ``--program DIR --stack``."""
    names = [*stacks, *([stack_opt] if stack_opt else [])]
    if all_stacks and (names or stack_file):
        exit_with(["--all judges every stack; name no stacks and no --stack-file with it"])
    if stack_file is not None and stacks:
        exit_with(["--stack-file names its stack; give no stack names with it (--stack renames it)"])
    try:
        if all_stacks:
            found = all_stack_targets(program)
            if not found:
                raise InputError([f"{program or REPO_ROOT}: no stack files (Pulumi.<stack>.yaml) found"])
            return found
        if stack_file is not None:
            return [resolve_target(stack_opt, stack_file, program)]
        if not names:
            raise InputError(
                ["name a stack, or pass --all, --stack-file PATH, or --program DIR --stack NAME"]
            )
        return [resolve_target(name, None, program) for name in names]
    except InputError as error:
        exit_with(error.problems)


def read_plan(path: Path, flag: str = "--plan") -> Plan:
    """A plan file as ``mlplatform plan --json`` writes it; exit 2 naming the flag and file when it is
    not one."""
    return read_plan_file(path, flag)[0]


def read_plan_file(path: Path, flag: str = "--plan") -> tuple[Plan, str]:
    """``read_plan``'s plan and the file's ``plan_digest``, from one read."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        return Plan.from_dict(document), plan_digest(document)
    except OSError as error:
        exit_with([f"{flag} {path}: cannot read ({error.strerror})"])
    except ValueError as error:
        exit_with([f"{flag} {path}: not JSON ({error})"])
    except (KeyError, TypeError, AttributeError) as error:
        exit_with([f"{flag} {path}: not a plan written by mlplatform plan --json (missing or wrong {error})"])


def _judge(
    session: PolicyPackSession,
    label: str,
    stack_file: Path | None,
    plan: Plan,
    settings: Mapping[str, PolicySettings],
    skipped: frozenset[str],
    previous: Plan | None = None,
    digest: str | None = None,
) -> StackReport:
    """The pack's verdict, then the behaviour judges' (mlplatform.judging) on the same plan; with
    ``previous``, the day-2 update from it. ``digest``: the plan file's (``plan_digest``), where the plan
    was read from one; else the digest of the plan as ``plan --json`` writes it."""
    violations = [*session.judge(plan.to_dict(), settings), *judge_plan(plan, skipped, previous)]
    objects = kubernetes_objects(plan)
    return StackReport(
        label=label,
        project=plan.project,
        stack=plan.stack,
        stack_file=stack_file,
        resources=len(plan.resources),
        violations=tuple(sorted(violations, key=_order)),
        charts=_charts(plan),
        exemptions=documented_exemptions(plan) + transport_exemptions(plan, skipped),
        mirrored=tuple(
            mirror_list(
                objects,
                str(plan.outputs["registry"]),
                plan_node_os(plan.outputs),
                signed=plan_lock_signed(plan.outputs),
            )
        )
        if "registry" in plan.outputs
        else (),
        providers=frozenset(r.type.split(":", 1)[0] for r in plan.resources),
        types=frozenset(r.type for r in plan.resources),
        audited=audited(plan),
        plan_digest=digest or plan_digest(plan.to_dict()),
    )


def _charts(plan: Plan) -> dict[str, str]:
    """The URN of every object a Helm release renders → its chart and version."""
    releases = {r.urn: chart_label(r) for r in plan.by_type(HELM_RELEASE)}
    return {r.urn: releases[r.parent] for r in plan.resources if r.parent in releases}


def _print(pack: PackInfo, reports: list[StackReport], console: Console) -> None:
    """Findings as a list, not a table: policy names and messages wrap between words at 80 columns.
    Advisories on a chart's objects (third-party templates we do not write) are one line per chart and
    policy; --json and --sarif keep each of them."""
    console.print(f"policy pack {pack.name} v{pack.version} ({len(pack.policies)} policies, {pack.path})")
    for report in reports:
        if not report.violations:
            console.print(f"[green]{report.label}[/]: {report.resources} resources, no violations")
            continue
        console.print(f"[bold]{report.label}[/]: {report.resources} resources")
        ours = tuple(v for v in report.violations if v.mandatory or v.urn not in report.charts)
        for group in _groups(ours):
            first = group[0]
            console.print(_heading(first.enforcement, first.policy))
            console.print(Padding(_unbroken(Text(_group_message(group))), (0, 0, 0, 4), expand=False))
            names = ", ".join(v.name for v in group)
            types = ", ".join(sorted({v.type for v in group}))
            console.print(
                Padding(_unbroken(Text(f"{names} ({types})", style="dim")), (0, 0, 0, 4), expand=False)
            )
        charted: dict[tuple[str, str, str], set[str]] = {}
        for violation in sorted(report.violations, key=_order):
            if violation not in ours:
                key = (violation.enforcement, violation.policy, report.charts[violation.urn])
                charted.setdefault(key, set()).add(violation.urn)
        for (enforcement, policy, chart), urns in charted.items():
            count = f"{len(urns)} object" + ("s" if len(urns) != 1 else "")
            console.print(_heading(enforcement, policy).append(f": {chart} ({count})"))
    mandatory, advisory = _counts(reports)
    stacks = f"{len(reports)} stack" + ("s" if len(reports) != 1 else "")
    console.print(f"{mandatory} mandatory and {advisory} advisory violations in {stacks}")
    if any(v.urn in report.charts and not v.mandatory for report in reports for v in report.violations):
        console.print("a chart's advisories are counted per policy; --json and --sarif list each")


def _heading(enforcement: str, policy: str) -> Text:
    return Text.assemble("  ", (enforcement, _STYLES.get(enforcement, "")), " ", (policy, "bold"))


def _unbroken(text: Text) -> Text:
    """Wrapped at spaces only; a word longer than the line (a long resource name) ends in an ellipsis."""
    text.overflow = "ellipsis"
    return text


# "<subject>: <finding>", where the subject is one token (a chart@version, a key): findings that differ
# only in their subject read as one, e.g. every Helm release's "not judged offline" advisory.
_SUBJECT = re.compile(r"(\S+): (.+)", re.DOTALL)


def _finding(violation: Violation) -> str:
    match = _SUBJECT.fullmatch(violation.message)
    return match.group(2) if match else violation.message


def _groups(violations: tuple[Violation, ...]) -> list[list[Violation]]:
    """Violations of one policy and level with the same finding, most severe first."""
    groups: dict[tuple[str, str, str], list[Violation]] = {}
    for violation in sorted(violations, key=_order):
        groups.setdefault((violation.enforcement, violation.policy, _finding(violation)), []).append(
            violation
        )
    return list(groups.values())


def _group_message(group: list[Violation]) -> str:
    if len({v.message for v in group}) == 1:
        return group[0].message
    subjects = [match.group(1) for v in group if (match := _SUBJECT.fullmatch(v.message))]
    return f"{', '.join(subjects)}: {_finding(group[0])}"


def _order(violation: Violation) -> tuple[bool, str, str, str]:
    """Mandatory first, then by policy and resource: the same findings in the same order, whatever order
    the plan listed its resources in (a plan JSON lists them in graph order)."""
    return not violation.mandatory, violation.policy, violation.urn, violation.message


def _counts(reports: list[StackReport]) -> tuple[int, int]:
    violations = [v for report in reports for v in report.violations]
    mandatory = sum(v.mandatory for v in violations)
    return mandatory, len(violations) - mandatory


def _to_json(pack: PackInfo, reports: list[StackReport], problems: list[str]) -> dict[str, Any]:
    mandatory, advisory = _counts(reports)
    return {
        "pack": {"name": pack.name, "version": pack.version, "path": str(pack.path)},
        "stacks": [
            {
                "label": report.label,
                "project": report.project,
                "stack": report.stack,
                "stackFile": str(report.stack_file) if report.stack_file else None,
                "resources": report.resources,
                "violations": [asdict(v) for v in report.violations],
            }
            for report in reports
        ],
        "summary": {"mandatory": mandatory, "advisory": advisory},
        "errors": problems,
    }
