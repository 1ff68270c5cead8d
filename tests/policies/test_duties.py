"""People's duties kept apart (issue 35 item 2; review rows S1, I2, E2), both ways, through the real pack
over gRPC: the enterprise plans with teams and every people's role named pass ``duties-separated`` and
``key-duties-separated``; a plan with one merge planted in fails with the policy and the resource that
carries it: a platform admin who is also a key custodian (AWS key policy, Azure vault role), an auditor
who is also an admin, or holds an edit access policy, a write in the auditors' policy or a writer's Azure
role, a model approver who trains (``REGISTRY_PROMOTERS`` naming the training user), and a key custodian
whom the key policy also lets use the key (KMS developer guide, "Default key policy": administrators and
users in separate statements); and ``key-use-by-role``: a named person whose roles the role-to-key table
(``policies/key_users.yaml``) keeps off a key, left in its use (AWS: KMS developer guide, "Default key
policy", "Allows access to the AWS account and enables IAM policies": a root statement lets any account
principal its IAM allows use the key) or given a key-using Key Vault role (Azure built-in roles,
"Security": Key Vault Crypto User's data actions include decrypt and unwrapKey), a person named by role
session (IAM user guide, "IAM identifiers": ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``) or, on
Azure, by object id under any description included; and the image-signing key administered by any IAM
administrator while the stack names key custodians (KMS developer guide, "Default key policy", "Allows key
administrators to administer the KMS key": they can give themselves the key's use).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from mlplatform.analyzer import PolicyPackSession
from mlplatform.analyzer_config import PolicySettings
from mlplatform.mocks import TENANT_ID
from mlplatform.plan import Plan
from tests.stack_variants import PEOPLE_AWS, PEOPLE_AZURE

from .conftest import found
from .test_audit import with_inputs

POLICIES = {"duties-separated", "key-duties-separated", "key-use-by-role"}
PlanDict = dict[str, Any]
Findings = Callable[[PlanDict], set[tuple[str, str]]]

AWS = "aws-enterprise-prod"
AZURE = "azure-enterprise-prod"
REGISTRY_SERVER = "deployment-ml-registry-registry"
ADMIN, CUSTODIAN, AUDITOR = (
    PEOPLE_AWS["platformAdmins"][0],
    PEOPLE_AWS["keyCustodians"][0],
    PEOPLE_AWS["auditors"][0],
)
ENGINEER = PEOPLE_AWS["mlEngineers"]["nlp"][0]
APPROVER = PEOPLE_AWS["modelApprovers"][0]
AUDITOR_ENTRY = f"{AWS}-aws-access-123456789012-auditors"
AUDITOR_POLICY = f"{AWS}-aws-access-auditors"
DATASETS_KEY = f"{AWS}-aws-datasets-key"
OBJECT_DATA_KEY = f"{AWS}-aws-object-data-key"
SECRETS_KEY = f"{AWS}-aws-key-key"
SIGNING_KEY = f"{AWS}-aws-registry-signing-key"
NLP_DATASETS_POLICY = f"{AWS}-aws-identities-datasets-nlp"
DATA_BUCKET = f"{AWS}-aws-storage-data"
DATASETS_BUCKET = f"{AWS}-aws-storage-datasets"
ENGINEERS_RECORD_POLICY = f"{AWS}-aws-identities-record-reader-engineers"
# Azure built-in roles reference: Azure Kubernetes Service RBAC Writer.
AKS_WRITER = "a7ffa36f-339b-4b5c-8bdf-e2c188b2c0eb"
READ_TYPES = (
    "aws:eks/access",
    "aws:iam/policy:Policy",
    "aws:iam/rolePolicyAttachment",
    "aws:kms/key:Key",
    "aws:s3/bucket:Bucket",
    "azure-native:authorization:RoleAssignment",
    "azure-native:authorization:RoleDefinition",
    "azure-native:compute:DiskEncryptionSet",
    "azure-native:containerregistry:Registry",
    "azure-native:containerservice:ManagedCluster",
    "azure-native:keyvault:",
    "azure-native:managedidentity:",
    "azure-native:storage:BlobContainer",
    "azure-native:storage:StorageAccount",
    "kubernetes:apps/v1:Deployment",
    # The charts' and the stack's Kubernetes RBAC objects (review rev35h A2).
    "kubernetes:rbac.authorization.k8s.io/",
    "pulumi:providers:",
)


@pytest.fixture(scope="module")
def duties(pack: PolicyPackSession, defaults: dict[str, PolicySettings]) -> Findings:
    def judge(plan: PlanDict) -> set[tuple[str, str]]:
        return {(p, name) for p, name in found(pack.judge(plan, defaults)) if p in POLICIES}

    return judge


def _read_by_policies(plan: Plan) -> PlanDict:
    whole = plan.to_dict()
    return {**whole, "resources": [r for r in whole["resources"] if r["type"].startswith(READ_TYPES)]}


@pytest.fixture(scope="module")
def aws_plan(people_plan: Callable[[str], Plan]) -> PlanDict:
    return _read_by_policies(people_plan(AWS))


@pytest.fixture(scope="module")
def azure_plan(people_plan: Callable[[str], Plan]) -> PlanDict:
    return _read_by_policies(people_plan(AZURE))


def test_plans_naming_every_role_pass(aws_plan: PlanDict, azure_plan: PlanDict, duties: Findings) -> None:
    assert duties(aws_plan) == set()
    assert duties(azure_plan) == set()


def _named(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: r["name"] == name


def _policy(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(inputs: dict[str, Any]) -> None:
        document = json.loads(inputs["policy"])
        edit(document)
        inputs["policy"] = json.dumps(document)

    return apply


def _statement(sid: str, edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return _policy(lambda d: edit(next(s for s in d["Statement"] if s.get("Sid") == sid)))


def _also_custodian(principal: str) -> Callable[[dict[str, Any]], None]:
    return _statement(
        "KeyCustodiansAdministerKey",
        lambda s: s["Condition"]["ArnEquals"]["aws:PrincipalArn"].append(principal),
    )


def _let_in(principal: str) -> Callable[[dict[str, Any]], None]:
    """Add ``principal`` to the users a use statement names (``ArnEquals`` ``aws:PrincipalArn``)."""
    return lambda s: s["Condition"]["ArnEquals"]["aws:PrincipalArn"].append(principal)


def _promoters_add(user: str, name: str = "REGISTRY_PROMOTERS") -> Callable[[dict[str, Any]], None]:
    def apply(inputs: dict[str, Any]) -> None:
        for container in inputs["spec"]["template"]["spec"]["containers"]:
            for variable in container.get("env", []):
                if variable["name"] == name:
                    variable["value"] = json.dumps([*json.loads(variable["value"]), user])

    return apply


def _retag(roles: str) -> Callable[[dict[str, Any]], None]:
    def apply(inputs: dict[str, Any]) -> None:
        inputs["tags"]["ml-platform.io/access-roles"] = roles

    return apply


def _association(principal: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: (
        r["type"].endswith("AccessPolicyAssociation") and r["inputs"]["principalArn"] == principal
    )


def _session(role_arn: str, session: str) -> str:
    """The ARN of a session of ``role_arn`` (IAM user guide, "IAM identifiers": assumed-role form)."""
    _arn, partition, _iam, _region, account, resource = role_arn.split(":", 5)
    return f"arn:{partition}:sts::{account}:assumed-role/{resource.rsplit('/', 1)[-1]}/{session}"


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda inputs: inputs.__setitem__(key, value)


def _objects_of(team: str) -> Callable[[dict[str, Any]], None]:
    """The team's datasets policy's object statement moved to another team's prefix."""
    return _statement(
        "ReadWriteTeamDatasets",
        lambda s: s.__setitem__("Resource", s["Resource"].replace("/nlp/", f"/{team}/")),
    )


def _also_reaches(plan: PlanDict, bucket: str, name: str = NLP_DATASETS_POLICY) -> PlanDict:
    """An engineers' policy (the nlp engineers' datasets policy unless ``name``) given another bucket's
    objects too: a statement naming the bucket, which the engine records as the policy's dependency on
    it."""
    edited = copy.deepcopy(plan)
    (target,) = [r for r in edited["resources"] if r["name"] == bucket]
    (policy,) = [r for r in edited["resources"] if r["name"] == name]
    document = json.loads(policy["inputs"]["policy"])
    objects = f"arn:aws:s3:::{target['inputs'].get('bucket', bucket)}/datasets/nlp/*"
    document["Statement"].append(
        {"Sid": "Elsewhere", "Effect": "Allow", "Action": "s3:GetObject", "Resource": objects}
    )
    policy["inputs"]["policy"] = json.dumps(document)
    policy["propertyDependencies"]["policy"].append(target["urn"])
    return edited


AWS_CASES: list[tuple[str, Callable[[PlanDict], PlanDict], set[tuple[str, str]]]] = [
    (
        "platform-admin-is-key-custodian",
        lambda p: with_inputs(p, _named(SECRETS_KEY), _also_custodian(ADMIN)),
        {("duties-separated", f"{AWS}-aws-access-123456789012-platform-admins")},
    ),
    (
        "auditor-is-platform-admin",
        lambda p: with_inputs(p, _named(AUDITOR_ENTRY), _retag("auditor platform-admin")),
        {("duties-separated", AUDITOR_ENTRY)},
    ),
    (
        "auditor-edits",
        lambda p: with_inputs(
            p,
            _association(AUDITOR),
            _set("policyArn", "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy"),
        ),
        # The grant is an ML engineer's too, so the auditor holds a second role (review rev35f A3).
        {("duties-separated", f"{AUDITOR_ENTRY}-auditor"), ("duties-separated", AUDITOR_ENTRY)},
    ),
    (
        "auditors-policy-writes",
        lambda p: with_inputs(
            p,
            _named(AUDITOR_POLICY),
            _policy(
                lambda d: d["Statement"].append(
                    {"Effect": "Allow", "Action": "s3:PutObject", "Resource": "*"}
                )
            ),
        ),
        {("duties-separated", AUDITOR_POLICY)},
    ),
    (
        # An auditor given the lifecycle record readers' policy (the model approvers') holds a second role.
        "auditor-approves",
        lambda p: with_inputs(
            p, _named(f"{AWS}-aws-identities-record-reader-model-approvers"), _set("role", "auditors")
        ),
        {("duties-separated", AUDITOR_ENTRY)},
    ),
    (
        "approver-trains",
        lambda p: with_inputs(p, _named(REGISTRY_SERVER), _promoters_add("ml-training")),
        {("duties-separated", REGISTRY_SERVER)},
    ),
    (
        # The approver role the registry decides approvals on (review rev40d A4: REGISTRY_APPROVERS).
        "approver-role-trains",
        lambda p: with_inputs(
            p, _named(REGISTRY_SERVER), _promoters_add("ml-training", "REGISTRY_APPROVERS")
        ),
        {("duties-separated", REGISTRY_SERVER)},
    ),
    (
        "team-approves-its-models",
        lambda p: with_inputs(p, _named(REGISTRY_SERVER), _promoters_add("team-nlp")),
        {("duties-separated", REGISTRY_SERVER)},
    ),
    (
        # docs/security.md: custodians "may not reach the cluster" (review 35 A3).
        "key-custodian-is-ml-engineer",
        lambda p: with_inputs(p, _named(SECRETS_KEY), _also_custodian(ENGINEER)),
        {("duties-separated", f"{AWS}-aws-access-123456789012-nlp-engineers")},
    ),
    (
        # The drift monitor launches retrains; as an approver it would promote them (review 35 A4).
        "drift-monitor-approves",
        lambda p: with_inputs(p, _named(REGISTRY_SERVER), _promoters_add("ml-inference-drift-monitor")),
        {("duties-separated", REGISTRY_SERVER)},
    ),
    (
        # A use statement for the root that names a custodian: its IAM rights decrypt the data (KMS
        # developer guide, "Default key policy"; review 35 A1).
        "custodian-named-a-user",
        lambda p: with_inputs(
            p,
            _named(OBJECT_DATA_KEY),
            _statement("ObjectDataUsersUseKey", _let_in(CUSTODIAN)),
        ),
        {("key-duties-separated", OBJECT_DATA_KEY)},
    ),
    (
        # The table gives a platform admin no key: its IAM rights would read models and the record.
        "platform-admin-left-in-object-data-use",
        lambda p: with_inputs(
            p, _named(OBJECT_DATA_KEY), _statement("ObjectDataUsersUseKey", _let_in(ADMIN))
        ),
        {("key-use-by-role", OBJECT_DATA_KEY)},
    ),
    (
        # aws:PrincipalArn carries a role's path (IAM Identity Center user guide, "Referencing permission
        # sets in resource policies, Amazon EKS, and AWS KMS"; review 35 C3): a pattern over every path
        # (ArnLike, IAM user guide "Condition operators", ARN condition operators) lets the admins' role
        # in wherever it lives.
        "platform-admin-let-in-by-a-pattern-over-paths",
        lambda p: with_inputs(
            p,
            _named(OBJECT_DATA_KEY),
            _statement(
                "ObjectDataUsersUseKey",
                lambda s: s["Condition"].__setitem__(
                    "ArnLike",
                    {
                        "aws:PrincipalArn": [
                            *s["Condition"].pop("ArnEquals")["aws:PrincipalArn"],
                            ADMIN.replace(":role/", ":role/*"),
                        ]
                    },
                ),
            ),
        ),
        {("key-use-by-role", OBJECT_DATA_KEY)},
    ),
    (
        # The table gives ML engineers the datasets domain, a team its own prefix (review 35 B3).
        "team-datasets-policy-on-another-teams-prefix",
        lambda p: with_inputs(p, _named(NLP_DATASETS_POLICY), _objects_of("vision")),
        {("key-use-by-role", NLP_DATASETS_POLICY)},
    ),
    (
        # Listing the whole bucket names every team's objects.
        "team-datasets-policy-lists-the-whole-bucket",
        lambda p: with_inputs(
            p, _named(NLP_DATASETS_POLICY), _statement("ListTeamDatasets", lambda s: s.pop("Condition"))
        ),
        {("key-use-by-role", NLP_DATASETS_POLICY)},
    ),
    (
        "team-datasets-policy-on-the-data-bucket",
        lambda p: _also_reaches(p, DATA_BUCKET),
        {("key-use-by-role", NLP_DATASETS_POLICY)},
    ),
    (
        # The engineers' record writers' policy (review 35b A1) reaches the record only: given a datasets
        # bucket, it is a datasets policy of no team.
        "engineers-record-writers-policy-on-the-datasets",
        lambda p: _also_reaches(p, DATASETS_BUCKET, ENGINEERS_RECORD_POLICY),
        {("key-use-by-role", ENGINEERS_RECORD_POLICY)},
    ),
    (
        # A person's object-data use is the record's bucket alone: not the models and checkpoints.
        "engineers-record-writers-policy-on-the-data-bucket",
        lambda p: _also_reaches(p, DATA_BUCKET, ENGINEERS_RECORD_POLICY),
        {("key-use-by-role", ENGINEERS_RECORD_POLICY)},
    ),
    (
        "team-datasets-policy-attached-to-another-team",
        lambda p: with_inputs(
            p, _named(f"{NLP_DATASETS_POLICY}-nlp-engineers"), _set("role", "vision-engineers")
        ),
        {("key-use-by-role", f"{NLP_DATASETS_POLICY}-nlp-engineers")},
    ),
    (
        # A model approver (known by the record-reader policy attached to its role) needs the record's
        # key, not the datasets'.
        "approver-left-in-datasets-use",
        lambda p: with_inputs(p, _named(DATASETS_KEY), _statement("DatasetsUsersUseKey", _let_in(APPROVER))),
        {("key-use-by-role", DATASETS_KEY)},
    ),
    (
        "ml-engineer-named-a-secrets-key-user",
        lambda p: with_inputs(
            p,
            _named(SECRETS_KEY),
            _statement(
                "KubernetesSecretsUsersUseKey",
                _let_in(ENGINEER),
            ),
        ),
        {("key-use-by-role", SECRETS_KEY)},
    ),
    (
        # IAM user guide, "IAM identifiers": a role session's ARN names the role it is of (review 35 A3).
        "ml-engineer-session-named-a-secrets-key-user",
        lambda p: with_inputs(
            p,
            _named(SECRETS_KEY),
            _policy(
                lambda d: d["Statement"].append(
                    {
                        "Sid": "EngineerSessionDecrypts",
                        "Effect": "Allow",
                        "Principal": {"AWS": _session(ENGINEER, "alice")},
                        "Action": ["kms:Decrypt"],
                        "Resource": "*",
                    }
                )
            ),
        ),
        {("key-use-by-role", SECRETS_KEY)},
    ),
    (
        # A root statement with NotAction allows every action it does not list, the cryptographic and the
        # administrative ones included (IAM JSON policy reference, "IAM JSON policy elements: NotAction";
        # review 35 C2): the engineer uses the Secrets key, may grant itself that use (kms:CreateGrant,
        # unconditioned) and administers the key, a key custodian who reaches the cluster.
        "ml-engineer-given-the-secrets-key-by-not-action",
        lambda p: with_inputs(
            p,
            _named(SECRETS_KEY),
            _policy(
                lambda d: d["Statement"].append(
                    {
                        "Sid": "EngineerAllButDeletion",
                        "Effect": "Allow",
                        "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                        "NotAction": ["kms:ScheduleKeyDeletion", "kms:PutKeyPolicy"],
                        "Resource": "*",
                        "Condition": {"ArnEquals": {"aws:PrincipalArn": ENGINEER}},
                    }
                )
            ),
        ),
        {
            ("key-use-by-role", SECRETS_KEY),
            ("key-duties-separated", SECRETS_KEY),
            ("duties-separated", f"{AWS}-aws-access-123456789012-nlp-engineers"),
        },
    ),
    (
        # The signing key administered by the account root unconditioned while custodians are named: any
        # IAM administrator may PutKeyPolicy and give itself kms:Sign (review 35 A2).
        "signing-key-administered-by-any-iam-admin",
        lambda p: with_inputs(
            p, _named(SIGNING_KEY), _statement("KeyCustodiansAdministerKey", lambda s: s.pop("Condition"))
        ),
        {("key-duties-separated", SIGNING_KEY)},
    ),
    (
        "custodian-uses-the-key",
        lambda p: with_inputs(
            p,
            _named(DATASETS_KEY),
            _statement(
                "DatasetsUsersUseKey",
                lambda s: s["Condition"].__setitem__("ArnLike", {"aws:PrincipalArn": [CUSTODIAN]}),
            ),
        ),
        {("key-duties-separated", DATASETS_KEY)},
    ),
]


@pytest.mark.parametrize(("case", "plant", "expected"), AWS_CASES, ids=[c[0] for c in AWS_CASES])
def test_aws_merged_duties_are_refused(
    aws_plan: PlanDict,
    duties: Findings,
    case: str,
    plant: Callable[[PlanDict], PlanDict],
    expected: set[tuple[str, str]],
) -> None:
    assert duties(plant(aws_plan)) == expected, case


def _assignment(principal: str, description: str) -> Callable[[dict[str, Any]], bool]:
    return lambda r: (
        r["type"] == "azure-native:authorization:RoleAssignment"
        and r["inputs"].get("principalId") == principal
        and r["inputs"].get("description") == description
    )


def _writer(inputs: dict[str, Any]) -> None:
    inputs["roleDefinitionId"] = inputs["roleDefinitionId"].rsplit("/", 1)[0] + f"/{AKS_WRITER}"


def _undescribed_crypto_user(inputs: dict[str, Any]) -> None:
    inputs.pop("description")
    inputs["roleDefinitionId"] = f"/providers/Microsoft.Authorization/roleDefinitions/{KEY_VAULT_CRYPTO_USER}"


AZURE_ADMIN, AZURE_AUDITOR = PEOPLE_AZURE["platformAdmins"][0], PEOPLE_AZURE["auditors"][0]
AZURE_ENGINEER = PEOPLE_AZURE["mlEngineers"]["vision"][0]
AZURE_ENGINEER_RECORD = f"{AZURE}-azure-access-ml-engineer-record-{AZURE_ENGINEER}"
AZURE_APPROVER, AZURE_CUSTODIAN = PEOPLE_AZURE["modelApprovers"][0], PEOPLE_AZURE["keyCustodians"][0]
# Azure built-in roles reference, "Security": Key Vault Crypto User.
KEY_VAULT_CRYPTO_USER = "12338af0-0e69-4776-bea7-57ae8d297424"
KEY_VAULT_CRYPTO_OFFICER = "14b46e9e-c2b7-41b4-b07b-48a6ebf60603"
# The mocks' deployer (mlplatform/mocks.py: the client config's object id), to which the stack gives its key
# administration role on its vaults (components/azure/keys.py ``deployer_key_access``).
AZURE_DEPLOYER = TENANT_ID
AZURE_NLP_DATASETS = f"{AZURE}-azure-access-ml-engineer-nlp-datasets-{PEOPLE_AZURE['mlEngineers']['nlp'][0]}"


def _moved_to(plan: PlanDict, container: str, name: str = AZURE_NLP_DATASETS) -> PlanDict:
    """An engineers' assignment (the nlp engineers' datasets one unless ``name``) moved onto another
    container (its scope and the engine's dependency on it)."""
    edited = copy.deepcopy(plan)
    (target,) = [r for r in edited["resources"] if r["name"] == container]
    (assignment,) = [r for r in edited["resources"] if r["name"] == name]
    assignment["inputs"]["scope"] = str(assignment["inputs"]["scope"]).replace("datasets", "models")
    assignment["propertyDependencies"]["scope"] = [target["urn"]]
    return edited


AZURE_CASES: list[tuple[str, Callable[[PlanDict], PlanDict], set[tuple[str, str]]]] = [
    (
        # The engineers hold the record writer role on the lifecycle record's account only (review 35b
        # A1): the same role on another store is a write outside their datasets.
        "engineers-record-writer-role-on-the-models-container",
        lambda p: _moved_to(p, f"{AZURE}-azure-objects-models", AZURE_ENGINEER_RECORD),
        {("key-use-by-role", AZURE_ENGINEER_RECORD)},
    ),
    (
        # Azure ABAC, "Example: Write blobs in named containers with a path": the condition keeps a team's
        # engineers in their part of the datasets container (review 35 B3).
        "team-datasets-role-on-another-teams-path",
        lambda p: with_inputs(
            p,
            _named(AZURE_NLP_DATASETS),
            lambda inputs: inputs.__setitem__(
                "condition", inputs["condition"].replace("'nlp/'", "'vision/'")
            ),
        ),
        {("key-use-by-role", AZURE_NLP_DATASETS)},
    ),
    (
        "team-datasets-role-unconditioned",
        lambda p: with_inputs(p, _named(AZURE_NLP_DATASETS), lambda inputs: inputs.pop("condition")),
        {("key-use-by-role", AZURE_NLP_DATASETS)},
    ),
    (
        "team-datasets-role-on-the-models-container",
        lambda p: _moved_to(p, f"{AZURE}-azure-objects-models"),
        {("key-use-by-role", AZURE_NLP_DATASETS)},
    ),
    (
        "platform-admin-is-key-custodian",
        lambda p: with_inputs(
            p,
            _assignment(PEOPLE_AZURE["keyCustodians"][0], "ml-platform access: key-custodian"),
            _set("principalId", AZURE_ADMIN),
        ),
        {("duties-separated", f"{AZURE}-azure-access-platform-admin-{AZURE_ADMIN}")},
    ),
    (
        "key-custodian-is-ml-engineer",
        lambda p: with_inputs(
            p,
            _assignment(PEOPLE_AZURE["keyCustodians"][0], "ml-platform access: key-custodian"),
            _set("principalId", AZURE_ENGINEER),
        ),
        # Reported at the first assignment (by URN) that gives the group its ML engineer role: the record
        # writer role on the record's account (review 35b A1), before the namespace's.
        {("duties-separated", AZURE_ENGINEER_RECORD)},
    ),
    (
        # docs/security.md, "The deployer's standing rights": never a person's role (review 35 A4).
        "deployer-is-platform-admin",
        lambda p: with_inputs(
            p,
            _assignment(AZURE_ADMIN, "ml-platform access: platform-admin"),
            _set("principalId", AZURE_DEPLOYER),
        ),
        {
            ("duties-separated", f"{AZURE}-azure-access-platform-admin-{AZURE_ADMIN}"),
            # The deployer alone signs (Crypto Officer on the signing vault); a platform admin uses no key.
            ("key-use-by-role", f"{AZURE}-azure-signing-vault-deployer-crypto-officer"),
        },
    ),
    (
        "deployer-is-auditor",
        lambda p: with_inputs(
            p,
            lambda r: (
                _assignment(AZURE_AUDITOR, "ml-platform access: auditor")(r)
                and "-auditor-cluster-" in r["name"]
            ),
            _set("principalId", AZURE_DEPLOYER),
        ),
        {
            ("duties-separated", f"{AZURE}-azure-access-auditor-cluster-{AZURE_AUDITOR}"),
            ("key-use-by-role", f"{AZURE}-azure-signing-vault-deployer-crypto-officer"),
        },
    ),
    (
        "auditor-writes",
        lambda p: with_inputs(
            p,
            lambda r: (
                _assignment(AZURE_AUDITOR, "ml-platform access: auditor")(r)
                and "-auditor-cluster-" in r["name"]
            ),
            _writer,
        ),
        # The writer's role is an ML engineer's too, so the auditor holds a second role (review rev35f A3).
        {
            ("duties-separated", f"{AZURE}-azure-access-auditor-cluster-{AZURE_AUDITOR}"),
            ("duties-separated", f"{AZURE}-azure-access-auditor-logs-{AZURE_AUDITOR}"),
        },
    ),
    (
        # The table gives no person an Azure key: a model approver holding Key Vault Crypto User could
        # decrypt with every key of the vault.
        "approver-uses-keys",
        lambda p: with_inputs(
            p,
            _assignment(AZURE_APPROVER, "ml-platform access: model-approver"),
            _set(
                "roleDefinitionId",
                f"/providers/Microsoft.Authorization/roleDefinitions/{KEY_VAULT_CRYPTO_USER}",
            ),
        ),
        {("key-use-by-role", f"{AZURE}-azure-access-model-approver-{AZURE_APPROVER}")},
    ),
    (
        # The stack names its people by object id: an auditor's given Key Vault Crypto User, described or
        # not, is the auditor's (review 35 A4).
        "auditor-uses-keys-undescribed",
        lambda p: with_inputs(
            p,
            lambda r: (
                _assignment(AZURE_AUDITOR, "ml-platform access: auditor")(r)
                and "-auditor-cluster-" in r["name"]
            ),
            _undescribed_crypto_user,
        ),
        {("key-use-by-role", f"{AZURE}-azure-access-auditor-cluster-{AZURE_AUDITOR}")},
    ),
    (
        # The deployer's key administration given Key Vault Crypto Officer again: standing use of every
        # data key of the vault (review 35 A5).
        "deployer-uses-data-keys",
        lambda p: with_inputs(
            p,
            _named(f"{AZURE}-azure-keys-vault-deployer-key-administration"),
            _set(
                "roleDefinitionId",
                f"/providers/Microsoft.Authorization/roleDefinitions/{KEY_VAULT_CRYPTO_OFFICER}",
            ),
        ),
        {("key-use-by-role", f"{AZURE}-azure-keys-vault-deployer-key-administration")},
    ),
]


@pytest.mark.parametrize(("case", "plant", "expected"), AZURE_CASES, ids=[c[0] for c in AZURE_CASES])
def test_azure_merged_duties_are_refused(
    azure_plan: PlanDict,
    duties: Findings,
    case: str,
    plant: Callable[[PlanDict], PlanDict],
    expected: set[tuple[str, str]],
) -> None:
    assert duties(plant(azure_plan)) == expected, case


def test_the_key_administration_role_without_its_exclusions_uses_keys(
    azure_plan: PlanDict, duties: Findings
) -> None:
    """The custodians' and the deployer's one custom role keeps Crypto Officer's key actions
    (``Microsoft.KeyVault/vaults/keys/*``, Key Vault RBAC guide); without its ``notDataActions`` the
    custodians and the deployer (on the keys vault and the registry's creation vault) would use every key."""
    planted = with_inputs(
        azure_plan,
        _named(f"{AZURE}-azure-keys-key-administration"),
        lambda inputs: inputs["permissions"][0].__setitem__("notDataActions", []),
    )
    assert duties(planted) == {
        ("key-use-by-role", f"{AZURE}-azure-access-key-custodian-{AZURE_CUSTODIAN}"),
        ("key-use-by-role", f"{AZURE}-azure-keys-vault-deployer-key-administration"),
        ("key-use-by-role", f"{AZURE}-azure-registry-creation-vault-deployer-key-administration"),
    }


@pytest.mark.parametrize("copy", ["backup", "restore"])
def test_the_key_administration_role_that_copies_keys_is_refused(
    azure_plan: PlanDict, duties: Findings, copy: str
) -> None:
    """A key administrator who may back up a key may restore it into another vault of the subscription and
    geography, where it holds a key-using role (the deployer's Crypto Officer on the signing vault), and use
    it there (Key Vault REST API, Keys - Backup Key: "BACKUP the key, and then RESTORE it into another
    Azure Key Vault instance"; review 35 B2): the role keeping either is refused like one that uses keys."""
    action = f"Microsoft.KeyVault/vaults/keys/{copy}/action"

    def keep(inputs: dict[str, Any]) -> None:
        inputs["permissions"][0]["notDataActions"].remove(action)

    planted = with_inputs(azure_plan, _named(f"{AZURE}-azure-keys-key-administration"), keep)
    assert duties(planted) == {
        ("key-use-by-role", f"{AZURE}-azure-access-key-custodian-{AZURE_CUSTODIAN}"),
        ("key-use-by-role", f"{AZURE}-azure-keys-vault-deployer-key-administration"),
        ("key-use-by-role", f"{AZURE}-azure-registry-creation-vault-deployer-key-administration"),
    }


def test_a_use_statement_naming_nobody_is_refused_and_said_so(
    aws_plan: PlanDict, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    """A root use statement whose ``aws:PrincipalArn`` list is empty (the Secrets key's cluster role left
    out) names nobody; judged as no condition, conservatively, so refused, and the finding says it is the
    empty list, not a grant to every principal that was written (review 35b C3)."""
    planted = with_inputs(
        aws_plan,
        _named(SECRETS_KEY),
        _statement(
            "KubernetesSecretsUsersUseKey",
            lambda s: s["Condition"]["ArnEquals"].update({"aws:PrincipalArn": []}),
        ),
    )
    messages = {
        (v.policy, v.message.split(" lets ", 1)[0])
        for v in pack.judge(planted, defaults)
        if v.policy in POLICIES and v.mandatory
    }
    said = (
        "key policy statement KubernetesSecretsUsersUseKey (its aws:PrincipalArn list is empty, judged as "
        "no condition)"
    )
    assert messages == {("key-duties-separated", said), ("key-use-by-role", said)}


def _added(plan: PlanDict, like: Callable[[dict[str, Any]], bool], name: str, **inputs: Any) -> PlanDict:
    """A copy of ``plan`` with a resource like the one ``like`` picks (its type, dependencies, parent),
    named ``name``, its inputs overridden by ``inputs`` (a key set to None is dropped)."""
    edited = copy.deepcopy(plan)
    model = next(r for r in edited["resources"] if like(r))
    added = copy.deepcopy(model)
    added["name"], added["urn"] = name, model["urn"].rsplit("::", 1)[0] + f"::{name}"
    added["inputs"] = {k: v for k, v in {**model["inputs"], **inputs}.items() if v is not None}
    edited["resources"].append(added)
    return edited


def _entry_for(plan: PlanDict, principal: str, policy: str, tags: dict[str, str]) -> PlanDict:
    """An EKS access entry for ``principal`` with ``tags`` and an association of the access ``policy`` at
    cluster scope, like the platform admins'."""
    admins = f"{AWS}-aws-access-123456789012-platform-admins"
    entry = _added(plan, _named(admins), "planted-entry", principalArn=principal, tags=tags)
    return _added(
        entry,
        _named(f"{admins}-platform-admin"),
        "planted-association",
        principalArn=principal,
        policyArn=f"arn:aws:eks::aws:cluster-access-policy/{policy}",
    )


# The standard tags of the stack, without the people's role tag (review rev35f e1, e2).
_UNTAGGED = {"project": "ml-platform", "environment": "prod", "tier": "enterprise"}


@pytest.mark.parametrize(
    ("case", "principal", "policy", "expected"),
    [
        # e1: the key custodians given cluster admin through an entry the stack does not tag: a custodian
        # who reaches the cluster, and a grant beyond what access names it for.
        (
            "custodian-untagged-cluster-admin",
            CUSTODIAN,
            "AmazonEKSClusterAdminPolicy",
            {"planted-association"},
        ),
        # e2: a principal the stack names for no role.
        (
            "stranger-cluster-admin",
            "arn:aws:iam::123456789012:role/attacker",
            "AmazonEKSClusterAdminPolicy",
            {"planted-association"},
        ),
        (
            "stranger-edit",
            "arn:aws:iam::123456789012:role/attacker",
            "AmazonEKSEditPolicy",
            {"planted-association"},
        ),
        # A second view-only entry grants nothing beyond reading: not a cluster duty.
        ("stranger-view", "arn:aws:iam::123456789012:role/attacker", "AmazonEKSViewPolicy", set()),
    ],
)
def test_eks_cluster_access_is_judged_by_its_grant(
    aws_plan: PlanDict, duties: Findings, case: str, principal: str, policy: str, expected: set[str]
) -> None:
    """Review rev35f A3: cluster access is the access policy association's grant (EKS user guide, "Review
    access policy permissions": AmazonEKSClusterAdminPolicy is cluster-admin, AmazonEKSEditPolicy edits),
    not the entry's tag: a key custodian's or a stranger's grant is refused whatever the entry says."""
    planted = _entry_for(aws_plan, principal, policy, _UNTAGGED)
    assert duties(planted) == {("duties-separated", name) for name in expected}, case


def _aks_role(
    principal: str, role: str, name: str, description: str | None = None
) -> Callable[[PlanDict], PlanDict]:
    """An assignment of ``role`` on the AKS cluster to ``principal``, like the platform admins'."""
    admins = f"{AZURE}-azure-access-platform-admin-{AZURE_ADMIN}"
    return lambda plan: _added(
        plan,
        _named(admins),
        name,
        principalId=principal,
        description=description,
        roleDefinitionId=f"/providers/Microsoft.Authorization/roleDefinitions/{role}",
    )


def _key_administration_to(principal: str) -> Callable[[PlanDict], PlanDict]:
    """The stack's key-administration role on the keys vault given to ``principal``, undescribed (z6)."""
    custodians = f"{AZURE}-azure-access-key-custodian-{AZURE_CUSTODIAN}"
    return lambda plan: _added(
        plan, _named(custodians), "planted-keys", principalId=principal, description=None
    )


# Azure built-in roles, "Containers": Azure Kubernetes Service RBAC Cluster Admin.
AKS_CLUSTER_ADMIN = "b1ff04bb-8a4e-4dc4-8eb5-8693973ce19b"


def _custom_aks_role(principal: str) -> Callable[[PlanDict], PlanDict]:
    """A custom role of the plan with every Kubernetes data action of the cluster (AKS, "Use Azure RBAC for
    Kubernetes authorization": ``Microsoft.ContainerService/managedClusters/*``), named like a reader's,
    given to ``principal`` on the cluster."""

    def plant(plan: PlanDict) -> PlanDict:
        definition = f"{AZURE}-azure-access-team-datasets-writer"
        permissions = [{"actions": [], "dataActions": ["Microsoft.ContainerService/managedClusters/*"]}]
        edited = _added(
            plan, _named(definition), "planted-definition", permissions=permissions, roleName="reader"
        )
        urn = edited["resources"][-1]["urn"]
        edited = _aks_role(principal, "planted-definition-id", "planted-aks")(edited)
        edited["resources"][-1]["propertyDependencies"]["roleDefinitionId"] = [urn]
        return edited

    return plant


PIM_ELIGIBILITY = "azure-native:authorization:PimRoleEligibilitySchedule"


def _eligible(plant: Callable[[PlanDict], PlanDict]) -> Callable[[PlanDict], PlanDict]:
    """``plant`` with the role assignment it adds made PIM-eligible instead (pulumi-azure-native
    ``authorization.PimRoleEligibilitySchedule``: the same principal, role and scope, activated by its
    member): a duty the member holds as an active one's holder does (review rev35h A1)."""

    def eligible(plan: PlanDict) -> PlanDict:
        edited = plant(plan)
        added = edited["resources"][-1]
        assert added["type"] == "azure-native:authorization:RoleAssignment"
        added["urn"] = added["urn"].replace(added["type"], PIM_ELIGIBILITY)
        added["type"] = PIM_ELIGIBILITY
        added["inputs"] = {
            **{k: added["inputs"][k] for k in ("principalId", "roleDefinitionId", "scope")},
            "requestType": "AdminAssign",
            "scheduleInfo": {"expiration": {"type": "NoExpiration"}},
        }
        return edited

    return eligible


@pytest.mark.parametrize(
    ("case", "plant", "expected"),
    [
        # Review rev35h A1 (plant p01): the same, PIM-eligible.
        (
            "custodian-eligible-cluster-admin",
            _eligible(_aks_role(AZURE_CUSTODIAN, AKS_CLUSTER_ADMIN, "planted-aks")),
            {"planted-aks"},
        ),
        # z8: the key custodians given AKS RBAC Cluster Admin undescribed.
        (
            "custodian-undescribed-cluster-admin",
            _aks_role(AZURE_CUSTODIAN, AKS_CLUSTER_ADMIN, "planted-aks"),
            {"planted-aks"},
        ),
        # z10: a principal the stack names for no role.
        (
            "stranger-cluster-admin",
            _aks_role("99999999-9999-9999-9999-999999999999", AKS_CLUSTER_ADMIN, "planted-aks"),
            {"planted-aks"},
        ),
        # A custom role judged by its data actions, not its name.
        (
            "stranger-custom-cluster-role",
            _custom_aks_role("99999999-9999-9999-9999-999999999999"),
            {"planted-aks"},
        ),
        # An ML engineer given the platform admin's role: beyond its role.
        (
            "engineer-cluster-admin",
            _aks_role(AZURE_ENGINEER, AKS_CLUSTER_ADMIN, "planted-aks"),
            {"planted-aks"},
        ),
        # z6: a platform admin given the stack's key-administration role (a custodian's, by its data actions).
        (
            "platform-admin-key-administration",
            _key_administration_to(AZURE_ADMIN),
            {f"{AZURE}-azure-access-platform-admin-{AZURE_ADMIN}"},
        ),
    ],
)
def test_aks_access_and_key_administration_are_judged_by_their_grants(
    azure_plan: PlanDict,
    duties: Findings,
    case: str,
    plant: Callable[[PlanDict], PlanDict],
    expected: set[str],
) -> None:
    """Review rev35f A3, A4: an AKS role at the cluster is a cluster duty whatever its description (Azure
    built-in roles, "Containers"), and a role whose data actions administer keys (the stack's key-
    administration role, Crypto Officer) is a key custodian's whatever its name or description (Key Vault
    RBAC guide): a custodian reaching the cluster, a stranger's or an engineer's cluster admin, a platform
    admin administering keys are refused."""
    assert duties(plant(azure_plan)) == {("duties-separated", name) for name in expected}, case


ROLLOUT_IDENTITY = f"{AZURE}-azure-rollout-identity-uai"
KEYS_VAULT = f"{AZURE}-azure-keys-vault"
STORAGE_KEY = f"{AZURE}-azure-keys-storage"
# Azure built-in roles, "Security": Key Vault Data Access Administrator.
KEY_VAULT_DATA_ACCESS_ADMINISTRATOR = "8b54135c-b56d-4d72-a534-26097cfdc8d8"
# Azure built-in roles, "Privileged": the roles that assign any role (review rev35h A7).
USER_ACCESS_ADMINISTRATOR = "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9"
RBAC_ADMINISTRATOR = "f58310d9-a9f6-439a-9e8d-f62e7b41a168"


def _key_role(
    role: str, scope: str, principal: str | None = None, identity: str | None = None, literal: bool = False
) -> Callable[[PlanDict], PlanDict]:
    """An assignment of ``role`` on the plan's resource ``scope`` (a vault or a key), to a literal
    ``principal`` or to the managed ``identity`` of the plan, like the AKS KMS identity's Crypto User; with
    ``literal`` the key's resource ID is written as the scope, with no dependency on it."""

    def plant(plan: PlanDict) -> PlanDict:
        by_name = {r["name"]: r for r in plan["resources"]}
        target = by_name[scope]["inputs"]
        edited = _added(
            plan,
            _named(f"{AZURE}-azure-cluster-kms-crypto-user"),
            "planted-key-role",
            roleDefinitionId=f"/providers/Microsoft.Authorization/roleDefinitions/{role}",
            principalId=principal or "db8ce593-0000-0000-0000-000000000000",
        )
        added = edited["resources"][-1]
        if literal:
            added["inputs"]["scope"] = (
                f"/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/"
                f"{target['resourceGroupName']}/providers/Microsoft.KeyVault/vaults/{target['vaultName']}"
                f"/keys/{target['keyName']}"
            )
        added["propertyDependencies"] = {
            **added["propertyDependencies"],
            "scope": [] if literal else [by_name[scope]["urn"]],
            "principalId": [by_name[identity]["urn"]] if identity else [],
        }
        added["dependencies"] = sorted({u for urns in added["propertyDependencies"].values() for u in urns})
        return edited

    return plant


@pytest.mark.parametrize(
    ("case", "plant", "expected"),
    [
        # z4: a principal the plan does not have given Crypto User on the keys vault, so on every data key.
        (
            "stranger-crypto-user-vault",
            _key_role(KEY_VAULT_CRYPTO_USER, KEYS_VAULT, principal="99999999-9999-9999-9999-999999999999"),
            {("key-use-by-role", "planted-key-role")},
        ),
        # The same on one key.
        (
            "stranger-crypto-user-key",
            _key_role(KEY_VAULT_CRYPTO_USER, STORAGE_KEY, principal="99999999-9999-9999-9999-999999999999"),
            {("key-use-by-role", "planted-key-role")},
        ),
        # The same with the key's resource ID written literally, no dependency on it.
        (
            "stranger-crypto-user-literal-key",
            _key_role(
                KEY_VAULT_CRYPTO_USER,
                STORAGE_KEY,
                principal="99999999-9999-9999-9999-999999999999",
                literal=True,
            ),
            {("key-use-by-role", "planted-key-role")},
        ),
        # A workload's identity (the rollout's, federated) given Crypto User on a data key.
        (
            "workload-crypto-user-data-key",
            _key_role(KEY_VAULT_CRYPTO_USER, STORAGE_KEY, identity=ROLLOUT_IDENTITY),
            {("key-use-by-role", "planted-key-role")},
        ),
        # z5: a workload's identity that may assign itself any Key Vault data role on the vault.
        (
            "workload-data-access-administrator",
            _key_role(KEY_VAULT_DATA_ACCESS_ADMINISTRATOR, KEYS_VAULT, identity=ROLLOUT_IDENTITY),
            {("key-use-by-role", "planted-key-role")},
        ),
        # Review rev35h A1: the same, PIM-eligible.
        (
            "stranger-eligible-crypto-user-vault",
            _eligible(
                _key_role(KEY_VAULT_CRYPTO_USER, KEYS_VAULT, principal="99999999-9999-9999-9999-999999999999")
            ),
            {("key-use-by-role", "planted-key-role")},
        ),
        # Review rev35h A7 (plants p07, p09): a stranger that may assign itself any role on the vault.
        *(
            (
                f"stranger-{name}-on-the-vault",
                _key_role(role, KEYS_VAULT, principal="99999999-9999-9999-9999-999999999999"),
                {("key-use-by-role", "planted-key-role")},
            )
            for name, role in (
                ("user-access-administrator", USER_ACCESS_ADMINISTRATOR),
                ("rbac-administrator", RBAC_ADMINISTRATOR),
            )
        ),
    ],
)
def test_azure_key_use_only_for_the_keys_named_users(
    azure_plan: PlanDict,
    duties: Findings,
    case: str,
    plant: Callable[[PlanDict], PlanDict],
    expected: set[tuple[str, str]],
) -> None:
    """Review rev35f A5: on Azure a key is used only by the identities the stack gives it (issue 35 item 3,
    "a policy naming only its users"): each store's encryption identity, the AKS KMS identity, the image
    verifier on the signing key, each on its own key (docs/security.md, "Keys per data domain"). A key-using
    role (Key Vault Crypto User: "Perform cryptographic operations using keys", Azure built-in roles,
    "Security") on a whole vault, for a principal the plan does not have, or for a workload's identity on a
    data key, and Key Vault Data Access Administrator ("Manage access to Azure Key Vault by adding or
    removing role assignments") for anyone but the deployer, are refused."""
    assert duties(plant(azure_plan)) == expected, case


def _binding(subject: str, role: str = "cluster-admin") -> Callable[[PlanDict], PlanDict]:
    """A ClusterRoleBinding of the ClusterRole ``role`` to the Kubernetes group ``subject``."""

    def plant(plan: PlanDict) -> PlanDict:
        edited = copy.deepcopy(plan)
        token = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
        provider = next(r for r in edited["resources"] if r["type"] == "kubernetes:apps/v1:Deployment")
        edited["resources"].append(
            {
                "urn": provider["urn"].rsplit("$", 1)[0] + f"${token}::planted-binding",
                "type": token,
                "name": "planted-binding",
                "custom": True,
                "provider": provider.get("provider"),
                "inputs": {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "planted-binding"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": subject}],
                },
            }
        )
        return edited

    return plant


@pytest.mark.parametrize(
    ("case", "plant", "expected"),
    [
        # Plant p11: the auditors' access entry maps them to a group that is bound to cluster-admin.
        (
            "auditor-group-bound-cluster-admin",
            lambda p: _binding("ops-admins")(
                with_inputs(p, _named(AUDITOR_ENTRY), lambda i: i.update(kubernetesGroups=["ops-admins"]))
            ),
            {("duties-separated", AUDITOR_ENTRY)},
        ),
        # The same group bound to edit: an auditor that writes.
        (
            "auditor-group-bound-edit",
            lambda p: _binding("ops-admins", "edit")(
                with_inputs(p, _named(AUDITOR_ENTRY), lambda i: i.update(kubernetesGroups=["ops-admins"]))
            ),
            {("duties-separated", AUDITOR_ENTRY)},
        ),
        # Plant p05: the Azure key custodians' Entra group bound to cluster-admin.
        (
            "azure-custodian-group-bound-cluster-admin",
            _binding(AZURE_CUSTODIAN),
            {("duties-separated", "planted-binding")},
        ),
        # A read-only binding merges nothing.
        ("azure-custodian-group-bound-view", _binding(AZURE_CUSTODIAN, "view"), set()),
    ],
)
def test_kubernetes_rbac_bindings_are_cluster_access(
    aws_plan: PlanDict,
    azure_plan: PlanDict,
    duties: Findings,
    case: str,
    plant: Callable[[PlanDict], PlanDict],
    expected: set[tuple[str, str]],
) -> None:
    """Review rev35h A2: a RoleBinding or ClusterRoleBinding of cluster-admin, admin, edit or a role writing
    Secrets (Kubernetes, "Using RBAC Authorization", "User-facing roles") to a group or user the access
    table maps to a key custodian or an auditor (EKS access entries' kubernetesGroups; AKS Entra object
    IDs) is the duty merge it is."""
    plan = azure_plan if case.startswith("azure-") else aws_plan
    assert duties(plant(plan)) == expected, case
