"""``mlplatform images scan`` (docs/images.md, "The CVE gate"): Grype on images' SBOMs, offline.

No Grype here: a stand-in ``grype`` (written by the test, as test_mirror.py's stand-in crane) answers
in Grype's real shapes, anchore/grype at 4562c55cebba5fe50a0c5afc7cec50a3b2392a87:
- ``grype db status -o json``: cmd/grype/cli/commands/db_status_test.go (schemaVersion, from, built,
  path, valid, error), exit 1 with its error (commands/db_status.go); the errors for a missing and a
  too old database: grype/db/v6/installation/curator.go (Status, validateAge: 5 days by default);
- ``grype sbom:FILE -o json``: grype/presenter/json/testdata/snapshot/TestJsonImgsPresenter.golden and
  grype/presenter/models/document.go (matches: vulnerability {id, severity, fix {versions, state}},
  artifact {name, version, type}; ignoredMatches with appliedIgnoreRules, models/ignore.go);
- ``--fail-on`` exits 2 on a match at or above it (cmd/grype/cli/cli.go), ``--only-fixed`` turns a
  match without a fix into an ignored one (cmd/grype/cli/commands/root.go), ``-c`` names the config
  whose ``ignore:`` rules (``vulnerability:``) it applies.
Its database is a JSON file in GRYPE_DB_CACHE_DIR (package → advisories); it refuses to run when told it
may download one (GRYPE_DB_AUTO_UPDATE not false).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mlplatform.cli import app
from mlplatform.scan import GRYPE_VERSION

REPO = Path(__file__).resolve().parents[2]
BUILT = "2026-11-28T01:31:06Z"

_GRYPE = r"""#!{python}
import json, os, sys
import yaml

ORDER = ["negligible", "low", "medium", "high", "critical"]
args = sys.argv[1:]
if os.environ.get("GRYPE_DB_AUTO_UPDATE") != "false":
    sys.exit("stand-in grype: would download a database")
db = os.path.join(os.environ.get("GRYPE_DB_CACHE_DIR", "/nonexistent"), "vulnerability.json")
if args[:2] == ["db", "status"]:
    status = {{"schemaVersion": "6.0.0", "from": "file://import", "built": "{built}", "path": db,
              "valid": True}}
    if not os.path.isfile(db):
        status = {{"schemaVersion": "", "built": "0001-01-01T00:00:00Z", "path": db, "valid": False,
                  "error": 'database not found at "%s"' % db}}
    elif os.path.isfile(os.path.join(os.path.dirname(db), "stale")):
        status["valid"] = False
        status["error"] = "the vulnerability database was built 9d ago (max allowed age is 5d)"
    print(json.dumps(status, indent=1))
    sys.exit(0 if status["valid"] else 1)
if not os.path.isfile(db):
    sys.exit("failed to load vulnerability db: database does not exist")
advisories = json.load(open(db))
sbom = json.load(open(args[0].removeprefix("sbom:")))
fail_on = args[args.index("--fail-on") + 1]
ignored_ids = {{}}
if "-c" in args:
    config = yaml.safe_load(open(args[args.index("-c") + 1])) or {{}}
    ignored_ids = {{r["vulnerability"]: r.get("reason", "") for r in config.get("ignore") or []}}
matches, ignored = [], []
for package in sbom["packages"]:
    for advisory in advisories.get(package["name"], []):
        fixed = advisory["fixedIn"]
        fix = {{"versions": fixed, "state": "fixed" if fixed else "not-fixed"}}
        match = {{
            "vulnerability": {{"id": advisory["id"], "dataSource": "", "severity": advisory["severity"],
                              "urls": [], "fix": fix, "advisories": []}},
            "relatedVulnerabilities": [], "matchDetails": [],
            "artifact": {{"id": "a246fd2054833c93", "name": package["name"],
                          "version": package["versionInfo"], "type": "deb", "locations": [],
                          "language": "", "licenses": [], "cpes": [], "purl": "", "upstreams": []}},
        }}
        if advisory["id"] in ignored_ids:
            rule = {{"vulnerability": advisory["id"], "reason": ignored_ids[advisory["id"]], "namespace": ""}}
            ignored.append({{**match, "appliedIgnoreRules": [rule]}})
        elif "--only-fixed" in args and not fixed:
            ignored.append({{**match, "appliedIgnoreRules": [{{"namespace": "", "fix-state": "not-fixed"}}]}})
        else:
            matches.append(match)
document = {{"matches": matches, "source": {{"type": "sbom", "target": {{}}}}, "distro": {{}},
            "descriptor": {{"name": "grype", "version": "{version}", "timestamp": ""}}}}
if ignored:
    document["ignoredMatches"] = ignored
print(json.dumps(document, indent=1))
for sarif in [a.removeprefix("sarif=") for a in args if a.startswith("sarif=")]:
    with open(sarif, "w") as out:
        json.dump({{"version": "2.1.0", "runs": [{{"tool": {{"driver": {{"name": "Grype"}}}}}}]}}, out)
above = [m for m in matches if ORDER.index(m["vulnerability"]["severity"].lower()) >= ORDER.index(fail_on)]
sys.exit(2 if above else 0)
"""

ADVISORIES = {
    "openssl": [
        {"id": "CVE-2026-0001", "severity": "High", "fixedIn": ["3.0.15-1"]},
        {"id": "CVE-2026-0002", "severity": "Critical", "fixedIn": []},  # no fix: --only-fixed drops it
    ],
    "zlib": [{"id": "CVE-2026-0003", "severity": "Medium", "fixedIn": ["1.3.1"]}],
}


@dataclass(frozen=True)
class Grype:
    binary: Path
    db_dir: Path
    work: Path

    def sbom(self, name: str, packages: dict[str, str]) -> Path:
        return write_sbom(self.work / f"{name}.spdx.json", packages)


def write_sbom(path: Path, packages: dict[str, str]) -> Path:
    """An SPDX JSON SBOM (SPDX 2.3: spdxVersion, packages with name and versionInfo), as syft writes."""
    packaged = [{"name": n, "versionInfo": v} for n, v in packages.items()]
    spdx = {"spdxVersion": "SPDX-2.3", "SPDXID": "SPDXRef-DOCUMENT", "name": path.name, "packages": packaged}
    path.write_text(json.dumps(spdx))
    return path


def stand_in_grype(directory: Path) -> tuple[Path, Path]:
    """The stand-in ``grype`` and its database folder (for GRYPE_DB_CACHE_DIR), written in ``directory``."""
    binary = directory / "bin" / "grype"
    binary.parent.mkdir(parents=True)
    binary.write_text(_GRYPE.format(python=sys.executable, built=BUILT, version=GRYPE_VERSION.lstrip("v")))
    binary.chmod(0o755)
    db_dir = directory / "db"
    db_dir.mkdir()
    (db_dir / "vulnerability.json").write_text(json.dumps(ADVISORIES))
    return binary, db_dir


@pytest.fixture
def grype(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Grype]:
    binary, db_dir = stand_in_grype(tmp_path)
    monkeypatch.setenv("PATH", f"{binary.parent}:/usr/bin:/bin")
    monkeypatch.setenv("GRYPE_DB_CACHE_DIR", str(db_dir))
    monkeypatch.chdir(tmp_path)  # no .grype.yaml here unless a test writes one
    yield Grype(binary, db_dir, tmp_path)


def _scan(*args: str) -> Any:
    return CliRunner().invoke(app, ["images", "scan", *args])


def test_a_clean_sbom_passes_and_the_summary_names_the_database(grype: Grype) -> None:
    sbom = grype.sbom("inference", {"zlib": "1.3", "numpy": "2.1.0"})
    result = _scan(f"inference={sbom}", "--json", "scan.json")
    assert result.exit_code == 0, result.output
    assert "PASS inference: 1 medium" in result.output
    summary = json.loads((grype.work / "scan.json").read_text())
    assert summary["database"]["built"] == BUILT and summary["passed"] is True
    [image] = summary["images"]
    assert image["counts"]["medium"] == 1 and image["findings"] == []
    assert image["grypeVersion"] == GRYPE_VERSION.lstrip("v")


def test_a_high_cve_with_a_fix_fails_the_gate_and_is_named(grype: Grype) -> None:
    clean = grype.sbom("registry", {"zlib": "1.3"})
    vulnerable = grype.sbom("trainer-cpu", {"openssl": "3.0.2-0ubuntu1"})
    result = _scan(str(clean), str(vulnerable), "--json", "scan.json", "--sarif", "sarif")
    assert result.exit_code == 1, result.output
    # Grype writes each image's SARIF (for code scanning) beside its JSON.
    assert sorted(p.name for p in (grype.work / "sarif").iterdir()) == ["registry.sarif", "trainer-cpu.sarif"]
    assert "PASS registry.spdx" not in result.output  # named by the file without .spdx.json
    assert "PASS registry:" in result.output
    assert "FAIL trainer-cpu: 1 high; CVE-2026-0001 openssl 3.0.2-0ubuntu1 fixed in 3.0.15-1" in result.output
    summary = json.loads((grype.work / "scan.json").read_text())
    assert summary["passed"] is False
    failed = summary["images"][1]
    assert failed["findings"] == [
        {
            "id": "CVE-2026-0001",
            "severity": "high",
            "package": "openssl",
            "version": "3.0.2-0ubuntu1",
            "type": "deb",
            "fixedIn": ["3.0.15-1"],
        }
    ]
    # The Critical without a fix is not judged (--only-fixed, as CI); --all judges it.
    assert failed["counts"]["critical"] == 0
    everything = _scan(str(vulnerable), "--all")
    assert everything.exit_code == 1 and "1 critical, 1 high" in everything.output


def test_a_cve_the_ignore_file_accepts_passes_and_is_recorded_with_its_reason(grype: Grype) -> None:
    sbom = grype.sbom("trainer-efa", {"openssl": "3.0.2-0ubuntu1"})
    config = {"ignore": [{"vulnerability": "CVE-2026-0001", "reason": "not reachable: no TLS server"}]}
    (grype.work / ".grype.yaml").write_text(yaml.safe_dump(config))
    result = _scan(str(sbom), "--json", "scan.json")
    assert result.exit_code == 0, result.output
    summary = json.loads((grype.work / "scan.json").read_text())
    assert summary["config"]["path"] == ".grype.yaml"
    [accepted] = summary["images"][0]["ignoredByConfig"]
    assert accepted["id"] == "CVE-2026-0001" and accepted["reason"] == "not reachable: no TLS server"


def test_a_lower_threshold_fails_on_a_medium(grype: Grype) -> None:
    sbom = grype.sbom("inference", {"zlib": "1.3"})
    assert _scan(str(sbom)).exit_code == 0
    result = _scan(str(sbom), "--fail-on", "medium")
    assert result.exit_code == 1 and "CVE-2026-0003 zlib 1.3 fixed in 1.3.1" in result.output


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return str(lines[0])


def test_no_grype_on_path_is_one_line_saying_how_to_install_it(
    grype: Grype, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    line = _one_error_line(_scan(str(grype.sbom("x", {}))))
    assert "grype: not found on PATH" in line and GRYPE_VERSION in line and "--grype" in line
    named = _one_error_line(_scan(str(grype.sbom("x", {})), "--grype", "/nonexistent/grype"))
    assert "--grype /nonexistent/grype: cannot run it" in named


def test_no_database_is_one_line_with_grypes_reason_and_nothing_written(
    grype: Grype, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRYPE_DB_CACHE_DIR", str(grype.work / "empty"))
    line = _one_error_line(_scan(str(grype.sbom("x", {"zlib": "1.3"})), "--json", "scan.json"))
    missing = grype.work / "empty" / "vulnerability.json"
    assert f'grype db status: no valid vulnerability database (database not found at "{missing}")' in line
    assert "GRYPE_DB_CACHE_DIR" in line and not (grype.work / "scan.json").exists()


def test_a_stale_database_is_one_line_with_its_age(grype: Grype) -> None:
    (grype.db_dir / "stale").touch()
    line = _one_error_line(_scan(str(grype.sbom("x", {"zlib": "1.3"}))))
    assert "(the vulnerability database was built 9d ago (max allowed age is 5d))" in line


def test_bad_sboms_and_flags_are_one_line_each(grype: Grype) -> None:
    (grype.work / "notes.json").write_text("not json")
    (grype.work / "other.json").write_text('{"hello": 1}')
    result = _scan("notes.json", "other.json", "missing.json")
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "error: SBOM notes.json: not JSON; give an SPDX or CycloneDX JSON SBOM",
        "error: SBOM other.json: neither SPDX (spdxVersion) nor CycloneDX (bomFormat) JSON",
        "error: SBOM missing.json: cannot read it (No such file or directory)",
    ]
    sbom = str(grype.sbom("x", {}))
    twice = _one_error_line(_scan(sbom, f"x={sbom}"))
    assert twice == "error: image x: named by more than one SBOM; name each as NAME=PATH"
    assert "--fail-on severe: not one of" in _one_error_line(_scan(sbom, "--fail-on", "severe"))
    assert "--config none.yaml: no such file" in _one_error_line(_scan(sbom, "--config", "none.yaml"))


def test_ci_installs_the_grype_version_the_command_names() -> None:
    """One pinned version: the install hint of `images scan` is the version CI runs."""
    for path in (REPO / ".github/workflows/deploy.yml", REPO / "ci/gitlab-ci.yml"):
        assert GRYPE_VERSION in path.read_text(), path
