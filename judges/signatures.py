"""Every image a guarded namespace runs is verified against a signing key at admission (compliance review
rows V3 and R4).

The guarded namespaces are those the platform's image ValidatingAdmissionPolicy denies in (namespace label
``ml-platform.io/image-admission: deny``): they run only what the stack builds, so they run only what its
key signed. Sigstore's policy-controller verifies that: its fail-closed validating webhook
``policy.sigstore.dev`` (the chart's ``cosign.webhookName``) sees the pods of the namespaces its
``namespaceSelector`` selects, and admits an image when every ``ClusterImagePolicy`` whose glob matches it
has an authority whose signature verifies; an image no policy matches is refused unless the
``config-policy-controller`` ConfigMap's ``no-match-policy`` says ``allow`` or ``warn``, and a policy in
``mode: warn`` only warns (sigstore/policy-controller v0.13.1 README "Admission of images",
``pkg/config/store.go``, ``pkg/apis/glob/glob.go``).

Mandatory, each a pod that would start unverified or never start: a guarded namespace no fail-closed
verifier webhook selects; an image no enforcing policy matches (refused under ``deny``, admitted unsigned
under ``allow``/``warn``); a matching policy with an authority that checks no key (a ``static`` pass, a
keyless identity, or none at all), since any one authority admits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import labels_match, namespace_labels, pods

POLICY = "image-signature-unverified"
GUARD_LABEL = "ml-platform.io/image-admission"
GUARDED = "deny"
WEBHOOK = "policy.sigstore.dev"
CONFIG = "config-policy-controller"
_KEY_FIELDS = ("kms", "data", "secretRef")


def glob_pattern(glob: str) -> re.Pattern[str]:
    """policy-controller's glob as its ``glob.Compile`` translates it: ``**`` any characters, ``*`` any but
    ``/``, the whole reference."""
    escaped = glob.replace(".", r"\.").replace("**", "#").replace("*", "[^/]*").replace("#", ".*")
    return re.compile(f"^{escaped}$")


def _verifier_selectors(objects: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The namespace selectors of the fail-closed verifier webhooks that see pods."""
    return [
        webhook.get("namespaceSelector") or {}
        for configuration in objects
        if configuration.get("kind") == "ValidatingWebhookConfiguration"
        for webhook in configuration.get("webhooks") or []
        if webhook.get("name") == WEBHOOK and webhook.get("failurePolicy", "Fail") == "Fail"
    ]


def _no_match_policy(objects: Sequence[Mapping[str, Any]]) -> str:
    for obj in objects:
        if obj.get("kind") == "ConfigMap" and (obj.get("metadata") or {}).get("name") == CONFIG:
            return str((obj.get("data") or {}).get("no-match-policy", "deny"))
    return "deny"


def _unkeyed(policy: Mapping[str, Any]) -> list[str]:
    """Why ``policy`` can admit an image no key signed: each authority that checks no key, or none."""
    spec = policy.get("spec") or {}
    authorities = spec.get("authorities") or []
    if not authorities:
        return ["it names no authority"]
    return [
        f"authority {a.get('name') or i!r} checks no key"
        for i, a in enumerate(authorities)
        if not any((a.get("key") or {}).get(f) for f in _KEY_FIELDS)
    ]


def judge_signatures(
    objects: Sequence[Mapping[str, Any]], unseen: frozenset[str] = frozenset()
) -> list[Finding]:
    """``unseen``: namespaces of releases not rendered; with any, a verifier missing from the objects may be
    one of them, and nothing is said (``plan`` and ``check`` name each unrendered release)."""
    labels = namespace_labels(objects)
    guarded = {name for name, found in labels.items() if found.get(GUARD_LABEL) == GUARDED}
    selectors = _verifier_selectors(objects)
    if not selectors and unseen:
        return []
    policies = [
        p
        for p in objects
        if p.get("kind") == "ClusterImagePolicy" and (p.get("spec") or {}).get("mode", "enforce") == "enforce"
    ]
    no_match = _no_match_policy(objects)
    findings = []
    for pod in pods(objects):
        if pod.namespace not in guarded:
            continue
        if not any(labels_match(s, labels.get(pod.namespace, {})) for s in selectors):
            findings.append(
                Finding(
                    POLICY,
                    "mandatory",
                    pod.owner,
                    f"namespace {pod.namespace} runs only the stack's images, but no fail-closed {WEBHOOK}"
                    " webhook selects it: its pods start without a signature check",
                )
            )
            continue
        for container in pod.containers():
            image = str(container.get("image", ""))
            matching = [
                p
                for p in policies
                if any(glob_pattern(g["glob"]).match(image) for g in p["spec"].get("images") or [])
            ]
            if not matching:
                outcome = "refused at admission" if no_match == "deny" else f"admitted unsigned ({no_match})"
                findings.append(
                    Finding(
                        POLICY,
                        "mandatory",
                        pod.owner,
                        f"image {image} matches no enforcing ClusterImagePolicy: {outcome}",
                    )
                )
            for policy in matching:
                for reason in _unkeyed(policy):
                    findings.append(
                        Finding(
                            POLICY,
                            "mandatory",
                            pod.owner,
                            f"ClusterImagePolicy {Subject.of(policy).name} admits image {image} unsigned:"
                            f" {reason} (any one authority admits)",
                        )
                    )
    return findings
