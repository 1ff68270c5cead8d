"""kube-apiserver reaches every admission webhook and aggregated API the plan registers, through the
NetworkPolicies the plan applies (cluster review A1, AWS review A1).

The API server is not a pod: it calls webhooks and APIServices from the control plane's addresses (EKS
cross-account ENIs in the cluster subnets, aws/aws-network-policy-agent#281; AKS through konnectivity),
so no ``namespaceSelector``/``podSelector`` peer matches it (kubernetes.io, "Network Policies": peers
select pods). A call passes only if every namespace policy that selects the backend pods for Ingress is
absent or one of them has a rule with no ``from`` (or an ``ipBlock``) whose ports admit the target port.
Walk: webhook/APIService → Service → targetPort (named ports through the pods' containerPorts) → the
pods of the namespace's workloads → the policies (kubernetes.io: a pod selected by no Ingress policy is
open; a selected pod admits the union of the selecting policies' rules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from judges.kube import labels_match
from mlplatform.plan import Plan, all_stack_targets
from mlplatform.report import kubernetes_objects

STACKS = [t.stack for t in all_stack_targets()]
_WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}


def _backends(objects: list[dict[str, Any]]) -> Iterator[tuple[str, str, str, int | str]]:
    """(caller, namespace, service, service port) of every webhook (any failurePolicy) and APIService."""
    for obj in objects:
        if obj["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            for hook in obj.get("webhooks", []):
                service = hook["clientConfig"].get("service")
                if service:
                    yield hook["name"], service["namespace"], service["name"], service.get("port", 443)
        if obj["kind"] == "APIService" and obj["spec"].get("service"):
            service = obj["spec"]["service"]
            yield obj["metadata"]["name"], service["namespace"], service["name"], service.get("port", 443)


def _pods(objects: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    return [
        o["spec"]["template"]
        for o in objects
        if o["kind"] in _WORKLOADS and o["metadata"].get("namespace") == namespace
    ]


def _target_port(service: dict[str, Any], port: int | str, pod: dict[str, Any]) -> int:
    [entry] = [p for p in service["spec"]["ports"] if p["port"] == port]
    target = entry.get("targetPort", port)
    if isinstance(target, int):
        return target
    return int(
        next(
            p["containerPort"]
            for c in pod["spec"]["containers"]
            for p in c.get("ports", [])
            if p.get("name") == target
        )
    )


def _admits_api_server(policies: list[dict[str, Any]], labels: dict[str, str], port: int) -> bool:
    selecting = [
        p
        for p in policies
        if "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and labels_match(p["spec"]["podSelector"], labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            sources = rule.get("from")
            from_anywhere = not sources or any("ipBlock" in peer for peer in sources)
            ports = rule.get("ports")
            if from_anywhere and (not ports or any(p.get("port") in (None, port) for p in ports)):
                return True
    return False


def unreachable(objects: list[dict[str, Any]]) -> list[str]:
    """One line per API-server call that the namespace's NetworkPolicies drop."""
    services = {
        (o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects if o["kind"] == "Service"
    }
    problems = []
    for caller, namespace, name, port in _backends(objects):
        service = services[(namespace, name)]
        policies = [
            o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"].get("namespace") == namespace
        ]
        for pod in _pods(objects, namespace):
            labels = pod["metadata"].get("labels", {})
            if not labels_match({"matchLabels": service["spec"].get("selector", {})}, labels):
                continue
            target = _target_port(service, port, pod)
            if not _admits_api_server(policies, labels, target):
                problems.append(f"{caller} → {namespace}/{name}:{target}")
    return sorted(set(problems))


@pytest.mark.parametrize("stack", STACKS)
def test_api_server_reaches_every_webhook_and_apiservice(stack: str, planned: Callable[[str], Plan]) -> None:
    objects = kubernetes_objects(planned(stack))
    assert list(_backends(objects)), f"{stack} registers no webhook: the walk would prove nothing"
    assert unreachable(objects) == []


def test_the_walk_catches_a_policy_that_admits_only_namespaces(planned: Callable[[str], Plan]) -> None:
    """The defect the review found: kueue-system admitting only namespace peers (addons.py before)."""
    objects = [
        o
        for o in kubernetes_objects(planned("aws-smb-dev"))
        if not (o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("api-server-ingress"))
    ]
    blocked = unreachable(objects)
    assert "mclusterqueue.kb.io → kueue-system/kueue-webhook-service:9443" in blocked
    assert "v1beta2.visibility.kueue.x-k8s.io → kueue-system/kueue-visibility-server:8082" in blocked
