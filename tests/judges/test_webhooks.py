"""Helm hook Jobs against other releases' fail-closed Job webhooks (review wt-cluster2 A2), on planted
objects and on Kueue's rendered webhooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.kubernetes.kueue import QUEUED_NAMESPACE_LABEL
from judges.kube import labels_match, namespace_labels
from judges.webhooks import POLICY, job_webhooks, judge_hook_jobs

from .conftest import Judged

_RELEASE = "meta.helm.sh/release-name"


def _webhook(selector: dict[str, Any] | None, policy: str = "Fail") -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": "mjob.kb.io",
        "failurePolicy": policy,
        "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "operations": ["CREATE"]}],
    }
    if selector is not None:
        hook["namespaceSelector"] = selector
    return {
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "kueue", "annotations": {_RELEASE: "kueue"}},
        "webhooks": [hook],
    }


HOOK_JOB: dict[str, Any] = {
    "kind": "Job",
    "metadata": {
        "name": "admission-create",
        "namespace": "monitoring",
        "annotations": {"helm.sh/hook": "pre-install", _RELEASE: "kube-prometheus-stack"},
    },
}
NOT_IN = {
    "matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
    ]
}


def test_a_hook_job_in_a_namespace_the_webhook_covers_is_a_finding() -> None:
    """Kueue 0.19.2's default selector (every namespace but kube-system and its own)."""
    (finding,) = judge_hook_jobs([_webhook(NOT_IN), HOOK_JOB])
    assert finding.policy == POLICY and "mjob.kb.io" in finding.message and finding.mandatory


def test_scoped_ignoring_or_same_release_webhooks_pass() -> None:
    scoped = {"matchLabels": {QUEUED_NAMESPACE_LABEL: "required"}}
    assert judge_hook_jobs([_webhook(scoped), HOOK_JOB]) == []
    assert judge_hook_jobs([_webhook(NOT_IN, "Ignore"), HOOK_JOB]) == []
    same = {
        **HOOK_JOB,
        "metadata": {**HOOK_JOB["metadata"], "annotations": {"helm.sh/hook": "x", _RELEASE: "kueue"}},
    }
    assert judge_hook_jobs([_webhook(None), same]) == []


def test_kueues_rendered_job_webhooks_select_exactly_the_queued_namespaces(
    judged: Callable[[str], Judged],
) -> None:
    objects = judged("all-features-aws").objects
    labels = namespace_labels(objects)
    queued = {n for n, ls in labels.items() if ls.get(QUEUED_NAMESPACE_LABEL) == "required"}
    assert "ml-training" in queued and any(n.startswith("team-") for n in queued)
    webhooks = [w for c, w in job_webhooks(objects) if c["metadata"]["name"].startswith("kueue-")]
    assert {w["name"] for w in webhooks} >= {"mjob.kb.io", "vjob.kb.io"}
    for webhook in webhooks:
        selected = {n for n, ls in labels.items() if labels_match(webhook["namespaceSelector"], ls)}
        assert selected == queued, webhook["name"]
