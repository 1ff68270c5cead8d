"""One policy pack process for the whole session, and a way to judge a tiny Pulumi program with it.

Programs are written to a temporary directory as real Pulumi projects (Pulumi.yaml, __main__.py,
Pulumi.test.yaml), planned by ``mlplatform.plan`` under Pulumi's mocks, and judged by the real pack over
the Analyzer gRPC protocol, the path ``mlplatform check`` takes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mlplatform.analyzer import PolicyPackSession, Violation
from mlplatform.analyzer_config import PolicySettings, reconcile
from mlplatform.plan import REPO_ROOT, resolve_target, run_plan

PACK_DIR = REPO_ROOT / "policies"

# Shared by every program: complete tags and a few hardened settings programs reuse.
PRELUDE = """
import json
import pulumi

TAGS = {
    "project": "demo",
    "environment": "dev",
    "tier": "enterprise",
    "data-classification": "internal",
    "owner": "ml@example.ae",
    "cost-center": "CC-1",
}
SMB_TAGS = {**TAGS, "tier": "smb"}
KEY_ARN = "arn:aws:kms:me-central-1:123456789012:key/k"
ENCRYPTED_DISK = [{"device_name": "/dev/xvda", "ebs": {"encrypted": "true", "kms_key_id": KEY_ARN}}]
IMDS = {"http_tokens": "required", "http_put_response_hop_limit": 1}
AKS = {
    "resource_group_name": "rg",
    "dns_prefix": "aks",
    "disk_encryption_set_id": "/des",
    "agent_pool_profiles": [{"name": "system", "mode": "System", "vm_size": "Standard_D8s_v5", "count": 3}],
}
"""

AWS = """
config:
  aws:region: me-central-1
  aws:defaultTags:
    tags: {project: demo, environment: dev, tier: enterprise, data-classification: internal,
           owner: ml@example.ae, cost-center: CC-1}
"""
AWS_SMB = AWS.replace("tier: enterprise", "tier: smb")
AWS_UNTAGGED = "config:\n  aws:region: me-central-1\n"
AZURE = "config:\n  azure-native:location: uaenorth\n"
KUBERNETES = "config: {}\n"

Judge = Callable[..., list[Violation]]


def write_program(directory: Path, body: str, config: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Pulumi.yaml").write_text("name: case\nruntime: python\n")
    (directory / "__main__.py").write_text(PRELUDE + textwrap.dedent(body))
    (directory / "Pulumi.test.yaml").write_text(textwrap.dedent(config))
    return directory


@pytest.fixture(scope="session")
def pack() -> Iterator[PolicyPackSession]:
    with PolicyPackSession(PACK_DIR) as session:
        yield session


@pytest.fixture(scope="session")
def defaults(pack: PolicyPackSession) -> dict[str, PolicySettings]:
    return reconcile(pack.info.schemas(), {})


@pytest.fixture()
def judge(pack: PolicyPackSession, defaults: dict[str, PolicySettings], tmp_path: Path) -> Judge:
    """``judge(body, config, settings=None)`` → every violation the pack reports for that program."""

    def run(body: str, config: str, settings: dict[str, PolicySettings] | None = None) -> list[Violation]:
        program = write_program(tmp_path / "program", body, config)
        plan = run_plan(resolve_target("test", program=program))
        return pack.judge(plan.to_dict(), settings or defaults)

    return run


# A plan as the pack reads it, and a policy's refusals in it by resource name.
PlanDict = dict[str, Any]
Findings = Callable[[PlanDict], set[str]]


@pytest.fixture(scope="session")
def merged(pack: PolicyPackSession, defaults: dict[str, PolicySettings]) -> Findings:
    """The resources ``keys-per-domain`` refuses, as mandatory, in a plan."""

    def judge(plan: PlanDict) -> set[str]:
        return {name for policy, name in found(pack.judge(plan, defaults)) if policy == "keys-per-domain"}

    return judge


def found(violations: list[Violation], enforcement: str = "mandatory") -> set[tuple[str, str]]:
    """``(policy, resource name)`` of each violation at ``enforcement``."""
    return {(v.policy, v.name) for v in violations if v.enforcement == enforcement}
