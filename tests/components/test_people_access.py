"""People's roles (config ``access``; docs/security.md, "Who can do what"; issue 35 item 2), as planned on
both clouds from the enterprise templates with teams and every role named:

- AWS: one EKS access entry per IAM role with its roles' access policies (EKS user guide, "Review access
  policy permissions"): AmazonEKSClusterAdminPolicy on the cluster for platform admins, AmazonEKSEditPolicy
  on the team's namespace only for its engineers, AmazonEKSViewPolicy for auditors; the KMS keys'
  administrative actions limited to the key custodians and the deployer (the one that writes the key
  policies); the auditors' read-only policy attached to their role, refused for a role of another account;
- Azure: AKS RBAC Cluster Admin / Writer on the team's namespace / Reader, the key-custodian role (Crypto
  Officer's key management without its cryptographic operations) on the keys' vault, auditors' readers
  on the workspace, the audit archive and the record; ``adminGroupObjectIDs`` unused;
- config: each identity checked for its cloud's kind, each team a team of the stack, and
  ``cluster.admins`` refused with where it moved.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.azure.keys import KEY_COPY_DATA_ACTIONS, KEY_USE_DATA_ACTIONS
from components.config import PLATFORM_KEY, ConfigError, parse_stack_config, placeholder_problems
from mlplatform import plan as plan_module
from mlplatform.plan import Plan, resolve_target
from tests.stack_variants import (
    ACCOUNT,
    PEOPLE_AWS,
    PEOPLE_AZURE,
    cloud_only,
    one,
    plan_config,
    template,
    with_teams,
)

AWS = "aws-enterprise-prod"
AZURE = "azure-enterprise-prod"
ENTRY = "aws:eks/accessEntry:AccessEntry"
ASSOCIATION = "aws:eks/accessPolicyAssociation:AccessPolicyAssociation"
ASSIGNMENT = "azure-native:authorization:RoleAssignment"
EKS_POLICY = "arn:aws:eks::aws:cluster-access-policy/"
# The mocks' deployer (mlplatform/mocks.py getCallerIdentity, a user: its session context is itself).
DEPLOYER = f"arn:aws:iam::{ACCOUNT}:user/mock"
# Azure built-in roles reference.
AKS_CLUSTER_ADMIN = "b1ff04bb-8a4e-4dc4-8eb5-8693973ce19b"
AKS_WRITER = "a7ffa36f-339b-4b5c-8bdf-e2c188b2c0eb"
AKS_READER = "7f6c6a51-bcf8-42ba-9220-52d62157d7db"
LOG_ANALYTICS_READER = "73c42c96-874c-492b-b04d-ab87d138a893"
BLOB_READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"


def _associations(plan: Plan) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for association in plan.by_type(ASSOCIATION):
        policy = association.inputs["policyArn"].removeprefix(EKS_POLICY)
        found.setdefault(association.inputs["principalArn"], []).append(
            (policy, association.inputs["accessScope"])
        )
    return found


def test_aws_each_role_gets_its_access_policy_and_scope(people_plan: Callable[[str], Plan]) -> None:
    plan = people_plan(AWS)
    entries = {e.inputs["principalArn"]: e for e in plan.by_type(ENTRY)}
    named = [*PEOPLE_AWS["platformAdmins"], *PEOPLE_AWS["auditors"]]
    named += [arn for arns in PEOPLE_AWS["mlEngineers"].values() for arn in arns]
    # The key custodians get no cluster access; every other person one entry, tagged with its roles.
    assert sorted(entries) == sorted(named)
    assert entries[PEOPLE_AWS["auditors"][0]].inputs["tags"]["ml-platform.io/access-roles"] == "auditor"
    assert _associations(plan) == {
        PEOPLE_AWS["platformAdmins"][0]: [("AmazonEKSClusterAdminPolicy", {"type": "cluster"})],
        PEOPLE_AWS["mlEngineers"]["nlp"][0]: [
            ("AmazonEKSEditPolicy", {"type": "namespace", "namespaces": ["team-nlp"]})
        ],
        PEOPLE_AWS["mlEngineers"]["vision"][0]: [
            ("AmazonEKSEditPolicy", {"type": "namespace", "namespaces": ["team-vision"]})
        ],
        PEOPLE_AWS["auditors"][0]: [("AmazonEKSViewPolicy", {"type": "cluster"})],
    }


def _statements(key: Any) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for s in json.loads(key.inputs["policy"])["Statement"]}


def test_aws_only_custodians_and_the_deployer_administer_every_key(
    people_plan: Callable[[str], Plan],
) -> None:
    keys = people_plan(AWS).by_type("aws:kms/key:Key")
    data_keys = [k for k in keys if "signing" not in k.name]
    assert len(data_keys) >= 8  # a key per data domain, the datasets' and the audit trail's
    # The image-signing key too: otherwise any IAM administrator could rewrite its policy and sign (review
    # 35 A2); anyone IAM lets may still verify a signature with it.
    assert len(keys) == len(data_keys) + 1
    for key in keys:
        statements = _statements(key)
        assert "AccountAdministersKeyThroughIam" not in statements, key.name
        custody = statements["KeyCustodiansAdministerKey"]
        assert custody["Condition"] == {
            "ArnEquals": {"aws:PrincipalArn": [DEPLOYER, *PEOPLE_AWS["keyCustodians"]]}
        }
        assert "kms:PutKeyPolicy" not in custody["Action"] and "kms:Put*" in custody["Action"]
        assert not any(
            a.startswith(("kms:Decrypt", "kms:Encrypt", "kms:Generate")) for a in custody["Action"]
        )
        # Reading a key's configuration stays IAM's to grant (auditors, AWS Config).
        assert statements["AccountReadsKeyConfigurationThroughIam"]["Action"] == [
            "kms:Describe*",
            "kms:List*",
            "kms:Get*",
            *(["kms:Verify"] if key not in data_keys else []),
        ]


def test_aws_no_key_custodian_uses_a_data_key(people_plan: Callable[[str], Plan]) -> None:
    """docs/security.md: key custodians "may not use a key for data". A use statement for the account root
    lets the account principals its condition names use the key where their IAM policy allows it (KMS
    developer guide, "Default key policy"), so each names its users by exact ARN (``ArnEquals``
    ``aws:PrincipalArn``), never a custodian; the deployer only on the keys of stores it creates through a
    service that uses its key rights (the registry database, the file systems; review 35 A1)."""
    data_keys = [k for k in people_plan(AWS).by_type("aws:kms/key:Key") if "signing" not in k.name]
    uses = [
        (key.name, statement)
        for key in data_keys
        for statement in _statements(key).values()
        if statement["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}
        and "kms:Decrypt" in statement["Action"]
    ]
    assert len(uses) >= 7  # every data domain's but the logs' and the images' (their services' own)
    for name, statement in uses:
        users = statement["Condition"]["ArnEquals"]["aws:PrincipalArn"]
        assert set(PEOPLE_AWS["keyCustodians"]).isdisjoint(users), name
        assert DEPLOYER not in users or "registry-database" in name or "training-data" in name, name


def test_aws_keys_stay_administered_through_iam_without_custodians(cloud_plan: Callable[[str], Plan]) -> None:
    for key in cloud_plan(AWS).by_type("aws:kms/key:Key"):
        assert "KeyCustodiansAdministerKey" not in _statements(key), key.name


def test_aws_auditors_read_the_trail_logs_and_record_and_write_nothing(
    people_plan: Callable[[str], Plan],
) -> None:
    plan = people_plan(AWS)
    policy = one(plan, "aws:iam/policy:Policy", "-access-auditors")
    document = json.loads(policy.inputs["policy"])
    actions = [
        a
        for s in document["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    ]
    verbs = {a.split(":")[1] for a in actions}
    assert all(
        v.startswith(("Get", "List", "Describe", "Lookup", "Filter"))
        for v in verbs - {"StartQuery", "StopQuery", "Decrypt"}
    )
    statements = {s["Sid"]: s for s in document["Statement"]}
    assert statements["DecryptThroughS3"]["Condition"] == {
        "StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}
    }
    buckets = statements["ListAuditedBuckets"]["Resource"]
    assert len(buckets) == 2 and any("-storage-audit-" in b for b in buckets)
    assert any("-storage-record-" in b for b in buckets)
    groups = statements["ReadStackLogs"]["Resource"]
    assert any(g.endswith(":log-group:/aws/cloudtrail/aws-enterprise-prod-audit:*") for g in groups)
    attachment = one(plan, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "-access-auditors-auditors")
    assert attachment.inputs["role"] == "auditors"
    assert plan.outputs["auditorPolicy"] == attachment.inputs["policyArn"]


def test_aws_each_teams_engineers_read_and_write_only_their_teams_datasets(
    people_plan: Callable[[str], Plan],
) -> None:
    """policies/key_users.yaml: ML engineers put their team's training data in the datasets bucket, under
    the datasets key (review 35 B3): one policy per team, attached to that team's roles only, listing,
    reading and writing ``datasets/<team>/`` of the datasets bucket and nothing else, the key through S3
    ("To upload an object encrypted with an AWS KMS key ... kms:GenerateDataKey ... to download ...
    kms:Decrypt", S3 user guide, "Using server-side encryption with AWS KMS keys (SSE-KMS)")."""
    plan = people_plan(AWS)
    urns = {r.urn: r for r in plan.resources}
    for team in ("nlp", "vision"):
        policy = one(plan, "aws:iam/policy:Policy", f"-identities-datasets-{team}")
        assert policy.inputs["tags"]["ml-platform.io/access-roles"] == "ml-engineer"
        assert policy.inputs["tags"]["ml-platform.io/team"] == team
        named = sorted(urns[u].name for u in policy.property_dependencies["policy"])
        assert named == [f"{AWS}-aws-datasets-key", f"{AWS}-aws-storage-datasets"]
        statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
        assert set(statements) == {"ListTeamDatasets", "ReadWriteTeamDatasets", "UseDatasetsKeyThroughS3"}
        listing, objects, key = statements.values()
        assert listing["Action"] == "s3:ListBucket" and "-storage-datasets-" in listing["Resource"]
        assert listing["Condition"] == {"StringLike": {"s3:prefix": [f"datasets/{team}/*"]}}
        assert objects["Action"] == ["s3:GetObject", "s3:PutObject"]
        assert objects["Resource"] == f"{listing['Resource']}/datasets/{team}/*"
        assert key["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"]
        assert key["Condition"] == {"StringEquals": {"kms:ViaService": "s3.me-central-1.amazonaws.com"}}
        (attachment,) = [
            a
            for a in plan.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
            if a.property_dependencies.get("policyArn") == [policy.urn]
        ]
        assert attachment.inputs["role"] == f"{team}-engineers"


def test_aws_auditor_of_another_account_is_refused_in_one_line(tmp_path: Path) -> None:
    config = cloud_only(template(AWS))
    config[PLATFORM_KEY]["access"] = {"auditors": ["arn:aws:iam::210987654321:role/central-audit"]}
    with pytest.raises(Exception) as refused:
        plan_config(config, tmp_path, AWS)
    assert (
        "access.auditors: arn:aws:iam::210987654321:role/central-audit is a role of another account"
        in str(refused.value)
    )


def test_aws_engineers_of_another_account_are_refused_in_one_line(tmp_path: Path) -> None:
    """IAM attaches a managed policy only to a role of its own account: the team's datasets policy cannot
    reach another account's role, so the preview says so instead of failing at apply."""
    config = with_teams(AWS)
    config[PLATFORM_KEY]["access"] = {"mlEngineers": {"nlp": ["arn:aws:iam::210987654321:role/nlp"]}}
    with pytest.raises(Exception) as refused:
        plan_config(config, tmp_path, AWS)
    assert (
        "access.mlEngineers.nlp: arn:aws:iam::210987654321:role/nlp is a role of another account, to which "
        "this stack cannot attach its datasets policy" in str(refused.value)
    )


def _assignments(plan: Plan) -> list[tuple[str, str, str]]:
    """(principal, role definition GUID, scope) of each people's role assignment."""
    return [
        (a.inputs["principalId"], a.inputs["roleDefinitionId"].rsplit("/", 1)[1], a.inputs["scope"])
        for a in plan.by_type(ASSIGNMENT)
        if str(a.inputs.get("description", "")).startswith("ml-platform access: ")
    ]


def _scopes(assignments: list[tuple[str, str, str]], principal: str, role: str | None = None) -> list[str]:
    return [s for p, r, s in assignments if p == principal and role in (None, r)]


def test_azure_groups_get_aks_rbac_roles_and_auditors_readers(people_plan: Callable[[str], Plan]) -> None:
    plan = people_plan(AZURE)
    assignments = _assignments(plan)
    cluster = one(plan, "azure-native:containerservice:ManagedCluster", "-cluster-aks")
    assert cluster.inputs["aadProfile"]["adminGroupObjectIDs"] == []
    admin, custodian, auditor = (
        PEOPLE_AZURE["platformAdmins"][0],
        PEOPLE_AZURE["keyCustodians"][0],
        PEOPLE_AZURE["auditors"][0],
    )
    (cluster_scope,) = _scopes(assignments, admin, AKS_CLUSTER_ADMIN)
    assert cluster_scope.endswith("/azure-enterprise-prod")
    datasets = one(plan, "azure-native:storage:BlobContainer", "-objects-datasets")
    for team in ("nlp", "vision"):
        engineers = PEOPLE_AZURE["mlEngineers"][team][0]
        (scope,) = _scopes(assignments, engineers, AKS_WRITER)
        assert scope.endswith(f"/namespaces/team-{team}")
        # Review 35 B3: the team's datasets, through a role assignment condition on the blob path and the
        # listing prefix (Azure ABAC, "Example: Read or list blobs in named containers with a path").
        (writer,) = [
            a
            for a in plan.by_type(ASSIGNMENT)
            if a.inputs["principalId"] == engineers and a.name.endswith(f"-{team}-datasets-{engineers}")
        ]
        assert writer.property_dependencies["scope"] == [datasets.urn]
        assert writer.inputs["conditionVersion"] == "2.0"
        assert f"blobs:path] StringStartsWith '{team}/'" in writer.inputs["condition"]
        assert f"blobs:prefix] StringStartsWith '{team}/'" in writer.inputs["condition"]
        # Review 35b A1: and the record writer role on the record's account, for their promotion
        # requests and rollout controls (docs/lifecycle.md), as the approvers hold it.
        (record,) = [
            a
            for a in plan.by_type(ASSIGNMENT)
            if a.inputs["principalId"] == engineers and a.name.endswith(f"-ml-engineer-record-{engineers}")
        ]
        assert record.property_dependencies["scope"] == [
            one(plan, "azure-native:storage:StorageAccount", "-record-account").urn
        ]
        assert len(_scopes(assignments, engineers)) == 3
    assert _scopes(assignments, auditor, AKS_READER) == [cluster_scope]
    assert len(_scopes(assignments, auditor, LOG_ANALYTICS_READER)) == 1
    readers = _scopes(assignments, auditor, BLOB_READER)
    assert len(readers) == 2 and any("-audit-account" in r for r in readers)  # the archive and the record
    assert len(_scopes(assignments, auditor)) == 4
    (vault,) = _scopes(assignments, custodian)
    assert "-keys-vault" in vault
    role = one(plan, "azure-native:authorization:RoleDefinition", "-access-team-datasets-writer")
    assert role.inputs["permissions"][0]["dataActions"] == [
        f"Microsoft.Storage/storageAccounts/blobServices/containers/blobs/{op}"
        for op in ("read", "write", "add/action")
    ]
    # The stack's key administration role, the deployer's on the same vault (components/azure/keys.py).
    definition = one(plan, "azure-native:authorization:RoleDefinition", "-keys-key-administration")
    (permissions,) = definition.inputs["permissions"]
    assert permissions["notDataActions"] == [*KEY_USE_DATA_ACTIONS, *KEY_COPY_DATA_ACTIONS]
    assert "Microsoft.KeyVault/vaults/keys/unwrap/action" in permissions["notDataActions"]
    # Key Vault REST API, Keys - Backup Key: a backup is restored into another vault (review 35 B2).
    assert "Microsoft.KeyVault/vaults/keys/backup/action" in permissions["notDataActions"]


def _body(stack: str) -> dict[str, Any]:
    return copy.deepcopy(template(stack))


@pytest.mark.parametrize(
    ("stack", "access", "line"),
    [
        (
            AWS,
            {"platformAdmins": [PEOPLE_AZURE["platformAdmins"][0]]},
            "access.platformAdmins[0]: '0a000000-0000-4000-8000-000000000001' is not an IAM role ARN: "
            "arn:aws:iam::<12-digit account>:role/<name>",
        ),
        (
            AZURE,
            {"auditors": [PEOPLE_AWS["auditors"][0]]},
            f"access.auditors[0]: '{PEOPLE_AWS['auditors'][0]}' is not an Entra group object id: a lowercase "
            "GUID (8-4-4-4-12 hex digits)",
        ),
        (
            # IAM Identity Center user guide, "Referencing permission sets in resource policies, Amazon EKS,
            # and AWS KMS": the role's ARN carries aws-reserved/sso.amazonaws.com/<region>/ (review 35 C3).
            AWS,
            {"auditors": ["arn:aws:iam::123456789012:role/AWSReservedSSO_Auditor_1234567890abcdef"]},
            "access.auditors[0]: 'arn:aws:iam::123456789012:role/AWSReservedSSO_Auditor_1234567890abcdef' "
            "has no path: an IAM Identity Center role is named with its path: arn:aws:iam::<account>:role/"
            "aws-reserved/sso.amazonaws.com/<region>/AWSReservedSSO_<permission set>_<suffix> "
            "(aws:PrincipalArn carries it)",
        ),
        (
            AWS,
            {"mlEngineers": {"speech": [PEOPLE_AWS["auditors"][0]]}},
            "access.mlEngineers.speech: no team is named speech (kubernetes.teams: none)",
        ),
    ],
)
def test_bad_identities_are_refused_in_one_line(stack: str, access: dict[str, Any], line: str) -> None:
    config = _body(stack)
    config[PLATFORM_KEY]["access"] = access
    with pytest.raises(ConfigError) as refused:
        parse_stack_config(config, "Pulumi.x.yaml")
    assert refused.value.problems == [f"Pulumi.x.yaml: {PLATFORM_KEY}.{line}"]


def test_cluster_admins_is_refused_with_where_it_moved() -> None:
    config = _body(AWS)
    config[PLATFORM_KEY]["cluster"]["admins"] = [PEOPLE_AWS["platformAdmins"][0]]
    with pytest.raises(ConfigError) as refused:
        parse_stack_config(config, "Pulumi.x.yaml")
    assert refused.value.problems == [
        f"Pulumi.x.yaml: {PLATFORM_KEY}.cluster.admins: moved to access.platformAdmins (the people's "
        "roles, docs/security.md): move the list there"
    ]


def _commented_access(stack: str) -> dict[str, Any]:
    """The ``access`` example an enterprise template carries as comments, uncommented."""
    lines = resolve_target(stack).stack_file.read_text().splitlines()
    start = lines.index("    # access:")
    block = [start]
    block += [i for i in range(start + 1, len(lines)) if lines[i].startswith("    #   ")][: len(PEOPLE_AWS)]
    document = yaml.safe_load("\n".join(lines[i].replace("    # ", "", 1) for i in block))
    example: dict[str, Any] = document["access"]
    return example


@pytest.mark.parametrize("stack", [AWS, AZURE, "aws-enterprise-dev", "azure-enterprise-dev"])
def test_the_templates_access_example_is_valid_and_refused_by_pulumi_up_as_placeholders(stack: str) -> None:
    config = with_teams(stack, ["vision"])
    config[PLATFORM_KEY]["access"] = _commented_access(stack)
    problems = placeholder_problems(parse_stack_config(config, f"Pulumi.{stack}.yaml"))
    access = [line for line in problems if f"{PLATFORM_KEY}.access." in line]
    assert len(access) == 5, problems  # one placeholder per role of the example
    assert all("is a template placeholder identity" in line for line in access)


def test_aws_moved_cluster_admins_keep_their_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cluster.admins`` made ``<cluster>-admin-<i>`` (an entry and its ClusterAdmin association) under the
    EKS cluster component; EKS keeps one access entry per principal, so ``access.platformAdmins`` must adopt
    them (an alias to that name and parent), or the update would fail creating a second entry."""
    registered: dict[tuple[str, str], list[tuple[str, str]]] = {}
    capture = plan_module._CaptureMonitor.RegisterResource

    def record(self: Any, request: Any) -> Any:
        registered[(request.type, request.name)] = [(a.spec.name, a.spec.parentUrn) for a in request.aliases]
        return capture(self, request)

    monkeypatch.setattr(plan_module._CaptureMonitor, "RegisterResource", record)
    stack = "aws-enterprise-dev"
    config = cloud_only(template(stack))
    config[PLATFORM_KEY]["access"] = {
        "platformAdmins": PEOPLE_AWS["platformAdmins"],
        "auditors": PEOPLE_AWS["auditors"],
    }
    plan_config(config, tmp_path, stack)
    cluster = f"{stack}-aws-cluster"
    former = [
        (
            f"{cluster}-admin-0",
            f"urn:pulumi:{stack}::ml-platform::ml-platform:aws:Platform$ml-platform:aws:EksCluster::{cluster}",
        )
    ]
    admin, auditor = f"{stack}-aws-access-{ACCOUNT}-platform-admins", f"{stack}-aws-access-{ACCOUNT}-auditors"
    assert registered[(ENTRY, admin)] == former
    assert registered[(ASSOCIATION, f"{admin}-platform-admin")] == former
    assert registered[(ENTRY, auditor)] == [] and registered[(ASSOCIATION, f"{auditor}-auditor")] == []
