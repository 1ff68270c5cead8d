"""Helpers for the AWS adapter tests: look-ups in a plan, and the adapter built directly under the
same mocks for what a plan does not record (the ClusterHandle it returns)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Callable
from typing import Any

import pulumi
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.aws.platform import AwsPlatform
from components.config import PlatformConfig, parse_stack_config
from mlplatform.mocks import ExistingAccount, PlanMocks
from mlplatform.plan import SECRET_SIG, Plan, PlannedResource, isolated

AWS_STACKS = ("aws-smb-dev", "aws-smb-prod", "aws-enterprise-dev", "aws-enterprise-prod")
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
# When the test run started: a Capacity Block's window is placed around it.
NOW = datetime.datetime.now(datetime.UTC)
# A secret plan output: the signature key and the value.
SECRET_KEYS = {SECRET_SIG, "value"}


def parse(config: dict[str, Any], stack: str) -> PlatformConfig:
    return parse_stack_config(config, f"Pulumi.{stack}.yaml")


def build_platform(config: PlatformConfig, mocks: PlanMocks | None = None) -> AwsPlatform:
    """The adapter object itself, built under the plan's mocks (``mocks``, or a fresh account's) in a
    fresh context."""

    def run() -> AwsPlatform:
        pulumi.runtime.set_mocks(
            mocks or PlanMocks(aws_region=config.region, azure_location=""),
            project="ml-platform",
            stack=config.stack_name,
            preview=True,
        )
        built: list[AwsPlatform] = []
        _sync_await(run_pulumi_func(lambda: built.append(AwsPlatform(f"{config.stack_name}-aws", config))))
        return built[0]

    return isolated(run)


def resources(plan: Plan, token: str, contains: str = "") -> list[PlannedResource]:
    return [r for r in plan.resources if r.type == token and contains in r.name]


def policy(value: Any) -> dict[str, Any]:
    """A policy input (JSON string) as a document."""
    assert isinstance(value, str), value
    document: dict[str, Any] = json.loads(value)
    return document


def by_urn(plan: Plan) -> Callable[[str], PlannedResource]:
    table = {r.urn: r for r in plan.resources}
    return table.__getitem__


def reservation(instance_type: str, zone: str, instances: int = 14, **properties: Any) -> dict[str, Any]:
    """An active On-Demand Capacity Reservation of ``instances`` instances (by default room for
    aws-enterprise-prod's inference pool, maxSize 12, and a node update's surge) as Cloud Control reads it
    (CloudFormation's AWS::EC2::CapacityReservation schema; components/aws/reservations.py),
    ``properties`` changed."""
    return {
        "InstanceType": instance_type,
        "AvailabilityZone": zone,
        "InstanceCount": instances,
        "TotalInstanceCount": instances,
        "InstancePlatform": "Linux/UNIX",
        "Tenancy": "default",
        "State": "active",
        "ReservationType": "default",
        "EndDateType": "unlimited",
        **properties,
    }


def capacity_block(
    instance_type: str = "p5en.48xlarge", zone: str = "me-central-1a", instances: int = 4, **properties: Any
) -> dict[str, Any]:
    """A Capacity Block of ``instances`` instances bought for a week that starts tomorrow, ``scheduled``
    (by default for aws-enterprise-prod's gpu-efa pool, maxSize 4, in zone 0 under the mocks),
    ``properties`` changed."""
    start, end = NOW + datetime.timedelta(days=1), NOW + datetime.timedelta(days=8)
    window = {"StartDate": start.isoformat(), "EndDate": end.isoformat(), "EndDateType": "limited"}
    block = {"State": "scheduled", "ReservationType": "capacity-block", **window}
    return reservation(instance_type, zone, instances, **block) | properties


def reserved(
    reservations: dict[str, dict[str, Any]], account: ExistingAccount | None = None
) -> ExistingAccount:
    """``account`` (a fresh one by default) holding ``reservations`` too, as the preflight reads them."""
    base = account or ExistingAccount()
    return dataclasses.replace(base, reservations={**base.reservations, **reservations})
