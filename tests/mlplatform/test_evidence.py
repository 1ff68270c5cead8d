"""``mlplatform check --evidence DIR`` (issue 34, item 4), through the real command, pack and judges.

One run judges the shipped aws-enterprise-prod and azure-enterprise-prod plans (cloud layer) and each
with its control-plane trail removed (the CloudTrail trail; the Activity Log export). The directory's
files match the manifest's hashes; results include passes; the trail's controls (ISO/IEC 27001:2022 A.8.15
logging, A.5.28 collection of evidence) are met on each shipped plan and absent without its trail; the
HTML page shows every control with a status on every stack, as parsed and as a browser (headless
Chromium) renders it.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from judges import JUDGES
from mlplatform.analyzer import Violation
from mlplatform.check import DEFAULT_PACK
from mlplatform.cli import app
from mlplatform.evidence import (
    Catalogue,
    Result,
    Scope,
    audited,
    control_matrix,
    documented_exemptions,
    load_controls,
    pack_digest,
)
from mlplatform.plan import REPO_ROOT, Plan
from mlplatform.report import write_document
from tests.mlplatform.test_scan import BUILT, stand_in_grype, write_sbom
from tests.policies.test_audit import of_type, without

TRAIL_CONTROLS = ("ISO27001:2022 A.8.15", "ISO27001:2022 A.5.28")


# Per cloud, the planted removal of its control-plane trail: the CloudTrail trail, the subscription's
# Activity Log export.
TRAIL_REMOVED = {
    "aws-enterprise-prod": of_type("aws:cloudtrail/trail:Trail"),
    "azure-enterprise-prod": of_type("azure-native:monitor:DiagnosticSetting", "activity-log"),
}


@dataclass(frozen=True)
class Evidence:
    directory: Path
    pairs: dict[str, tuple[str, str]]  # stack → the labels (plan files judged) of it shipped, and trail-less
    plans: dict[str, Path]
    exit_code: int
    scans: Path

    @property
    def shipped(self) -> str:
        return self.pairs["aws-enterprise-prod"][0]

    @property
    def no_trail(self) -> str:
        return self.pairs["aws-enterprise-prod"][1]

    @property
    def labels(self) -> set[str]:
        return set(self.plans)


@pytest.fixture(scope="module")
def evidence(cloud_plan: Callable[[str], Plan], tmp_path_factory: pytest.TempPathFactory) -> Evidence:
    work = tmp_path_factory.mktemp("evidence")
    pairs: dict[str, tuple[str, str]] = {}
    plans: dict[str, Path] = {}
    for stack, trail in TRAIL_REMOVED.items():
        plan = cloud_plan(stack).to_dict()
        shipped, no_trail = work / f"{stack}.json", work / f"{stack}-no-trail.json"
        write_document(shipped, plan)
        write_document(no_trail, without(plan, trail))
        pairs[stack] = (str(shipped), str(no_trail))
        plans |= {str(shipped): shipped, str(no_trail): no_trail}
    # One image scan (docs/images.md, "The CVE gate"): a High with a fix, so its FAIL is what is recorded.
    grype, db_dir = stand_in_grype(work)
    sbom = write_sbom(work / "sbom.json", {"openssl": "3.0.2-0ubuntu1"})
    scans = work / "scans.json"
    scan = ["images", "scan", f"trainer-cpu={sbom}", "--grype", str(grype), "--json", str(scans)]
    scanned = CliRunner().invoke(app, scan, env={"GRYPE_DB_CACHE_DIR": str(db_dir)})
    assert scanned.exit_code == 1, scanned.output
    directory = work / "out"
    args = [arg for path in plans for arg in ("--plan", path)]
    args += ["--skip", "exit-codes", "--evidence", str(directory), "--scans", str(scans)]
    result = CliRunner().invoke(app, ["check", *args])
    assert "wrote" in result.output, result.output
    return Evidence(directory, pairs, plans, result.exit_code, scans)


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


def test_the_image_scans_are_kept_as_written_and_named_in_the_manifest(evidence: Evidence) -> None:
    """Issue 36 item 4: the evidence records what was scanned, when, against which database."""
    manifest = _json(evidence.directory / "manifest.json")
    summary = _json(evidence.scans)
    kept = evidence.directory / "image-scans" / "01-scans.json"
    assert kept.read_bytes() == evidence.scans.read_bytes()
    hashed = {f["path"]: f["sha256"] for f in manifest["files"]}
    assert hashed["image-scans/01-scans.json"] == hashlib.sha256(kept.read_bytes()).hexdigest()
    [image] = manifest["imageScans"]
    assert image["image"] == "trainer-cpu" and image["passed"] is False and image["counts"]["high"] == 1
    assert image["databaseBuilt"] == BUILT and image["scannedAt"] == summary["time"]
    assert image["sbomSha256"] == summary["images"][0]["sbomSha256"] and image["failOn"] == "high"


def test_scans_without_evidence_or_not_a_scan_are_refused_before_any_planning(tmp_path: Path) -> None:
    bare = CliRunner().invoke(app, ["check", "aws-smb-dev", "--scans", str(tmp_path / "s.json")])
    assert bare.exit_code == 2 and "--scans records image scans in the evidence" in bare.output
    other = tmp_path / "other.json"
    other.write_text('{"images": []}')
    args = ["check", "aws-smb-dev", "--evidence", str(tmp_path / "out"), "--scans", str(other)]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2, refused.output
    assert f"--scans {other}: not a summary `mlplatform images scan --json` wrote" in refused.output
    assert not (tmp_path / "out").exists()


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


@pytest.mark.parametrize("stack", sorted(TRAIL_REMOVED))
def test_a_removed_trail_turns_its_controls_from_met_to_absent(evidence: Evidence, stack: str) -> None:
    """On each cloud: the trail's controls are met on the shipped plan, absent once the trail is gone,
    and a control the trail does not prove (A.8.16 monitoring: detection) stays met."""
    assert evidence.exit_code == 1  # a removed trail is a mandatory violation
    shipped, no_trail = evidence.pairs[stack]
    with (evidence.directory / "control-matrix.csv").open(encoding="utf-8") as handle:
        rows = {row["control"]: row for row in csv.DictReader(handle)}
    for control in TRAIL_CONTROLS:
        assert (rows[control][shipped], rows[control][no_trail]) == ("met", "absent"), control
    assert rows["ISO27001:2022 A.8.16"][no_trail] == "met"


def test_the_exceptions_register_lists_advisories_and_waived_judges(evidence: Evidence) -> None:
    rows = _json(evidence.directory / "exceptions.json")
    with (evidence.directory / "exceptions.csv").open(encoding="utf-8") as handle:
        assert list(csv.DictReader(handle)) == rows
    assert {(r["stack"], r["policy"], r["kind"]) for r in rows} >= {
        (label, "exit-codes", "waived") for label in evidence.labels
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
        assert set(cells) == evidence.labels, control
        for status, links in cells.values():
            assert status in {"met", "partial", "absent", "na"}
            assert all((evidence.directory / link).is_file() for link in links)
    assert page.cells["ISO27001:2022 A.8.15"][evidence.no_trail][0] == "absent"
    assert any(
        "audit-trail/FAIL-" in link for link in page.cells["ISO27001:2022 A.8.15"][evidence.no_trail][1]
    )


CHROMIUM = shutil.which("chromium")
# Headless, and nothing that reaches the network or keeps state between runs.
_CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
_WINDOW = (1600, 1200)
# The page's cell colours (evidence._CSS): met green, absent red.
_MET_RGB, _ABSENT_RGB = (0xD9, 0xF2, 0xD9), (0xF8, 0xD0, 0xD0)


def _chromium(page: Path, profile: Path, *args: str) -> str:
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, *_CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)"
)
def test_the_html_page_opens_in_a_browser_and_shows_every_status(evidence: Evidence, tmp_path: Path) -> None:
    """What a person sees: Chromium renders the page at the window's size, with green met cells and red
    absent ones (the trail-less stacks), and its DOM holds every control's row with a status per stack."""
    page = evidence.directory / "control-matrix.html"
    dom = _Matrix()
    dom.feed(_chromium(page, tmp_path / "dom", "--dump-dom"))
    catalogue = load_controls(DEFAULT_PACK)
    assert list(dom.cells) == [c.id for c in catalogue.controls]
    for control, cells in dom.cells.items():
        assert set(cells) == evidence.labels, control
        assert all(status in {"met", "partial", "absent", "na"} for status, _ in cells.values()), control
    shot = tmp_path / "matrix.png"
    _chromium(page, tmp_path / "shot", f"--screenshot={shot}", f"--window-size={_WINDOW[0]},{_WINDOW[1]}")
    with Image.open(shot) as image:
        assert image.size == _WINDOW
        colours = {rgb for _, rgb in image.convert("RGB").getcolors(maxcolors=1 << 20) or []}
    assert _MET_RGB in colours and _ABSENT_RGB in colours
    assert len(colours) > 50  # text rendered (antialiased glyphs), not a blank or one-colour page


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
    aws = {"s": Scope(frozenset({"aws", "kubernetes"}))}
    assert control_matrix(catalogue, aws, results, {"q": kind})["c", "s"].status == status
    assert control_matrix(catalogue, aws, results[:1], {})["c", "s"].status == "met"
    assert control_matrix(catalogue, aws, [], {})["c", "s"].status == "absent"


def test_a_control_about_one_cloud_is_not_applicable_on_the_other() -> None:
    """CIS Amazon EKS 2.1.1 is about EKS clusters: on an Azure stack it is n/a, not met by AKS's logs."""
    catalogue = load_controls(DEFAULT_PACK)
    eks = next(c for c in catalogue.controls if c.id == "CIS EKS 2.1.1")
    stacks = {
        "aws": Scope(frozenset({"aws"}), frozenset({"aws:eks/cluster:Cluster"}), audited=True),
        "azure": Scope(frozenset({"azure-native"}), frozenset({AKS}), audited=True),
    }
    results = [Result(stack, "data-store-audit-logs", "pack", "x.json") for stack in stacks]
    matrix = control_matrix(Catalogue(controls=(eks,)), stacks, results, {})
    assert (matrix[eks.id, "aws"].status, matrix[eks.id, "azure"].status) == ("met", "n/a")


AKS = "azure-native:containerservice:ManagedCluster"
AUDIT_CONTROLS = (*TRAIL_CONTROLS, "ISO27001:2022 A.8.16")


def _all_pass(catalogue: Catalogue, stack: str) -> list[Result]:
    names = {p for c in catalogue.controls for p in c.policies}
    return [Result(stack, name, "pack", f"{name}.json") for name in sorted(names)]


def test_a_policy_that_did_not_apply_proves_nothing(cloud_plan: Callable[[str], Plan]) -> None:
    """Review A2: the audit policies return nothing on a stack they do not judge (SMB dev: no trail, no
    detector, untagged), which is no proof: the trail's and detection's controls read absent there, met on
    an audited stack; an AKS policy's pass proves nothing about an AWS stack's cryptography."""
    catalogue = load_controls(DEFAULT_PACK)
    dev, prod = cloud_plan("aws-smb-dev"), cloud_plan("aws-enterprise-prod")
    assert not audited(dev) and audited(prod)
    stacks = {
        label: Scope(frozenset(r.type.split(":", 1)[0] for r in plan.resources), plan_types, audited(plan))
        for label, plan in (("dev", dev), ("prod", prod))
        for plan_types in [frozenset(r.type for r in plan.resources)]
    }
    matrix = control_matrix(catalogue, stacks, _all_pass(catalogue, "dev") + _all_pass(catalogue, "prod"), {})
    for control in AUDIT_CONTROLS:
        assert (matrix[control, "dev"].status, matrix[control, "prod"].status) == ("absent", "met"), control
    cryptography = {r.policy for r in matrix["ISO27001:2022 A.8.24", "prod"].results}
    assert "s3-default-encryption-kms" in cryptography
    assert not cryptography & {"aks-secrets-kms", "azure-des-versioned-key"}


def test_a_customer_control_is_partial_when_every_policy_passes() -> None:
    """Review B8: PDPL Art. 20, 22-23 and CBUAE 6.1 are the customer's; a plan cannot prove a transfer's
    legal basis or where the system of record is kept, so passing policies make them partial, with why."""
    catalogue = load_controls(DEFAULT_PACK)
    customer = [c.id for c in catalogue.controls if c.responsibility == "customer" and c.policies]
    assert {"PDPL Art. 20", "PDPL Art. 22-23", "CBUAE Outsourcing Art. 6.1"} <= set(customer)
    scope = Scope(frozenset({"aws"}), frozenset({"aws:eks/cluster:Cluster", "aws:s3/bucket:Bucket"}), True)
    matrix = control_matrix(catalogue, {"s": scope}, _all_pass(catalogue, "s"), {})
    for control in customer:
        cell = matrix[control, "s"]
        assert cell.status == "partial" and "customer's" in cell.why, control


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
