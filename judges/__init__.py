"""Judges that see behaviour: what the API server, the admission chain and the network would do with the
planned Kubernetes objects (DESIGN.md, "Judges that see behaviour").

Each judge is a pure function over the objects ``mlplatform plan --manifests`` exports (charts included),
returning ``Finding``s: ``mandatory`` where the cluster would refuse or break what the plan applies,
``advisory`` where it works but says more than the platform means (a flow no contract lists, a rule not
evaluated offline). Used by the tests and by ``mlplatform check``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from judges.cel import judge_cel
from judges.disruption import judge_disruption_budgets
from judges.findings import Finding, Subject
from judges.limits import judge_limit_ranges
from judges.pod_security import judge_pod_security
from judges.reachability import CONTROL_PLANE_NETWORK, judge_reachability
from judges.runtime import judge_rendezvous
from judges.storage import judge_shared_volume_owners
from judges.transport import judge_transport
from judges.webhooks import judge_hook_jobs


def judge_all(
    objects: Sequence[Mapping[str, Any]], cluster_network: str = CONTROL_PLANE_NETWORK
) -> list[Finding]:
    """What ``mlplatform check`` runs: CEL, reachability, Pod Security, LimitRange defaults, shared-volume
    owners, hook Jobs against fail-closed Job webhooks, the rendezvous timeouts, disruption budgets
    over pods without a scale (the exit-code judge, ``judges.runtime.judge_exit_codes``, runs torchrun,
    so the suite runs it), and each contract flow's transport (TLS or a named exception)."""
    return [
        *judge_cel(objects),
        *judge_reachability(objects, cluster_network),
        *judge_pod_security(objects),
        *judge_limit_ranges(objects),
        *judge_shared_volume_owners(objects),
        *judge_hook_jobs(objects),
        *judge_rendezvous(objects),
        *judge_disruption_budgets(objects),
        *judge_transport(objects, cluster_network),
    ]


__all__ = ["Finding", "Subject", "judge_all"]
