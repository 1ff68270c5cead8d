"""The CEL judge: CRD ``x-kubernetes-validations`` after defaulting, transition rules skipped and counted,
ValidatingAdmissionPolicies on the objects their bindings select (kubernetes.io "Validation rules",
"Validating Admission Policy"); and Kueue's own CRD catching the team ClusterQueue of review A2."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from judges.cel import CRD_POLICY, VAP_POLICY, cel_report
from judges.findings import Finding

from .conftest import Judged

RULES = [
    {"rule": "self.min <= self.max", "message": "min must not exceed max"},
    {"rule": "self.mode == 'Fast' || self.min == 0"},
    {"rule": "self.min >= oldSelf.min", "message": "min may only grow"},
]
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "ranges.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Range", "plural": "ranges"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-validations": RULES,
                                "properties": {
                                    "min": {"type": "integer"},
                                    "max": {"type": "integer"},
                                    "mode": {"type": "string", "default": "Fast"},
                                    "items": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "x-kubernetes-validations": [
                                                {"rule": "has(self.name)", "message": "every item is named"}
                                            ],
                                        },
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def custom(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Range",
        "metadata": {"name": "r", "namespace": "a"},
        "spec": spec,
    }


def test_a_rule_that_fails_is_a_finding_with_its_message_and_path() -> None:
    report = cel_report([CRD, custom({"min": 3, "max": 1})])
    [finding] = report.findings
    assert finding.policy == CRD_POLICY and finding.mandatory
    assert "self.spec" in finding.message and "min must not exceed max" in finding.message


def test_rules_see_defaults_and_items_are_judged_each() -> None:
    """``mode`` is absent: its default ``Fast`` makes the second rule hold (without defaulting it errs)."""
    assert cel_report([CRD, custom({"min": 1, "max": 2, "items": [{"name": "x"}]})]).findings == []
    [finding] = cel_report([CRD, custom({"min": 1, "max": 2, "items": [{"name": "x"}, {}]})]).findings
    assert "self.spec.items[1]" in finding.message and "every item is named" in finding.message


def test_transition_rules_are_skipped_and_counted() -> None:
    report = cel_report([CRD, custom({"min": 1, "max": 2})])
    assert (report.evaluated, report.skipped_old_self) == (2, 1)


def test_an_evaluation_error_is_a_refusal() -> None:
    """``self.max`` of an object without ``max``: the API server reports "no such key" as invalid."""
    [finding] = cel_report([CRD, custom({"min": 1})]).findings
    assert "evaluation error" in finding.message


def _team_queue(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [platform] = [o for o in objects if o.get("kind") == "ClusterQueue"]
    team = copy.deepcopy(platform)
    team["metadata"]["name"] = "team-planted"
    team["spec"]["preemption"] = {
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 499},
    }
    return team


def test_kueues_crd_refuses_a_queue_that_never_reclaims_but_borrows_by_priority(
    judged: Callable[[str], Judged],
) -> None:
    """Review cluster.md A2: the ClusterQueue CRD of Kueue 0.19.2 (the chart the plan installs) has
    ``!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) && ...policy != 'Never')``."""
    objects = judged("aws-smb-dev").objects
    before = cel_report(objects).findings
    assert [f for f in before if f.mandatory] == []
    [finding] = [f for f in cel_report([*objects, _team_queue(objects)]).findings if f not in before]
    assert finding.subject.name == "team-planted"
    assert "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never" in finding.message


def _job(objects: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, Any]:
    """A Job running the stack's training image (by digest from its registry, as image admission asks)."""
    [image] = {
        c["image"]
        for o in objects
        if o["kind"] == "Job" and o["metadata"]["namespace"] == "ml-training"
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "planted", "namespace": "ml-training", "labels": labels},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
    }


def test_the_queue_admission_policy_refuses_a_job_without_a_queue_in_a_queued_namespace(
    judged: Callable[[str], Judged],
) -> None:
    objects = judged("aws-smb-dev").objects
    before = cel_report(objects).findings

    def new_findings(job: dict[str, Any]) -> list[Finding]:
        return [f for f in cel_report([*objects, job]).findings if f not in before]

    [finding] = new_findings(_job(objects, {}))
    assert (
        finding.policy == VAP_POLICY and finding.mandatory and "ml-platform-require-queue" in finding.message
    )
    assert new_findings(_job(objects, {"kueue.x-k8s.io/queue-name": "default"})) == []
    elsewhere = _job(objects, {})
    elsewhere["metadata"]["namespace"] = "kube-system"
    assert new_findings(elsewhere) == [], "the binding selects queued namespaces only"
