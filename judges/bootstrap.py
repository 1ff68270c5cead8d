"""Secrets a workload needs that the plan does not make (cluster review B-N1).

A pod whose non-optional Secret is missing never starts: the kubelet retries ``MountVolume.SetUp`` (a
volume) or refuses to create the container (``CreateContainerConfigError``, an ``env``/``envFrom`` ref),
until the Secret appears. pulumi-kubernetes waits for a Deployment, StatefulSet or DaemonSet to be ready
and for a Job to complete, unless the object is annotated ``pulumi.com/skipAwait`` (pulumi-kubernetes
documentation, "Resource readiness"). So a Secret an *awaited* workload needs must be made by the plan:
when the plan also creates the Secret's namespace, no step can make it before the update that waits for it
(a namespace created ahead by hand is refused by that update, AlreadyExists: pulumi-kubernetes v4.29.0
creates client-side and upserts only with ``upsertExistingObjects``). That case is mandatory. A workload
that is not awaited (or whose namespace exists before the update) needs a documented step: advisory, with
the Secret's name. Objects Helm installs are left out: their release makes its own (hook) Secrets.

Day 2 (``check --previous``, the objects the stack's last plan applied): a namespace that plan applied
exists before this update, so an operator's step can make a Secret in it first (review of issue 38, B3: a
registry whose operator made ``registry-admin``, ``workloads.registry.adminSecret: operator``). A Secret
that plan made and this one does not is deleted by the update (the stack no longer has it) while a
workload still needs it: mandatory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from judges.findings import Finding, Subject
from judges.kube import of_kind

POLICY = "secret-made-before-await"
AWAITED = frozenset({"Deployment", "StatefulSet", "DaemonSet", "Job"})
SKIP_AWAIT = "pulumi.com/skipAwait"
HELM_RELEASE = "meta.helm.sh/release-name"


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    return (spec.get("template") or {}).get("spec") or {}


def needed_secrets(pod: Mapping[str, Any]) -> Iterator[str]:
    """The Secrets a pod cannot start without: non-optional volumes, projections, env and envFrom refs."""
    for volume in pod.get("volumes") or []:
        secret = volume.get("secret")
        if secret and not secret.get("optional"):
            yield str(secret["secretName"])
        for source in (volume.get("projected") or {}).get("sources") or []:
            projected = source.get("secret")
            if projected and not projected.get("optional"):
                yield str(projected["name"])
    for key in ("initContainers", "containers"):
        for container in pod.get(key) or []:
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    yield str(ref["name"])
            for source in container.get("envFrom") or []:
                ref = source.get("secretRef")
                if ref and not ref.get("optional"):
                    yield str(ref["name"])


def _secrets(objects: Sequence[Mapping[str, Any]]) -> set[tuple[str, str]]:
    return {
        (str(s["metadata"].get("namespace", "")), str(s["metadata"]["name"]))
        for s in of_kind(objects, "Secret")
    }


def _namespaces(objects: Sequence[Mapping[str, Any]]) -> set[str]:
    return {str(n["metadata"]["name"]) for n in of_kind(objects, "Namespace")}


def judge_bootstrap_secrets(
    objects: Sequence[Mapping[str, Any]], previous: Sequence[Mapping[str, Any]] | None = None
) -> list[Finding]:
    """Each Secret an awaited workload needs that the plan does not make; ``previous``: the objects the
    stack's last plan applied (``None``: a first update, every namespace new)."""
    made = _secrets(objects)
    created = _namespaces(objects) - _namespaces(previous or [])
    deleted = _secrets(previous or []) - made
    findings = []
    for obj in objects:
        metadata = obj.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        if obj.get("kind") not in {*AWAITED, "CronJob"} or annotations.get(HELM_RELEASE):
            continue
        namespace = str(metadata.get("namespace", ""))
        awaited = obj["kind"] in AWAITED and str(annotations.get(SKIP_AWAIT, "")).lower() != "true"
        for name in sorted(set(needed_secrets(_template(obj))) - {n for ns, n in made if ns == namespace}):
            if (namespace, name) in deleted:
                findings.append(
                    Finding(
                        POLICY,
                        "mandatory",
                        Subject.of(obj),
                        f"needs Secret {namespace}/{name}, which the previous plan made and this one does"
                        " not: pulumi up deletes it while the workload needs it; keep it in the stack",
                    )
                )
            elif awaited and namespace in created:
                findings.append(
                    Finding(
                        POLICY,
                        "mandatory",
                        Subject.of(obj),
                        f"needs Secret {namespace}/{name}, which the plan does not make; pulumi up waits for"
                        f" it, and nothing can create the Secret before the update that creates namespace"
                        f" {namespace}: make it in the stack",
                    )
                )
            else:
                findings.append(
                    Finding(
                        POLICY,
                        "advisory",
                        Subject.of(obj),
                        f"needs Secret {namespace}/{name}, which the plan does not make: a documented step"
                        " must create it (its pods wait until it exists)",
                    )
                )
    return findings
