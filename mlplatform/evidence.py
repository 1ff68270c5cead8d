"""``mlplatform check --evidence DIR``: what an auditor is handed, from one judgement of the stacks.

The directory holds one OCSF Detection Finding per policy and subject, passes included (``results/``),
an exceptions register (advisory findings, waived policies and judges), a control matrix through the
pack's controls catalogue (``policies/controls.yaml``) as CSV and a self-contained HTML page, and a
``manifest.json`` naming the commit, the pack's digest, each stack's plan digest, the time, who ran it,
and every other file with its sha256 (docs/compliance.md, "Producing and keeping evidence").

Pass semantics: the pack reports violations only, and its policies declare no resource scope over the
Analyzer protocol, so a policy (or a judge's policy) with no finding on a stack is one PASS for the
stack; each finding is one FAIL for its resource.
"""

from __future__ import annotations

import csv
import getpass
import hashlib
import html
import io
import json
import re
import socket
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from judges import JUDGES
from mlplatform.analyzer import PackInfo, StackReport, Violation
from mlplatform.analyzer_config import PolicySettings
from mlplatform.errors import InputError
from mlplatform.graph import Plan, as_applied

CONTROLS_FILE = "controls.yaml"
Status = Literal["met", "partial", "absent", "n/a"]
_OCSF_SEVERITY = {"informational": 1, "low": 2, "medium": 3, "high": 4, "critical": 5}
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
# The pack's exemption annotations (docs/policies.md): a written reason lets an object past a baseline rule.
_EXEMPTION = re.compile(r"policy\.ml-platform\.io/[a-z-]+-reason")


class Control(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str
    framework: str
    responsibility: Literal["project", "customer", "cloud-provider"]
    source: str = Field(min_length=1)
    # The providers (resource type packages: aws, azure-native) whose stacks the control is about; none:
    # every stack. On a stack with none of them the control is not applicable (n/a).
    providers: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    judges: tuple[str, ...] = ()
    # Policies of ``policies`` without which the control cannot be met: where one of them judges
    # nothing on a stack, the control is absent there (A.8.15 without a trail, however well the rest logs).
    required: tuple[str, ...] = ()


class Subjects(BaseModel):
    """What a policy judges: a pass proves something only on a stack whose plan has one of ``types``
    (and, with ``audited``, whose cluster is audited: tagged tier enterprise or environment prod)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    types: tuple[str, ...] = Field(min_length=1)
    audited: bool = False


class Unmapped(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str = Field(min_length=1)
    policies: tuple[str, ...] = ()
    judges: tuple[str, ...] = ()


class Catalogue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    controls: tuple[Control, ...]
    unmapped: tuple[Unmapped, ...] = ()
    # Policy → what it judges; a policy not listed judges every stack.
    subjects: dict[str, Subjects] = {}


@dataclass(frozen=True)
class Scope:
    """What one stack's plan holds, as far as the matrix asks."""

    providers: frozenset[str]
    types: frozenset[str] = frozenset()
    audited: bool = False


def load_controls(pack_dir: Path) -> Catalogue:
    """The pack's controls catalogue; bad input (exit 2) naming the file when it is not one."""
    path = pack_dir / CONTROLS_FILE
    try:
        return Catalogue.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except OSError as error:
        raise InputError([f"{path}: cannot read ({error.strerror})"]) from None
    except yaml.YAMLError as error:
        raise InputError([f"{path}: not YAML ({error})"]) from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InputError([f"{path}: {where}: {first['msg']}"]) from None


def evidence_problems(directory: Path, pack_dir: Path) -> list[str]:
    """Why ``--evidence DIR`` cannot be written: a folder that already holds files (one run per folder,
    so the manifest lists all it holds), or a controls catalogue that is not one."""
    if directory.is_dir() and any(directory.iterdir()):
        return [f"--evidence {directory}: not empty; name a new folder (each run's evidence is kept apart)"]
    try:
        load_controls(pack_dir)
    except InputError as error:
        return error.problems
    return []


def documented_exemptions(plan: Plan) -> tuple[tuple[str, str, str], ...]:
    """Each exemption annotation on a planned Kubernetes object: (URN, annotation, written reason)."""
    found = []
    for resource in plan.resources:
        if resource.type.startswith("kubernetes:"):
            metadata = as_applied(resource.inputs).get("metadata") or {}
            for key, reason in sorted((metadata.get("annotations") or {}).items()):
                if _EXEMPTION.fullmatch(key):
                    found.append((resource.urn, key, str(reason)))
    return tuple(found)


# The cluster types whose tags say whether a stack is audited.
AUDITED_CLUSTERS = frozenset({"aws:eks/cluster:Cluster", "azure-native:containerservice:ManagedCluster"})


def audited(plan: Plan) -> bool:
    """A cluster of the plan is in the audit policies' scope: tagged tier enterprise or environment prod
    (policies/mlplatform_policies/audit.py ``audited``, the ``audit`` config's default)."""
    for resource in plan.resources:
        if resource.type in AUDITED_CLUSTERS:
            tags = as_applied(resource.inputs).get("tags") or {}
            if tags.get("tier") == "enterprise" or tags.get("environment") == "prod":
                return True
    return False


@dataclass(frozen=True)
class Result:
    """One policy's verdict on one subject of one stack, and the file that records it."""

    stack: str
    policy: str
    origin: str  # "pack" or the judge's name
    path: str  # relative to the evidence directory
    violation: Violation | None = None  # None: a pass

    @property
    def passed(self) -> bool:
        return self.violation is None


def plan_digest(document: Mapping[str, Any]) -> str:
    """sha256 of a plan (the ``plan --json`` document) as canonical JSON: keys sorted, no spaces. The file
    ``plan --json`` writes keeps the engine's key order, which varies run to run (a resource's tags)."""
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def pack_digest(pack_dir: Path) -> tuple[str, int]:
    """sha256 over the pack's tracked files (relative path and content), and how many there are."""
    digest = hashlib.sha256()
    files = _pack_files(pack_dir)
    for path in files:
        digest.update(f"{path.relative_to(pack_dir).as_posix()}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest(), len(files)


def _pack_files(pack_dir: Path) -> list[Path]:
    listed = _git(pack_dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard", ".")
    if listed is not None:
        return sorted(pack_dir / name for name in listed.split("\0") if name and (pack_dir / name).is_file())
    skip = {".venv", "__pycache__", "node_modules", ".git"}
    return sorted(p for p in pack_dir.rglob("*") if p.is_file() and not skip & set(p.parts))


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True, check=False)
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else None


def write_evidence(
    directory: Path,
    pack: PackInfo,
    reports: list[StackReport],
    settings: Mapping[str, PolicySettings],
    skipped: frozenset[str],
    scans: Sequence[tuple[Path, Mapping[str, Any]]] = (),
) -> list[str]:
    """Write the evidence directory; the paths written, relative to it, manifest last. Each image scan
    (``mlplatform images scan --json``) is kept as it was written, under ``image-scans/``."""
    catalogue = load_controls(pack.path)
    now = datetime.now(UTC)
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[str, bytes] = {}
    judge_of = {policy: judge for judge in JUDGES if judge.name not in skipped for policy in judge.policies}
    active = [
        p
        for p in pack.policies
        if settings.get(p.name, PolicySettings(p.enforcement, {})).enforcement != "disabled"
    ]
    results: list[Result] = []
    for report in reports:
        stack_dir = f"results/{_safe(report.label)}"
        by_policy: dict[str, list[Violation]] = {}
        for violation in report.violations:
            by_policy.setdefault(violation.policy, []).append(violation)
        # What the stack runs from outside its registry, and where each image goes (mlplatform.mirror).
        written[f"{stack_dir}/mirrored-images.json"] = _json([image.as_dict() for image in report.mirrored])
        policies = [(p.name, "pack", p.severity, p.description) for p in active]
        policies += [(policy, judge.name, "", judge.summary) for policy, judge in judge_of.items()]
        for policy, origin, severity, description in policies:
            found = by_policy.get(policy, [])
            if not found:
                path = f"{stack_dir}/{_safe(policy)}/PASS.json"
                results.append(Result(report.label, policy, origin, path))
                written[path] = _json(_finding(report, policy, origin, severity, description, None, now))
            for number, violation in enumerate(found, 1):
                path = f"{stack_dir}/{_safe(policy)}/FAIL-{number:03d}-{_safe(violation.name)[:80]}.json"
                results.append(Result(report.label, policy, origin, path, violation))
                finding = _finding(report, policy, origin, violation.severity, description, violation, now)
                written[path] = _json(finding)
    waived = [
        (p.name, "pack", "enforcement disabled by --policy-config") for p in pack.policies if p not in active
    ]
    waived += [(j.name, j.name, "judge skipped by --skip") for j in JUDGES if j.name in skipped]
    exceptions = _exceptions(reports, results, waived)
    written["exceptions.json"] = _json(exceptions)
    written["exceptions.csv"] = _exceptions_csv(exceptions)
    stacks = {r.label: Scope(r.providers, r.types, r.audited) for r in reports}
    matrix = control_matrix(catalogue, stacks, results, {p.name: p.kind for p in pack.policies})
    written["control-matrix.csv"] = _matrix_csv(catalogue, reports, matrix)
    written["control-matrix.html"] = _matrix_html(catalogue, reports, matrix, pack, now).encode()
    scanned = []
    for number, (source, scan) in enumerate(scans, 1):
        path = f"image-scans/{number:02d}-{_safe(source.name)}"
        written[path] = source.read_bytes()  # byte for byte: its sha256 in the manifest is the file's
        scanned += [_scan_entry(path, scan, image) for image in scan["images"]]
    for path, content in written.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_bytes(content)
    manifest = {**_manifest(pack, reports, written, now), "imageScans": scanned}
    (directory / "manifest.json").write_bytes(_json(manifest))
    return [*written, "manifest.json"]


def _finding(
    report: StackReport,
    policy: str,
    origin: str,
    severity: str,
    description: str,
    violation: Violation | None,
    now: datetime,
) -> dict[str, Any]:
    """An OCSF 1.1 Detection Finding (class 2004) with the field names Prowler's JSON-OCSF output uses."""
    passed = violation is None
    severity = severity or "informational"
    resource = (
        {"uid": violation.urn, "name": violation.name, "type": violation.type}
        if violation is not None
        else {
            "uid": f"stack:{report.project}/{report.stack}",
            "name": report.stack,
            "type": "pulumi:pulumi:Stack",
        }
    )
    return {
        "message": violation.message
        if violation is not None
        else f"{policy}: no violation on {report.label}",
        "metadata": {
            "event_code": policy,
            "product": {"name": "mlplatform check", "vendor_name": "ml-platform", "version": "offline"},
            "version": "1.1.0",
        },
        "severity_id": _OCSF_SEVERITY.get(severity.lower(), 0),
        "severity": severity.capitalize(),
        "status": "New",
        "status_code": "PASS" if passed else "FAIL",
        "status_detail": violation.message if violation is not None else "no violation reported",
        "status_id": 1,
        "unmapped": {
            "stack": report.label,
            "origin": origin,
            "enforcement": violation.enforcement if violation is not None else None,
            "chart": report.charts.get(violation.urn) if violation is not None else None,
        },
        "activity_name": "Create",
        "activity_id": 1,
        "finding_info": {
            "created_time_dt": now.isoformat(),
            "desc": description,
            "title": policy,
            "types": [origin],
            "uid": f"{report.label}/{policy}/{resource['uid']}",
        },
        "resources": [{**resource, "group": {"name": report.project}}],
        "category_name": "Findings",
        "category_uid": 2,
        "class_name": "Detection Finding",
        "class_uid": 2004,
        "time_dt": now.isoformat(),
        "type_uid": 200401,
        "type_name": "Detection Finding: Create",
    }


def _exceptions(
    reports: list[StackReport], results: list[Result], waived: list[tuple[str, str, str]]
) -> list[dict[str, str]]:
    rows = [
        {
            "stack": result.stack,
            "policy": result.policy,
            "origin": result.origin,
            "kind": "advisory",
            "resource": result.violation.urn,
            "reason": result.violation.message,
            "result": result.path,
        }
        for result in results
        if result.violation is not None and not result.violation.mandatory
    ]
    for report in reports:
        rows += [
            {
                "stack": report.label,
                "policy": annotation,
                "origin": "plan",
                "kind": "documented",
                "resource": urn,
                "reason": reason,
                "result": "",
            }
            for urn, annotation, reason in report.exemptions
        ]
        rows += [
            {
                "stack": report.label,
                "policy": name,
                "origin": origin,
                "kind": "waived",
                "resource": "",
                "reason": why,
                "result": "",
            }
            for name, origin, why in waived
        ]
    return rows


def _exceptions_csv(rows: list[dict[str, str]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(
        out, ["stack", "policy", "origin", "kind", "resource", "reason", "result"], lineterminator="\n"
    )
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


@dataclass(frozen=True)
class Cell:
    status: Status
    why: str
    results: tuple[Result, ...]


def _applies(catalogue: Catalogue, policy: str, scope: Scope) -> bool:
    subjects = catalogue.subjects.get(policy)
    if subjects is None:
        return True
    return (scope.audited or not subjects.audited) and bool(scope.types & set(subjects.types))


def control_matrix(
    catalogue: Catalogue,
    stacks: Mapping[str, Scope],
    results: Iterable[Result],
    kinds: Mapping[str, str],
) -> dict[tuple[str, str], Cell]:
    """Each control's status on each stack (docs/compliance.md, "The control matrix"). A pass is proof
    only where its policy applies (``subjects``: the stack plans what it judges); a finding always is.
    met when every mapped policy and judge that applies passes, every ``required`` one among them;
    absent when none applies, a required one does not, or a mandatory stack-wide policy fails (it fails
    everywhere it applies); partial otherwise (some fail, or only advisories), and where the control is
    the customer's (the plan supports it; the legal basis or the record keeping it asks for is no plan's
    to prove); n/a on a stack of none of the control's providers."""
    listed = list(results)
    cells: dict[tuple[str, str], Cell] = {}
    for control in catalogue.controls:
        judged = {(j.name, p) for j in JUDGES if j.name in control.judges for p in j.policies}
        for stack, scope in stacks.items():
            if control.providers and not scope.providers & set(control.providers):
                cells[control.id, stack] = Cell("n/a", f"no {', '.join(control.providers)} resources", ())
                continue
            proof = tuple(
                r
                for r in listed
                if r.stack == stack
                and ((r.origin == "pack" and r.policy in control.policies) or (r.origin, r.policy) in judged)
                and (r.violation is not None or r.origin != "pack" or _applies(catalogue, r.policy, scope))
            )
            failed = [r for r in proof if r.violation is not None]
            unjudged = [p for p in control.required if not any(r.policy == p for r in proof)]
            if not proof:
                cells[control.id, stack] = Cell("absent", "nothing mapped applies", proof)
            elif unjudged:
                why = f"{', '.join(unjudged)} judges nothing here: not audited, or nothing to judge planned"
                cells[control.id, stack] = Cell("absent", why, proof)
            elif not failed and control.responsibility == "customer":
                why = (
                    "every mapped policy passes, but the control is the customer's: the plan supports it "
                    "and cannot prove the rest (the legal basis, the record kept)"
                )
                cells[control.id, stack] = Cell("partial", why, proof)
            elif not failed:
                cells[control.id, stack] = Cell("met", "every mapped policy that applies passes", proof)
            elif any(
                r.origin == "pack"
                and kinds.get(r.policy) == "stack"
                and r.violation is not None
                and r.violation.mandatory
                for r in failed
            ):
                names = sorted(
                    {r.policy for r in failed if r.violation is not None and r.violation.mandatory}
                )
                cells[control.id, stack] = Cell("absent", f"mandatory {', '.join(names)} fails", proof)
            else:
                names = sorted({r.policy for r in failed})
                cells[control.id, stack] = Cell("partial", f"findings from {', '.join(names)}", proof)
    return cells


def _matrix_csv(
    catalogue: Catalogue, reports: list[StackReport], matrix: Mapping[tuple[str, str], Cell]
) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    labels = [r.label for r in reports]
    writer.writerow(
        ["control", "title", "framework", "responsibility", "source", "policies", "judges", *labels]
    )
    for control in catalogue.controls:
        writer.writerow(
            [
                control.id,
                control.title,
                control.framework,
                control.responsibility,
                control.source,
                " ".join(control.policies),
                " ".join(control.judges),
                *(matrix[control.id, label].status for label in labels),
            ]
        )
    return out.getvalue().encode()


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}
th,td{border:1px solid #bbb;padding:.35em .5em;vertical-align:top;font-size:.9em}
th{background:#f0f0f0}.met{background:#d9f2d9}.partial{background:#fff1c2}.absent{background:#f8d0d0}.na{background:#eee}
.status{font-weight:bold;text-transform:uppercase}details{margin-top:.3em}small{color:#555}
"""


def _matrix_html(
    catalogue: Catalogue,
    reports: list[StackReport],
    matrix: Mapping[tuple[str, str], Cell],
    pack: PackInfo,
    now: datetime,
) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(r.label)}</th>" for r in reports)
    rows = []
    for control in catalogue.controls:
        cells = []
        for report in reports:
            cell = matrix[control.id, report.label]
            links = "".join(
                f'<li><a href="{esc(r.path)}">{esc(r.policy)} {"PASS" if r.passed else "FAIL"}</a></li>'
                for r in cell.results
            )
            proof = (
                f"<details><summary>{len(cell.results)} results</summary><ul>{links}</ul></details>"
                if links
                else ""
            )
            cells.append(
                f'<td class="{cell.status.replace("/", "")}" data-stack="{esc(report.label)}">'
                f'<span class="status">{cell.status}</span><br><small>{esc(cell.why)}</small>{proof}</td>'
            )
        mapped = ", ".join([*control.policies, *control.judges]) or "none"
        rows.append(
            f'<tr data-control="{esc(control.id)}"><th scope="row">{esc(control.id)}</th>'
            f"<td>{esc(control.title)}<br><small>{esc(control.framework)}; {esc(control.responsibility)}; "
            f"evidence: {esc(mapped)}</small>"
            f"<br><small>source: {esc(control.source)}</small></td>{''.join(cells)}</tr>"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>ml-platform control matrix</title>"
        f"<style>{_CSS}</style></head><body><h1>Control matrix</h1>"
        f"<p>Policy pack {esc(pack.name)} v{esc(pack.version)}, judged {esc(now.isoformat())}. "
        "met: every mapped policy and judge that applies to the stack (it plans what the policy judges) "
        "passes; partial: some fail, only advisory findings, or the control is the customer's (the plan "
        "supports it, cannot prove it); absent: a mandatory stack-wide policy fails, a policy the control "
        "requires judges nothing on the stack, or nothing mapped applies; n/a: the control is about "
        "another cloud. "
        "Hashes of every file: manifest.json.</p>"
        f"<table><thead><tr><th>control</th><th>requirement</th>{head}</tr></thead><tbody>{''.join(rows)}"
        "</tbody></table></body></html>\n"
    )


def _manifest(
    pack: PackInfo, reports: list[StackReport], written: Mapping[str, bytes], now: datetime
) -> dict[str, Any]:
    commit = _git(pack.path, "rev-parse", "HEAD")
    status = _git(pack.path, "status", "--porcelain")
    digest, count = pack_digest(pack.path)
    return {
        "tool": "mlplatform check --evidence",
        "time": now.isoformat(),
        "operator": f"{getpass.getuser()}@{socket.gethostname()}",
        "commit": commit.strip() if commit else None,
        "uncommittedChanges": bool(status.strip()) if status is not None else None,
        "pack": {"name": pack.name, "version": pack.version, "sha256": digest, "files": count},
        "stacks": [
            {
                "label": r.label,
                "project": r.project,
                "stack": r.stack,
                "resources": r.resources,
                "planSha256": r.plan_digest,
            }
            for r in reports
        ],
        "files": [
            {"path": path, "sha256": hashlib.sha256(content).hexdigest(), "bytes": len(content)}
            for path, content in sorted(written.items())
        ],
    }


def _scan_entry(path: str, scan: Mapping[str, Any], image: Mapping[str, Any]) -> dict[str, Any]:
    """One scanned image in the manifest: what (its SBOM's digest), when, against which database."""
    return {
        "image": image.get("image"),
        "sbomSha256": image.get("sbomSha256"),
        "passed": image.get("passed"),
        "counts": image.get("counts"),
        "scannedAt": scan.get("time"),
        "databaseBuilt": (scan.get("database") or {}).get("built"),
        "failOn": scan.get("failOn"),
        "onlyFixed": scan.get("onlyFixed"),
        "file": path,
    }


def _json(document: Any) -> bytes:
    return (json.dumps(document, indent=2) + "\n").encode()


def _safe(name: str) -> str:
    return _SAFE.sub("_", name).strip("_") or "_"
