"""The governed model lifecycle as planned (issue 40; reviews rev40b A3, rev40c A3 and C1):
``drift-retrains-can-pass`` refuses a namespace whose drift monitor launches retrains into a rollout that
does not judge them beside the champion on labelled rows.

The monitor (a workload with ``MONITOR_POLICY``) retrains on the shifted data; the version it registers
is meant to disagree with the champion that drift made stale. The rollout (a workload with
``ROLLOUT_PLAN``, in the same namespace) judges it on its plan. Only a ``labelledSet`` with
``gates.maxAccuracyDrop`` measures the retrain beside the champion on the same rows, and then that
comparison replaces shadow agreement for every challenger (workloads/delivery/plan.py
``judges_beside_champion``). Without it, shadow agreement stops every useful retrain (the review measured
0 %), a ``minAccuracy`` floor passes a retrain worse than the champion, and with no gate at all a retrain
can only reach ``@champion`` through ``--force``. The same relation as the stack's config check
(components/config.py ``retrains_can_pass``), judged here on what the plan carries.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import Severity

from . import tokens
from .factory import Finding, StackRule, stack_policy
from .subject import Graph, Subject
from .values import elements

PLAN_VARIABLE = "ROLLOUT_PLAN"
MONITOR_VARIABLE = "MONITOR_POLICY"


def _variable(subject: Subject, name: str) -> Any:
    """The JSON value of the environment variable ``name`` of any container of ``subject``; None when it
    has none (or one that is not JSON: not a plan the rollout would follow either)."""
    spec = subject.get(tokens.POD_SPEC_PATHS[subject.type]) or {}
    for container in elements(spec, "containers"):
        for variable in elements(container, "env") if isinstance(container, Mapping) else ():
            if isinstance(variable, Mapping) and variable.get("name") == name:
                try:
                    return json.loads(str(variable.get("value")))
                except json.JSONDecodeError:
                    return None
    return None


def _namespace(subject: Subject) -> str:
    return str(subject.get("metadata.namespace") or "")


def _retrains_stopped(graph: Graph) -> Iterator[Finding]:
    workloads = graph.of(*tokens.WORKLOADS)
    monitored = {_namespace(w) for w in workloads if _variable(w, MONITOR_VARIABLE) is not None}
    for workload in workloads:
        plan = _variable(workload, PLAN_VARIABLE)
        if not isinstance(plan, Mapping) or _namespace(workload) not in monitored:
            continue
        gates = plan.get("gates")
        drop = gates.get("maxAccuracyDrop") if isinstance(gates, Mapping) else None
        if plan.get("labelledSet") is None or drop is None:
            yield (
                workload.urn,
                f"the drift monitor in {_namespace(workload)} launches retrains that this rollout "
                f"({PLAN_VARIABLE}) does not judge beside the champion on labelled rows: set "
                "workloads.inference.rollout.labelledSet with gates.maxAccuracyDrop (shadow agreement stops "
                "every useful retrain, a minAccuracy floor passes a worse one; docs/lifecycle.md)",
            )


_RULE: StackRule = _retrains_stopped

POLICIES = [
    stack_policy(
        "drift-retrains-can-pass",
        "A drift monitor's retrains meet a rollout that judges them beside the champion on labelled rows "
        "(labelledSet with gates.maxAccuracyDrop), not on shadow agreement with the stale champion nor on a "
        "floor alone.",
        _RULE,
        severity=Severity.MEDIUM,
    ),
]
