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
size guard does (components/aws/node_pools.py). So does a reservation the read finds in a state not
documented (``unavailable``, in the SDKs' enum but not described) or without a property compared.
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
# The documented states that carry launches now or will (same reference); any other (``unavailable``, in
# the SDKs' CapacityReservationState enum, e.g. AWS SDK for Python v4, with no description) is a warning.
LIVE_STATES = frozenset({"active", "scheduled", "pending", "payment-pending", "assessing", "delayed"})
# A read that finds nothing. Cloud Control's GetResource answers ResourceNotFoundException (Cloud Control
# API reference, GetResource, Errors); a read handler answers NotFound for a deleted resource
# (CloudFormation resource handler contract, "read": "MUST return NotFound if the resource does not
# exist"), and deleting this resource is cancelling the reservation; terraform-provider-aws reads
# ``cancelled`` and ``expired`` reservations as not found too (internal/service/ec2/find.go,
# FindCapacityReservationByID). The provider pulumi-aws bridges does not pass that name on: its data source
# (terraform-provider-aws internal/service/cloudcontrol/resource_data_source.go, "reading Cloud Control API
# (%s) Resource (%s): %s") wraps findResource's error, which turns ResourceNotFoundException into a
# retry.NotFoundError (internal/service/cloudcontrol/resource.go), whose text is "couldn't find resource"
# (terraform-plugin-sdk v2 helper/retry/error.go). Either text is a reservation not found, refused: none
# carries the pool's launches.
NOT_FOUND = ("couldn't find resource", "ResourceNotFoundException")
# The properties compared, as the CloudFormation schema of AWS::EC2::CapacityReservation names them
# (``TotalInstanceCount`` is read-only there, ``InstanceCount`` the requested count).
COMPARED = ("InstanceType", "AvailabilityZone", "State", "ReservationType", "InstancePlatform", "Tenancy")
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
    # TotalInstanceCount (else InstanceCount); None where the read gives neither.
    instances: int | None
    # Which of ``COMPARED`` the read did not give (their checks are skipped, and said).
    missing: tuple[str, ...]

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Reservation:
        end = properties.get("EndDate")
        count = properties.get("TotalInstanceCount", properties.get("InstanceCount"))
        return cls(
            id=str(properties.get("Id", "")),
            instance_type=str(properties.get("InstanceType", "")),
            availability_zone=str(properties.get("AvailabilityZone", "")),
            state=str(properties.get("State", "")),
            reservation_type=str(properties.get("ReservationType", "")),
            platform=str(properties.get("InstancePlatform", "")),
            tenancy=str(properties.get("Tenancy", "")),
            end_date=datetime.datetime.fromisoformat(str(end).replace("Z", "+00:00")) if end else None,
            instances=int(count) if count is not None else None,
            missing=tuple(name for name in COMPARED if properties.get(name) in (None, "")),
        )


def reservation_doubts(reservation: Reservation) -> Iterator[str]:
    """What the read leaves unchecked: a state not documented, properties it did not give."""
    if reservation.state and reservation.state not in LIVE_STATES | ENDED_STATES:
        yield f"its state {reservation.state} is not one EC2 documents as carrying launches"
    absent = [*reservation.missing, *(["TotalInstanceCount"] if reservation.instances is None else [])]
    if absent:
        yield f"the read gave no {', '.join(absent)}, so that is not compared with the pool"


# What a node-group update launches beside the old nodes before it drains them: EKS raises the group's
# maximum and desired size "by the larger of either: up to twice the number of Availability Zones ...
# [or] the maxUnavailable of upgrade" (EKS user guide, "Understand each phase of node updates", scale up
# phase); a reserved pool is in one zone and the stack sets no updateConfig (maxUnavailable 1, the API's
# default).
UPDATE_SURGE = 2


def update_headroom(pool: NodePoolConfig, reservation: Reservation) -> str | None:
    """The warning for an On-Demand reservation with no room for a node update's surge at ``maxSize``:
    the update's targeted launches would fail there. A Capacity Block pool is at 0 before any update
    (docs/operations.md), so it has none to warn about."""
    assert pool.capacity_reservation is not None
    if pool.capacity_reservation.kind is not CapacityReservationKind.ODCR or reservation.instances is None:
        return None
    room = reservation.instances - UPDATE_SURGE
    if pool.max_size <= room:
        return None
    return (
        f"it reserves {reservation.instances} instances and a node update launches up to {UPDATE_SURGE} "
        f"beside the old nodes (EKS's scale-up phase), so an update with more than {room} nodes running "
        "fails its launches: before a node update scale the group down or raise the reservation's count "
        "(docs/operations.md, reserved pools)"
    )


def reservation_problems(
    pool: NodePoolConfig, reservation: Reservation, zones: Sequence[str], now: datetime.datetime
) -> Iterator[str]:
    """Why ``reservation`` cannot carry ``pool``'s launches; nothing when it can. ``zones``: the stack's
    zones in config's order (``availabilityZone`` N is the pool's subnet in ``zones[N]``)."""
    assert pool.capacity_reservation is not None
    given = set(COMPARED) - set(reservation.missing)
    if "InstanceType" in given and pool.instance_type != reservation.instance_type:
        yield f"it reserves {reservation.instance_type}, the pool's instanceType is {pool.instance_type}"
    zone = zones[pool.availability_zone or 0]
    if "AvailabilityZone" in given and reservation.availability_zone != zone:
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
    if "ReservationType" in given and reservation.reservation_type != wanted:
        other = _KINDS.get(reservation.reservation_type)
        fix = f": set kind: {other}" if other is not None else ""
        yield f"it is a {reservation.reservation_type} reservation, not {wanted}{fix}"
    if "InstancePlatform" in given and reservation.platform != PLATFORM:
        yield f"it reserves {reservation.platform} instances, the EKS node AMIs launch as {PLATFORM}"
    if "Tenancy" in given and reservation.tenancy != TENANCY:
        yield f"its tenancy is {reservation.tenancy}, the launch template's is {TENANCY}"
    # The launch template targets the reservation by id: a launch it has no capacity for fails (EC2 user
    # guide, "Launch instances into an existing Capacity Reservation": "If the selected Capacity
    # Reservation doesn't have enough capacity ... the instance launch fails"; API reference,
    # CapacityReservationSpecification). So the group may never grow past what it reserves.
    if reservation.instances is not None and pool.max_size > reservation.instances:
        yield (
            f"it reserves {reservation.instances} instance{'s' * (reservation.instances != 1)}, the pool's "
            f"maxSize is {pool.max_size}: launches past {reservation.instances} fail; set maxSize to at most "
            f"{reservation.instances}"
        )


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
    # Pools on the same reservation share its instances: their maxSizes together must fit it.
    sharing: dict[str, list[tuple[int, NodePoolConfig]]] = {}
    reads: dict[str, Reservation] = {}
    for index, pool in enumerate(config.node_pools):
        if pool.capacity_reservation is None:
            continue
        key = f"{PLATFORM_KEY}.nodePools[{index}].capacityReservation"
        reservation_id = pool.capacity_reservation.id
        sharing.setdefault(reservation_id, []).append((index, pool))
        try:
            reservation = (
                reads[reservation_id] if reservation_id in reads else read_reservation(reservation_id, parent)
            )
        except Exception as error:  # the provider's lookup error
            if any(text in str(error) for text in NOT_FOUND):
                problems.append(missing_reservation(key, pool.name, reservation_id, config.region))
            else:
                pulumi.log.warn(
                    unread_reservation(key, reservation_id, config.region, error), resource=parent
                )
            continue
        for doubt in reservation_doubts(reservation):
            pulumi.log.warn(
                f"{key} ({pool.name}): {reservation_id}: {doubt} (check with: "
                f"{DESCRIBE_COMMAND.format(region=config.region, id=reservation_id)})",
                resource=parent,
            )
        reads[reservation_id] = reservation
        found = list(reservation_problems(pool, reservation, zones, now))
        headroom = None if found else update_headroom(pool, reservation)
        if headroom is not None:
            pulumi.log.warn(f"{key} ({pool.name}): {reservation_id}: {headroom}", resource=parent)
        if found:
            problems.append(
                f"{key} ({pool.name}): {reservation_id} cannot carry the pool's launches: "
                + "; ".join(found)
                + f" (check with: {DESCRIBE_COMMAND.format(region=config.region, id=reservation_id)})"
            )
    for reservation_id, pools in sharing.items():
        total = sum(pool.max_size for _, pool in pools)
        count = reads[reservation_id].instances if reservation_id in reads else None
        if len(pools) > 1 and count is not None and total > count:
            keys = " and ".join(f"{PLATFORM_KEY}.nodePools[{index}] ({pool.name})" for index, pool in pools)
            problems.append(
                f"{keys} share {reservation_id}, which reserves {count} instances; their maxSizes add up to "
                f"{total}: launches past {count} fail; lower them to add up to at most {count}"
            )
    if problems:
        raise pulumi.RunError("\n".join(problems))


def missing_reservation(key: str, pool: str, reservation_id: str, region: str) -> str:
    """The refusal where the reservation is not found: none carries the pool's launches."""
    return (
        f"{key} ({pool}): {reservation_id} is not found in {region} (Cloud Control: not found): it is not "
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
