"""Every image a guarded namespace runs is verified against a signing key at admission (compliance review
rows V3 and R4).

The guarded namespaces are those the platform's image ValidatingAdmissionPolicy denies in (namespace label
``ml-platform.io/image-admission: deny``): they run only what the stack builds, or, on a stack whose
mirror lock says its key signed every third-party copy, what its charts name from that mirror, so they
run only what its key signed. Sigstore's policy-controller verifies that: its fail-closed validating
webhook ``policy.sigstore.dev`` (the chart's ``cosign.webhookName``) sees the pods of the namespaces its
``namespaceSelector`` selects, and admits an image when every ``ClusterImagePolicy`` whose glob matches it
has an authority whose signature verifies; an image no policy matches is refused unless the
``config-policy-controller`` ConfigMap's ``no-match-policy`` says ``allow`` or ``warn``, and a policy in
``mode: warn`` only warns (sigstore/policy-controller v0.13.1 README "Admission of images",
``pkg/config/store.go``, ``pkg/apis/glob/glob.go``).

Mandatory, each a pod that would start unverified or never start: a guarded namespace no fail-closed
verifier webhook selects; an image no enforcing policy matches (refused under ``deny``, admitted unsigned
under ``allow``/``warn``); a matching policy with an authority that checks no key (a ``static`` pass, a
keyless identity, or none at all), since any one authority admits.

The verifier's own namespace (its webhooks' Service's, ``clientConfig.service.namespace``) is never
required to be verified, whatever its label: a fail-closed ``policy.sigstore.dev`` webhook, validating or
mutating, that selects it is itself the finding (``POLICY_SELF``, mandatory). The chart renders the
webhooks without rules; the running webhook writes them, on pods and every pod-making workload
(policy-controller v0.13.1 cmd/webhook/main.go ``types``, knative.dev/pkg reconcile_config.go), so with
all its replicas gone the ReplicaSet's new pods are refused by the webhook they are to serve, and nothing
it selects starts again (components/kubernetes/image_verification.py).

The verifier reads each signature from the registry as its own pod (policy-controller v0.13.1
pkg/webhook/registryauth/registryauth.go: amazon-ecr-credential-helper on the AWS SDK's default
credentials, an ACR helper on azidentity's default credential): on a managed cluster (``cluster``) its
webhook's pods must carry the cloud identity the stack grants the registry's read, or every lookup fails
and the webhook refuses every pod it guards (``POLICY_IDENTITY``, mandatory). EKS: IRSA, the service
account's ``eks.amazonaws.com/role-arn`` (EKS user guide, "IAM roles for service accounts"); AKS:
workload identity, the account's ``azure.workload.identity/client-id`` and the pod's
``azure.workload.identity/use: "true"`` (AKS workload identity, "Service account labels and
annotations": the webhook injects the credentials only into a pod so labelled). The grant itself is a
cloud resource the pack judges (policy ``image-verifier-reads-registry``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import labels_match, namespace_labels, of_kind, pods, service_selects

POLICY = "image-signature-unverified"
POLICY_SELF = "image-verifier-guards-itself"
POLICY_IDENTITY = "image-verifier-identity"
# Per managed Kubernetes: the service-account annotation and the pod labels its pods' cloud identity needs.
CLOUD_IDENTITY: dict[str, tuple[str, Mapping[str, str]]] = {
    "eks": ("eks.amazonaws.com/role-arn", {}),
    "aks": ("azure.workload.identity/client-id", {"azure.workload.identity/use": "true"}),
}
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


def _verifier_webhooks(
    objects: Sequence[Mapping[str, Any]], kinds: tuple[str, ...]
) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Each fail-closed verifier webhook in a configuration of ``kinds``, with its configuration."""
    return [
        (configuration, webhook)
        for configuration in objects
        if configuration.get("kind") in kinds
        for webhook in configuration.get("webhooks") or []
        if webhook.get("name") == WEBHOOK and webhook.get("failurePolicy", "Fail") == "Fail"
    ]


def _own_namespace(webhook: Mapping[str, Any]) -> str | None:
    """The namespace of the Service the API server calls for ``webhook``."""
    service = (webhook.get("clientConfig") or {}).get("service") or {}
    return service.get("namespace")


def _guarding_itself(
    objects: Sequence[Mapping[str, Any]], labels: Mapping[str, Mapping[str, str]]
) -> list[Finding]:
    """A fail-closed verifier webhook that selects the namespace its own Service runs in."""
    findings = []
    kinds = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
    for configuration, webhook in _verifier_webhooks(objects, kinds):
        own = _own_namespace(webhook)
        if own is not None and labels_match(webhook.get("namespaceSelector") or {}, labels.get(own, {})):
            findings.append(
                Finding(
                    POLICY_SELF,
                    "mandatory",
                    Subject.of(configuration),
                    f"webhook {WEBHOOK} (failurePolicy Fail) selects {own}, the namespace of its own"
                    f" Service: once its pods are all gone, their replacements are refused by it and no pod"
                    f" it guards starts again; keep {own} out of its namespaceSelector",
                )
            )
    return findings


def _without_identity(
    objects: Sequence[Mapping[str, Any]],
    verifiers: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
    cluster: str | None,
) -> list[Finding]:
    """The verifier webhook's pods (its Service's) that carry no cloud identity on ``cluster``."""
    if cluster not in CLOUD_IDENTITY:
        return []
    annotation, pod_labels = CLOUD_IDENTITY[cluster]
    accounts = {
        (Subject.of(a).namespace, Subject.of(a).name): (a.get("metadata") or {}).get("annotations") or {}
        for a in of_kind(objects, "ServiceAccount")
    }
    services = {
        (service.get("namespace"), service.get("name"))
        for _, webhook in verifiers
        if (service := (webhook.get("clientConfig") or {}).get("service") or {})
    }
    findings = []
    for service in of_kind(objects, "Service"):
        where = (Subject.of(service).namespace, Subject.of(service).name)
        if where not in services:
            continue
        selector = (service.get("spec") or {}).get("selector")
        for pod in pods(objects):
            if pod.namespace != where[0] or not service_selects(selector, pod.labels):
                continue
            account = str(pod.spec.get("serviceAccountName") or "default")
            missing = [f"label {k}: {v!r}" for k, v in pod_labels.items() if pod.labels.get(k) != v]
            if not accounts.get((pod.namespace, account), {}).get(annotation):
                missing.append(f"annotation {annotation} on ServiceAccount {account}")
            if missing:
                findings.append(
                    Finding(
                        POLICY_IDENTITY,
                        "mandatory",
                        pod.owner,
                        f"the signature verifier's pods on {cluster} lack {' and '.join(missing)}: they have"
                        " no cloud identity, cannot read the signatures in the registry, and the webhook"
                        " refuses every pod it guards",
                    )
                )
    return findings


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
    objects: Sequence[Mapping[str, Any]], unseen: frozenset[str] = frozenset(), cluster: str | None = None
) -> list[Finding]:
    """``unseen``: namespaces of releases not rendered; with any, a verifier missing from the objects may be
    one of them, and nothing is said (``plan`` and ``check`` name each unrendered release). ``cluster``
    (``eks``, ``aks``): the managed Kubernetes, whose cloud identity the verifier's pods must carry."""
    labels = namespace_labels(objects)
    verifiers = _verifier_webhooks(objects, ("ValidatingWebhookConfiguration",))
    if not verifiers and unseen:
        return []
    selectors = [webhook.get("namespaceSelector") or {} for _, webhook in verifiers]
    own = {_own_namespace(webhook) for _, webhook in verifiers}
    guarded = {
        name for name, found in labels.items() if found.get(GUARD_LABEL) == GUARDED and name not in own
    }
    policies = [
        p
        for p in objects
        if p.get("kind") == "ClusterImagePolicy" and (p.get("spec") or {}).get("mode", "enforce") == "enforce"
    ]
    no_match = _no_match_policy(objects)
    findings = _guarding_itself(objects, labels) + _without_identity(objects, verifiers, cluster)
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
