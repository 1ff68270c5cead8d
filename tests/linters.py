"""The third-party checkers the tests use as judges: checkov (Kubernetes security checks, in its own
venv that `make setup` builds) and hadolint (Dockerfiles, from the dev extra)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CHECKOV = REPO / ".tools" / "checkov" / "bin" / "checkov"
# The venv's own bin first: `make test` runs the venv's python without activating it.
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")

needs_checkov = pytest.mark.skipif(
    not CHECKOV.exists(), reason=f"checkov is not installed at {CHECKOV} (make setup)"
)
needs_hadolint = pytest.mark.skipif(
    HADOLINT is None, reason="hadolint is not installed (the dev extra has it)"
)


def write_objects(objects: Iterable[dict[str, Any]], directory: Path, prefix: str = "") -> None:
    """One YAML file per object, as checkov reads them."""
    for index, obj in enumerate(objects):
        (directory / f"{prefix}{index:02d}-{obj['kind'].lower()}.yaml").write_text(yaml.safe_dump(obj))


def checkov_kubernetes(directory: Path) -> dict[str, Any]:
    """checkov's results (passed, failed and skipped checks) for the manifests under ``directory``."""
    done = subprocess.run(
        [str(CHECKOV), "-d", str(directory), "--framework", "kubernetes", "-o", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(done.stdout)
    results: dict[str, Any] = (report[0] if isinstance(report, list) else report)["results"]
    assert results["passed_checks"], "checkov ran no checks: the objects were not recognised"
    return results


def unexplained_skips(results: dict[str, Any]) -> list[str]:
    """Skipped checks whose skip annotation carries no written reason."""
    return [
        f"{c['check_id']} on {c['resource']}"
        for c in results["skipped_checks"]
        if len(((c.get("check_result") or {}).get("suppress_comment") or "").strip()) < 10
    ]


def hadolint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    assert HADOLINT is not None
    return subprocess.run([HADOLINT, str(dockerfile)], capture_output=True, text=True, check=False)
