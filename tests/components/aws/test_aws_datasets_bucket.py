"""One data domain per bucket on AWS (review B5; issue 35 item 3): datasets (read by training) have a
bucket and key of their own beside the data bucket (models, checkpoints, the registry's artifacts, written
by training and read by inference and the registry).

A stack made before that split keeps its one bucket: the program tells it by the KMS aliases in the
account (its first key's, ``alias/<stack>-aws-key``, and no ``alias/<stack>-aws-datasets``; the mocks'
``ExistingAccount``), so its upgrade adds, moves and replaces no store and needs no edit of its stack
file. A stack made since (both aliases) keeps its datasets bucket on its next ``pulumi up``.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from components.aws.keys import DOMAIN_STORES, MODELS_BUCKET_STORES
from components.config import KeyDomain
from mlplatform.mocks import ExistingAccount, PlanMocks
from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import build_platform, parse
from tests.stack_variants import cloud_only, input_diff, one, plan_config, template

STACK = "aws-enterprise-prod"
PREFIX = f"{STACK}-aws"
FIRST_ALIAS = f"alias/{PREFIX}-key"
DATASETS_ALIAS = f"alias/{PREFIX}-datasets"
# An existing stack after the keys per data domain (docs/operations.md), made before the datasets bucket:
# every per-domain key's alias but the datasets'.
EXISTING = ExistingAccount(
    aliases=frozenset(
        {FIRST_ALIAS}
        | {f"alias/{PREFIX}-{d.value}" for d in KeyDomain if d not in (KeyDomain.SECRETS, KeyDomain.DATASETS)}
    )
)
BUCKET = "aws:s3/bucket:Bucket"
# What the datasets bucket changes in the resources both layouts have (each in place): training's policy
# (the datasets bucket and key), the trail's data events (both buckets), the log bucket's delivery grant
# (both buckets as sources), the object-data key's description.
IN_PLACE_FOR_THE_SPLIT = {
    f"{PREFIX}-identities-training": {"policy"},
    f"{PREFIX}-audit-trail": {"advancedEventSelectors"},
    f"{PREFIX}-storage-logs": {"policy"},
    f"{PREFIX}-object-data-key": {"description"},
}


def _domain(resource: Any) -> str:
    return str(resource.inputs["tags"].get("ml-platform.io/data-domain"))


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Plan]:
    """The plan of a new stack (a fresh account) and of the same stack made before the split."""
    tmp = tmp_path_factory.mktemp("datasets-bucket")
    config = cloud_only(template(STACK))
    (tmp / "new").mkdir()
    (tmp / "existing").mkdir()
    new = plan_config(config, tmp / "new", STACK, shared=True)
    return new, plan_config(config, tmp / "existing", STACK, existing=EXISTING)


def test_a_new_stack_keeps_datasets_and_models_in_buckets_of_their_own(layouts: tuple[Plan, Plan]) -> None:
    new, _ = layouts
    data, datasets = one(new, BUCKET, "-storage-data"), one(new, BUCKET, "-storage-datasets")
    assert (_domain(data), _domain(datasets)) == ("object-data", "datasets")
    keys = new.outputs["kmsKeys"]
    assert keys["datasets"] not in {arn for domain, arn in keys.items() if domain != "datasets"}
    encryption = {
        r.name: r.inputs["rules"][0]["applyServerSideEncryptionByDefault"].get("kmsMasterKeyId")
        for r in new.by_type(
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
        )
    }
    assert encryption[datasets.name] == keys["datasets"]
    assert encryption[data.name] == keys["object-data"]
    assert (
        one(new, "aws:kms/key:Key", "-object-data-key").inputs["description"].endswith(MODELS_BUCKET_STORES)
    )
    assert new.outputs["datasets"].startswith(f"s3://{PREFIX}-storage-datasets-")
    # Only training is granted the datasets bucket; inference and the registry stay on the data bucket.
    for role in ("inference", "registry"):
        assert (
            "storage-datasets"
            not in one(new, "aws:iam/rolePolicy:RolePolicy", f"-identities-{role}").inputs["policy"]
        )
    # The trail records object events on both buckets.
    (trail,) = new.by_type("aws:cloudtrail/trail:Trail")
    assert "storage-datasets" in json.dumps(trail.inputs["advancedEventSelectors"])


def test_an_existing_stack_keeps_its_one_bucket_and_gains_nothing(layouts: tuple[Plan, Plan]) -> None:
    """The upgrade of a stack made before the split: no resource added or removed but the split's own, no
    bucket replaced, and every resource both plans have differs only where the split says (in place)."""
    new, existing = layouts
    bucket = one(existing, BUCKET, "-storage-data")
    assert [r for r in existing.by_type(BUCKET) if _domain(r) == "datasets"] == []
    assert "datasets" not in existing.outputs["kmsKeys"]
    assert existing.outputs["datasets"] == f"{existing.outputs['bucket']}/datasets"
    assert (
        one(existing, "aws:kms/key:Key", "-object-data-key")
        .inputs["description"]
        .endswith(DOMAIN_STORES[KeyDomain.OBJECTS])
    )
    policy = one(existing, "aws:iam/rolePolicy:RolePolicy", "-identities-training").inputs["policy"]
    assert "storage-datasets" not in policy and f"{bucket.name}-" in policy
    old = {r.urn: r for r in existing.resources}
    added = {r.name for r in new.resources if r.urn not in old}
    assert added == {f"{PREFIX}-datasets{part}" for part in ("", "-key", "-alias")} | {
        f"{PREFIX}-storage-datasets"
    }
    assert {r.urn for r in new.resources} >= set(old), "the split removed or renamed a resource"
    for resource in new.resources:
        if resource.urn not in old:
            continue
        changed = {
            p.split(".")[0].split("[")[0] for p in input_diff(old[resource.urn].inputs, resource.inputs)
        }
        assert changed <= IN_PLACE_FOR_THE_SPLIT.get(resource.name, set()), (resource.name, changed)


class _Recording(PlanMocks):
    """An account holding ``aliases``, recording the names of the buckets the program registers."""

    def __init__(self, aliases: frozenset[str]) -> None:
        super().__init__(
            aws_region="me-central-1", azure_location="", existing=ExistingAccount(aliases=aliases)
        )
        self.buckets: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if args.typ == BUCKET:
            self.buckets.append(args.name)
        return super().new_resource(args)


def test_a_stack_made_since_keeps_its_datasets_bucket() -> None:
    """Day 2 of a new stack: its first key's and its datasets key's aliases both exist."""
    mocks = _Recording(EXISTING.aliases | {DATASETS_ALIAS})
    build_platform(parse(cloud_only(template(STACK)), STACK), mocks)
    assert f"{PREFIX}-storage-datasets" in mocks.buckets
