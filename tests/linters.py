"""The third-party checkers the tests use as judges: kubernetes-validate (the API's OpenAPI schemas,
strict), checkov (Kubernetes security checks, in its own venv that `make setup` builds), hadolint
(Dockerfiles, from the dev extra) and promtool (Prometheus's own rule checker and rule-test evaluator,
from Debian's prometheus package: .ci/run unpacks the binary alone into .tools/prometheus)."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CHECKOV = REPO / ".tools" / "checkov" / "bin" / "checkov"
# The venv's own bin first: `make test` runs the venv's python without activating it.
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")

PROMTOOL = shutil.which("promtool") or str(REPO / ".tools" / "prometheus" / "usr" / "bin" / "promtool")

needs_promtool = pytest.mark.skipif(
    not Path(PROMTOOL).exists(),
    reason="promtool is not installed (Debian's prometheus package: .ci/run unpacks it, .tools/prometheus)",
)
needs_checkov = pytest.mark.skipif(
    not CHECKOV.exists(), reason=f"checkov is not installed at {CHECKOV} (make setup)"
)
needs_hadolint = pytest.mark.skipif(
    HADOLINT is None, reason="hadolint is not installed (the dev extra has it)"
)


# kubernetes-validate 1.x (utils.validate) opens and parses the version's 1.4 MB ``_definitions.json``
# and the kind's schema on every call, 11 ms an object: the suite validates thousands. Its reader is
# wrapped once per process with a cache (the parsed schemas are only read: jsonschema does not change
# them), so each file is parsed once; validation itself is the library's, unchanged.
kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)


def validate_strictly(obj: dict[str, Any], version: str) -> None:
    """kubernetes-validate's strict validation of ``obj`` for Kubernetes ``version`` (no unknown field);
    raises its ValidationError or SchemaNotFoundError."""
    kubernetes_validate.validate(obj, version, strict=True)


def write_objects(objects: Iterable[dict[str, Any]], directory: Path, prefix: str = "") -> None:
    """One YAML file per object, as checkov reads them."""
    for index, obj in enumerate(objects):
        (directory / f"{prefix}{index:02d}-{obj['kind'].lower()}.yaml").write_text(yaml.safe_dump(obj))


def checkov_kubernetes(directory: Path) -> dict[str, Any]:
    """checkov's results (passed, failed and skipped checks) for the manifests under ``directory``.

    ``--compact`` leaves each result's code block out: the same checks and results, but for every stack's
    objects a 10 MB report instead of 131 MB, which checkov spent half its time writing and the test
    reading."""
    command = [str(CHECKOV), "-d", str(directory), "--framework", "kubernetes", "-o", "json"]
    done = subprocess.run(
        [*command, "--skip-download", "--compact"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(done.stdout)
    results: dict[str, Any] = (report[0] if isinstance(report, list) else report)["results"]
    assert results["passed_checks"], "checkov ran no checks: the objects were not recognised"
    return results


# Run in checkov's venv: each resource check's kinds, and every kind a graph check filters on or connects.
_CHECKOV_KINDS = """
import json
from pathlib import Path

import checkov.kubernetes.checks.graph_checks as graph_checks
from checkov.kubernetes.checks.resource.registry import registry

assert not registry.wildcard_checks, "a check for every kind"
kinds = set(registry.checks)

def named(node):
    if isinstance(node, dict):
        if node.get("attribute") == "resource_type":
            kinds.update(node["value"])
        kinds.update(node.get("resource_types", []), node.get("connected_resource_types", []))
        for value in node.values():
            named(value)
    elif isinstance(node, list):
        for value in node:
            named(value)

for check in Path(graph_checks.__file__).parent.glob("*.json"):
    named(json.loads(check.read_text())["definition"])
print(json.dumps(sorted(kinds)))
"""


def checkov_kinds() -> frozenset[str]:
    """The Kubernetes kinds any of checkov's checks reads (resource checks by their kinds, graph checks by
    the kinds they filter on and connect). An object of another kind (a CustomResourceDefinition) gets no
    result: leaving it out leaves the report as it was, without the time checkov takes to parse it."""
    python = CHECKOV.with_name("python")
    done = subprocess.run(
        [str(python), "-c", _CHECKOV_KINDS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    kinds = frozenset(json.loads(done.stdout))
    assert {"Pod", "Deployment", "ClusterRole", "RoleBinding", "NetworkPolicy"} <= kinds, kinds
    return kinds


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


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` (``check rules FILE``, ``test rules FILE``), its output kept."""
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, check=False, timeout=60, cwd=cwd)
