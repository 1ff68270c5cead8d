"""Fail-closed Job webhooks against other releases' Helm hook Jobs (review wt-cluster2 A2).

A Helm hook Job (``helm.sh/hook``) is created during its own release's install or upgrade, before that
release's other objects. When a ``failurePolicy: Fail`` webhook of another release intercepts Job
creation in the hook's namespace, the hook fails whenever that webhook's backend is not serving yet (its
release installing concurrently, its pods rolling), and with ``atomic`` the hook's release rolls back.
Kueue 0.19.2 registers its Job webhooks on every namespace but ``kube-system`` and its own unless
``managedJobsNamespaceSelector`` is set (chart templates/webhook/manifests.yaml). Admission webhook
matching: rules by group, resource and operation, ``namespaceSelector`` absent = every namespace,
``failurePolicy`` absent = Fail (kubernetes.io, "Dynamic Admission Control").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import labels_match, namespace_labels

POLICY = "hook-job-behind-foreign-webhook"
HOOK = "helm.sh/hook"
RELEASE = "meta.helm.sh/release-name"
_CONFIGURATIONS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _any(values: Sequence[str] | None, wanted: str) -> bool:
    return any(v in (wanted, "*") for v in values or [])


def _creates_jobs(webhook: Mapping[str, Any]) -> bool:
    return any(
        _any(rule.get("apiGroups"), "batch")
        and (_any(rule.get("resources"), "jobs") or "*/*" in (rule.get("resources") or []))
        and _any(rule.get("operations"), "CREATE")
        for rule in webhook.get("rules") or []
    )


def _release(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("annotations") or {}).get(RELEASE, ""))


def job_webhooks(
    objects: Sequence[Mapping[str, Any]],
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Each fail-closed webhook that intercepts Job creation, with its configuration."""
    for configuration in objects:
        if configuration.get("kind") not in _CONFIGURATIONS:
            continue
        for webhook in configuration.get("webhooks") or []:
            if webhook.get("failurePolicy", "Fail") == "Fail" and _creates_jobs(webhook):
                yield configuration, webhook


def judge_hook_jobs(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    labels = namespace_labels(objects)
    hooks = [
        o
        for o in objects
        if o.get("kind") == "Job" and HOOK in ((o.get("metadata") or {}).get("annotations") or {})
    ]
    findings = []
    for configuration, webhook in job_webhooks(objects):
        for job in hooks:
            namespace = str(job["metadata"].get("namespace", ""))
            if _release(job) == _release(configuration):
                continue
            if labels_match(webhook.get("namespaceSelector") or {}, labels.get(namespace, {})):
                findings.append(
                    Finding(
                        POLICY,
                        "mandatory",
                        Subject.of(job),
                        f"this {job['metadata']['annotations'][HOOK]} hook of release {_release(job)!r} "
                        f"is refused while webhook {webhook['name']} (release {_release(configuration)!r}, "
                        "failurePolicy Fail) is not serving; scope its namespaceSelector",
                    )
                )
    return findings
