"""Node pool sizes and zones, read from the subscription's Resource SKUs before anything is created.

Every pool's size must be offered to this subscription in the region (no ``Location`` restriction) and
support encryption at host, which every pool turns on (node_pools.py): the SKU's capability
``EncryptionAtHostSupported`` is ``True`` ("Use the Azure CLI to enable end-to-end encryption using
encryption at host": ``az vm list-skus ... --query "[?capabilities[?name=='EncryptionAtHostSupported' &&
value=='True']]"``). Otherwise the agent pool fails after the cluster exists (review azure.md D2).

Zonal node pools: a pool listed under ``azure.poolZones`` spreads its nodes over those zones.

Which VM sizes a region offers in which zones, to which subscription, is not published as a table; it is
what the Resource SKUs API answers (``az vm list-skus --location <region> --zone``, REST "Resource Skus -
List", Microsoft.Compute 2021-07-01): ``locationInfo[].zones`` lists the size's zones, and a
``restrictions[]`` entry of type ``Location`` (the whole region) or ``Zone`` (its
``restrictionInfo.zones``) withholds them from this subscription (``NotAvailableForSubscription``). So
zones are opt-in per pool and the program reads that answer at preview, before anything is created, and
stops with the command to look for itself when a pool asks for a zone its size does not have; an
unreadable answer counts as not offered.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pulumi

from components.azure.arm import ArmReader, ArmReadError, arm_reader
from components.config import NodePoolConfig, PlatformConfig

COMPUTE_SKUS_API_VERSION = "2021-07-01"
ENCRYPTION_AT_HOST = "EncryptionAtHostSupported"


def pool_zones(config: PlatformConfig, pool: NodePoolConfig) -> list[str]:
    """The zones a pool's nodes go to: its ``poolZones`` entry, or its one pinned zone (config counts
    ``availabilityZone`` from 0; Azure names zones "1" to "3"); empty for a regional pool."""
    if pool.availability_zone is not None:
        return [str(pool.availability_zone + 1)]
    return list(config.azure.pool_zones.get(pool.name, []))


def offered_zones(skus: list[Mapping[str, Any]], size: str, location: str) -> set[str]:
    """The zones of ``location`` where this subscription may run ``size``."""
    zones: set[str] = set()
    for sku in skus:
        if sku.get("resourceType") != "virtualMachines" or sku.get("name") != size:
            continue
        for info in sku.get("locationInfo", []):
            if str(info.get("location", "")).lower() == location:
                zones |= set(info.get("zones", []))
        for restriction in sku.get("restrictions", []):
            info = restriction.get("restrictionInfo", {})
            if location not in [str(loc).lower() for loc in info.get("locations", [])]:
                continue
            if restriction.get("type") == "Location":
                return set()
            if restriction.get("type") == "Zone":
                zones -= set(info.get("zones", []))
    return zones


def offered_in_region(skus: list[Mapping[str, Any]], size: str, location: str) -> Mapping[str, Any] | None:
    """The SKU entry of ``size`` when this subscription may run it in ``location`` at all."""
    for sku in skus:
        if sku.get("resourceType") != "virtualMachines" or sku.get("name") != size:
            continue
        listed = any(str(i.get("location", "")).lower() == location for i in sku.get("locationInfo", []))
        restricted = any(
            r.get("type") == "Location"
            and location in [str(loc).lower() for loc in r.get("restrictionInfo", {}).get("locations", [])]
            for r in sku.get("restrictions", [])
        )
        return sku if listed and not restricted else None
    return None


def _capability(sku: Mapping[str, Any], name: str) -> str | None:
    return next((str(c.get("value")) for c in sku.get("capabilities", []) if c.get("name") == name), None)


def _zone_problems(arm: ArmReader, config: PlatformConfig) -> Iterator[str]:
    location = config.region
    try:
        answer = arm.get(
            f"/subscriptions/{arm.subscription_id}/providers/Microsoft.Compute/skus",
            {"api-version": COMPUTE_SKUS_API_VERSION, "$filter": f"location eq '{location}'"},
        )
        skus: list[Mapping[str, Any]] = answer.get("value", [])
    except ArmReadError as exc:
        skus, unreadable = [], f" (Resource SKUs unreadable: {exc})"
    else:
        unreadable = ""
    check = f"`az vm list-skus --location {location} --size {{size}} --all --output table`"
    for pool in config.node_pools:
        size = pool.instance_type
        sku = offered_in_region(skus, size, location)
        if sku is None:
            yield (
                f"node pool '{pool.name}': {size} is not offered to this subscription in {location}"
                f"{unreadable}; check with {check.format(size=size)} and pick an offered size"
            )
        elif _capability(sku, ENCRYPTION_AT_HOST) != "True":
            yield (
                f"node pool '{pool.name}': {size} does not support encryption at host in {location}, which "
                f"every pool turns on; check with {check.format(size=size)} and pick a size that does"
            )
    for pool, zones in [(p, z) for p in config.node_pools if (z := pool_zones(config, p))]:
        missing = sorted(set(zones) - offered_zones(skus, pool.instance_type, location))
        if missing:
            yield (
                f"node pool '{pool.name}': {pool.instance_type} is not offered to this subscription in "
                f"{location} zone(s) {', '.join(missing)}{unreadable}; check with "
                f"`az vm list-skus --location {location} --size {pool.instance_type} --zone --all "
                f"--output table` and change the pool's zones"
            )


def require_zones(config: PlatformConfig) -> None:
    """Raise one ``RunError`` naming every pool whose size is not offered in the region (or its zones) or
    lacks encryption at host."""
    with arm_reader() as arm:
        problems = list(_zone_problems(arm, config))
    if problems:
        raise pulumi.RunError("\n".join(problems))
