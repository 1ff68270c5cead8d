"""``mlplatform images scan``: the CVE gate on images' SBOMs, offline, with Grype.

Grype (anchore/grype) matches an SBOM's packages (``grype sbom:FILE``: SPDX or CycloneDX JSON, as syft or
buildx write it) against a vulnerability database on disk. This module never fetches one: it runs Grype
with ``GRYPE_DB_AUTO_UPDATE=false`` against the database the user gives it (``GRYPE_DB_CACHE_DIR``,
``grype db import``), reads its status first (``grype db status -o json``: schema, build time, source,
valid) and records it beside the results, so an auditor sees what was scanned, when, against which
database.

The gate is Grype's own: ``--fail-on SEVERITY`` (exit 2 when a match at or above it remains,
cmd/grype/cli/cli.go) with ``--only-fixed`` (matches without a fix become ignored matches,
cmd/grype/cli/commands/root.go), and the ignore rules of one config file (``.grype.yaml``, which CI's
Grype reads too). The summary takes its counts and findings from Grype's JSON document
(grype/presenter/models/document.go: ``matches``, ``ignoredMatches`` with ``appliedIgnoreRules``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlplatform.errors import InputError

# The version CI installs (.github/workflows/deploy.yml, ci/gitlab-ci.yml; tests/mlplatform/test_scan.py
# holds them to it).
GRYPE_VERSION = "v0.110.0"
INSTALL = (
    f"install Grype {GRYPE_VERSION} (https://github.com/anchore/grype#installation:"
    f" curl -sSfL https://get.anchore.io/grype | sh -s -- -b /usr/local/bin {GRYPE_VERSION})"
    " or name it with --grype"
)
# Grype's order (grype/vulnerability/severity.go); "unknown" ranks below them all.
SEVERITIES = ("negligible", "low", "medium", "high", "critical")
SCAN_TOOL = "mlplatform images scan"


@dataclass(frozen=True)
class Sbom:
    image: str
    path: Path


def parse_sbom_arg(argument: str) -> Sbom:
    """``NAME=PATH`` or ``PATH`` (the image named by the file's name without ``.json``, ``.spdx.json``)."""
    name, sep, path = argument.partition("=")
    if not sep:
        path, name = argument, Path(argument).name.removesuffix(".json").removesuffix(".spdx")
    if not name or not path:
        raise InputError([f"{argument}: give an SBOM as NAME=PATH or PATH"])
    return Sbom(name, Path(path))


def sbom_problems(sbom: Sbom) -> list[str]:
    """Why Grype could not read ``sbom``: unreadable, not JSON, neither SPDX nor CycloneDX."""
    try:
        document = json.loads(sbom.path.read_bytes())
    except OSError as error:
        return [f"SBOM {sbom.path}: cannot read it ({error.strerror})"]
    except ValueError:
        return [f"SBOM {sbom.path}: not JSON; give an SPDX or CycloneDX JSON SBOM"]
    if not isinstance(document, dict) or not (
        "spdxVersion" in document or document.get("bomFormat") == "CycloneDX"
    ):
        return [f"SBOM {sbom.path}: neither SPDX (spdxVersion) nor CycloneDX (bomFormat) JSON"]
    return []


def grype_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment Grype runs in: never a database download."""
    return {**environ, "GRYPE_DB_AUTO_UPDATE": "false", "GRYPE_CHECK_FOR_APP_UPDATE": "false"}


def _run(command: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(command), env=dict(env), capture_output=True, text=True, check=False)
    except OSError as error:
        raise InputError([f"--grype {command[0]}: cannot run it ({error.strerror}); {INSTALL}"]) from None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def database_status(grype: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``grype db status -o json``: the database Grype would use, refused when missing or invalid."""
    done = _run([grype, "db", "status", "-o", "json"], env)
    try:
        status = json.loads(done.stdout)
    except ValueError:
        status = None
    if done.returncode != 0 or not isinstance(status, dict) or status.get("valid") is not True:
        reason = (status or {}).get("error") if isinstance(status, dict) else None
        raise InputError(
            [
                f"grype db status: no valid vulnerability database ({reason or _last_line(done.stderr)});"
                " give one offline: GRYPE_DB_CACHE_DIR=DIR holding it, or `grype db import FILE`"
                ' (docs/images.md "The CVE gate")'
            ]
        )
    return {key: status.get(key) for key in ("schemaVersion", "built", "from", "path")}


@dataclass(frozen=True)
class Gate:
    fail_on: str
    only_fixed: bool
    config: Path | None
    sarif_dir: Path | None  # Grype also writes <image>.sarif here (for code scanning)


def scan_image(grype: str, sbom: Sbom, gate: Gate, env: Mapping[str, str]) -> dict[str, Any]:
    """One image's result: Grype's gate, counts per severity, findings at or above ``fail_on``."""
    command = [grype, f"sbom:{sbom.path}", "-o", "json", "--fail-on", gate.fail_on]
    command += ["--only-fixed"] * gate.only_fixed + (["-c", str(gate.config)] if gate.config else [])
    if gate.sarif_dir is not None:
        command += ["-o", f"sarif={gate.sarif_dir / sbom.image}.sarif"]
    done = _run(command, env)
    if done.returncode not in (0, 2):
        raise InputError([f"grype on {sbom.path}: {_last_line(done.stderr)}"])
    try:
        document = json.loads(done.stdout)
        matches, ignored = document["matches"], document.get("ignoredMatches") or []
    except (ValueError, KeyError, TypeError):
        raise InputError([f"grype on {sbom.path}: its output is not Grype's JSON document"]) from None
    counts = {severity: 0 for severity in (*SEVERITIES, "unknown")}
    for match in matches:
        counts[_severity(match)] += 1
    threshold = SEVERITIES.index(gate.fail_on)  # Grype's --fail-on: at or above it
    findings = [_finding(m) for m in matches if _rank(_severity(m)) >= threshold]
    accepted = [
        {**_finding(m), "reason": rule.get("reason", "")}
        for m in ignored
        for rule in m.get("appliedIgnoreRules") or []
        if rule.get("vulnerability")
    ]
    return {
        "image": sbom.image,
        "sbom": str(sbom.path),
        "sbomSha256": hashlib.sha256(sbom.path.read_bytes()).hexdigest(),
        "grypeVersion": (document.get("descriptor") or {}).get("version"),
        "passed": done.returncode == 0,
        "counts": counts,
        "findings": findings,
        "ignoredByConfig": accepted,
    }


def _severity(match: Mapping[str, Any]) -> str:
    severity = str((match.get("vulnerability") or {}).get("severity", "")).lower()
    return severity if severity in SEVERITIES else "unknown"


def _rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def _finding(match: Mapping[str, Any]) -> dict[str, Any]:
    vulnerability, artifact = match.get("vulnerability") or {}, match.get("artifact") or {}
    return {
        "id": vulnerability.get("id"),
        "severity": _severity(match),
        "package": artifact.get("name"),
        "version": artifact.get("version"),
        "type": artifact.get("type"),
        "fixedIn": list((vulnerability.get("fix") or {}).get("versions") or []),
    }


def scan(
    grype: str, sboms: Sequence[Sbom], gate: Gate, environ: Mapping[str, str] = os.environ
) -> dict[str, Any]:
    """The summary of one run over ``sboms``: the database, the gate's settings, each image's result."""
    names = [sbom.image for sbom in sboms]
    problems = [
        f"image {name}: named by more than one SBOM; name each as NAME=PATH"
        for name in sorted({n for n in names if names.count(n) > 1})
    ]
    problems += [line for sbom in sboms for line in sbom_problems(sbom)]
    if problems:
        raise InputError(problems)
    env = grype_env(environ)
    database = database_status(grype, env)
    if gate.sarif_dir is not None:
        gate.sarif_dir.mkdir(parents=True, exist_ok=True)
    images = [scan_image(grype, sbom, gate, env) for sbom in sboms]
    return {
        "tool": SCAN_TOOL,
        "time": datetime.now(UTC).isoformat(),
        "database": database,
        "failOn": gate.fail_on,
        "onlyFixed": gate.only_fixed,
        "config": None
        if gate.config is None
        else {"path": str(gate.config), "sha256": hashlib.sha256(gate.config.read_bytes()).hexdigest()},
        "passed": all(image["passed"] for image in images),
        "images": images,
    }


def summary_line(image: Mapping[str, Any]) -> str:
    counts = ", ".join(f"{n} {severity}" for severity, n in reversed(image["counts"].items()) if n)
    verdict = "PASS" if image["passed"] else "FAIL"
    found = "; ".join(
        f"{f['id']} {f['package']} {f['version']} fixed in {', '.join(f['fixedIn']) or 'no release'}"
        for f in image["findings"]
    )
    return f"{verdict} {image['image']}: {counts or 'no matches'}" + (f"; {found}" if found else "")


def read_scan(path: Path) -> dict[str, Any]:
    """A summary ``mlplatform images scan --json`` wrote, for the evidence; refused when it is not one."""
    try:
        document = json.loads(path.read_bytes())
    except OSError as error:
        raise InputError([f"--scans {path}: cannot read it ({error.strerror})"]) from None
    except ValueError:
        raise InputError([f"--scans {path}: not JSON"]) from None
    if not isinstance(document, dict) or document.get("tool") != SCAN_TOOL or "images" not in document:
        raise InputError([f"--scans {path}: not a summary `{SCAN_TOOL} --json` wrote"])
    return document
