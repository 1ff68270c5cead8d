"""The stack's customer-managed KMS keys: one per data domain (``KeyDomain``), each used only by the
stores of its domain, its policy naming each of that domain's users by exact ARN (``DOMAIN_USERS``) and
that domain's services, beside the account root's administration.

A key per domain keeps revocation and the CloudTrail record of each decrypt per domain: disabling the
datasets' key does not take Kubernetes Secrets with it, and whoever may use one domain's key reads no
other domain. The keys are single-region on purpose: a multi-Region key would replicate key material out
of the only UAE region (REFERENCE.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_aws import get_caller_identity, iam, kms

from components.aws.account import AwsAccount
from components.config import DATA_DOMAIN_TAG, PLATFORM_KEY, KeyDomain

# KMS waits this many days before deleting a scheduled key; 30 is the maximum the API allows
# (AWS KMS developer guide, "Deleting AWS KMS keys": 7-30 days), the longest window to notice a mistake.
DELETION_WINDOW_DAYS = 30

# Key actions a service needs to use the key for data, not to manage it.
_USE_KEY = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]
# What a caller that only reads needs (S3 user guide, "Using server-side encryption with AWS KMS keys
# (SSE-KMS)": "to download ... you need kms:Decrypt"; review 35 C1).
_READ_KEY = ["kms:Decrypt", "kms:DescribeKey"]


def use_key(principal: Mapping[str, Any], sid: str, condition: Mapping[str, Any]) -> dict[str, Any]:
    """A statement letting a service principal use the key for data, under ``condition``."""
    return {
        "Sid": sid,
        "Effect": "Allow",
        "Principal": dict(principal),
        "Action": _USE_KEY,
        "Resource": "*",
        "Condition": dict(condition),
    }


# The key administrators' actions (AWS KMS developer guide, "Default key policy", "Allows key
# administrators to administer the KMS key"), with the console's ``kms:Create*`` narrowed to
# ``kms:CreateAlias``: ``kms:CreateGrant`` hands out use of the key, so administrators create grants only
# for AWS services (``_GRANTS``). No cryptographic action is among them.
KEY_ADMINISTRATION = [
    "kms:CreateAlias",
    "kms:Describe*",
    "kms:Enable*",
    "kms:List*",
    "kms:Put*",
    "kms:Update*",
    "kms:Revoke*",
    "kms:Disable*",
    "kms:Get*",
    "kms:Delete*",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
    "kms:RotateKeyOnDemand",
]
# Reading a key's configuration (its policy, rotation, tags, grants): what auditors and AWS Config read,
# left to IAM where the key custodians are named. No action here changes the key or uses it.
KEY_CONFIGURATION_READS = ["kms:Describe*", "kms:List*", "kms:Get*"]
# What the key custodians alone administer where they are named: every other administrative action.
KEY_CUSTODY = [a for a in KEY_ADMINISTRATION if a not in KEY_CONFIGURATION_READS]
# What an AWS service needs to attach the key to a persistent resource it creates for a caller (an EKS
# cluster, an RDS instance, a file system, a repository, a volume): "Allows key users to use the KMS key
# with AWS services" (same guide), ``kms:GrantIsForAWSResource``.
_GRANTS = ["kms:CreateGrant", "kms:ListGrants", "kms:RevokeGrant"]


def account_statement(
    account: AwsAccount, sid: str, actions: str | list[str], condition: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A statement delegating ``actions`` on the key to the account's IAM policies ("Allows access to the
    AWS account and enables IAM policies"), under ``condition``."""
    statement: dict[str, Any] = {
        "Sid": sid,
        "Effect": "Allow",
        "Principal": {"AWS": account.root_arn},
        "Action": actions,
        "Resource": "*",
    }
    if condition:
        statement["Condition"] = dict(condition)
    return statement


def deployer_arn(parent: pulumi.Resource) -> str:
    """The identity running ``pulumi up``: the role behind its session (IAM GetSessionContext's issuer
    ARN), as a key policy's ``aws:PrincipalArn`` is the role's ARN, never a session's."""
    opts = pulumi.InvokeOptions(parent=parent)
    arn: str = iam.get_session_context(arn=get_caller_identity(opts=opts).arn, opts=opts).issuer_arn
    return arn


def key_administrators(custodians: Sequence[str], deployer: str) -> tuple[str, ...]:
    """Who administers the keys where the stack names its key custodians (``access.keyCustodians``): the
    custodians and the ``deployer``, which writes the key policies on every ``pulumi up`` (PutKeyPolicy)
    and must stay able to (KMS refuses a policy that locks its caller out unless told to bypass the check:
    KMS API reference, PutKeyPolicy ``BypassPolicyLockoutSafetyCheck``). None named: IAM decides
    (``administered_by_account``)."""
    if not custodians:
        return ()
    return tuple(dict.fromkeys((deployer, *custodians)))


def key_administration(
    account: AwsAccount, administrators: Sequence[str] = (), also: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The account root's administration of a key, data key or signing key alike (AWS KMS developer guide,
    "Default key policy", "Allows key administrators to administer the KMS key"): ``KEY_ADMINISTRATION``
    delegated to IAM, so IAM decides who the key custodians are; where the stack names them
    (``administrators``: the custodians and the deployer, ``key_administrators``), the actions that change
    the key only for those roles (``aws:PrincipalArn``), its configuration readable by whomever IAM lets
    (auditors, AWS Config). ``also``: actions any account principal its IAM allows may take beside the
    configuration reads (the signing key's ``kms:Verify``)."""
    if not administrators:
        return [account_statement(account, "AccountAdministersKeyThroughIam", [*KEY_ADMINISTRATION, *also])]
    return [
        account_statement(
            account, "AccountReadsKeyConfigurationThroughIam", [*KEY_CONFIGURATION_READS, *also]
        ),
        account_statement(
            account,
            "KeyCustodiansAdministerKey",
            KEY_CUSTODY,
            {"ArnEquals": {"aws:PrincipalArn": list(administrators)}},
        ),
    ]


def administered_by_account(account: AwsAccount, administrators: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The account root delegates the key's administration to IAM, and no use for data: IAM policies can
    make a key custodian administer the key (so it never becomes unmanageable), but no IAM policy alone
    makes anyone use it (``domain_use`` names the users).

    - administration (``key_administration``), limited to the key custodians and the deployer where the
      stack names custodians;
    - grants for AWS resources only (``kms:GrantIsForAWSResource``), so the deployer's IAM rights let a
      service attach the key to the store it creates;
    - grants to AWS service-linked roles only (``kms:GranteePrincipal``), such as FSx's role that reads
      the data bucket (components/aws/shared_fs.py), never to a person or a workload role.
    """
    service_linked = account.arn("iam", "role/aws-service-role/*", regional=False)
    administration = key_administration(account, administrators)
    return [
        *administration,
        account_statement(
            account,
            "ServicesAttachKeyToResourcesTheyCreate",
            _GRANTS,
            {"Bool": {"kms:GrantIsForAWSResource": "true"}},
        ),
        account_statement(
            account,
            "GrantsOnlyToServiceLinkedRoles",
            "kms:CreateGrant",
            {"ArnLike": {"kms:GranteePrincipal": service_linked}},
        ),
    ]


@dataclass(frozen=True)
class KeyUsers:
    """Who uses a key for data, each by the exact ARN of its IAM role (``aws:PrincipalArn``): ``writers``
    encrypt and decrypt, ``readers`` only decrypt (review 35 C1). A principal in both is a writer."""

    writers: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()

    def __or__(self, other: KeyUsers) -> KeyUsers:
        writers = tuple(sorted({*self.writers, *other.writers}))
        readers = tuple(sorted({*self.readers, *other.readers} - set(writers)))
        return KeyUsers(writers, readers)


def domain_use(
    account: AwsAccount, name: str, users: KeyUsers, services: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """The guide's "Allows key users to use the KMS key", its users named: a statement for the account
    root limited to the exact roles ``users`` lists (``ArnEquals`` ``aws:PrincipalArn``; issue 35 item 3,
    review 35 A1) and, where ``services`` are given, to calls through them (``kms:ViaService``). A statement
    for the account root takes effect only for a principal whose IAM policy also allows it (KMS developer
    guide, "Default key policy", "Allows access to the AWS account and enables IAM policies"), and naming
    the roles by condition needs no role to exist before the key. Any other principal of the account, a
    platform admin's, a custodian's or the deployer's, gets no use whatever its IAM rights. The writers get
    ``_USE_KEY``, the readers ``_READ_KEY``; no users, no statement."""
    users = KeyUsers() | users
    via = sorted(f"{s}.{account.dns_suffix}" for s in services)
    statements: list[dict[str, Any]] = []
    for sid, actions, arns in (
        (f"{name}UsersUseKey", _USE_KEY, users.writers),
        (f"{name}ReadersDecrypt", _READ_KEY, users.readers),
    ):
        if not arns:
            continue
        # A name-prefix pattern only on a Secrets key still holding other domains (platform.py ``_policy``).
        operator = "ArnLike" if any("*" in arn for arn in arns) else "ArnEquals"
        condition: dict[str, Any] = {operator: {"aws:PrincipalArn": list(arns)}}
        if via:
            condition["StringEquals"] = {"kms:ViaService": via}
        statements.append(account_statement(account, sid, actions, condition))
    return statements


def logs_use_key(account: AwsAccount) -> dict[str, Any]:
    """CloudWatch Logs encrypts this account's log groups (CloudWatch Logs user guide, "Encrypt log data
    in CloudWatch Logs using AWS KMS")."""
    return use_key(
        {"Service": f"logs.{account.dns_suffix}"},
        "CloudWatchLogsEncryptsThisAccountsLogGroups",
        {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": account.arn("logs", "log-group:*")}},
    )


def _autoscaling_uses_key(account: AwsAccount) -> list[dict[str, Any]]:
    """The EC2 Auto Scaling service-linked role launches managed node group instances; without the key
    it cannot create their encrypted root volumes (EC2 Auto Scaling user guide, "Required AWS KMS key
    policy for use with encrypted volumes")."""
    autoscaling_role = account.arn(
        "iam", "role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling", regional=False
    )
    return [
        {
            "Sid": "AutoScalingUsesKeyForNodeVolumes",
            "Effect": "Allow",
            "Principal": {"AWS": autoscaling_role},
            "Action": _USE_KEY,
            "Resource": "*",
        },
        {
            "Sid": "AutoScalingGrantsKeyToEc2ForAttachedVolumes",
            "Effect": "Allow",
            "Principal": {"AWS": autoscaling_role},
            "Action": "kms:CreateGrant",
            "Resource": "*",
            "Condition": {"Bool": {"kms:GrantIsForAWSResource": "true"}},
        },
    ]


# What each domain's key is for (its description) and where its stores live.
DOMAIN_STORES: dict[KeyDomain, str] = {
    KeyDomain.SECRETS: "Kubernetes Secrets (EKS envelope encryption)",
    KeyDomain.REGISTRY_DATABASE: "the registry's RDS database and its managed password",
    KeyDomain.TRAINING_DATA: "the shared file system (EFS or FSx for Lustre)",
    KeyDomain.OBJECTS: "the data bucket: datasets, models, the registry's artifacts",
    KeyDomain.IMAGES: "the ECR repositories",
    KeyDomain.VOLUMES: "node root volumes and EBS persistent volumes",
    KeyDomain.LOGS: "the VPC flow-log and EKS control-plane log groups",
}


# The object-data key's stores where the datasets have a bucket of their own (``datasets_key_policy``).
MODELS_BUCKET_STORES = "the data bucket: models, checkpoints, the registry's artifacts"
# The datasets' domain: curated training data in S3, read by training only (review B5: one data domain per
# bucket). Its key is made beside the bucket, not among ``_domain_keys``: a stack made before the datasets
# bucket has no store in it and keeps its datasets in the data bucket (``made_before_datasets_bucket``).
DATASETS_DOMAIN = KeyDomain.DATASETS.value
DATASETS_STORES = "the datasets bucket"


# The stack's own roles (``StackRoles`` keys) and the deployer, by what they do.
CLUSTER_ROLE, EBS_CSI_ROLE, DEPLOYER = "cluster", "ebs-csi", "deployer"


@dataclass(frozen=True)
class DomainUsers:
    """Who uses a domain's key for data: through these AWS services (``kms:ViaService``; none: directly),
    and which of the stack's roles (``StackRoles`` keys) write and read with it."""

    services: tuple[str, ...] = ()
    roles: KeyUsers = KeyUsers()


# Each domain's users among the stack's roles (docs/security.md, "Keys per data domain"), each the role
# whose IAM policy in the plan grants it the key (the pack's ``key-users-named`` holds the two to each
# other). The people the role-to-key table gives a domain are added to these (components/
# key_users.py). The AWS services that attach a key to a store they create do it through grants
# (``administered_by_account``), which need no use statement: ECR encrypts and decrypts image layers under
# the grants it creates with the repository, so pushing or pulling needs no key right (ECR user guide,
# "Encryption at rest"); the images and logs domains name no role. CloudWatch Logs and the Auto Scaling
# service-linked role are named by principal below.
DOMAIN_USERS: dict[str, DomainUsers] = {
    # EKS encrypts Secrets as the cluster role (EKS user guide, "Encrypt Kubernetes secrets with KMS").
    KeyDomain.SECRETS.value: DomainUsers(roles=KeyUsers(writers=(CLUSTER_ROLE,))),
    # The registry reads its managed password through Secrets Manager; the deployer creates the instance
    # whose managed password Secrets Manager encrypts under this key, which needs its caller's kms:Decrypt
    # and kms:GenerateDataKey (RDS user guide, "Password management with Amazon RDS and AWS Secrets
    # Manager", "Required permissions for Secrets Manager integration").
    KeyDomain.REGISTRY_DATABASE.value: DomainUsers(
        ("rds", "secretsmanager"), KeyUsers(writers=(DEPLOYER,), readers=("registry",))
    ),
    # The deployer creates the file system; EFS asks the key policy for kms:Decrypt and
    # kms:GenerateDataKeyWithoutPlaintext beside the grant (EFS user guide, "Using AWS KMS keys for
    # Amazon EFS", "Amazon EFS key policies for AWS KMS"). Pods mount it through NFS, with no key right.
    KeyDomain.TRAINING_DATA.value: DomainUsers(("elasticfilesystem", "fsx"), KeyUsers(writers=(DEPLOYER,))),
    # Training and the registry write models, checkpoints and artifacts, the registry appends to the
    # lifecycle record (its only writer, review rev40c A1); inference reads models, the rollout and the
    # drift monitor read the record.
    KeyDomain.OBJECTS.value: DomainUsers(
        ("s3",),
        KeyUsers(writers=("registry", "training"), readers=("drift-monitor", "inference", "rollout")),
    ),
    KeyDomain.IMAGES.value: DomainUsers(("ecr",)),
    # The EBS CSI driver creates persistent volumes through EC2 (components/aws/addons.py ebs_key_policy).
    KeyDomain.VOLUMES.value: DomainUsers(("ec2",), KeyUsers(writers=(EBS_CSI_ROLE,))),
    KeyDomain.LOGS.value: DomainUsers(),
    # Training reads the datasets; the ML engineers put them in (the role-to-key table).
    DATASETS_DOMAIN: DomainUsers(("s3",), KeyUsers(readers=("training",))),
}

# A domain's key users: the exact ARNs of every role that uses it.
UsersOf = Callable[[str], KeyUsers]


def stack_roles_using(domains: Mapping[str, DomainUsers]) -> set[str]:
    """The stack's roles (``DOMAIN_USERS`` keys, the deployer aside) that use a key of ``domains``."""
    return {role for users in domains.values() for role in (*users.roles.writers, *users.roles.readers)} - {
        DEPLOYER
    }


def _sid(domain: str) -> str:
    return "".join(part.title() for part in domain.split("-"))


def key_policy(
    account: AwsAccount,
    domains: Iterable[KeyDomain],
    users: UsersOf,
    administrators: Sequence[str] = (),
) -> dict[str, Any]:
    """The policy of the key of ``domains`` (one, unless the stack keeps stores on its first key until
    they migrate): the account root administers it through IAM and uses it for nothing; each domain's
    ``users`` use it (``domain_use``), every one named by its exact ARN, through the domain's services
    (``DOMAIN_USERS``):

    - their IAM policies (IRSA roles, the EKS cluster role) grant use too, each naming its own domain's
      key only: both must allow it;
    - CloudWatch Logs (logs) encrypts the flow-log and control-plane log groups; it has no IAM role to
      delegate to, so it is named, limited to this account's log groups;
    - the EC2 Auto Scaling service-linked role (node volumes) creates the nodes' encrypted root volumes.
    """
    statements: list[dict[str, Any]] = administered_by_account(account, administrators)
    for domain in dict.fromkeys(domains):
        statements += domain_use(
            account, _sid(domain.value), users(domain.value), DOMAIN_USERS[domain.value].services
        )
        if domain is KeyDomain.LOGS:
            statements.append(logs_use_key(account))
        if domain is KeyDomain.VOLUMES:
            statements += _autoscaling_uses_key(account)
    return {"Version": "2012-10-17", "Statement": statements}


# The domains whose stores take a key at creation only, so that moving them to another key replaces them
# (docs/operations.md, "Keys per data domain"; tests/components/aws/test_aws_key_day2.py): the RDS
# instance and its managed password, the file systems, the ECR repositories, and the default StorageClass
# that gives new EBS volumes the node-volumes key (a StorageClass's ``parameters`` are immutable:
# k8s.io/kubernetes ``ValidateStorageClassUpdate``; moving them also rolls every node group onto a new
# launch template version, so it is a step of its own).
REPLACED_ON_KEY_CHANGE = (
    KeyDomain.REGISTRY_DATABASE,
    KeyDomain.TRAINING_DATA,
    KeyDomain.IMAGES,
    KeyDomain.VOLUMES,
)


def alias_name(key_name: str) -> str:
    return f"alias/{key_name}"


def _alias_exists(name: str, parent: pulumi.Resource) -> bool:
    """Whether the account has alias ``name`` (KMS ListAliases, through the provider's lookup). The lookup
    fails for an alias that does not exist; it fails as well where the caller may not list aliases, and
    then the guard below stands down rather than refuse a stack it cannot judge."""
    try:
        kms.get_alias(name=name, opts=pulumi.InvokeOptions(parent=parent))
    except Exception:  # the provider's lookup error: no such alias (or no kms:ListAliases)
        return False
    return True


def datasets_key_policy(
    account: AwsAccount, users: KeyUsers, administrators: Sequence[str] = ()
) -> dict[str, Any]:
    """The datasets key's policy: administered through IAM, used for data only through S3 and only by
    ``users``: training, which reads them, and the ML engineers who put the data there."""
    statements = [
        *administered_by_account(account, administrators),
        *domain_use(account, _sid(DATASETS_DOMAIN), users, DOMAIN_USERS[DATASETS_DOMAIN].services),
    ]
    return {"Version": "2012-10-17", "Statement": statements}


def made_before_datasets_bucket(first_key: str, datasets_key: str, parent: pulumi.Resource) -> bool:
    """Whether the stack was made when one bucket held datasets and models: its first key's alias exists
    (every stack has that key) and the datasets key's does not (a stack made since has both). Such a stack
    keeps its one bucket, so that no store is added, moved or replaced by the upgrade (docs/operations.md,
    "One data domain per bucket"). A deployer that may not list aliases is taken for a new stack: the
    datasets bucket and key are added beside the data bucket, which nothing replaces, and training's
    grant on ``datasets/`` moves to the new, empty bucket (the preview shows it)."""
    return _alias_exists(alias_name(first_key), parent) and not _alias_exists(
        alias_name(datasets_key), parent
    )


def refuse_silent_key_moves(
    stack: str, first_key: str, moving: dict[KeyDomain, str], parent: pulumi.Resource
) -> None:
    """Refuse, before anything is registered, the update of a stack made when one key encrypted every store
    (``first_key``'s alias exists, none of the per-domain keys' aliases does) that would give the stores of
    ``moving`` (domain -> the name of its new key) new keys, where those stores are replaced to move
    (``REPLACED_ON_KEY_CHANGE``): the first step of the upgrade lists them in ``storage.onStackKey``
    (docs/operations.md, "Keys per data domain")."""
    replaced = [d for d in REPLACED_ON_KEY_CHANGE if d in moving]
    if not replaced or not _alias_exists(alias_name(first_key), parent):
        return
    if any(_alias_exists(alias_name(name), parent) for name in moving.values()):
        return
    listed = ", ".join(d.value for d in replaced)
    raise pulumi.RunError(
        f"{PLATFORM_KEY}.storage.onStackKey: stack {stack} keeps every store on {alias_name(first_key)} "
        f"(made before the keys per data domain), and this update would replace its {listed} stores to move "
        f"them to new keys; set storage.onStackKey: [{listed}] first (docs/operations.md, 'Keys per data "
        "domain')"
    )


@dataclass(frozen=True)
class EncryptionKeyArgs:
    account: AwsAccount
    tags: Mapping[str, str]
    # Production stacks protect the key: deleting it makes every encrypted byte unreadable.
    protect: bool
    # What the key is for, and its policy (an output where it names roles declared after the key).
    description: str
    policy: pulumi.Input[Mapping[str, Any]]
    # The data domains it serves (``KeyDomain`` values, or the audit domain), tagged for the pack.
    domains: tuple[str, ...]


class EncryptionKey(pulumi.ComponentResource):
    """A rotating customer-managed key with an alias, under a policy with named principals only."""

    def __init__(
        self, name: str, args: EncryptionKeyArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:aws:EncryptionKey", name, None, opts)
        self.key = kms.Key(
            f"{name}-key",
            description=f"{name}: {args.description}",
            enable_key_rotation=True,
            deletion_window_in_days=DELETION_WINDOW_DAYS,
            multi_region=False,
            policy=pulumi.Output.from_input(args.policy).apply(json.dumps),
            tags={**args.tags, DATA_DOMAIN_TAG: " ".join(args.domains)},
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect),
        )
        self.alias = kms.Alias(
            f"{name}-alias",
            name=alias_name(name),
            target_key_id=self.key.key_id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.arn: pulumi.Output[str] = self.key.arn
        self.register_outputs({"arn": self.arn, "alias": self.alias.name})
