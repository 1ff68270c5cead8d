"""Policy config is reconciled as the Pulumi CLI does it, and the pack honours it over the wire; values
unknown during preview make a policy say it cannot run, never pass or fail silently."""

from __future__ import annotations

from typing import Any

import pytest

from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySchema, reconcile
from mlplatform.errors import InputError

from .conftest import AWS, Judge, found

SCHEMAS = {
    "residency": PolicySchema(
        "mandatory", {"regions": {"type": "array", "items": {"type": "string"}, "default": ["a"]}}
    ),
    "tags": PolicySchema("advisory"),
}
UNKNOWN_STRING = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's marker for a string not known yet


def test_defaults_come_from_each_schema() -> None:
    settings = reconcile(SCHEMAS, {})
    assert settings["residency"].enforcement == "mandatory" and settings["residency"].properties == {
        "regions": ["a"]
    }
    assert settings["tags"].enforcement == "advisory" and settings["tags"].properties == {}


def test_all_sets_every_level_and_entries_override_it() -> None:
    settings = reconcile(
        SCHEMAS, {"all": "advisory", "residency": {"enforcementLevel": "mandatory", "regions": ["b"]}}
    )
    assert settings["tags"].enforcement == "advisory"
    assert settings["residency"].enforcement == "mandatory" and settings["residency"].properties == {
        "regions": ["b"]
    }


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"residncy": "mandatory"}, "unknown policy 'residncy'"),
        ({"tags": "strict"}, "enforcementLevel 'strict' is not one of"),
        (
            {"residency": {"regions": "me-central-1"}},
            "residency: regions: 'me-central-1' is not of type 'array'",
        ),
        ({"all": {"regions": ["x"]}}, "only enforcementLevel applies to all policies"),
        (
            {"residency": {"regoins": ["me-central-1"]}},
            "residency: Additional properties are not allowed ('regoins' was unexpected)",
        ),
        ({"tags": {"enforcementLevel": "mandatory", "keys": []}}, "tags: Additional properties"),
    ],
)
def test_bad_config_is_bad_input(given: dict[str, Any], problem: str) -> None:
    with pytest.raises(InputError) as raised:
        reconcile(SCHEMAS, given)
    assert any(problem in line for line in raised.value.problems), raised.value.problems


def test_the_pack_honours_settings_and_levels(judge: Judge, pack: PolicyPackSession) -> None:
    body = "import pulumi_aws.ecr as ecr\necr.Repository('eu', region='eu-west-1')"
    assert ("uae-residency", "eu") in found(judge(body, AWS))
    widened = reconcile(
        pack.info.schemas(), {"uae-residency": {"allowedAwsRegions": ["me-central-1", "eu-west-1"]}}
    )
    assert ("uae-residency", "eu") not in found(judge(body, AWS, widened))
    advisory = reconcile(pack.info.schemas(), {"uae-residency": "advisory"})
    assert ("uae-residency", "eu") in found(judge(body, AWS, advisory), "advisory")
    assert not judge(body, AWS, reconcile(pack.info.schemas(), {"all": "disabled"}))


def _plan(*resources: dict[str, Any]) -> dict[str, Any]:
    provider = {
        "urn": "urn:pulumi:dev::p::pulumi:providers:aws::default",
        "type": "pulumi:providers:aws",
        "name": "default",
        "parent": None,
        "custom": True,
        "provider": None,
        "inputs": {"region": "me-central-1", "defaultTags": {"tags": {}}},
    }
    reference = f"{provider['urn']}::id"
    return {
        "project": "p",
        "stack": "dev",
        "outputs": {},
        "resources": [
            provider,
            *({"custom": True, "parent": None, "provider": reference, **r} for r in resources),
        ],
    }


def test_unknown_values_are_reported_as_not_judged_during_preview(pack: PolicyPackSession) -> None:
    bucket = {
        "urn": "urn:pulumi:dev::p::aws:s3/bucket:Bucket::data",
        "type": "aws:s3/bucket:Bucket",
        "name": "data",
        "inputs": {},
    }
    policy = {
        "urn": "urn:pulumi:dev::p::aws:s3/bucketPolicy:BucketPolicy::data",
        "type": "aws:s3/bucketPolicy:BucketPolicy",
        "name": "data-policy",
        "inputs": {"bucket": UNKNOWN_STRING, "policy": UNKNOWN_STRING},
        "dependencies": [bucket["urn"]],
    }
    template = {
        "urn": "urn:pulumi:dev::p::aws:ec2/launchTemplate:LaunchTemplate::lt",
        "type": "aws:ec2/launchTemplate:LaunchTemplate",
        "name": "lt",
        "inputs": {
            "metadataOptions": {"httpTokens": UNKNOWN_STRING, "httpPutResponseHopLimit": 1},
            "blockDeviceMappings": [{"ebs": {"encrypted": "true", "kmsKeyId": UNKNOWN_STRING}}],
        },
    }
    violations = pack.judge(_plan(bucket, policy, template), reconcile(pack.info.schemas(), {}))
    by_policy = {v.policy: v for v in violations if v.policy in ("s3-tls-only", "imdsv2-required")}
    assert {v.enforcement for v in by_policy.values()} == {"advisory"}
    assert all("can't be known during preview" in v.message for v in by_policy.values())
    # A key ARN that is not known yet will exist: presence checks pass.
    assert not [v for v in violations if v.policy == "encryption-at-rest-cmk"]
