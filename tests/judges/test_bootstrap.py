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
