"""Day 2 of the key split (issue 35 item 3): an AWS stack made when one key encrypted every store takes
the per-domain keys with no store replaced.

Before: ``storage.onStackKey`` lists every domain, the layout of a stack made before the split (every
store on ``<stack>-key``, whose policy keeps the CloudWatch Logs and Auto Scaling statements it had).
After: the upgrade's first step (docs/operations.md, "Keys per data domain"), only the stores whose key
cannot change in place stay on ``<stack>-key``:
- Kubernetes Secrets: "You can't disable secrets encryption after enabling it" (EKS user guide, "Encrypt
  Kubernetes secrets with KMS on existing clusters"), and a change of the encryption configuration
  "will require rebuilding a new cluster" (pulumi/pulumi-eks#389);
- the registry database: its storage key is chosen at creation (RDS user guide, "Encrypting Amazon RDS
  resources": a snapshot copied under another key, restored, is the way to another key), and once RDS
  manages the master password "you can't change the KMS key used to encrypt the secret" (RDS API,
  ``MasterUserSecretKmsKeyId``);
- the shared file system (EFS ``KmsKeyId``, FSx ``KmsKeyId``: set by CreateFileSystem, absent from the
  update APIs) and the ECR repositories (``encryptionConfiguration``: set at CreateRepository only).
The bucket's default encryption, the log groups (``AssociateKmsKey``) and the launch templates (a new
version, rolled out by the node group) take their new keys in place.

Both programs run under the plan's mocks and their inputs are compared as the engine diffs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.config import PLATFORM_KEY
from mlplatform.plan import Plan
from tests.stack_variants import cloud_only, input_diff, plan_config, template

STACK = "aws-enterprise-prod"
FIXED = ["registry-database", "training-data", "images"]
# Inputs a key change would replace the store on (the sources above), by type.
REPLACING = {
    "aws:eks/cluster:Cluster": "encryptionConfig",
    "aws:rds/instance:Instance": "kmsKeyId",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "kmsKeyId",
    "aws:efs/fileSystem:FileSystem": "kmsKeyId",
    "aws:ecr/repository:Repository": "encryptionConfigurations",
}
# What may change in place: the first key's description, policy and domain tag, the stores that move in
# place, the IAM policies that name the new keys; and the FSx data repository's grant, recreated on the
# bucket's key (a grant holds no data).
IN_PLACE = {
    "aws:kms/key:Key": {"description", "policy", "tags"},
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": {"rules"},
    "aws:cloudwatch/logGroup:LogGroup": {"kmsKeyId"},
    "aws:ec2/launchTemplate:LaunchTemplate": {"blockDeviceMappings"},
    "aws:iam/rolePolicy:RolePolicy": {"policy"},
    # The lifecycle record's writer policy for approvers names the bucket's key (an IAM policy's document
    # is updated in place: a new default version, IAM API CreatePolicyVersion).
    "aws:iam/policy:Policy": {"policy"},
    "aws:kms/grant:Grant": {"keyId"},
}


def _plan(tmp_path: Path, name: str, on_stack_key: list[str]) -> Plan:
    config = cloud_only(template(STACK))
    config[PLATFORM_KEY].setdefault("storage", {})["onStackKey"] = on_stack_key
    (tmp_path / name).mkdir()
    return plan_config(config, tmp_path / name, STACK)


@pytest.fixture(scope="module")
def before_after(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Plan]:
    tmp_path = tmp_path_factory.mktemp("key-day2")
    everything = ["registry-database", "training-data", "object-data", "images", "node-volumes", "logs"]
    return _plan(tmp_path, "before", everything), _plan(tmp_path, "after", FIXED)


def _by_urn(plan: Plan) -> dict[str, Any]:
    return {r.urn: r for r in plan.resources}


def test_the_split_adds_keys_and_replaces_no_store(before_after: tuple[Plan, Plan]) -> None:
    before, after = (_by_urn(p) for p in before_after)
    assert set(before) <= set(after), "a resource was removed or renamed"
    added = {after[urn].name for urn in set(after) - set(before)}
    # Each new key: its component, the key and its alias.
    assert added == {
        f"{STACK}-aws-{domain}{part}"
        for domain in ("object-data", "node-volumes", "logs")
        for part in ("", "-key", "-alias")
    }
    for urn, old in before.items():
        changed = {path.split(".")[0].split("[")[0] for path in input_diff(old.inputs, after[urn].inputs)}
        assert REPLACING.get(old.type) not in changed, (old.name, changed)
        assert changed <= IN_PLACE.get(old.type, set()), (old.name, changed)


def test_the_stores_that_cannot_move_stay_on_the_first_key(before_after: tuple[Plan, Plan]) -> None:
    _, after = before_after
    first = after.outputs["kmsKeys"]["kubernetes-secrets"]
    assert {domain for domain, arn in after.outputs["kmsKeys"].items() if arn == first} == {
        "kubernetes-secrets",
        *FIXED,
    }
    moved = {d: after.outputs["kmsKeys"][d] for d in ("object-data", "node-volumes", "logs")}
    assert first not in moved.values()
