"""Plan all shipped stacks in one process, side by side with the cost of `import pulumi` alone.

Prints both wall times and their ratio, and how much of each provider SDK the plans imported: planning
must import per-service modules, never a provider's whole tree (REFERENCE.md: ~7-10 s and ~450 MB).
Target: all eight stacks in under 20 s on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

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


def _timed(code: str) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, done.stdout


def _package_modules(package: str) -> int:
    """How many modules the whole provider package has (what walking its tree would import)."""
    root = (
        REPO / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    )
    return sum(1 for _ in (root / package).rglob("*.py"))


def main() -> None:
    import_wall, _ = _timed("import pulumi")
    plan_wall, out = _timed(PLAN_ALL)
    report = json.loads(out.strip().splitlines()[-1])
    print(f"{'stack':28} {'plan s':>8} {'resources':>10}")
    for stack, (seconds, count) in report["per_stack"].items():
        print(f"{stack:28} {seconds:8.2f} {count:10d}")
    print(f"\nimport pulumi (fresh process):        {import_wall:6.2f} s")
    print(f"plan all {len(report['per_stack'])} stacks (fresh process):    {plan_wall:6.2f} s")
    print(f"ratio plan-all / import-pulumi:       {plan_wall / import_wall:6.1f}x")
    print(f"target: all stacks under 20 s -> {'met' if plan_wall < 20 else 'NOT met'}")
    for package, count in report["loaded"].items():
        print(f"{package}: {count} modules imported of {_package_modules(package)}")


if __name__ == "__main__":
    main()
