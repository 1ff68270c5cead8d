"""``mlplatform check --evidence DIR`` (issue 34, item 4), through the real command, pack and judges.

One run judges the shipped aws-enterprise-prod plan (cloud layer) and the same plan with its CloudTrail
trail removed. The directory's files match the manifest's hashes; results include passes; the trail's
controls (ISO/IEC 27001:2022 A.8.15 logging, A.5.28 collection of evidence) are met on the shipped plan
and absent without the trail; the HTML page shows every control with a status on every stack.
"""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from judges import JUDGES
from mlplatform.analyzer import Violation
from mlplatform.check import DEFAULT_PACK
from mlplatform.cli import app
from mlplatform.evidence import (
    Catalogue,
    Result,
    control_matrix,
    documented_exemptions,
    load_controls,
    pack_digest,
)
from mlplatform.plan import REPO_ROOT, Plan
from mlplatform.report import write_document
from tests.policies.test_audit import of_type, without

TRAIL_CONTROLS = ("ISO27001:2022 A.8.15", "ISO27001:2022 A.5.28")


@dataclass(frozen=True)
class Evidence:
    directory: Path
    shipped: str  # the stack labels: the plan files judged
    no_trail: str
    plans: dict[str, Path]
    exit_code: int


@pytest.fixture(scope="module")
def evidence(cloud_plan: Callable[[str], Plan], tmp_path_factory: pytest.TempPathFactory) -> Evidence:
    work = tmp_path_factory.mktemp("evidence")
    plan = cloud_plan("aws-enterprise-prod").to_dict()
    shipped, no_trail = work / "aws-enterprise-prod.json", work / "aws-no-trail.json"
    write_document(shipped, plan)
    write_document(no_trail, without(plan, of_type("aws:cloudtrail/trail:Trail")))
    directory = work / "out"
    plans = ["--plan", str(shipped), "--plan", str(no_trail)]
    result = CliRunner().invoke(app, ["check", *plans, "--skip", "exit-codes", "--evidence", str(directory)])
    assert "wrote" in result.output, result.output
    return Evidence(
        directory,
        str(shipped),
        str(no_trail),
        {str(shipped): shipped, str(no_trail): no_trail},
        result.exit_code,
    )


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_manifest_hashes_every_file_and_names_commit_pack_and_plans(evidence: Evidence) -> None:
    manifest = _json(evidence.directory / "manifest.json")
    on_disk = {
        p.relative_to(evidence.directory).as_posix() for p in evidence.directory.rglob("*") if p.is_file()
    }
    listed = {entry["path"]: entry["sha256"] for entry in manifest["files"]}
    assert set(listed) == on_disk - {"manifest.json"}
    for path, digest in listed.items():
        assert hashlib.sha256((evidence.directory / path).read_bytes()).hexdigest() == digest, path
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert manifest["commit"] == head.stdout.strip()
    assert manifest["pack"]["sha256"] == pack_digest(DEFAULT_PACK)[0]
    assert "@" in manifest["operator"] and manifest["time"]
    # The plan digest is over the plan file's canonical JSON: an auditor re-plans the commit and compares.
    for stack in manifest["stacks"]:
        document = _json(evidence.plans[stack["label"]])
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
        assert stack["planSha256"] == hashlib.sha256(canonical).hexdigest()


def test_results_record_passes_and_each_finding_as_ocsf(evidence: Evidence) -> None:
    pass_file = _results(evidence, evidence.shipped, "audit-trail")
    assert [p.name for p in pass_file] == ["PASS.json"]
    passed = _json(pass_file[0])
    assert passed["status_code"] == "PASS" and passed["class_uid"] == 2004
    assert passed["finding_info"]["title"] == "audit-trail" and passed["resources"]
    failed = [_json(p) for p in _results(evidence, evidence.no_trail, "audit-trail")]
    assert failed and {f["status_code"] for f in failed} == {"FAIL"}
    assert all(f["unmapped"]["enforcement"] == "mandatory" and f["severity"] == "High" for f in failed)


def _results(evidence: Evidence, stack: str, policy: str) -> list[Path]:
    manifest = _json(evidence.directory / "manifest.json")
    label = next(s["label"] for s in manifest["stacks"] if s["label"] == stack)
    folder = next(
        evidence.directory / Path(e["path"]).parent
        for e in manifest["files"]
        if e["path"].endswith(f"/{policy}/PASS.json") or f"/{policy}/FAIL-" in e["path"]
        if _json(evidence.directory / e["path"])["unmapped"]["stack"] == label
    )
    return sorted(folder.iterdir())


def test_a_removed_trail_turns_its_controls_from_met_to_absent(evidence: Evidence) -> None:
    assert evidence.exit_code == 1  # the removed trail is a mandatory violation
    with (evidence.directory / "control-matrix.csv").open(encoding="utf-8") as handle:
        rows = {row["control"]: row for row in csv.DictReader(handle)}
    for control in TRAIL_CONTROLS:
        assert rows[control][evidence.shipped] == "met", control
        assert rows[control][evidence.no_trail] == "absent", control
    assert rows["ISO27001:2022 A.8.16"][evidence.no_trail] == "met"  # detection stays on


def test_the_exceptions_register_lists_advisories_and_waived_judges(evidence: Evidence) -> None:
    rows = _json(evidence.directory / "exceptions.json")
    with (evidence.directory / "exceptions.csv").open(encoding="utf-8") as handle:
        assert list(csv.DictReader(handle)) == rows
    assert {(r["stack"], r["policy"], r["kind"]) for r in rows} >= {
        (evidence.shipped, "exit-codes", "waived"),
        (evidence.no_trail, "exit-codes", "waived"),
    }
    for row in (r for r in rows if r["kind"] == "advisory"):
        finding = _json(evidence.directory / row["result"])
        assert finding["status_code"] == "FAIL" and finding["unmapped"]["enforcement"] == "advisory"


class _Matrix(HTMLParser):
    """Each row's control id → each cell's stack → its status and linked files."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, dict[str, tuple[str, list[str]]]] = {}
        self.external: list[str] = []
        self._control = ""
        self._stack = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag in {"link", "script", "img"}:
            self.external.append(tag)
        if tag == "tr" and found.get("data-control"):
            self._control = found["data-control"] or ""
            self.cells[self._control] = {}
        if tag == "td" and found.get("data-stack"):
            self._stack = found["data-stack"] or ""
            self.cells[self._control][self._stack] = (found.get("class") or "", [])
        if tag == "a" and self._stack:
            self.cells[self._control][self._stack][1].append(found.get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._stack = ""


def test_the_html_page_shows_every_control_with_a_status_per_stack(evidence: Evidence) -> None:
    page = _Matrix()
    page.feed((evidence.directory / "control-matrix.html").read_text(encoding="utf-8"))
    catalogue = load_controls(DEFAULT_PACK)
    assert list(page.cells) == [c.id for c in catalogue.controls]
    assert not page.external  # self-contained: no stylesheet, script or image to fetch
    for control, cells in page.cells.items():
        assert set(cells) == {evidence.shipped, evidence.no_trail}, control
        for status, links in cells.values():
            assert status in {"met", "partial", "absent", "na"}
            assert all((evidence.directory / link).is_file() for link in links)
    assert page.cells["ISO27001:2022 A.8.15"][evidence.no_trail][0] == "absent"
    assert any(
        "audit-trail/FAIL-" in link for link in page.cells["ISO27001:2022 A.8.15"][evidence.no_trail][1]
    )


def _violation(policy: str, enforcement: str) -> Violation:
    return Violation(policy, enforcement, "low", "urn:x", "t", "n", "m")


@pytest.mark.parametrize(
    ("kind", "enforcement", "status"),
    [
        ("resource", "advisory", "partial"),
        ("resource", "mandatory", "partial"),
        ("stack", "mandatory", "absent"),
    ],
)
def test_the_status_rule(kind: str, enforcement: str, status: str) -> None:
    """met when all pass; a mandatory stack-wide failure is absent; a resource policy failing on some of
    the stack's resources, or only advisories, is partial (docs/compliance.md, "The control matrix")."""
    catalogue = Catalogue.model_validate(
        {
            "controls": [
                {
                    "id": "c",
                    "title": "t",
                    "framework": "f",
                    "responsibility": "project",
                    "source": "s",
                    "policies": ["p", "q"],
                }
            ]
        }
    )
    results = [
        Result("s", "p", "pack", "p.json"),
        Result("s", "q", "pack", "q.json", _violation("q", enforcement)),
    ]
    aws = {"s": frozenset({"aws", "kubernetes"})}
    assert control_matrix(catalogue, aws, results, {"q": kind})["c", "s"].status == status
    assert control_matrix(catalogue, aws, results[:1], {})["c", "s"].status == "met"
    assert control_matrix(catalogue, aws, [], {})["c", "s"].status == "absent"


def test_a_control_about_one_cloud_is_not_applicable_on_the_other() -> None:
    """CIS Amazon EKS 2.1.1 is about EKS clusters: on an Azure stack it is n/a, not met by AKS's logs."""
    catalogue = load_controls(DEFAULT_PACK)
    eks = next(c for c in catalogue.controls if c.id == "CIS EKS 2.1.1")
    stacks = {"aws": frozenset({"aws"}), "azure": frozenset({"azure-native"})}
    results = [Result(stack, "data-store-audit-logs", "pack", "x.json") for stack in stacks]
    matrix = control_matrix(Catalogue(controls=(eks,)), stacks, results, {})
    assert (matrix[eks.id, "aws"].status, matrix[eks.id, "azure"].status) == ("met", "n/a")


def test_every_judge_is_mapped_or_listed_unmapped() -> None:
    catalogue = load_controls(DEFAULT_PACK)
    named = {j for c in catalogue.controls for j in c.judges} | {
        j for u in catalogue.unmapped for j in u.judges
    }
    assert named == {judge.name for judge in JUDGES}


def test_a_control_without_a_source_is_refused_before_any_planning(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    pack.mkdir()
    control = {"id": "c", "title": "t", "framework": "f", "responsibility": "project", "policies": ["p"]}
    (pack / "controls.yaml").write_text(json.dumps({"controls": [control]}), encoding="utf-8")
    result = CliRunner().invoke(
        app, ["check", "aws-smb-dev", "--policy-pack", str(pack), "--evidence", str(tmp_path / "out")]
    )
    assert result.exit_code == 2
    assert f"{pack / 'controls.yaml'}: controls.0.source: Field required" in result.output
    assert not (tmp_path / "out").exists()


def test_a_folder_with_files_in_it_is_refused(tmp_path: Path) -> None:
    """One run per folder: the manifest must list everything the folder holds."""
    (tmp_path / "manifest.json").write_text("{}", encoding="utf-8")
    result = CliRunner().invoke(app, ["check", "aws-smb-dev", "--evidence", str(tmp_path)])
    assert result.exit_code == 2
    assert f"--evidence {tmp_path}: not empty" in result.output


def test_the_register_takes_each_exemption_the_plan_documents(planned: Callable[[str], Plan]) -> None:
    """A privileged namespace passes the pack only with its written reason (docs/policies.md): that
    reason is an exception an auditor reads, as the compliance review asks (section 5)."""
    found = {
        (urn.rsplit("::", 1)[1], annotation): reason
        for urn, annotation, reason in documented_exemptions(planned("aws-enterprise-prod"))
    }
    reason = found["namespace-gpu-operator", "policy.ml-platform.io/privileged-reason"]
    assert reason.startswith("NVIDIA GPU operator")
