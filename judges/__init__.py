"""Judges that see behaviour: what the API server, the admission chain and the network would do with the
planned Kubernetes objects (DESIGN.md, "Judges that see behaviour").

Each judge is a pure function over the objects ``mlplatform plan --manifests`` exports (charts included),
returning ``Finding``s: ``mandatory`` where the cluster would refuse or break what the plan applies,
``advisory`` where it works but says more than the platform means (a flow no contract lists, a rule not
evaluated offline). Used by the tests and by ``mlplatform check``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from judges.cel import judge_cel
from judges.findings import Finding
from judges.pod_security import judge_pod_security
from judges.reachability import judge_reachability

Judge = Callable[[Sequence[Mapping[str, Any]]], list[Finding]]

# The judges `mlplatform check` runs (the run-time judge needs torch: it runs in the suite, judges.runtime).
JUDGES: dict[str, Judge] = {
    "cel": judge_cel,
    "reachability": judge_reachability,
    "pod-security": judge_pod_security,
}


def judge_all(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    return [finding for judge in JUDGES.values() for finding in judge(objects)]


__all__ = ["JUDGES", "Finding", "judge_all"]
