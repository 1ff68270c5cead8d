"""LimitRanger's defaulting, offline (review wt-cluster2 B1; kubernetes.io "Limit Ranges": a default limit
below a container's request makes the pod invalid)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from judges.limits import admit, judge_limit_ranges, quantity

from .conftest import Judged

# The way a team writes a GPU Job: requests, and a limit on the GPUs only.
TEAM_CONTAINER = {
    "name": "trainer",
    "resources": {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": "8"}},
}


def _range(**item: Any) -> dict[str, Any]:
    return {"kind": "LimitRange", "spec": {"limits": [{"type": "Container", **item}]}}


OLD = _range(default={"cpu": "1", "memory": "1Gi"}, defaultRequest={"cpu": "250m", "memory": "256Mi"})


def test_quantities() -> None:
    assert quantity("1500m") == Decimal("1.5") and quantity("1Gi") == 2**30 and quantity("2k") == 2000


def test_a_default_limit_below_the_request_refuses_the_container() -> None:
    """The team LimitRange before the fix: 1 CPU / 1Gi became the limits of a 32 CPU / 256Gi request."""
    assert admit(TEAM_CONTAINER, [OLD]) == [
        "resources.requests[cpu] 32: must be less than or equal to cpu limit 1 (the LimitRange default; "
        "ValidateResourceRequirements)",
        "resources.requests[memory] 256Gi: must be less than or equal to memory limit 1Gi (the LimitRange "
        "default; ValidateResourceRequirements)",
    ]


def test_a_request_above_its_own_limit_is_refused_without_a_limit_range() -> None:
    """ValidateResourceRequirements (pkg/apis/core/validation): the request "must be less than or equal
    to" the limit the container states."""
    container = {"name": "c", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
    assert admit(container, []) == [
        "resources.requests[cpu] 2: must be less than or equal to cpu limit 1 (its own limit; "
        "ValidateResourceRequirements)"
    ]


@pytest.mark.parametrize(
    "container",
    [
        {"name": "c", "resources": {"limits": {"cpu": "4"}}},  # request defaults to the limit
        {"name": "c"},  # both from the defaults
        {"name": "c", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}},
    ],
)
def test_containers_the_old_range_admits(container: dict[str, Any]) -> None:
    assert admit(container, [OLD]) == []


def test_a_team_job_with_requests_only_is_admitted_in_every_team_namespace(
    judged: Callable[[str], Judged],
) -> None:
    objects = judged("all-features-aws").objects
    teams = [
        o for o in objects if o["kind"] == "LimitRange" and o["metadata"]["namespace"].startswith("team-")
    ]
    assert teams
    for limit_range in teams:
        assert admit(TEAM_CONTAINER, [limit_range]) == []
        assert "defaultRequest" in limit_range["spec"]["limits"][0]


def test_the_judge_probes_each_quota_at_full_size() -> None:
    quota = {
        "kind": "ResourceQuota",
        "metadata": {"name": "quota", "namespace": "team-a"},
        "spec": {"hard": {"requests.cpu": "384", "requests.memory": "7600Gi"}},
    }
    old = {**OLD, "metadata": {"name": "defaults", "namespace": "team-a"}}
    (finding,) = judge_limit_ranges([quota, old])[:1]
    assert finding.mandatory and "spec.hard" in finding.message and "requests[cpu] 384" in finding.message
