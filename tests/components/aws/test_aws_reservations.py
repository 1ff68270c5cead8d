"""Review 38 N1: a pool's capacity reservation is read before anything is made and refused where it cannot
carry the pool's launches. An instance launches into a reservation only with its attributes, "instance
type, platform, Availability Zone, and tenancy", and while it "is in the active state" (EC2 user guide,
"Launch instances into an existing Capacity Reservation"); a reservation in a terminal state (EC2 API
reference, CapacityReservation ``State``: ``expired``, ``cancelled``...) carries nothing again. The read is
the provider's Cloud Control data source on ``AWS::EC2::CapacityReservation``
(components/aws/reservations.py), answered under the mocks from ``ExistingAccount.reservations``; a read
that finds nothing is refused, one that fails otherwise (rights, throttling) a warning.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components.config import PLATFORM_KEY
from mlplatform.errors import InputError
from mlplatform.mocks import ExistingAccount, PlanMocks
from tests.components.aws.aws_plan_support import NOW, build_platform, capacity_block, parse, reservation
from tests.components.aws.test_aws_node_pool_sizes import _config, _Recording
from tests.stack_variants import plan_config

STACK = "aws-enterprise-prod"
BLOCK = "cr-0b10c000000000001"
ODCR = "cr-0dc40000000000002"
UNKNOWN = "cr-0ff00000000000003"
# The stack's pools: gpu-efa (p5en.48xlarge) on a Capacity Block in zone 0 (me-central-1a under the mocks),
# inference (c7i.4xlarge) on an ODCR in zone 1 (me-central-1b).
POOLS = {
    "gpu-efa": {"capacityReservation": {"id": BLOCK, "kind": "capacity-block"}, "minSize": 0},
    "inference": {"capacityReservation": {"id": ODCR, "kind": "odcr"}, "availabilityZone": 1},
}


def _account(**reservations: dict[str, Any]) -> ExistingAccount:
    found = {BLOCK: capacity_block(), ODCR: reservation("c7i.4xlarge", "me-central-1b")}
    return ExistingAccount(reservations=found | reservations)


def _refused(account: ExistingAccount) -> str:
    """The one refusal line; nothing of the stack was registered before it."""
    mocks = _Recording(account)
    with pytest.raises(pulumi.RunError) as refused:
        build_platform(parse(_config(**POOLS), STACK), mocks)
    assert [t for t in mocks.created if not t.startswith("ml-platform:")] == []
    [line] = str(refused.value).splitlines()
    return line


READ = "aws:cloudcontrol/getResource:getResource"


class _ReadDenied(PlanMocks):
    """The deployer lacks the read's rights: Cloud Control refuses GetResource (AccessDeniedException)."""

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if (
            args.token == "aws:cloudcontrol/getResource:getResource"
            and args.args.get("identifier") == UNKNOWN
        ):
            return {}, [
                ("identifier", f"reading {args.args.get('typeName')} ({UNKNOWN}): AccessDeniedException")
            ]
        return super().call(args)


def test_matching_reservations_plan_and_an_unreadable_one_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduled Capacity Block and an active ODCR of the pools' types in their zones plan with no
    word; a third pool on a reservation the deployer may not read warns, naming the key and the rights,
    and the plan goes on (as the node-group guard does when ListNodegroups fails)."""
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *_, **__: warnings.append(str(message)))
    unknown = {"capacityReservation": {"id": UNKNOWN, "kind": "odcr"}, "availabilityZone": 0}
    pools = {**POOLS, "system": unknown}
    build_platform(parse(_config(**pools), STACK), _ReadDenied("me-central-1", "", existing=_account()))
    [warning] = [w for w in warnings if "capacityReservation" in w]
    assert warning.startswith(f"{PLATFORM_KEY}.nodePools[0].capacityReservation: could not read {UNKNOWN} (")
    assert "AccessDeniedException" in warning
    assert "cloudformation:GetResource and ec2:DescribeCapacityReservations" in warning


def test_a_reservation_the_read_does_not_find_is_refused() -> None:
    """Review 38 (third) A1: a cancelled or ended reservation reads as not found (a read handler answers
    NotFound for a deleted resource, and cancelling is this resource's delete; terraform-provider-aws
    reads cancelled and expired ones as not found too): refused, not warned about, as none carries the
    pool's launches."""
    gone = _account()
    line = _refused(ExistingAccount(reservations={BLOCK: gone.reservations[BLOCK]}))
    assert line.startswith(
        f"{PLATFORM_KEY}.nodePools[1].capacityReservation (inference): {ODCR} is not found"
    )
    assert "(Cloud Control: not found)" in line and "cancelled or has ended" in line
    assert f"--capacity-reservation-ids {ODCR}" in line


@pytest.mark.parametrize(
    "error",
    [
        # What the provider reports (terraform-provider-aws cloudcontrol resource_data_source.go wrapping
        # its finder's retry.NotFoundError, terraform-plugin-sdk v2 helper/retry/error.go), as the mocks
        # answer; and the API's own exception name, should a provider version pass it on.
        f"reading Cloud Control API (AWS::EC2::CapacityReservation) Resource ({ODCR}): "
        "couldn't find resource",
        f"operation error CloudControl: GetResource, ResourceNotFoundException: {ODCR} not found",
    ],
    ids=["provider", "api"],
)
def test_either_not_found_text_is_refused_and_a_denied_read_is_not(error: str) -> None:
    """Review 38 (fourth) A1: the refusal must recognise the text the real provider gives, not only the
    API's exception name; a read denied for want of rights stays a warning (the test above)."""

    class _Says(PlanMocks):
        def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
            if (
                args.token == "aws:cloudcontrol/getResource:getResource"
                and args.args.get("identifier") == ODCR
            ):
                return {}, [("identifier", error)]
            return super().call(args)

    with pytest.raises(pulumi.RunError) as refused:
        build_platform(parse(_config(**POOLS), STACK), _Says("me-central-1", "", existing=_account()))
    [line] = str(refused.value).splitlines()
    assert line.startswith(
        f"{PLATFORM_KEY}.nodePools[1].capacityReservation (inference): {ODCR} is not found"
    )


def test_a_pool_that_may_grow_past_its_reservation_is_refused() -> None:
    """A launch template targets the reservation by id, and a launch the reservation has no capacity
    for fails (EC2 user guide, "Launch instances into an existing Capacity Reservation"; API reference,
    CapacityReservationSpecification): maxSize above TotalInstanceCount is refused, naming the bound."""
    line = _refused(_account(**{BLOCK: capacity_block(instances=2)}))
    assert line.startswith(f"{PLATFORM_KEY}.nodePools[2].capacityReservation (gpu-efa): {BLOCK} cannot carry")
    assert (
        "it reserves 2 instances, the pool's maxSize is 4: launches past 2 fail; set maxSize to at most 2"
        in line
    )


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ({"State": "unavailable"}, "its state unavailable is not one EC2 documents as carrying launches"),
        ({"State": None, "TotalInstanceCount": None, "InstanceCount": None}, "the read gave no State, "),
    ],
    ids=["undocumented-state", "missing-properties"],
)
def test_a_state_not_documented_or_a_property_not_read_is_said_not_passed_silently(
    monkeypatch: pytest.MonkeyPatch, edit: dict[str, Any], said: str
) -> None:
    """Review 38 (fourth) C1/C3: ``unavailable`` is in the SDKs' CapacityReservationState enum (AWS SDK
    for Python v4) with no description, and a read without a compared property was once taken for the
    expected value: each is a warning naming what is unchecked; the plan goes on."""
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *_, **__: warnings.append(str(message)))
    odcr = {k: v for k, v in (reservation("c7i.4xlarge", "me-central-1b") | edit).items() if v is not None}
    build_platform(
        parse(_config(**POOLS), STACK), PlanMocks("me-central-1", "", existing=_account(**{ODCR: odcr}))
    )
    [warning] = [
        w for w in warnings if w.startswith(f"{PLATFORM_KEY}.nodePools[1].capacityReservation (inference)")
    ]
    assert said in warning and f"--capacity-reservation-ids {ODCR}" in warning


def test_a_reservation_of_another_instance_type_is_refused() -> None:
    line = _refused(_account(**{BLOCK: capacity_block(InstanceType="p5.48xlarge")}))
    assert line.startswith(f"{PLATFORM_KEY}.nodePools[2].capacityReservation (gpu-efa): {BLOCK} cannot carry")
    assert "it reserves p5.48xlarge, the pool's instanceType is p5en.48xlarge" in line
    command = (
        f"aws ec2 describe-capacity-reservations --region me-central-1 --capacity-reservation-ids {BLOCK}"
    )
    assert command in line


def test_a_reservation_in_another_zone_is_refused_naming_the_zone_index_that_holds_it() -> None:
    line = _refused(_account(**{ODCR: reservation("c7i.4xlarge", "me-central-1c")}))
    assert line.startswith(f"{PLATFORM_KEY}.nodePools[1].capacityReservation (inference): ")
    assert "it is in me-central-1c, the pool's subnet in me-central-1b (availabilityZone 1)" in line
    assert "set availabilityZone to 2" in line


def test_an_expired_capacity_block_is_refused() -> None:
    """The block's week is over: EC2 reports it ``expired``, and no instance launches into it again."""
    ended = NOW - datetime.timedelta(days=1)
    line = _refused(_account(**{BLOCK: capacity_block(State="expired", EndDate=ended.isoformat())}))
    assert line.startswith(f"{PLATFORM_KEY}.nodePools[2].capacityReservation (gpu-efa): ")
    assert "it is expired: no instance launches into it again" in line


def test_a_reservation_past_its_end_date_or_of_the_other_kind_is_refused() -> None:
    """An end date already past, while the state has not caught up yet, is refused as well; and a
    Capacity Block named as an ODCR would launch without the capacity-block market type the block needs
    (EKS user guide, "Capacity Blocks for ML")."""
    ended = NOW - datetime.timedelta(hours=1)
    line = _refused(_account(**{BLOCK: capacity_block(State="active", EndDate=ended.isoformat())}))
    assert f"it ended at {ended.isoformat()}" in line
    block_as_odcr = capacity_block(
        InstanceType="c7i.4xlarge", AvailabilityZone="me-central-1b", State="active"
    )
    line = _refused(_account(**{ODCR: block_as_odcr}))
    assert "(inference): " in line
    assert "it is a capacity-block reservation, not default: set kind: capacity-block" in line


def test_mlplatform_plan_refuses_it_as_bad_input(tmp_path: Path) -> None:
    """Through `mlplatform plan`: the refusal is an input error (exit 2, the line and no traceback)."""
    account = _account(**{BLOCK: capacity_block(InstanceType="p5.48xlarge")})
    with pytest.raises(InputError) as refused:
        plan_config(_config(**POOLS), tmp_path, STACK, existing=account)
    [line] = refused.value.problems
    assert line.startswith(f"{PLATFORM_KEY}.nodePools[2].capacityReservation (gpu-efa): ")


def test_pools_sharing_a_reservation_may_not_together_grow_past_it() -> None:
    """Two pools on one ODCR draw on the same instances (EC2 user guide, "Launch instances into an
    existing Capacity Reservation": a launch reduces its available capacity): their maxSizes together
    must fit it (review 38, fifth, C1)."""
    pools = {
        "inference": {"capacityReservation": {"id": ODCR, "kind": "odcr"}, "availabilityZone": 1},
        "system": {
            "capacityReservation": {"id": ODCR, "kind": "odcr"},
            "availabilityZone": 1,
            "instanceType": "c7i.4xlarge",
        },
    }
    account = _account(**{ODCR: reservation("c7i.4xlarge", "me-central-1b", instances=14)})
    with pytest.raises(pulumi.RunError) as refused:
        build_platform(parse(_config(**pools), STACK), PlanMocks("me-central-1", "", existing=account))
    [line] = str(refused.value).splitlines()
    assert line == (
        f"{PLATFORM_KEY}.nodePools[0] (system) and {PLATFORM_KEY}.nodePools[1] (inference) share {ODCR}, "
        "which reserves 14 instances; their maxSizes add up to 18: launches past 14 fail; lower them to "
        "add up to at most 14"
    )


def test_an_odcr_pool_without_room_for_a_node_updates_surge_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node update first launches up to twice the zones' count (one zone: 2) beside the old nodes (EKS
    user guide, "Understand each phase of node updates"); a targeted ODCR with fewer than 2 instances free at
    maxSize fails those launches: a warning that points at the runbook (review 38, fifth, B1)."""
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *_, **__: warnings.append(str(message)))
    account = _account(**{ODCR: reservation("c7i.4xlarge", "me-central-1b", instances=13)})
    build_platform(parse(_config(**POOLS), STACK), PlanMocks("me-central-1", "", existing=account))
    [warning] = [w for w in warnings if "node update" in w]
    assert warning.startswith(
        f"{PLATFORM_KEY}.nodePools[1].capacityReservation (inference): {ODCR}: it reserves 13"
    )
    assert "more than 11 nodes running fails its launches" in warning
    warnings.clear()
    roomy = _account(**{ODCR: reservation("c7i.4xlarge", "me-central-1b", instances=14)})
    build_platform(parse(_config(**POOLS), STACK), PlanMocks("me-central-1", "", existing=roomy))
    assert not [w for w in warnings if "node update" in w]
