"""NetworkPolicy semantics, small and exact: may a packet go from one endpoint to another?

Source: kubernetes.io "Network Policies" and the NetworkPolicy API reference (networking.k8s.io/v1):
- a pod is isolated for ingress (egress) when some policy in its namespace selects it with ``Ingress``
  (``Egress``) in ``policyTypes``; an unisolated direction allows everything. ``podSelector: {}`` selects
  every pod of the namespace.
- ``policyTypes`` left out means ``Ingress``, plus ``Egress`` when the policy has egress rules.
- policies add up: a packet passes when any rule of any selecting policy allows it, on both sides (the
  source's egress and the destination's ingress).
- a rule with no ``from``/``to`` allows every peer; with no ``ports``, every port.
- a peer with only ``podSelector`` selects pods of the policy's own namespace; with only
  ``namespaceSelector``, every pod of the selected namespaces; with both in ONE peer, the pods matching
  ``podSelector`` in the selected namespaces (two peers, one of each, are ORed instead).
- ``ipBlock`` is for addresses outside the pod network (``except`` carves ranges out); pod IPs are left
  to the implementation, so a pod never counts as inside a block here.
- a port's ``protocol`` defaults to TCP; a named port resolves against the destination pod's container
  ports; ``endPort`` makes a range.
- hostNetwork pods are not selected by NetworkPolicies (their traffic is the node's).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judges.kube import Pod, labels_match


@dataclass(frozen=True)
class Endpoint:
    """One end of a flow: a pod, or an address range outside the pod network (the control plane, the
    internet)."""

    name: str
    pod: Pod | None = None
    network: ipaddress.IPv4Network | None = None

    @classmethod
    def of(cls, pod: Pod) -> Endpoint:
        return cls(f"{pod.owner.namespace}/{pod.owner.name}", pod=pod)

    @classmethod
    def outside(cls, name: str, network: str) -> Endpoint:
        return cls(name, network=ipaddress.IPv4Network(network))


class Policies:
    """The NetworkPolicies of a plan, and the namespace labels their selectors read."""

    def __init__(self, policies: Sequence[Mapping[str, Any]], namespaces: Mapping[str, Mapping[str, str]]):
        self.policies = list(policies)
        self.namespaces = namespaces

    def selecting(self, pod: Pod, direction: str) -> list[Mapping[str, Any]]:
        """The policies that isolate ``pod`` in ``direction`` (``Ingress`` or ``Egress``)."""
        if pod.host_network:
            return []
        return [
            policy
            for policy in self.policies
            if policy["metadata"].get("namespace") == pod.namespace
            and direction in policy_types(policy)
            and labels_match(policy["spec"].get("podSelector", {}), pod.labels)
        ]

    def isolated(self, pod: Pod, direction: str) -> bool:
        return bool(self.selecting(pod, direction))

    def allows(self, source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP") -> bool:
        """Whether a connection from ``source`` to ``destination:port/protocol`` gets through."""
        if source.pod is not None and not self._side(source.pod, "Egress", "to", destination, port, protocol):
            return False
        return destination.pod is None or self._side(
            destination.pod, "Ingress", "from", source, port, protocol
        )

    def _side(self, pod: Pod, direction: str, key: str, peer: Endpoint, port: int, protocol: str) -> bool:
        selecting = self.selecting(pod, direction)
        if not selecting:
            return True
        target = pod if direction == "Ingress" else peer.pod
        return any(
            self._rule(rule, key, str(policy["metadata"]["namespace"]), peer, target, port, protocol)
            for policy in selecting
            for rule in policy["spec"].get(direction.lower()) or []
        )

    def _rule(
        self,
        rule: Mapping[str, Any],
        key: str,
        namespace: str,
        peer: Endpoint,
        target: Pod | None,
        port: int,
        protocol: str,
    ) -> bool:
        peers = rule.get(key) or []
        ports = rule.get("ports") or []
        return (not peers or any(self._peer(p, namespace, peer) for p in peers)) and (
            not ports or any(_port(p, target, port, protocol) for p in ports)
        )

    def _peer(self, peer: Mapping[str, Any], namespace: str, endpoint: Endpoint) -> bool:
        if "ipBlock" in peer:
            return endpoint.network is not None and _in_block(peer["ipBlock"], endpoint.network)
        pod = endpoint.pod
        if pod is None or pod.host_network:
            return False
        if "namespaceSelector" in peer:
            in_namespace = labels_match(peer["namespaceSelector"], self.namespaces.get(pod.namespace, {}))
        else:
            in_namespace = pod.namespace == namespace
        return in_namespace and labels_match(peer.get("podSelector", {}), pod.labels)


def policy_types(policy: Mapping[str, Any]) -> list[str]:
    spec = policy["spec"]
    declared: list[str] | None = spec.get("policyTypes")
    if declared:
        return declared
    return ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def _in_block(block: Mapping[str, Any], network: ipaddress.IPv4Network) -> bool:
    """The whole range lies in ``cidr`` and touches none of its ``except`` ranges."""
    cidr = ipaddress.ip_network(block["cidr"])
    if cidr.version != network.version or not network.subnet_of(cidr):
        return False
    return not any(network.overlaps(ipaddress.ip_network(e)) for e in block.get("except") or [])


def _port(spec: Mapping[str, Any], target: Pod | None, port: int, protocol: str) -> bool:
    if spec.get("protocol", "TCP") != protocol:
        return False
    wanted = spec.get("port")
    if wanted is None:
        return True
    if isinstance(wanted, str) and not wanted.isdigit():
        return target is not None and target.named_port(wanted, protocol) == port
    first = int(wanted)
    return first <= port <= int(spec.get("endPort", first))
