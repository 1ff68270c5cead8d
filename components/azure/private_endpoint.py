"""One private endpoint: a NIC in the endpoint subnet for one sub-resource of a service, plus the DNS
record that makes the service's usual hostname resolve to it from inside the VNet."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import network

from components.azure.scope import AzureScope


@dataclass(frozen=True)
class PrivateEndpointArgs:
    scope: AzureScope
    subnet_id: pulumi.Input[str]
    # The service resource and its Private Link sub-resource ("blob", "file", "registry").
    target_id: pulumi.Input[str]
    group_id: str
    dns_zone_id: pulumi.Input[str]


class PrivateEndpoint(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: PrivateEndpointArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:azure:PrivateEndpoint", name, None, opts)
        scope = args.scope
        endpoint = network.PrivateEndpoint(
            f"{name}-pe",
            subnet={"id": args.subnet_id},
            private_link_service_connections=[
                {
                    "name": args.group_id,
                    "private_link_service_id": args.target_id,
                    "group_ids": [args.group_id],
                }
            ],
            **scope.placed,
            opts=scope.opts(self),
        )
        # The zone group keeps the A record in step with the endpoint's IP for the endpoint's lifetime. Until
        # it exists, a client in the VNet does not resolve the service to the endpoint: what reaches the
        # service through it (the registry push, registry.py) waits for it.
        self.zone_group = network.PrivateDnsZoneGroup(
            f"{name}-dns",
            resource_group_name=scope.resource_group_name,
            private_endpoint_name=endpoint.name,
            private_dns_zone_configs=[{"name": args.group_id, "private_dns_zone_id": args.dns_zone_id}],
            opts=scope.opts(self),
        )
        self.endpoint_id: pulumi.Output[str] = endpoint.id
        self.register_outputs({"endpointId": endpoint.id})
