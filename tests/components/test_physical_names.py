"""Physical names derive from the Pulumi stack's name, so two stacks in one account or subscription
never collide (README: "Stacks"), even when they share cloud, tier and environment.

A resource's physical identity here is every name-like input it sets (its name, name prefix, alias,
bucket, cluster, resource group, vault, ...) with the ``Name`` tag, taken together: a key named
``disks-cmk`` in two vaults of different names is two keys. A resource that sets none is autonamed by
the engine from its logical name (Pulumi: resource names and autonaming), so its logical name stands in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from components.config import PLATFORM_KEY, ConfigError, Tier, parse_stack_config
from components.handle import Cloud
from mlplatform.newstack import render_stack
from mlplatform.plan import Plan, resolve_target
from tests.stack_variants import plan_config

_NAME_KEY = re.compile(r"(?i)name|bucket|alias|prefix")

Identity = tuple[str, tuple[tuple[str, str], ...]]
# The account's or subscription's threat detection, made by one stack only (components/*/audit.py).
ACCOUNT_DETECTION = frozenset(
    {
        "aws:guardduty/detector:Detector",
        "aws:guardduty/detectorFeature:DetectorFeature",
        "azure-native:security:Pricing",
    }
)


def physical_identities(plan: Plan) -> set[Identity]:
    """The cloud resources' physical identities (objects inside a cluster live in that cluster)."""
    identities: set[Identity] = set()
    for resource in plan.resources:
        if not resource.custom or resource.type.startswith(("kubernetes:", "pulumi:")):
            continue
        named = [
            (key, value)
            for key, value in resource.inputs.items()
            if isinstance(value, str) and value and _NAME_KEY.search(key)
        ]
        tags = resource.inputs.get("tags")
        if isinstance(tags, dict) and isinstance(tags.get("Name"), str):
            named.append(("tags.Name", tags["Name"]))
        identities.add((resource.type, tuple(sorted(named or [("logical name", resource.name)]))))
    return identities


@pytest.mark.parametrize("cloud", [Cloud.AWS, Cloud.AZURE])
def test_two_stacks_with_one_triplet_share_no_physical_name(
    cloud: Cloud, planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    """`mlplatform new-stack team2-prod --cloud C --tier enterprise --env prod` beside the shipped
    C-enterprise-prod: same cloud, tier and environment, no physical name in common."""
    config = yaml.safe_load(render_stack("team2-prod", cloud, Tier.ENTERPRISE, "prod"))["config"]
    # Threat detection is one per account and region (GuardDuty) or subscription (Defender plans): the
    # second stack relies on the first's, as docs/compliance.md says (audit.detection: existing).
    config[PLATFORM_KEY]["audit"] = {"detection": "existing"}
    shipped = planned(f"{cloud}-enterprise-prod")
    team2 = plan_config(config, tmp_path, "team2-prod")
    detection = [r for r in shipped.resources if r.type in ACCOUNT_DETECTION]
    assert detection
    assert len(team2.resources) == len(shipped.resources) - len(detection)
    common = physical_identities(shipped) & physical_identities(team2)
    assert not common, sorted(common)[:5]


def test_shipped_stacks_keep_their_names(planned: Callable[[str], Plan]) -> None:
    """Day 2: a stack named <cloud>-<tier>-<environment> (every shipped one) keeps the names it had
    when names came from that triplet: its EKS cluster, KMS alias and ECR repositories."""
    plan = planned("aws-enterprise-prod")
    names = {(r.type, str(r.inputs.get("name"))) for r in plan.resources}
    assert ("aws:eks/cluster:Cluster", "aws-enterprise-prod-aws") in names
    assert ("aws:kms/alias:Alias", "alias/aws-enterprise-prod-aws-key") in names
    assert ("aws:ecr/repository:Repository", "aws-enterprise-prod-aws/ml-platform/trainer") in names


@pytest.mark.parametrize(
    "stack",
    [
        "team-" + "x" * 21,  # 26 characters: the longest IAM role prefix would overflow (iam.py)
        "Team2-prod",  # ECR repositories and S3 buckets are lowercase
        "team2.prod",  # KMS aliases take no dots
        "team2_prod",  # S3 bucket names take no underscores
        "team2-",  # AKS cluster names end with a letter or digit
    ],
)
def test_a_stack_name_no_api_would_take_is_refused_in_one_line(stack: str) -> None:
    raw = yaml.safe_load(resolve_target("aws-enterprise-prod").stack_file.read_text())["config"]
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(raw, f"Pulumi.{stack}.yaml")
    assert caught.value.problems == [
        f"Pulumi.{stack}.yaml: stack name {stack!r}: lowercase letters, digits and '-', starting with a "
        "letter, 25 characters at most (it names the stack's cloud resources)"
    ]
