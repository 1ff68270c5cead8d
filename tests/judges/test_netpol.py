"""The NetworkPolicy evaluator against the semantics of the NetworkPolicy API reference and
kubernetes.io "Network Policies" (each case names the rule it checks)."""

from __future__ import annotations

from typing import Any

from judges.findings import Subject
from judges.kube import Pod
from judges.netpol import Endpoint, Policies, policy_types

NAMESPACES = {
    "a": {"kubernetes.io/metadata.name": "a", "team": "x"},
    "b": {"kubernetes.io/metadata.name": "b", "team": "y"},
}


def pod(
    namespace: str, labels: dict[str, str], ports: list[dict[str, Any]] | None = None, **spec: Any
) -> Endpoint:
    container = {"name": "c", "ports": ports or []}
    return Endpoint.of(
        Pod(
            Subject("Pod", namespace, "-".join(labels.values()) or "p"),
            namespace,
            labels,
            {"containers": [container], **spec},
        )
    )


def policy(namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": namespace}, "spec": spec}


def allows(
    policies: list[dict[str, Any]], source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    return Policies(policies, NAMESPACES).allows(source, destination, port, protocol)


WEB, CLIENT, OTHER = (
    pod("a", {"app": "web"}, [{"name": "http", "containerPort": 8080}]),
    pod("a", {"app": "client"}),
    pod("b", {"app": "client"}),
)


def test_no_policy_allows_everything() -> None:
    assert allows([], CLIENT, WEB, 8080) and allows([], OTHER, WEB, 1, "UDP")


def test_an_empty_pod_selector_selects_every_pod_and_no_rules_deny_all_ingress() -> None:
    deny = policy("a", {"podSelector": {}})
    assert not allows([deny], CLIENT, WEB, 8080)
    assert allows([deny], WEB, OTHER, 9999), "ingress-only: egress stays open"


def test_policy_types_default_to_ingress_plus_egress_when_egress_rules_exist() -> None:
    assert policy_types(policy("a", {"podSelector": {}})) == ["Ingress"]
    assert policy_types(policy("a", {"podSelector": {}, "egress": []})) == ["Ingress"]
    assert policy_types(policy("a", {"podSelector": {}, "egress": [{}]})) == ["Ingress", "Egress"]
    egress_only = policy("a", {"podSelector": {}, "policyTypes": ["Egress"]})
    assert not allows([egress_only], CLIENT, OTHER, 80) and allows([egress_only], OTHER, WEB, 8080)


def test_namespace_and_pod_selector_in_one_peer_is_and_in_two_peers_is_or() -> None:
    both = {
        "namespaceSelector": {"matchLabels": {"team": "y"}},
        "podSelector": {"matchLabels": {"app": "web"}},
    }
    one_peer = policy("a", {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [both]}]})
    assert not allows([one_peer], OTHER, WEB, 8080), "client pods of team y are not web pods"
    assert not allows([one_peer], CLIENT, WEB, 8080), "namespace a is not team y"
    two_peers = policy(
        "a",
        {
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [
                {
                    "from": [
                        {"namespaceSelector": both["namespaceSelector"]},
                        {"podSelector": both["podSelector"]},
                    ]
                }
            ],
        },
    )
    assert allows([two_peers], OTHER, WEB, 8080), "every pod of team y's namespaces"
    assert not allows([two_peers], CLIENT, WEB, 8080), (
        "a pod selector alone is the policy's namespace's web pods"
    )


def test_a_pod_selector_alone_means_the_policys_own_namespace() -> None:
    same = policy(
        "a", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}]}
    )
    assert allows([same], CLIENT, WEB, 8080) and not allows([same], OTHER, WEB, 8080)


def test_named_ports_resolve_on_the_destination_pod_and_protocol_defaults_to_tcp() -> None:
    named = policy("a", {"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]})
    assert allows([named], CLIENT, WEB, 8080)
    assert not allows([named], CLIENT, WEB, 8081)
    assert not allows([named], CLIENT, WEB, 8080, "UDP")
    assert not allows([named], CLIENT, pod("a", {"app": "bare"}), 8080), "no container port of that name"


def test_end_port_makes_a_range() -> None:
    ranged = policy("a", {"podSelector": {}, "ingress": [{"ports": [{"port": 32000, "endPort": 32768}]}]})
    assert allows([ranged], CLIENT, WEB, 32768) and not allows([ranged], CLIENT, WEB, 32769)


def test_ip_block_except_carves_out_ranges_and_never_matches_pods() -> None:
    block = policy(
        "a",
        {
            "podSelector": {},
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}],
        },
    )
    assert allows([block], Endpoint.outside("vpc", "10.2.0.0/24"), WEB, 8080)
    assert not allows([block], Endpoint.outside("carved", "10.1.2.0/24"), WEB, 8080)
    assert not allows([block], Endpoint.outside("wider", "10.0.0.0/7"), WEB, 8080)
    assert not allows([block], CLIENT, WEB, 8080)


def test_policies_add_up_and_both_ends_must_allow() -> None:
    deny_all = policy("a", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    open_web = policy("a", {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{}]})
    assert not allows([deny_all, open_web], CLIENT, WEB, 8080), "the client's egress is still denied"
    assert allows([deny_all, open_web], OTHER, WEB, 8080)
    assert allows([deny_all, open_web], Endpoint.outside("api", "10.0.0.0/16"), WEB, 8080)


def test_host_network_pods_are_not_isolated_or_selected() -> None:
    node = pod("a", {"app": "web"}, hostNetwork=True)
    deny = policy("a", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    assert allows([deny], OTHER, node, 9100)
