"""Plan all shipped stacks in one process, side by side with the cost of `import pulumi` alone.

Prints both wall times and their ratio, and how much of each provider SDK the plans imported: planning
must import per-service modules, never a provider's whole tree (REFERENCE.md: ~7-10 s and ~450 MB).
Target: all eight stacks in under 20 s on 2 cores.

Plans render every Helm release from the packaged charts (``MLPLATFORM_CHARTS``, default the
repository's ``charts/``); the same plans with an empty folder (releases left unrendered) give the cost
of rendering as a ratio.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHARTS = os.environ.get("MLPLATFORM_CHARTS", str(REPO / "charts"))

PLAN_ALL = """
import json, sys, time
start = time.perf_counter()
from mlplatform.plan import all_stack_targets, run_plan
per_stack = {}
for target in all_stack_targets():
    t0 = time.perf_counter()
    plan = run_plan(target)
    per_stack[target.stack] = (time.perf_counter() - t0, len(plan.resources))
total = time.perf_counter() - start
loaded = {pkg: sum(1 for m in sys.modules if m == pkg or m.startswith(pkg + "."))
          for pkg in ("pulumi_aws", "pulumi_azure_native", "pulumi_kubernetes")}
print(json.dumps({"total": total, "per_stack": per_stack, "loaded": loaded}))
"""


def _timed(code: str, charts: str = CHARTS) -> tuple[float, str]:
    env = {**os.environ, "MLPLATFORM_CHARTS": charts}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env=env
    )
    return time.perf_counter() - start, done.stdout


def _package_modules(package: str) -> int:
    """How many modules the whole provider package has (what walking its tree would import)."""
    root = (
        REPO / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    )
    return sum(1 for _ in (root / package).rglob("*.py"))


def main() -> None:
    import_wall, _ = _timed("import pulumi")
    with tempfile.TemporaryDirectory() as empty:
        unrendered_wall, _ = _timed(PLAN_ALL, empty)
    plan_wall, out = _timed(PLAN_ALL)
    report = json.loads(out.strip().splitlines()[-1])
    print(f"{'stack':28} {'plan s':>8} {'resources':>10}")
    for stack, (seconds, count) in report["per_stack"].items():
        print(f"{stack:28} {seconds:8.2f} {count:10d}")
    print(f"\nimport pulumi (fresh process):        {import_wall:6.2f} s")
    print(f"plan all {len(report['per_stack'])} stacks (fresh process):    {plan_wall:6.2f} s")
    print(f"ratio plan-all / import-pulumi:       {plan_wall / import_wall:6.1f}x")
    print(f"plan all, charts not rendered:        {unrendered_wall:6.2f} s")
    extra, ratio = plan_wall - unrendered_wall, plan_wall / unrendered_wall
    print(f"rendering charts ({CHARTS}): +{extra:.2f} s, ratio {ratio:.2f}x")
    print(f"target: all stacks under 20 s -> {'met' if plan_wall < 20 else 'NOT met'}")
    for package, count in report["loaded"].items():
        print(f"{package}: {count} modules imported of {_package_modules(package)}")


if __name__ == "__main__":
    main()
