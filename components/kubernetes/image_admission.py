"""Admission of images: a pod runs only images from the stack's own registry, by digest (compliance review
rows R4 and V2).

One ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30; no controller to
run) reads every image a pod, or the pod template of a workload, names: ``containers``,
``initContainers`` and ``ephemeralContainers`` (Kubernetes API reference, PodSpec). Two rules, so the
refusal says which one a pod breaks: the image lies below the stack's registry (ECR's
``<account>.dkr.ecr.<region>.amazonaws.com/<stack>``, ACR's ``<name>.azurecr.io``), and it is named by
digest (``@sha256:`` and 64 hex digits: OCI image-spec, descriptor ``digest``), so no tag moved after
the plan can change what runs. Workload kinds are matched too, so ``pulumi up`` is refused at the
Deployment or Job, not later when its controller's pods silently fail to be created.

Bindings of that policy: ``Deny`` in the namespaces labelled ``deny``, ``Warn`` and ``Audit`` in those
labelled ``warn`` (Kubernetes API reference, ValidatingAdmissionPolicyBindingSpec ``validationActions``:
Deny refuses; Warn returns a warning to the client; Audit records it in the audit event). The workload
and team namespaces run only what the stack builds and deny; the operator namespaces, whose pods the
charts make from their upstream registries, warn until those images are mirrored. A stack with a mirror
lock (components/image_mirror.py) renders every third-party image from its mirror by digest: its
operator namespaces are labelled ``mirror`` and a third binding denies there too. A label of its own, as
the signature verifier and its judge (judges/signatures.py) hold ``deny`` namespaces to the stack's key,
and ``mirror`` ones not: the copies of a version 1 lock carry no signature by that key, and the
verifier's own namespace cannot be guarded by it (image_verification.py). Where the lock says the key
signed every copy, the other operator namespaces are labelled ``deny``.
"""

from __future__ import annotations

from enum import StrEnum

from components.kubernetes.objects import Object, admission_policy, policy_binding

POLICY = "ml-platform-image-provenance"
LABEL = "ml-platform.io/image-admission"


class ImageAdmission(StrEnum):
    DENY = "deny"
    WARN = "warn"
    # Third-party images from the stack's mirror by digest: denied otherwise, not held to its signing key
    # (copies unsigned, or the verifier's own namespace).
    MIRROR = "mirror"


# What the policy reads: pods (created, updated, or given an ephemeral container through the
# ``pods/ephemeralcontainers`` subresource, whose object is the Pod) and the workload kinds whose pod
# template their controllers copy into pods (Kubernetes API reference: apps/v1, batch/v1).
_RULES: list[Object] = [
    {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["pods", "pods/ephemeralcontainers"],
    },
    {
        "apiGroups": ["apps"],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
    },
    {
        "apiGroups": ["batch"],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["jobs", "cronjobs"],
    },
]
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# Variables are evaluated in order; a later one reads an earlier one as ``variables.<name>``.
_VARIABLES: list[Object] = [
    {
        "name": "podSpec",
        "expression": "object.kind == 'Pod' ? object.spec"
        " : (object.kind == 'CronJob' ? object.spec.jobTemplate.spec.template.spec"
        " : object.spec.template.spec)",
    },
    {
        "name": "images",
        "expression": " + ".join(
            f"(has(variables.podSpec.{lst}) ? variables.podSpec.{lst}.map(c, c.image) : [])"
            for lst in _CONTAINER_LISTS
        ),
    },
]


def image_admission_policy(registry: str, mirrored: bool) -> list[Object]:
    """The policy for images below ``registry`` (a host, or a host and path) by digest, and its bindings
    (``mirrored``: the stack has a mirror lock, and the binding that denies in ``mirror`` namespaces)."""
    if not registry or any(ch in registry for ch in "'\\@ ") or registry.endswith("/"):
        raise ValueError(f"registry {registry!r}: not a registry host[/path] to admit images from")
    validations = [
        {
            "expression": f"variables.images.all(i, i.startsWith('{registry}/'))",
            "message": f"every container image must come from the stack's registry {registry}/"
            " (third-party images: `mlplatform images mirror` copies them there)",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.images.all(i, i.matches('@sha256:[0-9a-f]{64}$'))",
            "message": "every container image must be named by digest (@sha256:<64 hex digits>), not by tag",
            "reason": "Forbidden",
        },
    ]
    return [
        *admission_policy(POLICY, _RULES, validations, {LABEL: ImageAdmission.DENY}, _VARIABLES),
        policy_binding(f"{POLICY}-warn", POLICY, ["Warn", "Audit"], {LABEL: ImageAdmission.WARN}),
        *(
            [policy_binding(f"{POLICY}-mirror", POLICY, ["Deny"], {LABEL: ImageAdmission.MIRROR})]
            if mirrored
            else []
        ),
    ]
