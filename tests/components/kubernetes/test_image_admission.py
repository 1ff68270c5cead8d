"""The image admission policy (components/kubernetes/image_admission.py), run by the CEL judge as the API
server runs it (judges/cel.py, cel-python).

Rules and their sources:
- Kubernetes API reference, ValidatingAdmissionPolicySpec: ``variables`` are evaluated in order and a
  later one reads an earlier one as ``variables.<name>``; ``matchConstraints.resourceRules`` selects what
  the policy reads; ``failurePolicy: Fail`` refuses when the policy cannot be evaluated.
- ValidatingAdmissionPolicyBindingSpec ``validationActions``: ``Deny`` refuses, ``Warn`` and ``Audit``
  admit; Deny and Warn may not be combined (duplicates are refused too).
- PodSpec: ``containers``, ``initContainers`` and ``ephemeralContainers`` each name an image.
- OCI image-spec, descriptor ``digest``: ``sha256:`` and 64 lowercase hex digits.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.kubernetes.image_admission import LABEL, POLICY, ImageAdmission, image_admission_policy
from judges.cel import refusals

REGISTRY = "123456789012.dkr.ecr.me-central-1.amazonaws.com/aws-enterprise-prod-aws"
DIGEST = "@sha256:" + "4b" * 32
OURS = f"{REGISTRY}/ml-platform/trainer:53ba5b004b2164b7b961{DIGEST}"


def _cluster(admission: ImageAdmission) -> list[dict[str, Any]]:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": {LABEL: admission.value}},
    }
    return [namespace, *image_admission_policy(REGISTRY, mirrored=True)]


def _pod(**images: list[str]) -> dict[str, Any]:
    spec = {
        lst: [{"name": f"c{i}", "image": image} for i, image in enumerate(names)]
        for lst, names in images.items()
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


def _refused(obj: dict[str, Any], admission: ImageAdmission = ImageAdmission.DENY) -> list[str]:
    return [f.message for f in refusals(_cluster(admission), obj)]


def test_a_pod_running_the_stacks_images_by_digest_is_admitted() -> None:
    assert (
        _refused(_pod(containers=[OURS], initContainers=[f"{REGISTRY}/ml-platform/registry{DIGEST}"])) == []
    )


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("quay.io/prometheus/prometheus:v3.14.0-distroless", "stack's registry"),
        (f"quay.io/prometheus/prometheus{DIGEST}", "stack's registry"),
        (f"{REGISTRY}/ml-platform/trainer:53ba5b004b2164b7b961", "by digest"),
        (f"{REGISTRY}/ml-platform/trainer@sha256:{'4b' * 31}", "by digest"),
        # A look-alike host: the registry must be the whole first part of the reference.
        (f"{REGISTRY}-evil/ml-platform/trainer{DIGEST}", "stack's registry"),
    ],
)
@pytest.mark.parametrize("where", ["containers", "initContainers", "ephemeralContainers"])
def test_an_image_from_elsewhere_or_by_tag_is_refused_in_every_container_list(
    image: str, says: str, where: str
) -> None:
    lists = {"containers": [OURS], where: [OURS, image]} if where != "containers" else {where: [OURS, image]}
    messages = _refused(_pod(**lists))
    assert any(says in m for m in messages), messages


def test_a_warn_binding_admits_what_the_deny_binding_refuses() -> None:
    pod = _pod(containers=["nvcr.io/nvidia/gpu-operator:v26.7.0"])
    assert _refused(pod, ImageAdmission.DENY)
    assert _refused(pod, ImageAdmission.WARN) == []


def test_a_mirror_namespace_denies_upstream_images_and_admits_the_mirror_by_digest() -> None:
    """A stack with a mirror lock labels its operator namespaces ``mirror``: denied like ``deny``."""
    mirror = f"{REGISTRY}/mirror/nvcr.io/nvidia/gpu-operator:v26.7.0{DIGEST}"
    assert _refused(_pod(containers=["nvcr.io/nvidia/gpu-operator:v26.7.0"]), ImageAdmission.MIRROR)
    assert _refused(_pod(containers=[mirror.partition("@")[0]]), ImageAdmission.MIRROR)
    assert _refused(_pod(containers=[mirror]), ImageAdmission.MIRROR) == []


def test_the_mirror_binding_exists_only_for_a_stack_with_a_mirror_lock() -> None:
    bindings = {o["metadata"]["name"]: o for o in image_admission_policy(REGISTRY, mirrored=True)[1:]}
    assert bindings[f"{POLICY}-mirror"]["spec"]["validationActions"] == ["Deny"]
    selector = bindings[f"{POLICY}-mirror"]["spec"]["matchResources"]["namespaceSelector"]
    assert selector == {"matchLabels": {LABEL: "mirror"}}
    assert f"{POLICY}-mirror" not in [o["metadata"]["name"] for o in image_admission_policy(REGISTRY, False)]


@pytest.mark.parametrize(
    ("kind", "api_version", "template_path"),
    [
        ("Deployment", "apps/v1", ("spec", "template")),
        ("DaemonSet", "apps/v1", ("spec", "template")),
        ("Job", "batch/v1", ("spec", "template")),
        ("CronJob", "batch/v1", ("spec", "jobTemplate", "spec", "template")),
    ],
)
def test_a_workloads_pod_template_is_judged_at_the_workload(
    kind: str, api_version: str, template_path: tuple[str, ...]
) -> None:
    workload: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "w", "namespace": "team-a"},
    }
    node = workload
    for key in template_path:
        node = node.setdefault(key, {})
    node["spec"] = copy.deepcopy(_pod(containers=[OURS])["spec"])
    assert _refused(workload) == []
    node["spec"]["containers"][0]["image"] = "registry.k8s.io/kueue/kueue:v0.19.2"
    assert len(_refused(workload)) == 2


def test_the_policy_keeps_the_admission_contract() -> None:
    policy, deny, warn = image_admission_policy(REGISTRY, mirrored=False)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    names = [v["name"] for v in spec["variables"]]
    # Each variable reads only those before it.
    for index, variable in enumerate(spec["variables"]):
        assert all(f"variables.{later}" not in variable["expression"] for later in names[index:])
    rules = spec["matchConstraints"]["resourceRules"]
    assert {"pods", "pods/ephemeralcontainers"} <= {r for rule in rules for r in rule["resources"]}
    assert [b["spec"]["policyName"] for b in (deny, warn)] == [POLICY, POLICY]
    assert deny["spec"]["validationActions"] == ["Deny"]
    actions = warn["spec"]["validationActions"]
    assert "Deny" not in actions and len(set(actions)) == len(actions)


@pytest.mark.parametrize("registry", ["", "example.azurecr.io/", "reg' || true || 'x", "a@b"])
def test_a_registry_that_is_not_a_host_and_path_is_refused(registry: str) -> None:
    with pytest.raises(ValueError, match="not a registry"):
        image_admission_policy(registry, mirrored=False)
