"""Day 2 of the key split (issue 35 item 3): an AWS stack made when one key encrypted every store takes
the per-domain keys with no store replaced, in the cloud layer and the Kubernetes layer alike.

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
  update APIs) and the ECR repositories (``encryptionConfiguration``: set at CreateRepository only);
- node volumes (review of issue 38, B5): the default StorageClass names the node-volumes key in its
  ``parameters``, which the API server refuses to update (``ValidateStorageClassUpdate``), so moving
  the domain replaces the class, and the launch templates' new version rolls every node group: a step of
  its own, planned below with the Kubernetes judge ``immutable-field-changed`` naming the class.
The bucket's default encryption and the log groups (``AssociateKmsKey``) take their new keys in place.

The programs run under the plan's mocks, the whole stack with its Kubernetes objects, each plan as
``mlplatform plan --json`` writes it, and their inputs are compared as the engine diffs them.

The upgrade cannot skip that first step by mistake (review B11): the program refuses, in one line naming
``storage.onStackKey``, an update of a stack whose first key's alias exists and none of the per-domain
keys' does, when it would move stores that are replaced to move; the mocks' account then has that alias.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest

from components.config import PLATFORM_KEY
from judges.immutable import judge_immutable
from mlplatform.mocks import ExistingAccount, PlanMocks
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects
from tests.components.aws.aws_plan_support import build_platform, parse
from tests.stack_variants import as_written, cloud_only, input_diff, plan_config, template

STACK = "aws-enterprise-prod"
FIXED = ["registry-database", "training-data", "images", "node-volumes"]
EVERYTHING = ["registry-database", "training-data", "object-data", "images", "node-volumes", "logs"]
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
# bucket's key (a grant holds no data). No Kubernetes object changes.
IN_PLACE = {
    "aws:kms/key:Key": {"description", "policy", "tags"},
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": {"rules"},
    "aws:cloudwatch/logGroup:LogGroup": {"kmsKeyId"},
    "aws:iam/rolePolicy:RolePolicy": {"policy"},
    # The lifecycle record's writer policy for approvers names the bucket's key (an IAM policy's document
    # is updated in place: a new default version, IAM API CreatePolicyVersion).
    "aws:iam/policy:Policy": {"policy"},
    "aws:kms/grant:Grant": {"keyId"},
}


def _plan(tmp_path: Path, name: str, on_stack_key: list[str]) -> Plan:
    config = template(STACK)
    config[PLATFORM_KEY].setdefault("storage", {})["onStackKey"] = on_stack_key
    (tmp_path / name).mkdir()
    return as_written(plan_config(config, tmp_path / name, STACK))


@pytest.fixture(scope="module")
def before_after(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Plan]:
    tmp_path = tmp_path_factory.mktemp("key-day2")
    return _plan(tmp_path, "before", EVERYTHING), _plan(tmp_path, "after", FIXED)


def _by_urn(plan: Plan) -> dict[str, Any]:
    return {r.urn: r for r in plan.resources}


def test_the_split_adds_keys_and_replaces_no_store(before_after: tuple[Plan, Plan]) -> None:
    before, after = (_by_urn(p) for p in before_after)
    assert set(before) <= set(after), "a resource was removed or renamed"
    added = {after[urn].name for urn in set(after) - set(before)}
    # Each new key: its component, the key and its alias.
    assert added == {
        f"{STACK}-aws-{domain}{part}" for domain in ("object-data", "logs") for part in ("", "-key", "-alias")
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
    moved = {d: after.outputs["kmsKeys"][d] for d in ("object-data", "logs")}
    assert first not in moved.values()


def test_the_first_step_changes_no_kubernetes_object(before_after: tuple[Plan, Plan]) -> None:
    """docs/operations.md step 1 "replaces nothing": the Kubernetes layer included (review 38 B5)."""
    before, after = (kubernetes_objects(p) for p in before_after)
    assert len(before) == len(after) > 100
    assert judge_immutable(before, after) == []
    assert before == after


def test_moving_node_volumes_replaces_the_default_storage_class_and_rolls_the_nodes(
    before_after: tuple[Plan, Plan], tmp_path: Path
) -> None:
    """The step that moves node volumes (the old step 1 left them out of ``storage.onStackKey``): the
    StorageClass's parameters are refused on update, so the class is replaced; the launch templates take
    a new version. Nothing else changes but the new key."""
    _, after = before_after
    moved = _plan(tmp_path, "node-volumes", [d for d in FIXED if d != "node-volumes"])
    [finding] = judge_immutable(kubernetes_objects(after), kubernetes_objects(moved))
    assert (finding.subject.kind, finding.subject.name) == ("StorageClass", "ml-platform-encrypted")
    assert "parameters" in finding.message
    old = _by_urn(after)
    changed = {
        (r.type, path.split(".")[0].split("[")[0])
        for r in moved.resources
        if r.urn in old
        for path in input_diff(old[r.urn].inputs, r.inputs)
    }
    assert changed == {
        ("aws:ec2/launchTemplate:LaunchTemplate", "blockDeviceMappings"),
        ("kubernetes:storage.k8s.io/v1:StorageClass", "parameters"),
        # The EBS CSI driver's role may use the new key.
        ("aws:iam/rolePolicy:RolePolicy", "policy"),
        ("aws:kms/key:Key", "description"),
        ("aws:kms/key:Key", "policy"),
        ("aws:kms/key:Key", "tags"),
    }


class _Recording(PlanMocks):
    """An account holding ``aliases``, recording what the program registers."""

    def __init__(self, aliases: set[str]) -> None:
        super().__init__(
            aws_region="me-central-1", azure_location="", existing=ExistingAccount(aliases=frozenset(aliases))
        )
        self.created: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.created.append(args.typ)
        return super().new_resource(args)


FIRST_ALIAS = f"alias/{STACK}-aws-key"


def _build(on_stack_key: list[str], aliases: set[str]) -> _Recording:
    config = cloud_only(template(STACK))
    config[PLATFORM_KEY].setdefault("storage", {})["onStackKey"] = on_stack_key
    mocks = _Recording(aliases)
    build_platform(parse(config, STACK), mocks)
    return mocks


def test_an_upgrade_that_would_replace_stores_to_move_them_is_refused() -> None:
    """A stack made before the split (its first key's alias only), upgraded without ``storage.onStackKey``:
    one line naming the stack key and what to list, before any resource is registered."""
    with pytest.raises(pulumi.RunError) as refused:
        _build([], {FIRST_ALIAS})
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        f"{PLATFORM_KEY}.storage.onStackKey: stack {STACK} keeps every store on {FIRST_ALIAS}"
    )
    assert "set storage.onStackKey: [registry-database, training-data, images, node-volumes] first" in message


@pytest.mark.parametrize(
    ("on_stack_key", "aliases"),
    [
        # The upgrade's first step: the stores that are replaced to move stay on the first key.
        (FIXED, {FIRST_ALIAS}),
        # A new stack: no alias at all.
        ([], set()),
        # After the first step the per-domain keys exist: emptying onStackKey is the migration itself.
        ([], {FIRST_ALIAS, f"alias/{STACK}-aws-object-data"}),
    ],
    ids=["first-step", "new-stack", "migrating"],
)
def test_the_guard_lets_a_new_stack_and_the_documented_upgrade_through(
    on_stack_key: list[str], aliases: set[str]
) -> None:
    assert "aws:rds/instance:Instance" in _build(on_stack_key, aliases).created
