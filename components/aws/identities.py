"""IRSA roles for the workloads and the cluster autoscaler, each scoped to what it touches.

Training reads datasets (from the datasets bucket, under the datasets key, where the stack has one) and
writes models and checkpoints; inference only reads models; both use the keys only through S3
(``kms:ViaService``), so a stolen token cannot decrypt anything else with it. The cluster autoscaler
may describe everything (it must, to discover groups) but resize only Auto Scaling groups tagged as this
cluster's (cluster-autoscaler AWS README, "Full Cluster Autoscaler Features Policy" with its
tag-condition variant).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.aws.access import ACCESS_ROLES_TAG, TEAM_TAG, PeopleRole, account_of, people_policy
from components.aws.account import AwsAccount
from components.aws.iam import IrsaRole, OidcIssuer, policy_document, role_name_prefix, service_account_role
from components.aws.node_pools import autoscaler_tags
from components.aws.registry import repositories_arn
from components.aws.service_accounts import IRSA_SERVICE_ACCOUNTS, ROLE_ARN_ANNOTATION
from components.aws.storage import (
    CHECKPOINTS_PREFIX,
    DATASETS_PREFIX,
    MODELS_PREFIX,
    RECORD_PREFIX,
    REGISTRY_PREFIX,
)
from components.config import PLATFORM_KEY


def bucket_access(
    bucket_arn: pulumi.Input[str],
    key_arn: pulumi.Input[str],
    region: str,
    *,
    read: Sequence[str],
    write: Sequence[str],
) -> dict[str, Any]:
    """Object access under the given prefixes only, listing limited to them, and the key through S3."""
    prefixes = list(dict.fromkeys([*read, *write]))
    statements: list[dict[str, Any]] = [
        list_under("ListOwnPrefixes", bucket_arn, *prefixes),
        {
            "Sid": "ReadObjects",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:GetObjectVersion"],
            "Resource": [pulumi.Output.concat(bucket_arn, "/", p, "*") for p in prefixes],
        },
    ]
    key_actions = ["kms:Decrypt"]
    if write:
        statements.append(
            {
                "Sid": "WriteObjects",
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": [pulumi.Output.concat(bucket_arn, "/", p, "*") for p in write],
            }
        )
        key_actions.append("kms:GenerateDataKey")
    statements.append(key_through_s3("UseKeyThroughS3", key_actions, key_arn, region))
    return policy_document(statements)


def training_policy(
    bucket_arn: pulumi.Input[str],
    key_arn: pulumi.Input[str],
    region: str,
    datasets: tuple[pulumi.Input[str], pulumi.Input[str]] | None,
) -> dict[str, Any]:
    """Training reads datasets and writes models and checkpoints. With a datasets bucket (``datasets``: its
    ARN and key), it reads that bucket only under ``datasets/`` with the datasets key, and writes the data
    bucket with the object-data key; without one, both prefixes are in the data bucket."""
    written = [MODELS_PREFIX, CHECKPOINTS_PREFIX]
    if datasets is None:
        return bucket_access(bucket_arn, key_arn, region, read=[DATASETS_PREFIX], write=written)
    datasets_bucket, datasets_key = datasets
    parts = {
        "Datasets": bucket_access(datasets_bucket, datasets_key, region, read=[DATASETS_PREFIX], write=[]),
        "Models": bucket_access(bucket_arn, key_arn, region, read=[], write=written),
    }
    # Statement ids are unique within a policy: each bucket's statements carry its name.
    return policy_document(
        [
            {**each, "Sid": f"{each['Sid']}{suffix}"}
            for suffix, doc in parts.items()
            for each in doc["Statement"]
        ]
    )


def list_under(
    sid: str, bucket_arn: pulumi.Input[str], *prefixes: str, versions: bool = False
) -> dict[str, Any]:
    """List ``bucket_arn`` under ``prefixes`` only (S3 condition key ``s3:prefix``), and its object versions
    there where ``versions`` (ListObjectVersions is ``s3:ListBucketVersions``, which takes ``s3:prefix``
    too: AWS Service Authorization Reference, Amazon S3)."""
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Action": ["s3:ListBucket", "s3:ListBucketVersions"] if versions else "s3:ListBucket",
        "Resource": bucket_arn,
        "Condition": {"StringLike": {"s3:prefix": [f"{p}*" for p in prefixes]}},
    }


def key_through_s3(
    sid: str, actions: str | list[str], key_arn: pulumi.Input[str], region: str
) -> dict[str, Any]:
    """``actions`` on ``key_arn`` only through S3 in ``region`` (``kms:ViaService``)."""
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Action": actions,
        "Resource": key_arn,
        "Condition": {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
    }


def team_datasets_policy(
    bucket_arn: pulumi.Input[str], key_arn: pulumi.Input[str], region: str, team: str
) -> dict[str, Any]:
    """What a team's ML engineers need to put their training data where training reads it (policies/
    key_users.yaml, ml-engineer): list, read and write the datasets bucket under ``datasets/<team>/`` only,
    no delete, no version or bucket action, and the datasets key only through S3 ("To upload an object
    encrypted with an AWS KMS key ... you need kms:GenerateDataKey ... to download ... kms:Decrypt", S3 user
    guide, "Using server-side encryption with AWS KMS keys (SSE-KMS)"; a multipart upload needs both)."""
    prefix = team_datasets_prefix(team)
    return policy_document(
        [
            list_under("ListTeamDatasets", bucket_arn, prefix),
            {
                "Sid": "ReadWriteTeamDatasets",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject"],
                "Resource": pulumi.Output.concat(bucket_arn, "/", prefix, "*"),
            },
            key_through_s3(
                "UseDatasetsKeyThroughS3", ["kms:Decrypt", "kms:GenerateDataKey"], key_arn, region
            ),
        ]
    )


def team_datasets_prefix(team: str) -> str:
    """A team's part of ``datasets/``, which training reads whole."""
    return f"{DATASETS_PREFIX}{team}/"


def autoscaler_policy(account: AwsAccount, cluster_name: str) -> dict[str, Any]:
    """Discover anything, resize only this cluster's tagged groups, describe only its node groups."""
    owned = {f"aws:ResourceTag/{key}": value for key, value in autoscaler_tags(cluster_name).items()}
    return policy_document(
        [
            {
                "Sid": "Discover",
                "Effect": "Allow",
                "Action": [
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeTags",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                ],
                "Resource": "*",
            },
            {
                "Sid": "DescribeOwnNodeGroups",
                "Effect": "Allow",
                "Action": "eks:DescribeNodegroup",
                "Resource": account.arn("eks", f"nodegroup/{cluster_name}/*"),
            },
            {
                "Sid": "ResizeOwnGroups",
                "Effect": "Allow",
                "Action": [
                    "autoscaling:SetDesiredCapacity",
                    "autoscaling:TerminateInstanceInAutoScalingGroup",
                ],
                "Resource": "*",
                "Condition": {"StringEquals": owned},
            },
        ]
    )


def registry_policy(
    bucket_arn: pulumi.Input[str],
    key_arn: pulumi.Input[str],
    region: str,
    database: tuple[pulumi.Input[str], pulumi.Input[str]] | None,
    record_bucket_arn: pulumi.Input[str] | None = None,
) -> dict[str, Any]:
    """The registry's artifacts (its prefix only, under the object-data key); with a managed database
    (its secret's ARN, the registry database's key), that database's RDS-managed password: the secret,
    decrypted with the database's key only through Secrets Manager; with a lifecycle record, the record
    writer's rights (``record_writer_policy``): the registry appends every event for the user it
    authenticated (workloads/registry/server/guard.py ``record_events``, review rev40c A1)."""
    document = bucket_access(bucket_arn, key_arn, region, read=[REGISTRY_PREFIX], write=[REGISTRY_PREFIX])
    if record_bucket_arn is not None:
        appends = record_writer_policy(record_bucket_arn, key_arn, region)["Statement"]
        document["Statement"] += [{**statement, "Sid": f"Record{statement['Sid']}"} for statement in appends]
    if database is not None:
        database_secret_arn, database_key_arn = database
        document["Statement"] += [
            {
                "Sid": "ReadDatabasePassword",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": database_secret_arn,
            },
            {
                "Sid": "UseKeyThroughSecretsManager",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": database_key_arn,
                "Condition": {"StringEquals": {"kms:ViaService": f"secretsmanager.{region}.amazonaws.com"}},
            },
        ]
    return document


def record_reader_policy(
    bucket_arn: pulumi.Input[str], key_arn: pulumi.Input[str], region: str
) -> dict[str, Any]:
    """Read the lifecycle record, nothing more: list its prefix and its versions, get its events by version
    (the reader reads versions, so a delete marker hides none: workloads/registry/record.py ``S3Record``;
    a GET with a version ID is ``s3:GetObjectVersion``), the key only to decrypt through S3. Every reader
    appends through the registry, the record's only writer (``registry_policy``,
    workloads/registry/server/guard.py ``record_events``, review rev40c A1)."""
    return policy_document(
        [
            list_under("ListRecord", bucket_arn, RECORD_PREFIX, versions=True),
            {
                "Sid": "ReadEvents",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:GetObjectVersion"],
                "Resource": pulumi.Output.concat(bucket_arn, "/", RECORD_PREFIX, "*"),
            },
            key_through_s3("DecryptThroughS3", "kms:Decrypt", key_arn, region),
        ]
    )


def record_writer_policy(
    bucket_arn: pulumi.Input[str], key_arn: pulumi.Input[str], region: str
) -> dict[str, Any]:
    """Append to the lifecycle record and read it back, nothing more (docs/lifecycle.md, "The record"):
    PutObject under its prefix (the bucket refuses one without ``If-None-Match``), read and list it and its
    versions (``record_reader_policy``), read
    the bucket's Object Lock rule (the writer refuses a bucket without COMPLIANCE); no DeleteObject, no
    PutObjectRetention or PutObjectLegalHold, no BypassGovernanceRetention, no bucket configuration. The
    key only through S3."""
    objects = pulumi.Output.concat(bucket_arn, "/", RECORD_PREFIX, "*")
    return policy_document(
        [
            list_under("ListRecord", bucket_arn, RECORD_PREFIX, versions=True),
            {
                "Sid": "ReadLockRule",
                "Effect": "Allow",
                "Action": "s3:GetBucketObjectLockConfiguration",
                "Resource": bucket_arn,
            },
            {
                "Sid": "AppendAndReadEvents",
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:GetObject", "s3:GetObjectVersion"],
                "Resource": objects,
            },
            key_through_s3("UseKeyThroughS3", ["kms:GenerateDataKey", "kms:Decrypt"], key_arn, region),
        ]
    )


def verifier_policy(signing_key_arn: pulumi.Input[str], repositories_arn: str) -> dict[str, Any]:
    """What the admission verifier needs: the signing key's public half (cosign's awskms verifier calls
    GetPublicKey; DescribeKey reads its spec; never Sign, and never Verify: verification is local, AWS KMS
    API reference, GetPublicKey; the key policy delegates ``kms:Get*`` and ``kms:Describe*`` to IAM,
    components/aws/registry.py ``signing_key_policy``), and a pull of the stack's repositories, where
    the signatures it verifies are (``repositories_arn``: the stack's namespace, its mirror below it).

    policy-controller reads the registry with its pod's own cloud identity: its keychain
    (pkg/webhook/registryauth/registryauth.go, v0.13.1) asks the pod's pull secrets, then the Docker
    config, then amazon-ecr-credential-helper, which takes the AWS SDK's default credentials (this IRSA
    role) and calls ecr:GetAuthorizationToken. That action has no resource type, so its statement names
    "*"; the pull, manifests (ecr:BatchGetImage) and the layers' URLs (ecr:GetDownloadUrlForLayer),
    takes the ``repository`` resource type (AWS Service Authorization Reference, "Actions, resources,
    and condition keys for Amazon Elastic Container Registry"; ECR user guide, "Private registry
    authentication": GetAuthorizationToken before any pull). Nothing to push, list or describe."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadImageSigningPublicKey",
                "Effect": "Allow",
                "Action": ["kms:GetPublicKey", "kms:DescribeKey"],
                "Resource": signing_key_arn,
            },
            {
                "Sid": "LogInToRegistry",
                "Effect": "Allow",
                "Action": "ecr:GetAuthorizationToken",
                "Resource": "*",
            },
            {
                "Sid": "PullStackRepositories",
                "Effect": "Allow",
                "Action": ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
                "Resource": repositories_arn,
            },
        ],
    }


# The record readers' policy's description (the people's: they append through the registry, review
# rev40c A1; named ``record-reader`` and exported as ``lifecycleRecordReaderPolicy``, review rev40d C1).
RECORD_READERS = "Read the model lifecycle record; the registry appends to it; no write, no delete"

# Short role-name purposes (IAM role names fit 64 characters; iam.role_name_prefix).
ROLE_PURPOSES = {
    "training": "train",
    "inference": "infer",
    "registry": "reg",
    "cluster-autoscaler": "ca",
    "rollout": "roll",
    "drift-monitor": "drift",
    "image-verifier": "verify",
}


@dataclass(frozen=True)
class WorkloadIdentitiesArgs:
    account: AwsAccount
    cluster_name: str
    issuer: OidcIssuer
    bucket_arn: pulumi.Input[str]
    # The object-data key: the bucket's.
    key_arn: pulumi.Input[str]
    tags: Mapping[str, str]
    # The registry database's RDS-managed secret and the key that encrypts it, where the stack has one.
    registry_database: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None
    # The lifecycle record's bucket, where the stack has one: the rollout's role appends to it.
    record_bucket_arn: pulumi.Input[str] | None = None
    # The image signing key, where the stack has one: the admission verifier reads its public half.
    signing_key_arn: pulumi.Input[str] | None = None
    # The datasets bucket and its key, where the stack has one: training reads datasets there.
    datasets: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None
    # The model approvers' IAM roles (``access.modelApprovers``): the record-reader policy is attached to
    # each, where the stack has the record.
    approvers: Sequence[str] = ()
    # Each team's ML engineers' IAM roles (``access.mlEngineers``): the team's datasets policy is attached
    # to each, where the stack has a datasets bucket.
    engineers: Mapping[str, Sequence[str]] = field(default_factory=dict)


class WorkloadIdentities(pulumi.ComponentResource):
    """The training, inference and cluster-autoscaler roles, as service-account annotations."""

    def __init__(
        self, name: str, args: WorkloadIdentitiesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:aws:WorkloadIdentities", name, None, opts)
        self._name, self._args = name, args
        region = args.account.region
        policies: dict[str, dict[str, Any]] = {
            "training": training_policy(args.bucket_arn, args.key_arn, region, args.datasets),
            "inference": bucket_access(args.bucket_arn, args.key_arn, region, read=[MODELS_PREFIX], write=[]),
            "registry": registry_policy(
                args.bucket_arn, args.key_arn, region, args.registry_database, args.record_bucket_arn
            ),
            "cluster-autoscaler": autoscaler_policy(args.account, args.cluster_name),
        }
        if args.record_bucket_arn is not None:
            # The rollout and the drift monitor, each its own role, read the record; they append through
            # the registry, its only writer (``registry_policy``), which names their registry identity.
            reader = record_reader_policy(args.record_bucket_arn, args.key_arn, region)
            policies |= {"rollout": reader, "drift-monitor": reader}
        if args.signing_key_arn is not None:
            repositories = repositories_arn(args.account, args.cluster_name)
            policies["image-verifier"] = verifier_policy(args.signing_key_arn, repositories)
        roles = {key: self._role(key, policies[key]) for key in IRSA_SERVICE_ACCOUNTS if key in policies}
        self.role_arns: dict[str, pulumi.Output[str]] = {key: role.arn for key, role in roles.items()}
        # The roles themselves, which the data keys' policies name (components/aws/keys.py DOMAIN_USERS):
        # their policies name the keys, so a key waits for the role, never for its gated ARN.
        self.key_user_arns: dict[str, pulumi.Output[str]] = {
            key: role.role.arn for key, role in roles.items()
        }
        # The same read for the people who act on the record with their own AWS identities
        # (docs/lifecycle.md: the approvers approve, reject and promote; the ML engineers request a
        # promotion and pause, resume or abort their models' rollouts), each event appended by the
        # registry: a managed policy per people's role, tagged with the role it is for (which the pack
        # reads), attached to the roles ``access`` names; the approvers' is exported for a permission set.
        self.record_reader_policy_arn: pulumi.Output[str] | None = None
        if "rollout" in policies:
            writer = policies["rollout"]
            self.record_reader_policy_arn = self._record_readers(
                "record-reader", PeopleRole.MODEL_APPROVER, RECORD_READERS, args.approvers, writer
            )
            engineers = sorted({role for roles in args.engineers.values() for role in roles})
            if engineers:
                self._record_readers(
                    "record-reader-engineers",
                    PeopleRole.ML_ENGINEER,
                    "ML engineers (promotion requests, rollout controls): " + RECORD_READERS.lower(),
                    engineers,
                    writer,
                )
        # Each team's ML engineers put their training data in the datasets bucket (the table's datasets key).
        datasets = args.datasets
        self.team_datasets_policy_arns: dict[str, pulumi.Output[str]] = (
            {t: self._team_datasets(t, roles, datasets) for t, roles in args.engineers.items() if roles}
            if datasets is not None
            else {}
        )
        # handle.identities: workload -> annotations for its service account.
        self.annotations: dict[str, Mapping[str, pulumi.Input[str]]] = {
            key: {ROLE_ARN_ANNOTATION: arn} for key, arn in self.role_arns.items()
        }
        self.register_outputs(
            {
                "roleArns": self.role_arns,
                "recordReaderPolicy": self.record_reader_policy_arn,
                "teamDatasetsPolicies": self.team_datasets_policy_arns,
            }
        )

    def _team_datasets(
        self, team: str, roles: Sequence[str], datasets: tuple[pulumi.Input[str], pulumi.Input[str]]
    ) -> pulumi.Output[str]:
        """The team's datasets policy, tagged with the people's role and the team it is for (which the pack
        reads: ``people-data-own-team``), attached to each of its engineers' roles (of this account: IAM
        attaches only within one)."""
        args = self._args
        foreign = [r for r in roles if account_of(r) != args.account.account_id]
        if foreign:
            raise pulumi.RunError(
                f"{PLATFORM_KEY}.access.mlEngineers.{team}: {foreign[0]} is a role of another account, to "
                "which this stack cannot attach its datasets policy: name a role of account "
                f"{args.account.account_id}"
            )
        bucket, key = datasets
        return people_policy(
            self,
            self._name,
            f"datasets-{team}",
            args.cluster_name,
            f"Team {team}'s ML engineers: list, read and write datasets/{team}/ only; no delete",
            team_datasets_policy(bucket, key, args.account.region, team),
            {**args.tags, ACCESS_ROLES_TAG: PeopleRole.ML_ENGINEER.value, TEAM_TAG: team},
            roles,
        )

    def _record_readers(
        self, what: str, role: PeopleRole, description: str, roles: Sequence[str], document: dict[str, Any]
    ) -> pulumi.Output[str]:
        """The lifecycle record readers' policy for one people's role (``what`` names it), attached to
        each of ``roles``."""
        args = self._args
        tags = {**args.tags, ACCESS_ROLES_TAG: role.value}
        return people_policy(self, self._name, what, args.cluster_name, description, document, tags, roles)

    def _role(self, key: str, policy: dict[str, Any]) -> IrsaRole:
        return service_account_role(
            f"{self._name}-{key}",
            name_prefix=role_name_prefix(self._args.cluster_name, ROLE_PURPOSES[key]),
            issuer=self._args.issuer,
            account=IRSA_SERVICE_ACCOUNTS[key],
            policy=pulumi.Output.json_dumps(policy),
            tags=self._args.tags,
            parent=self,
        )
