"""Keys per data domain (issue 35 item 3), both ways, through the real pack over gRPC.

The shipped AWS stacks give each data domain its own key, so ``keys-per-domain`` finds nothing; a plan
with one store pointed at another domain's key, or made with ``storage.onStackKey`` keeping a domain on
the stack's first key (an existing stack mid-migration), fails with every store of the merged key.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.config import PLATFORM_KEY
from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySettings
from mlplatform.plan import Plan
from tests.stack_variants import cloud_only, plan_config, template

from .conftest import found
from .test_audit import of_type, with_inputs

PlanDict = dict[str, Any]
Findings = Callable[[PlanDict], set[str]]
ENTERPRISE, SMB = "aws-enterprise-prod", "aws-smb-dev"
# What keys-per-domain reads (policies/mlplatform_policies/key_domains.py), and the providers.
READ_TYPES = (
    "aws:eks/cluster:",
    "aws:rds/instance:",
    "aws:efs/fileSystem:",
    "aws:fsx/lustreFileSystem:",
    "aws:ecr/repository:",
    "aws:ec2/launchTemplate:",
    "aws:cloudwatch/logGroup:",
    "aws:cloudtrail/trail:",
    "aws:sns/topic:",
    "pulumi:providers:",
)


def _read_by_policy(plan: Plan) -> PlanDict:
    whole = plan.to_dict()
    return {**whole, "resources": [r for r in whole["resources"] if r["type"].startswith(READ_TYPES)]}


@pytest.fixture(scope="module")
def merged(pack: PolicyPackSession, defaults: dict[str, PolicySettings]) -> Findings:
    """The resources ``keys-per-domain`` refuses, as mandatory."""

    def judge(plan: PlanDict) -> set[str]:
        return {name for policy, name in found(pack.judge(plan, defaults)) if policy == "keys-per-domain"}

    return judge


@pytest.mark.parametrize("stack", [ENTERPRISE, SMB])
def test_shipped_stacks_keep_each_domain_on_its_own_key(
    planned: Callable[[str], Plan], merged: Findings, stack: str
) -> None:
    assert merged(_read_by_policy(planned(stack))) == set()


def test_a_store_on_another_domains_key_is_refused(planned: Callable[[str], Plan], merged: Findings) -> None:
    plan = _read_by_policy(planned(ENTERPRISE))
    (cluster,) = [r for r in plan["resources"] if r["type"] == "aws:eks/cluster:Cluster"]
    secrets_key = cluster["inputs"]["encryptionConfig"]["provider"]["keyArn"]

    def on_secrets_key(inputs: dict[str, Any]) -> None:
        inputs["kmsKeyId"] = secrets_key

    planted = with_inputs(plan, of_type("aws:rds/instance:Instance"), on_secrets_key)
    assert merged(planted) == {f"{ENTERPRISE}-aws-registry-db", f"{ENTERPRISE}-aws-cluster-eks"}


def test_a_domain_kept_on_the_stacks_first_key_is_refused(tmp_path: Path, merged: Findings) -> None:
    """``storage.onStackKey`` keeps an existing stack's images on its first key until migrated: the pack
    says so until the repositories move (docs/operations.md, "Keys per data domain")."""
    config = cloud_only(template(SMB))
    config[PLATFORM_KEY].setdefault("storage", {})["onStackKey"] = ["images"]
    plan = plan_config(config, tmp_path, SMB)
    refused = merged(_read_by_policy(plan))
    assert f"{SMB}-aws-cluster-eks" in refused
    assert {name for name in refused if "-registry-" in name}, refused
