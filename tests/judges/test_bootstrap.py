"""The bootstrap-Secret judge (cluster review B-N1): a Secret an awaited workload needs and the plan does
not make, in a namespace the same update creates, is mandatory (no step can make it in time); a workload
``pulumi up`` does not wait for needs a documented step (advisory); the registry, whose admin Secret the
stack makes now, passes, and its plan without that Secret is found."""

from __future__ import annotations

from typing import Any

from components.kubernetes.registry import registry_objects
from judges.bootstrap import POLICY, judge_bootstrap_secrets
from tests.components.kubernetes.test_registry import _all, _spec


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _workload(kind: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod = {
        "volumes": [
            {"name": "a", "secret": {"secretName": "made-by-hand"}},
            {"name": "b", "secret": {"secretName": "maybe", "optional": True}},
        ],
        "containers": [
            {
                "name": "c",
                "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "env-ref", "key": "k"}}}],
            }
        ],
    }
    metadata = {"name": "w", "namespace": "ns", "annotations": annotations or {}}
    return {"kind": kind, "metadata": metadata, "spec": {"template": {"spec": pod}}}


def test_an_awaited_workload_needs_its_secrets_made_by_the_plan() -> None:
    findings = judge_bootstrap_secrets([_namespace("ns"), _workload("Deployment")])
    assert [(f.policy, f.mandatory) for f in findings] == [(POLICY, True), (POLICY, True)]
    assert "ns/env-ref" in findings[0].message and "ns/made-by-hand" in findings[1].message
    made = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "made-by-hand", "namespace": "ns"}}
    assert len(judge_bootstrap_secrets([_namespace("ns"), made, _workload("Deployment")])) == 1


def test_a_workload_not_awaited_or_in_an_existing_namespace_needs_a_documented_step() -> None:
    skipped = _workload("Deployment", {"pulumi.com/skipAwait": "true"})
    cronjob = _workload("CronJob")
    cronjob["spec"] = {"jobTemplate": {"spec": cronjob["spec"]}}
    for objects in ([_namespace("ns"), skipped], [_workload("Job")], [_namespace("ns"), cronjob]):
        findings = judge_bootstrap_secrets(objects)
        assert findings and not any(f.mandatory for f in findings)


def test_the_registry_makes_its_admin_secret_and_its_absence_is_found() -> None:
    objects = [_namespace("ml-registry"), *_all(_spec())]
    admin = registry_objects(_spec()).admin
    assert admin is not None
    assert not judge_bootstrap_secrets([*objects, admin])
    (finding,) = judge_bootstrap_secrets(objects)
    assert finding.mandatory and "ml-registry/registry-admin" in finding.message


def test_an_operators_admin_secret_on_an_existing_stack_is_a_documented_step() -> None:
    """Review of issue 38, B3: a stack whose operator made ``registry-admin`` before the stack made it
    keeps it (``workloads.registry.adminSecret: operator``): no Secret in the plan. With the previous
    plan's objects (``check --previous``) ``ml-registry`` exists before the update, so the operator's
    step ran first: advisory. Without them (a first update) the namespace is new: mandatory."""
    spec = _spec(admin={}, admin_by_operator=True)
    assert registry_objects(spec).admin is None
    objects = [_namespace("ml-registry"), *_all(spec)]
    assert any(
        v.get("secret", {}).get("secretName") == "registry-admin"
        for o in objects
        if o["kind"] == "Deployment"
        for v in o["spec"]["template"]["spec"]["volumes"]
    ), "the servers still mount the operator's Secret"
    (first,) = judge_bootstrap_secrets(objects)
    assert first.mandatory
    (existing,) = judge_bootstrap_secrets(objects, previous=objects)
    assert not existing.mandatory and "ml-registry/registry-admin" in existing.message


def test_a_secret_the_previous_plan_made_and_this_one_drops_is_a_deletion() -> None:
    """The planted defect: a stack that made ``registry-admin`` itself, switched to ``operator``: the
    update deletes the Secret the servers mount."""
    made = [_namespace("ml-registry"), *_all(_spec())]
    admin = registry_objects(_spec()).admin
    assert admin is not None
    dropped = [_namespace("ml-registry"), *_all(_spec(admin={}, admin_by_operator=True))]
    findings = judge_bootstrap_secrets(dropped, previous=[*made, admin])
    assert [f.mandatory for f in findings] == [True]
    assert "this one does not: pulumi up deletes it" in findings[0].message
    assert judge_bootstrap_secrets([*made, admin], previous=[*made, admin]) == []
