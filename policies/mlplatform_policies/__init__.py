"""The ml-platform policy pack's rules: UAE residency and the security baseline, importable without
serving them (only the pack's ``__main__.py`` builds and serves the ``PolicyPack``)."""

from __future__ import annotations

from pulumi_policy import Policy

from . import (
    audit,
    bringup_aws,
    budget,
    day2,
    deployability_aws,
    deployability_azure,
    duties,
    encryption,
    exposure,
    gpu,
    key_consumers,
    key_domains,
    key_users,
    kubernetes,
    lifecycle,
    queueing,
    registry,
    residency,
    separation,
    stack,
    tagging,
    verifier,
)

PACK_NAME = "ml-platform-uae"


def all_policies() -> list[Policy]:
    """Every policy, resource policies first, in the order a report reads well."""
    return [
        *residency.POLICIES,
        *encryption.POLICIES,
        *exposure.POLICIES,
        *registry.POLICIES,
        *tagging.POLICIES,
        *gpu.POLICIES,
        *kubernetes.POLICIES,
        *deployability_aws.POLICIES,
        *stack.POLICIES,
        *bringup_aws.POLICIES,
        *queueing.POLICIES,
        *deployability_azure.POLICIES,
        *budget.POLICIES,
        *day2.POLICIES,
        *audit.POLICIES,
        *separation.POLICIES,
        *duties.POLICIES,
        *key_domains.POLICIES,
        *key_users.POLICIES,
        *key_consumers.POLICIES,
        *verifier.POLICIES,
        *lifecycle.POLICIES,
    ]
