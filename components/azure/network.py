"""The stack's virtual network: a node subnet, a private-endpoint subnet, their NSGs and private DNS.

Pods do not take VNet addresses (Azure CNI overlay, see cluster.py), so the VNet is split into quarters:
nodes, private endpoints, the API server's subnet (its first /28) and one left free (a firewall). The API
server subnet is AKS's "API Server VNet Integration" subnet, which KMS etcd encryption with a private
vault requires (cluster.py): delegated to ``Microsoft.ContainerService/managedClusters``, a /28 at least,
for nothing else ("Create a private AKS cluster with API Server VNet Integration using bring-your-own
VNet", learn.microsoft.com/azure/aks/api-server-vnet-integration).
Each subnet has an NSG that denies traffic from the internet explicitly, ahead of Azure's default rules.
With ``azure.outboundType: userDefinedRouting`` the node subnet gets a route table sending all egress
(0.0.0.0/0) to the customer's firewall, which AKS requires to exist on the subnet before the cluster
(AKS egress docs, "outbound type userDefinedRouting"; "Control egress traffic using Azure Firewall").
With ``userAssignedNATGateway`` the node subnet gets the stack's NAT gateway (Standard, one static public
IP), which AKS likewise requires on the subnet before the cluster: "use userAssignedNatGateway when
bringing your own VNet; the NAT gateway must exist before the cluster" (AKS egress docs, "outbound
types"; learn.microsoft.com/azure/aks/nat-gateway, "Create an AKS cluster with a user-assigned NAT
gateway").
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import network, privatedns

from components.azure.scope import AzureScope
from components.config import OutboundType, managed_registry_database

# Our choice: the NAT gateway drops idle outbound flows after 4 minutes (the Azure default, 4-120).
_NAT_IDLE_TIMEOUT_MINUTES = 4
# Private Link DNS zones per service (learn.microsoft.com/azure/private-link/private-endpoint-dns).
BLOB_ZONE = "privatelink.blob.core.windows.net"
FILE_ZONE = "privatelink.file.core.windows.net"
REGISTRY_ZONE = "privatelink.azurecr.io"
VAULT_ZONE = "privatelink.vaultcore.azure.net"
PRIVATE_DNS_ZONES = (BLOB_ZONE, FILE_ZONE, REGISTRY_ZONE, VAULT_ZONE)


# The smallest API server subnet AKS supports (API Server VNet Integration docs); AKS reserves at least 9
# of its addresses.
API_SERVER_PREFIX_LENGTH = 28
API_SERVER_DELEGATION = "Microsoft.ContainerService/managedClusters"
# The registry's PostgreSQL flexible server takes a subnet delegated to it alone ("Network with private
# access (VNet integration) for Azure Database for PostgreSQL flexible server": a delegated subnet holds
# flexible servers only); the /28 after the API server's in the same quarter.
DATABASE_DELEGATION = "Microsoft.DBforPostgreSQL/flexibleServers"


@dataclass(frozen=True)
class SubnetPlan:
    nodes: str
    endpoints: str
    api_server: str
    database: str


def subnet_plan(cidr: str) -> SubnetPlan:
    """Quarters of the VNet; config guarantees /20 or larger, so nodes get at least a /22 (1019 hosts)."""
    quarters = list(ipaddress.IPv4Network(cidr).subnets(prefixlen_diff=2))
    api_server, database, *_ = quarters[2].subnets(new_prefix=API_SERVER_PREFIX_LENGTH)
    return SubnetPlan(
        nodes=str(quarters[0]), endpoints=str(quarters[1]), api_server=str(api_server), database=str(database)
    )


def _deny_internet_inbound() -> dict[str, object]:
    """Azure's default rules already end in DenyAllInBound (priority 65500); this rule states the intent
    in the template, where reviewers and policy checks see it, and outranks default allow rules."""
    return {
        "name": "deny-internet-inbound",
        "priority": 4000,
        "direction": "Inbound",
        "access": "Deny",
        "protocol": "*",
        "source_address_prefix": "Internet",
        "source_port_range": "*",
        "destination_address_prefix": "*",
        "destination_port_range": "*",
    }


_HTTPS = [{"protocol": "TCP", "port": 443}]


def workload_egress(cidr: str) -> tuple[dict[str, Any], ...]:
    """NetworkPolicy egress a workload needs beyond DNS: HTTPS to the private endpoints' subnet (blob
    storage resolves there through the Private Link zone). Nothing on the internet: neither workload
    calls an Azure API (models and outputs are NFS mounts made by the node), so no Entra ID token
    exchange is needed, and public HTTPS would be an exfiltration path from pods holding restricted data
    (cluster review C1). A hook that needs a public endpoint names its ranges
    (workloads.training.datasetEgressCidrs).
    """
    return ({"to": [{"ipBlock": {"cidr": subnet_plan(cidr).endpoints}}], "ports": _HTTPS},)


@dataclass(frozen=True)
class NetworkArgs:
    scope: AzureScope


class AzureNetwork(pulumi.ComponentResource):
    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:Network", name, None, opts)
        self._scope = scope = args.scope
        plan = subnet_plan(scope.config.network.cidr)
        self.route_table_id = self._egress_routes(name)
        self.nat_gateway_id = self._nat_gateway(name)
        vnet = network.VirtualNetwork(
            f"{name}-vnet",
            address_space={"address_prefixes": [scope.config.network.cidr]},
            **scope.placed,
            opts=scope.opts(self),
        )
        self.vnet_id: pulumi.Output[str] = vnet.id
        self.vnet = vnet
        self.node_subnet_id = self._subnet(
            f"{name}-nodes",
            vnet,
            plan.nodes,
            endpoints=False,
            route_table_id=self.route_table_id,
            nat_gateway_id=self.nat_gateway_id,
        )
        self.endpoint_subnet_id = self._subnet(f"{name}-endpoints", vnet, plan.endpoints, endpoints=True)
        self.api_server_subnet_id = self._subnet(
            f"{name}-apiserver", vnet, plan.api_server, endpoints=False, delegation=API_SERVER_DELEGATION
        )
        self.database_subnet_id = (
            self._subnet(
                f"{name}-database", vnet, plan.database, endpoints=False, delegation=DATABASE_DELEGATION
            )
            if managed_registry_database(scope.config.tier, scope.config.cloud)
            and scope.config.workloads.registry.enabled
            else None
        )
        self.dns_zone_ids: dict[str, pulumi.Output[str]] = {
            zone: self._private_zone(f"{name}-{zone.split('.')[1]}-dns", zone, vnet)
            for zone in PRIVATE_DNS_ZONES
        }
        self.register_outputs(
            {
                "vnetId": vnet.id,
                "nodeSubnetId": self.node_subnet_id,
                "endpointSubnetId": self.endpoint_subnet_id,
                "apiServerSubnetId": self.api_server_subnet_id,
            }
        )

    def _egress_routes(self, name: str) -> pulumi.Output[str] | None:
        """The node subnet's route table for userDefinedRouting: everything leaves through the firewall."""
        azure = self._scope.config.azure
        if azure.outbound_type is not OutboundType.USER_DEFINED_ROUTING:
            return None
        scope = self._scope
        table = network.RouteTable(
            f"{name}-egress-routes",
            routes=[
                {
                    "name": "egress-through-firewall",
                    "address_prefix": "0.0.0.0/0",
                    "next_hop_type": "VirtualAppliance",
                    "next_hop_ip_address": azure.egress_firewall_ip,
                }
            ],
            # Routes learned over BGP (an ExpressRoute or VPN gateway) must not bypass the firewall.
            disable_bgp_route_propagation=True,
            **scope.placed,
            opts=scope.opts(self),
        )
        table_id: pulumi.Output[str] = table.id
        return table_id

    def _nat_gateway(self, name: str) -> pulumi.Output[str] | None:
        """The node subnet's NAT gateway for userAssignedNATGateway, with its static public IP."""
        scope = self._scope
        if scope.config.azure.outbound_type is not OutboundType.USER_ASSIGNED_NAT_GATEWAY:
            return None
        address = network.PublicIPAddress(
            f"{name}-egress-ip",
            sku={"name": "Standard", "tier": "Regional"},
            public_ip_allocation_method="Static",
            public_ip_address_version="IPv4",
            **scope.placed,
            opts=scope.opts(self),
        )
        gateway = network.NatGateway(
            f"{name}-egress-nat",
            sku={"name": "Standard"},
            idle_timeout_in_minutes=_NAT_IDLE_TIMEOUT_MINUTES,
            public_ip_addresses=[{"id": address.id}],
            **scope.placed,
            opts=scope.opts(self),
        )
        gateway_id: pulumi.Output[str] = gateway.id
        return gateway_id

    def _subnet(
        self,
        name: str,
        vnet: network.VirtualNetwork,
        prefix: str,
        *,
        endpoints: bool,
        route_table_id: pulumi.Input[str] | None = None,
        nat_gateway_id: pulumi.Input[str] | None = None,
        delegation: str | None = None,
    ) -> pulumi.Output[str]:
        scope = self._scope
        # The delegated API server subnet is AKS's: a public API server (SMB) is reached from the internet
        # through it, and AKS names the flows an NSG there must let through (API Server VNet Integration
        # docs, "NSG security rules"); our deny-internet rule guards the subnets we own.
        nsg = (
            None
            if delegation
            else network.NetworkSecurityGroup(
                f"{name}-nsg",
                security_rules=[_deny_internet_inbound()],
                **scope.placed,
                opts=scope.opts(self),
            )
        )
        subnet = network.Subnet(
            f"{name}-subnet",
            resource_group_name=scope.resource_group_name,
            virtual_network_name=vnet.name,
            address_prefix=prefix,
            network_security_group={"id": nsg.id} if nsg is not None else None,
            # Private endpoints obey the subnet's NSG only when network policies are enabled on it.
            private_endpoint_network_policies="Enabled" if endpoints else None,
            route_table={"id": route_table_id} if route_table_id is not None else None,
            nat_gateway={"id": nat_gateway_id} if nat_gateway_id is not None else None,
            delegations=[{"name": "delegation", "service_name": delegation}] if delegation else None,
            opts=scope.opts(self),
        )
        subnet_id: pulumi.Output[str] = subnet.id
        return subnet_id

    def _private_zone(self, name: str, zone: str, vnet: network.VirtualNetwork) -> pulumi.Output[str]:
        """A Private Link zone linked to the VNet, so the service's public name resolves to its endpoint.

        Private DNS zones are global resources (location "global"): they hold record names (our account
        and registry names), not customer data.
        """
        scope = self._scope
        private_zone = privatedns.PrivateZone(
            name,
            resource_group_name=scope.resource_group_name,
            private_zone_name=zone,
            location="global",
            tags=scope.tags,
            opts=scope.opts(self),
        )
        privatedns.VirtualNetworkLink(
            f"{name}-link",
            resource_group_name=scope.resource_group_name,
            private_zone_name=private_zone.name,
            virtual_network={"id": vnet.id},
            registration_enabled=False,
            location="global",
            tags=scope.tags,
            opts=scope.opts(self),
        )
        zone_id: pulumi.Output[str] = private_zone.id
        return zone_id
