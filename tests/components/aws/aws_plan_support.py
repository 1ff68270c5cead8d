"""Helpers for the AWS adapter tests: look-ups in a plan, and the adapter built directly under the
same mocks for what a plan does not record (the ClusterHandle it returns)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pulumi
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.aws.platform import AwsPlatform
from components.config import PlatformConfig, parse_stack_config
from mlplatform.mocks import PlanMocks
from mlplatform.plan import SECRET_SIG, Plan, PlannedResource, isolated

AWS_STACKS = ("aws-smb-dev", "aws-smb-prod", "aws-enterprise-dev", "aws-enterprise-prod")
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
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
