"""Signature verification at admission: a pod in a workload or team namespace starts only if the stack's
own key signed every image it runs (compliance review rows V3 and R4).

The verifier is Sigstore's policy-controller (chart ``policy-controller`` 0.10.6, app v0.13.1, its image
pinned by digest in the chart's values), an admission webhook that verifies cosign signatures against
``ClusterImagePolicy`` objects. Chosen over Kyverno and Ratify (docs/images.md says why) because it
does one job, verifies cosign's own signatures with the key named the way cosign names it
(``awskms://``, ``azurekms://``: the ClusterImagePolicy ``key.kms`` field, validated against exactly
those prefixes in
sigstore/policy-controller ``pkg/apis/policy/v1beta1/clusterimagepolicy_validation.go``), runs the same
on EKS and AKS, and is enforced per namespace by one label.

What it verifies: a key authority with no ``ctlog`` skips the transparency log (policy-controller
``pkg/webhook/validator.go`` ``checkOptsFromAuthority``: no Rekor client and no keys, ``IgnoreTlog``), as
the stack signs with ``--tlog-upload=false``; and the legacy signature format, since policy-controller
verifies the new bundle format for keyless authorities only (same function: "when using the new bundle
format, the authority must be keyless"). So ``components/images.py`` signs each digest in cosign's
legacy format.

Enforcement: the webhook admits pods only in namespaces labelled ``policy.sigstore.dev/include: "true"``
(the chart's ``webhook.namespaceSelector``): the guarded (workload and team) namespaces, the ones the
image ValidatingAdmissionPolicy denies in; and, on a stack whose mirror lock says the stack's key signed
every third-party copy (components/image_mirror.py), the operator namespaces too (``verifiable``). The
policy's glob, every image below the stack's registry, covers the mirror's ``<registry>/mirror/**``. An
image there that no ClusterImagePolicy matches is refused too (``no-match-policy: deny``,
sigstore/policy-controller ``pkg/config/store.go``).

Which namespaces the webhook may guard. The chart's two ``policy.sigstore.dev`` webhooks (mutating and
validating, templates/webhook/policy_webhook_configurations.yaml) call the Service ``webhook`` in the
release's namespace, select namespaces by ``webhook.namespaceSelector`` (default: the include label "In
['true']", templates/_helpers.tpl) and fail closed (``failurePolicy: {{ .Values.webhook.failurePolicy
}}``, ``Fail`` in values.yaml). The chart gives them no rules: the running webhook writes them, every
create and update of Pods, ReplicaSets, Deployments, StatefulSets, DaemonSets, Jobs and CronJobs
(policy-controller v0.13.1 cmd/webhook/main.go ``types``), keeping the namespace selector and adding
``webhooks.knative.dev/exclude`` DoesNotExist (knative.dev/pkg
webhook/resourcesemantics/validation/reconcile_config.go). So in a selected namespace no pod is created
while no webhook replica serves. Its own namespace must not be selected: with both replicas gone (a
node-pool upgrade, two lost nodes) the ReplicaSet's new pods would be refused by the webhook they are to
serve, and no pod there, nor in any selected namespace, would start again. Nor kube-system, where what
the webhook needs to start runs (the cloud's CNI and DNS; AKS's workload identity webhook, which gives
its pods their credentials): the stack writes no label there. Nothing else it needs runs in the operator
namespaces: the GPU and network operators' pods run on the GPU and InfiniBand nodes and ready those for
workloads, Prometheus and Kueue serve others (Kueue's fail-closed webhooks select only the queued
namespaces, kueue.py), and the webhook runs on the CPU nodes (the chart gives it no toleration,
``commonTolerations: []``, and the GPU pools are tainted: pack policy ``gpu-nodes-tainted``). Selecting
them holds their new pods while the webhook does not serve, never the webhook itself; before it first
serves, its configurations have no rules and refuse nothing, so the first ``pulumi up`` installs the
operators in any order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pulumi

from components.handle import IMAGE_VERIFIER
from components.kubernetes.objects import MANAGED_BY, Object

NAMESPACE = IMAGE_VERIFIER.namespace
RELEASE = "policy-controller"
POLICY = "ml-platform-signed-images"
# The chart's webhook.namespaceSelector matches this label "In ['true']".
INCLUDE_LABEL = "policy.sigstore.dev/include"
# The webhook's pods (chart templates/webhook/deployment_webhook.yaml ``control-plane`` label) and the
# port its Service targets (``https``, 8443).
WEBHOOK_SELECTOR = {"control-plane": f"{RELEASE}-webhook"}
WEBHOOK_PORTS = (8443,)
KMS_PREFIXES = ("awskms://", "azurekms://")


def verifiable(namespace: str) -> bool:
    """Whether the webhook may guard ``namespace``: never its own (module docstring: it could not start
    its own pods again)."""
    return namespace != NAMESPACE


def chart_values(
    identity: Mapping[str, pulumi.Input[str]], pod_labels: Mapping[str, str]
) -> dict[str, object]:
    """The release's values: images no policy matches are refused; the webhook's account bears the
    cloud identity that reads the signing key's public half; and what Pod Security "restricted" needs of
    its containers (the chart's ``podSecurityContext`` is the container's, its ``securityContext`` the
    pod's: templates/webhook/deployment_webhook.yaml). ``pod_labels``: what the identity needs on the pods
    (AKS workload identity's ``azure.workload.identity/use``), as the chart's ``customLabels``, which its
    templates write unquoted (``{{ $key }}: {{ $value }}``, templates/_helpers.tpl): each value is quoted
    here, or ``"true"`` would be parsed as a boolean label the API server refuses."""
    restricted = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    limits = {"cpu": "200m", "memory": "128Mi"}
    return {
        # The post-delete hook Job that removes the webhook's leases: its container, restricted too.
        "leasescleanup": {
            "resources": {"limits": limits, "requests": {"cpu": "10m", "memory": "32Mi"}},
            "podSecurityContext": {"enabled": True, **restricted},
        },
        "webhook": {
            # Its failurePolicy is Fail: with one replica, a drain of its node stops every pod creation
            # in the guarded namespaces until it is back. Two, spread over nodes by the chart's affinity.
            "replicaCount": 2,
            "customLabels": {key: json.dumps(value) for key, value in pod_labels.items()},
            "configData": {"no-match-policy": "deny"},
            "serviceAccount": {"annotations": dict(identity)},
            "securityContext": {
                "enabled": True,
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "podSecurityContext": {"enabled": True, **restricted},
        },
    }


def signature_policy(registry: str, key: pulumi.Input[str]) -> Object:
    """The stack's ClusterImagePolicy (policy.sigstore.dev/v1beta1): every image below ``registry``
    verifies against ``key`` (the stack's ``imageSigningKey``), or the pod is refused (``mode: enforce``)."""
    if not registry or registry.endswith("/"):
        raise ValueError(f"registry {registry!r}: not a registry host[/path] to verify images from")
    if isinstance(key, str) and not key.startswith(KMS_PREFIXES):
        raise ValueError(f"signing key {key!r}: not a cosign KMS key ({', '.join(KMS_PREFIXES)})")
    return {
        "apiVersion": "policy.sigstore.dev/v1beta1",
        "kind": "ClusterImagePolicy",
        "metadata": {"name": POLICY, "labels": dict(MANAGED_BY)},
        "spec": {
            "mode": "enforce",
            "images": [{"glob": f"{registry}/**"}],
            "authorities": [{"name": "stack-signing-key", "key": {"kms": key}}],
        },
    }
