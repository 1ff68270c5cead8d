"""Every judge on every shipped stack and on the all-features variants: what the cluster would refuse or
break fails here (review cluster.md: A1 webhooks and APIServices behind NetworkPolicies, A2 team
ClusterQueues against Kueue's CEL, A3 team runs' pods cut off, A4 inert capabilities, B1 exit codes, C1
internet egress, B2 rendezvous timeouts)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from judges import JUDGES, Finding, judge_all
from judges.cel import cel_report
from judges.limits import judge_limit_ranges
from judges.pod_security import judge_pod_security
from judges.reachability import judge_reachability
from judges.runtime import judge_exit_codes, judge_rendezvous
from judges.storage import judge_shared_volume_owners
from judges.webhooks import judge_hook_jobs
from tests.stack_variants import ALL_FEATURES

from .conftest import JUDGED, Judged


def _mandatory(findings: Sequence[Finding]) -> list[str]:
    return [str(f) for f in findings if f.mandatory]


@pytest.mark.parametrize("stack", JUDGED)
def test_every_custom_resource_and_admitted_object_passes_its_cel_rules(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    report = cel_report(judged(stack).objects)
    assert report.evaluated > 0, "the plan installs CRDs with rules and objects of their kinds"
    assert _mandatory(report.findings) == []


@pytest.mark.parametrize("stack", JUDGED)
def test_every_flow_the_platform_needs_gets_through_the_network_policies(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    stack_objects = judged(stack)
    assert _mandatory(judge_reachability(stack_objects.objects, stack_objects.network)) == []


@pytest.mark.parametrize("stack", JUDGED)
def test_every_pod_passes_the_pod_security_level_of_its_namespace(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    assert _mandatory(judge_pod_security(judged(stack).objects)) == []


@pytest.mark.parametrize("stack", JUDGED)
def test_every_writer_of_shared_storage_may_write_its_root(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    """Review wt-cluster2 A1: on AWS the trainer (UID 10001) mounted an EFS/FSx root only root may
    write, and every run exited 2 in its preflight."""
    assert _mandatory(judge_shared_volume_owners(judged(stack).objects)) == []


@pytest.mark.parametrize("stack", JUDGED)
def test_no_helm_hook_job_waits_on_another_releases_fail_closed_job_webhook(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    """Review wt-cluster2 A2: Kueue's Job webhooks covered every namespace, so kube-prometheus-stack's
    pre-install Job raced Kueue's install and a Kueue outage blocked Jobs cluster-wide."""
    assert _mandatory(judge_hook_jobs(judged(stack).objects)) == []


@pytest.mark.parametrize("stack", JUDGED)
def test_a_requests_only_pod_of_any_size_the_quota_admits_survives_limit_range_defaulting(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    """Review wt-cluster2 B1: the LimitRange ``default`` (1 CPU, 1Gi) became the limit of a team
    container that requested more and stated no limit, and the pod was refused."""
    assert _mandatory(judge_limit_ranges(judged(stack).objects)) == []


@pytest.mark.parametrize("stack", JUDGED)
def test_every_rendezvous_waits_long_enough_for_its_retries(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    assert _mandatory(judge_rendezvous(judged(stack).objects)) == []


@pytest.mark.slow
@pytest.mark.parametrize("stack", list(ALL_FEATURES))
def test_a_fatal_exit_of_the_trainer_and_the_fabric_test_fails_the_job(
    stack: str, judged: Callable[[str], Judged]
) -> None:
    """Both fabrics' training Job and fabric gate, their commands run for real (torchrun, gloo)."""
    assert _mandatory(judge_exit_codes(judged(stack).objects)) == []


@pytest.mark.parametrize("stack", JUDGED)
def test_the_cluster_takes_and_runs_every_planned_object(stack: str, judged: Callable[[str], Judged]) -> None:
    """What check runs, every judge of the registry (the exit-code judge above, as it runs torchrun):
    no budget blocks a drain over pods unready by design (review cluster.md B-N3), every Secret an
    awaited workload needs is made by the plan (B-N1), one opener per SQLite file (B-N2), references
    resolve, the API server's validation passes, every pod fits a pool and every queued run its queues
    and quotas, and the admission policies take the pods the workloads create (A-N1, A-N2)."""
    stack_objects = judged(stack)
    findings = judge_all(
        stack_objects.objects,
        stack_objects.network,
        stack_objects.pools,
        skip=frozenset({"exit-codes"}),
        cluster=stack_objects.cluster,
    )
    assert _mandatory(findings) == []
    assert stack_objects.pools, "the plan's node pools are read"


def test_the_registry_names_each_judge_once_and_each_policy_once() -> None:
    """Audit evidence maps judges and policies to controls by these names: they must be unique."""
    names = [judge.name for judge in JUDGES]
    policies = [policy for judge in JUDGES for policy in judge.policies]
    assert len(names) == len(set(names)) and len(policies) == len(set(policies))
