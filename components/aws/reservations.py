"""Before anything is registered: read each pool's capacity reservation and refuse a pool it cannot carry
(review 38 N1: the config only knew the reservation's id and kind).

An instance launches into a reservation only with its attributes, "instance type, platform, Availability
Zone, and tenancy", and while it "is in the active state" (EC2 user guide, "Launch instances into an
existing Capacity Reservation"); a Capacity Block's instances launch only inside its window
(EC2 user guide, "Capacity Blocks for ML"). Otherwise the node group is made, and its launches fail later
with InsufficientInstanceCapacity / ``ReservationCapacityExceeded`` or never start, long after ``pulumi
up`` reported success. So the program reads the reservation and compares.

The read: pulumi-aws 7.51 has no data source for an On-Demand Capacity Reservation (its
``ec2.get_capacity_block_reservation`` returns only ``reservation_type`` ``capacity-block``, per its
docstring), so both kinds are read through the provider's Cloud Control data source
(``cloudcontrol.get_resource``, GetResource on ``AWS::EC2::CapacityReservation``, whose read handler calls
DescribeCapacityReservations), which also reports ``ReservationType``: one read checks the configured kind.
The deployer needs ``cloudformation:GetResource`` and ``ec2:DescribeCapacityReservations``. A reservation
the read does not find is refused (``NOT_FOUND`` below: cancelled and ended ones read so); where the read
fails otherwise (no right, throttling), the plan warns and says what it did not check, as the node-group
size guard does (components/aws/node_pools.py).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_aws import cloudcontrol

from components.config import PLATFORM_KEY, CapacityReservationKind, NodePoolConfig, PlatformConfig

RESOURCE_TYPE = "AWS::EC2::CapacityReservation"
# EC2 API reference, CapacityReservation ``State``: the states in which no instance will launch into it
# again (``expired``, ``cancelled``, ``failed``, ``payment-failed``, ``unsupported``). ``active`` carries
# launches; ``scheduled`` (a Capacity Block or future-dated reservation before its start), and ``pending``,
# ``payment-pending``, ``assessing`` and ``delayed`` (on their way to it) carry none yet but will.
ENDED_STATES = frozenset({"expired", "cancelled", "cancelling", "failed", "payment-failed", "unsupported"})
# Cloud Control's GetResource error for an identifier it cannot read (Cloud Control API reference,
# GetResource, Errors). A read handler answers NotFound for a deleted resource (CloudFormation resource
# handler contract, "read": "MUST return NotFound if the resource does not exist"), and deleting this
# resource is cancelling the reservation; terraform-provider-aws reads ``cancelled`` and ``expired``
# reservations as not found too (internal/service/ec2/find.go, FindCapacityReservationByID). So one that is
# not found is refused: none carries the pool's launches.
NOT_FOUND = "ResourceNotFoundException"
# EC2 API reference, CapacityReservation ``ReservationType``: ``default`` (an ODCR) or ``capacity-block``.
RESERVATION_TYPES = {
    CapacityReservationKind.ODCR: "default",
    CapacityReservationKind.CAPACITY_BLOCK: "capacity-block",
}
_KINDS = {reservation_type: kind for kind, reservation_type in RESERVATION_TYPES.items()}
# What the EKS AL2023 node AMIs launch as (EC2 ``InstancePlatform``), and the launch template's tenancy
# (none set: ``default``).
PLATFORM = "Linux/UNIX"
TENANCY = "default"
DESCRIBE_COMMAND = "aws ec2 describe-capacity-reservations --region {region} --capacity-reservation-ids {id}"


@dataclass(frozen=True)
class Reservation:
    """A capacity reservation as DescribeCapacityReservations reports it (Cloud Control's properties)."""

    id: str
    instance_type: str
    availability_zone: str
    state: str
    reservation_type: str
    platform: str
    tenancy: str
    end_date: datetime.datetime | None

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Reservation:
        end = properties.get("EndDate")
        return cls(
            id=str(properties.get("Id", "")),
            instance_type=str(properties.get("InstanceType", "")),
            availability_zone=str(properties.get("AvailabilityZone", "")),
            state=str(properties.get("State", "")),
            reservation_type=str(properties.get("ReservationType", "default")),
            platform=str(properties.get("InstancePlatform", PLATFORM)),
            tenancy=str(properties.get("Tenancy", TENANCY)),
            end_date=datetime.datetime.fromisoformat(str(end).replace("Z", "+00:00")) if end else None,
        )


def reservation_problems(
    pool: NodePoolConfig, reservation: Reservation, zones: Sequence[str], now: datetime.datetime
) -> Iterator[str]:
    """Why ``reservation`` cannot carry ``pool``'s launches; nothing when it can. ``zones``: the stack's
    zones in config's order (``availabilityZone`` N is the pool's subnet in ``zones[N]``)."""
    assert pool.capacity_reservation is not None
    if pool.instance_type != reservation.instance_type:
        yield f"it reserves {reservation.instance_type}, the pool's instanceType is {pool.instance_type}"
    zone = zones[pool.availability_zone or 0]
    if reservation.availability_zone != zone:
        where = (
            f"set availabilityZone to {zones.index(reservation.availability_zone)}"
            if reservation.availability_zone in zones
            else "a zone the stack's network does not span (network.availabilityZones)"
        )
        yield (
            f"it is in {reservation.availability_zone}, the pool's subnet in {zone} (availabilityZone "
            f"{pool.availability_zone or 0}): {where}"
        )
    if reservation.state in ENDED_STATES:
        yield f"it is {reservation.state}: no instance launches into it again"
    elif reservation.end_date is not None and reservation.end_date <= now:
        yield f"it ended at {reservation.end_date.isoformat()}"
    wanted = RESERVATION_TYPES[pool.capacity_reservation.kind]
    if reservation.reservation_type != wanted:
        other = _KINDS.get(reservation.reservation_type)
        fix = f": set kind: {other}" if other is not None else ""
        yield f"it is a {reservation.reservation_type} reservation, not {wanted}{fix}"
    if reservation.platform != PLATFORM:
        yield f"it reserves {reservation.platform} instances, the EKS node AMIs launch as {PLATFORM}"
    if reservation.tenancy != TENANCY:
        yield f"its tenancy is {reservation.tenancy}, the launch template's is {TENANCY}"


def read_reservation(reservation_id: str, parent: pulumi.Resource) -> Reservation:
    """The reservation, read through Cloud Control (the identifier is the ``cr-`` id). Raises the
    provider's lookup error."""
    found = cloudcontrol.get_resource(
        type_name=RESOURCE_TYPE, identifier=reservation_id, opts=pulumi.InvokeOptions(parent=parent)
    )
    return Reservation.from_properties(json.loads(found.properties))


def refuse_unusable_reservations(
    config: PlatformConfig, zones: Sequence[str], now: datetime.datetime, parent: pulumi.Resource
) -> None:
    """One line per reserved pool its reservation cannot carry, naming the stack key, what the
    reservation is and what differs; a ``RunError`` (``mlplatform plan``/``check`` exit 2, ``pulumi up``
    stops before it makes anything). A reservation that cannot be read is a warning, not silence."""
    problems = []
    for index, pool in enumerate(config.node_pools):
        if pool.capacity_reservation is None:
            continue
        key = f"{PLATFORM_KEY}.nodePools[{index}].capacityReservation"
        reservation_id = pool.capacity_reservation.id
        try:
            reservation = read_reservation(reservation_id, parent)
        except Exception as error:  # the provider's lookup error
            if NOT_FOUND in str(error):
                problems.append(missing_reservation(key, pool.name, reservation_id, config.region))
            else:
                pulumi.log.warn(
                    unread_reservation(key, reservation_id, config.region, error), resource=parent
                )
            continue
        found = list(reservation_problems(pool, reservation, zones, now))
        if found:
            problems.append(
                f"{key} ({pool.name}): {reservation_id} cannot carry the pool's launches: "
                + "; ".join(found)
                + f" (check with: {DESCRIBE_COMMAND.format(region=config.region, id=reservation_id)})"
            )
    if problems:
        raise pulumi.RunError("\n".join(problems))


def missing_reservation(key: str, pool: str, reservation_id: str, region: str) -> str:
    """The refusal where the reservation is not found: none carries the pool's launches."""
    return (
        f"{key} ({pool}): {reservation_id} is not found in {region} (Cloud Control {NOT_FOUND}): it is not "
        "this account's, or it was cancelled or has ended, which a read reports as not found; name a "
        f"reservation that exists (check with: {DESCRIBE_COMMAND.format(region=region, id=reservation_id)})"
    )


def unread_reservation(key: str, reservation_id: str, region: str, error: Exception) -> str:
    """The warning where a reservation could not be read for another reason (rights, throttling)."""
    reason = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return (
        f"{key}: could not read {reservation_id} ({reason}): its instance type, zone and state are not "
        "checked against the pool, and launches it cannot carry fail after the node group is made; "
        "the deployer needs cloudformation:GetResource and ec2:DescribeCapacityReservations (check with: "
        f"{DESCRIBE_COMMAND.format(region=region, id=reservation_id)})"
    )
