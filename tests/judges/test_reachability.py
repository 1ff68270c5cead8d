"""The reachability judge: the platform's flow contract against the planned NetworkPolicies, shown on
planted defects of each flow it needs (review cluster.md A1: a webhook behind a namespace-only policy)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from judges.reachability import EXTRA, INTERNET, NEEDED, judge_reachability

from .conftest import Judged

NETWORK = "10.50.0.0/16"


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def policy(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


DNS = policy(
    "hooks",
    "allow-dns",
    {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [
            {
                "to": [
                    {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                    }
                ],
                "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
            }
        ],
    },
)


def webhook_plan(ingress: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A webhook served by a Deployment behind a Service (443 → the named port 9443), in a namespace
    whose only ingress is ``ingress``."""
    return [
        namespace("hooks"),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "server", "namespace": "hooks"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": "server"}},
                    "spec": {
                        "containers": [{"name": "s", "ports": [{"name": "webhook", "containerPort": 9443}]}]
                    },
                }
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "server", "namespace": "hooks"},
            "spec": {"selector": {"app": "server"}, "ports": [{"port": 443, "targetPort": "webhook"}]},
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "hooks"},
            "webhooks": [
                {
                    "name": "v.example.com",
                    "failurePolicy": "Fail",
                    "clientConfig": {"service": {"name": "server", "namespace": "hooks"}},
                }
            ],
        },
        policy("hooks", "ingress", {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": ingress}),
        DNS,
    ]


def mandatory(objects: list[dict[str, Any]]) -> list[str]:
    return [
        f"{f.policy}: {f.subject}: {f.message}" for f in judge_reachability(objects, NETWORK) if f.mandatory
    ]


def test_a_webhook_open_only_to_namespaces_is_cut_off_from_the_api_server() -> None:
    namespaces_only = [
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}
    ]
    [finding] = mandatory(webhook_plan(namespaces_only))
    assert finding.startswith(f"{NEEDED}: Deployment hooks/server") and "the API server → 9443/TCP" in finding
    assert "v.example.com (failurePolicy Fail)" in finding


def test_a_port_only_rule_or_the_cluster_networks_block_lets_the_api_server_in() -> None:
    assert mandatory(webhook_plan([{"ports": [{"port": 9443, "protocol": "TCP"}]}])) == []
    assert mandatory(webhook_plan([{"from": [{"ipBlock": {"cidr": "10.50.0.0/16"}}]}])) == []
    assert mandatory(webhook_plan([{"from": [{"ipBlock": {"cidr": "10.99.0.0/16"}}]}])) != []
    assert mandatory(webhook_plan([{"ports": [{"port": 8443, "protocol": "TCP"}]}])) != []


def test_a_flow_the_contract_does_not_list_is_reported() -> None:
    findings = judge_reachability(webhook_plan([{}]), NETWORK)
    [extra] = [f for f in findings if f.policy == EXTRA]
    assert not extra.mandatory and "9443/TCP" in extra.message and "default/any-pod" in extra.message


def test_a_namespace_without_dns_egress_is_caught() -> None:
    objects = [o for o in webhook_plan([{"ports": [{"port": 9443}]}]) if o is not DNS]
    objects.append(policy("hooks", "deny", {"podSelector": {}, "policyTypes": ["Egress"]}))
    [finding] = mandatory(objects)
    assert "kube-system/coredns" in finding and "53/UDP, 53/TCP" in finding


def test_internet_egress_from_an_isolated_namespace_is_mandatory() -> None:
    objects = webhook_plan([{"ports": [{"port": 9443}]}])
    objects.append(policy("hooks", "deny", {"podSelector": {}, "policyTypes": ["Egress"]}))
    objects.append(
        policy(
            "hooks",
            "https",
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}],
                        "ports": [{"port": 443}],
                    }
                ],
            },
        )
    )
    [finding] = mandatory(objects)
    assert finding.startswith(f"{INTERNET}: Deployment hooks/server")


def test_a_training_run_whose_pods_cannot_reach_each_other_is_caught(judged: Callable[[str], Judged]) -> None:
    """The run's own policy (pod ↔ pod of the run) removed: rendezvous and NCCL ports are denied."""
    stack = judged("aws-smb-dev")
    objects = [
        o
        for o in copy.deepcopy(stack.objects)
        if not (o["kind"] == "NetworkPolicy" and o["metadata"]["name"].startswith("digits-mlp"))
    ]
    found = [m for m in mandatory_on(objects, stack.network) if "reach each other" in m]
    assert len(found) == 1 and "29400/TCP" in found[0], found


def test_prometheus_cut_off_from_a_scrape_target_is_caught(judged: Callable[[str], Judged]) -> None:
    stack = judged("aws-enterprise-prod")
    objects = copy.deepcopy(stack.objects)
    for obj in objects:
        if obj["kind"] == "NetworkPolicy" and obj["metadata"]["name"] == "inference":
            obj["spec"]["ingress"] = [{"from": [{"podSelector": {}}]}]
    found = [m for m in mandatory_on(objects, stack.network) if "scrapes inference" in m]
    assert found and all("ml-inference/inference" in m for m in found)


def mandatory_on(objects: list[dict[str, Any]], network: str) -> list[str]:
    return [f"{f.subject}: {f.message}" for f in judge_reachability(objects, network) if f.mandatory]


@pytest.mark.parametrize("job", ["inference-rollout", "inference-drift-monitor"])
def test_a_rollout_or_monitor_cut_off_from_the_servers_or_the_registry_is_caught(
    judged: Callable[[str], Judged], job: str
) -> None:
    """Issues 29 and 40: the rollout and the drift monitor read every server's /metrics and move the
    registry's aliases. Without its own egress policy the namespace's default-deny cuts it off from the
    servers; without the namespace's ``allow-registry`` from the registry too."""
    stack = judged("aws-enterprise-prod")
    assert mandatory_on(stack.objects, stack.network) == []
    objects = [
        o
        for o in copy.deepcopy(stack.objects)
        if not (o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == job)
    ]
    found = [m for m in mandatory_on(objects, stack.network) if "reads the servers" in m]
    assert len(found) == 1 and found[0].startswith("Deployment ml-inference/inference: "), found
    assert f"deny ml-inference/{job} → 8080/TCP" in found[0]
    objects = [
        o
        for o in copy.deepcopy(stack.objects)
        if not (
            o["kind"] == "NetworkPolicy"
            and o["metadata"]["name"] == "allow-registry"
            and o["metadata"]["namespace"] == "ml-inference"
        )
    ]
    found = [m for m in mandatory_on(objects, stack.network) if f"{job} calls the model registry" in m]
    assert found, mandatory_on(objects, stack.network)
