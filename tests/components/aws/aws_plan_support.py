"""Helpers for the AWS adapter tests: plans of the shipped templates (and variants of them), lookups in a
plan, and the adapter built directly under the same mocks for what a plan does not record (protect).
"""

from __future__ import annotations

import contextvars
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.aws.platform import AwsPlatform
from components.config import PLATFORM_KEY, PlatformConfig, parse_stack_config
from mlplatform.mocks import PlanMocks
from mlplatform.plan import SECRET_SIG, Plan, PlannedResource, resolve_target, run_plan

AWS_STACKS = ("aws-smb-dev", "aws-smb-prod", "aws-enterprise-dev", "aws-enterprise-prod")
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
# A secret plan output: the signature key and the value.
SECRET_KEYS = {SECRET_SIG, "value"}


def template(stack: str) -> dict[str, Any]:
    """The shipped template's ``config`` mapping."""
    document = yaml.safe_load(resolve_target(stack).stack_file.read_text())
    config: dict[str, Any] = document["config"]
    return config


def platform_body(config: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = config[PLATFORM_KEY]
    return body


def cloud_only(config: dict[str, Any]) -> dict[str, Any]:
    """The template as the first phase of a private cluster's bring-up runs it: the in-cluster layer
    off (README, two-phase bring-up), so these tests see the adapter alone."""
    variant = copy.deepcopy(config)
    platform_body(variant)["kubernetes"] = {"enabled": False}
    return variant


def plan_config(config: dict[str, Any], directory: Path, stack: str) -> Plan:
    """Plan a stack config written as ``Pulumi.<stack>.yaml`` in ``directory``."""
    path = directory / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return run_plan(resolve_target(stack_file=path))


def parse(config: dict[str, Any], stack: str) -> PlatformConfig:
    return parse_stack_config(config, f"Pulumi.{stack}.yaml")


def build_platform(config: PlatformConfig) -> AwsPlatform:
    """The adapter object itself, built under the plan's mocks in a fresh context."""

    def run() -> AwsPlatform:
        pulumi.runtime.set_mocks(
            PlanMocks(aws_region=config.region, azure_location=""),
            project="ml-platform",
            stack=config.stack_name,
            preview=True,
        )
        built: list[AwsPlatform] = []
        _sync_await(run_pulumi_func(lambda: built.append(AwsPlatform(f"{config.stack_name}-aws", config))))
        return built[0]

    return contextvars.Context().run(run)


def resources(plan: Plan, token: str, contains: str = "") -> list[PlannedResource]:
    return [r for r in plan.resources if r.type == token and contains in r.name]


def one(plan: Plan, token: str, suffix: str) -> PlannedResource:
    """The single resource of ``token`` whose name ends with ``suffix``."""
    found = [r for r in plan.resources if r.type == token and r.name.endswith(suffix)]
    assert len(found) == 1, f"{token} *{suffix}: {[r.name for r in found]}"
    return found[0]


def policy(value: Any) -> dict[str, Any]:
    """A policy input (JSON string) as a document."""
    assert isinstance(value, str), value
    document: dict[str, Any] = json.loads(value)
    return document


def by_urn(plan: Plan) -> Callable[[str], PlannedResource]:
    table = {r.urn: r for r in plan.resources}
    return table.__getitem__
