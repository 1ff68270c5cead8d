"""The governed model lifecycle as planned (issue 40; review rev40b A3): ``drift-retrains-can-pass``
refuses a namespace whose drift monitor launches retrains into a rollout that can only stop them.

The monitor (a workload with ``MONITOR_POLICY``) retrains on the shifted data; the version it registers
is meant to disagree with the champion that drift made stale. The rollout (a workload with
``ROLLOUT_PLAN``, in the same namespace) judges that version on its plan: where the plan judges shadow
agreement (``gates.minShadowAgreement``) and has no ``labelledSet``, every useful retrain stops at shadow
(the review measured 0 % agreement), and only ``--force`` remains. With a labelled set the rollout judges
a retrain on it beside the champion instead (workloads/delivery/runner.py ``judged_plan``). The same
relation as the stack's config check (components/config.py ``retrains_can_pass``), judged here on what
the plan carries.
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
        # The plan's own defaults where the key is absent (workloads/delivery/plan.py Gates): agreement 0.95.
        agreement = gates.get("minShadowAgreement", 0.95) if isinstance(gates, Mapping) else 0.95
        if agreement is not None and plan.get("labelledSet") is None:
            yield (
                workload.urn,
                f"the drift monitor in {_namespace(workload)} launches retrains that disagree with the stale "
                f"champion, and this rollout ({PLAN_VARIABLE}) judges shadow agreement {agreement} with no "
                "labelledSet: it can only stop them (workloads.inference.rollout.labelledSet with "
                "gates.maxAccuracyDrop, docs/lifecycle.md)",
            )


_RULE: StackRule = _retrains_stopped

POLICIES = [
    stack_policy(
        "drift-retrains-can-pass",
        "A drift monitor's retrains meet a rollout that can pass them on their merits: no shadow agreement "
        "with the stale champion unless the plan has a labelled set that judges them beside it.",
        _RULE,
        severity=Severity.MEDIUM,
    ),
]
