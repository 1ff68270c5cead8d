"""Keys per data domain (issue 35 item 3), both ways, through the real pack over gRPC.

The shipped AWS stacks give each data domain its own key, so ``keys-per-domain`` finds nothing; a plan
with one store pointed at another domain's key (an RDS instance, a bucket, the audit trail on the logs'
key: review findings A1, B4), a bucket that declares no domain, a key declaring another domain than its
stores', or made with ``storage.onStackKey`` keeping a domain on the stack's first key (an existing stack
mid-migration), fails with every store of the merged key.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.config import PLATFORM_KEY
from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySettings
from mlplatform.plan import Plan
from tests.stack_variants import cloud_only, plan_config, template

from .conftest import Findings, PlanDict
from .test_audit import of_type, with_inputs

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
    "aws:s3/bucket:",
    "aws:s3/bucketServerSideEncryptionConfiguration:",
    "aws:kms/key:",
    "pulumi:providers:",
)
DATA_DOMAIN_TAG = "ml-platform.io/data-domain"


def _read_by_policy(plan: Plan) -> PlanDict:
    whole = plan.to_dict()
    return {**whole, "resources": [r for r in whole["resources"] if r["type"].startswith(READ_TYPES)]}


DATA_BUCKET = f"{ENTERPRISE}-aws-storage-data"
BUCKET_ENCRYPTION = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"


@pytest.fixture(scope="module")
def planted_plan(planned: Callable[[str], Plan]) -> PlanDict:
    return _read_by_policy(planned(ENTERPRISE))


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


def _key(plan: PlanDict, suffix: str) -> dict[str, Any]:
    keys: list[dict[str, Any]] = [
        r for r in plan["resources"] if r["type"] == "aws:kms/key:Key" and r["name"].endswith(suffix)
    ]
    (key,) = keys
    return key


def _encrypt_under(plan: PlanDict, token: str, store: str, path: str, key_suffix: str) -> PlanDict:
    """``store`` (of type ``token``) encrypted under the key named ``*key_suffix``: the ARN at input
    ``path`` (``rules``: the bucket's default rule) and the input's property dependency, as the engine
    records them. The key's ARN is read where the plan names it (the stores' and policies' references)."""
    key = _key(plan, key_suffix)
    arn = next(
        value
        for value in _strings_in(plan)
        if value.startswith("arn:aws:kms:") and value.rsplit(":", 1)[-1].startswith(key["name"])
    )
    edited = copy.deepcopy(plan)
    (resource,) = [r for r in edited["resources"] if r["name"] == store and r["type"] == token]
    if path == "rules":
        resource["inputs"]["rules"][0]["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"] = arn
    else:
        resource["inputs"][path] = arn
    resource["propertyDependencies"][path] = [key["urn"]]
    return edited


def _strings_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings_in(v)]
    return []


def test_a_bucket_on_the_secrets_key_is_refused(
    planted_plan: PlanDict, merged: Findings, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    """Review A1: the data bucket's default encryption under the Kubernetes Secrets key; the finding names
    the bucket and the field."""
    planted = _encrypt_under(planted_plan, BUCKET_ENCRYPTION, DATA_BUCKET, "rules", "-aws-key-key")
    assert merged(planted) == {DATA_BUCKET, f"{ENTERPRISE}-aws-cluster-eks"}
    other_domain, merged_key = sorted(  # the store's name sorts before the field
        v.message
        for v in pack.judge(planted, defaults)
        if v.policy == "keys-per-domain" and v.name == DATA_BUCKET
    )
    field = "rules[].applyServerSideEncryptionByDefault.kmsMasterKeyId"
    assert merged_key.startswith(f"{field}: key ") and f"object-data: {DATA_BUCKET}" in merged_key
    assert other_domain.startswith(f"{DATA_BUCKET} (object-data): {field} is key {ENTERPRISE}-aws-key-key")


def test_the_audit_trail_on_the_logs_key_is_refused(planted_plan: PlanDict, merged: Findings) -> None:
    """Review B4: the audit trail and the application logs on one key; whoever decrypts the logs would read
    the audit record."""
    trail = f"{ENTERPRISE}-aws-audit-trail"
    planted = _encrypt_under(planted_plan, "aws:cloudtrail/trail:Trail", trail, "kmsKeyId", "-aws-logs-key")
    logs = ["network-flow-logs", "cluster-logs", "registry-postgresql-logs", "registry-upgrade-logs"]
    assert merged(planted) == {trail, *(f"{ENTERPRISE}-aws-{group}" for group in logs)}


def test_an_encrypted_bucket_must_declare_its_domain(planted_plan: PlanDict, merged: Findings) -> None:
    def undeclared(inputs: dict[str, Any]) -> None:
        del inputs["tags"][DATA_DOMAIN_TAG]

    planted = with_inputs(planted_plan, of_type("aws:s3/bucket:Bucket", "-storage-data"), undeclared)
    assert merged(planted) == {DATA_BUCKET}


def test_a_store_under_a_key_of_another_domain_is_refused(planted_plan: PlanDict, merged: Findings) -> None:
    """A key serving one domain only, but not its stores': the repositories' key declared training data's."""

    def other_domain(inputs: dict[str, Any]) -> None:
        inputs["tags"][DATA_DOMAIN_TAG] = "training-data"

    planted = with_inputs(planted_plan, of_type("aws:kms/key:Key", "-aws-images-key"), other_domain)
    refused = merged(planted)
    assert refused and all("-registry-" in name for name in refused), refused


def test_a_domain_kept_on_the_stacks_first_key_is_refused(tmp_path: Path, merged: Findings) -> None:
    """``storage.onStackKey`` keeps an existing stack's images on its first key until migrated: the pack
    says so until the repositories move (docs/operations.md, "Keys per data domain")."""
    config = cloud_only(template(SMB))
    config[PLATFORM_KEY].setdefault("storage", {})["onStackKey"] = ["images"]
    plan = plan_config(config, tmp_path, SMB)
    refused = merged(_read_by_policy(plan))
    assert f"{SMB}-aws-cluster-eks" in refused
    assert {name for name in refused if "-registry-" in name}, refused


def test_datasets_back_on_the_models_key_are_refused(planted_plan: PlanDict, merged: Findings) -> None:
    """Review B5 (one data domain per bucket): the datasets bucket under the object-data key is the one
    shared domain the split ended; every store of that key is named."""
    datasets = f"{ENTERPRISE}-aws-storage-datasets"
    planted = _encrypt_under(planted_plan, BUCKET_ENCRYPTION, datasets, "rules", "-aws-object-data-key")
    assert merged(planted) == {datasets, DATA_BUCKET, f"{ENTERPRISE}-aws-storage-record"}
