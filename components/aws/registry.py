"""ECR repositories for the workload images, in-region and under the stack's key.

Tags are immutable, so a deployed ``trainer:0.1.0`` is the image that was scanned and approved, and every
push is scanned. No replication configuration: a replica in another region would leave the UAE.

Repository names are unique per account and region (ECR API, CreateRepository:
``RepositoryAlreadyExistsException``), so each stack's live under its own namespace
(``<cluster>/ml-platform/trainer``): two stacks in one account no longer collide, and the handle's
registry is that namespace, so workloads pull from their own stack's repositories.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_aws import ecr, get_caller_identity_output, iam, kms

from components.aws.account import AwsAccount
from components.aws.keys import DELETION_WINDOW_DAYS, key_administration
from components.handle import ImageSigning, RegistryLogin

# What signing needs of the key: a signature, and the public key cosign writes into what it signs
# (AWS KMS API reference, Sign and GetPublicKey).
SIGN_ACTIONS = ["kms:Sign", "kms:GetPublicKey", "kms:DescribeKey"]
# What everyone else in the account may do through IAM beside reading the key's configuration: check
# signatures, never sign (AWS KMS developer guide, "Key policies": an action the key policy grants the
# account root is delegated to IAM policies; one it does not, no IAM policy can grant).
VERIFY = ["kms:Verify"]

# Images kept per repository. Every change of an image's inputs pushes a new immutable content tag
# (components/images.py), the trainer's several GB, so without a rule storage grows with every edit (AWS
# review N5). The stack runs the newest tag of each repository; the nine before it are the images a
# rollback can still name. Expiry by count of images of any tag status (ECR user guide, "Lifecycle
# policy parameters": tagStatus any, countType imageCountMoreThan, action expire).
KEPT_IMAGES = 10


def lifecycle_policy(kept: int = KEPT_IMAGES) -> str:
    rule = {
        "rulePriority": 1,
        "description": f"keep the newest {kept} images",
        "selection": {"tagStatus": "any", "countType": "imageCountMoreThan", "countNumber": kept},
        "action": {"type": "expire"},
    }
    return json.dumps({"rules": [rule]}, sort_keys=True)


def image_repository(image: str) -> str:
    """``ml-platform/trainer:0.1.0`` or ``…@sha256:<digest>`` -> ``ml-platform/trainer``."""
    name = image.split("@", 1)[0]
    repository, _, tag = name.rpartition(":")
    return repository if repository and "/" not in tag else name


def registry_host(account: AwsAccount) -> str:
    return f"{account.account_id}.dkr.ecr.{account.dns_suffix}"


def repositories_arn(account: AwsAccount, namespace: str) -> str:
    """Every repository of the stack's ``namespace`` (the cluster name): its images' and, below
    ``<namespace>/mirror/``, the third-party copies (mlplatform/mirror.py)."""
    return account.arn("ecr", f"repository/{namespace}/*")


def signing_key_policy(
    account: AwsAccount, signer_arn: str, administrators: Sequence[str] = ()
) -> dict[str, Any]:
    """Only the deployer (the identity running ``pulumi up``: CI's OIDC role, or the operator) signs; the
    key is administered as the data keys are (``key_administration``): where the stack names key custodians
    (``administrators``: they and the deployer), only they change it, so no other IAM administrator can
    rewrite its policy (PutKeyPolicy) and give itself ``kms:Sign`` (review 35 A2); anyone the account lets
    may verify."""
    administer = key_administration(account, administrators, also=VERIFY)
    sign = {
        "Sid": "DeployerSignsImages",
        "Effect": "Allow",
        "Principal": {"AWS": signer_arn},
        "Action": SIGN_ACTIONS,
        "Resource": "*",
    }
    return {"Version": "2012-10-17", "Statement": [*administer, sign]}


def repositories(images: Iterable[str]) -> list[str]:
    """One repository per distinct image repository, in first-seen order."""
    return list(dict.fromkeys(image_repository(image) for image in images))


@dataclass(frozen=True)
class RegistryArgs:
    account: AwsAccount
    # The stack's namespace in the account's registry (the cluster name).
    namespace: str
    repositories: Sequence[str]
    key_arn: pulumi.Input[str]
    tags: Mapping[str, str]
    # Protected (prod) repositories refuse to be deleted while they hold images; others go with their
    # images, so `pulumi destroy` of a dev stack does not stop at RepositoryNotEmptyException (ECR API,
    # DeleteRepository: ``force``).
    protect: bool = True
    # Who administers the signing key where the stack names key custodians (components/aws/keys.py
    # ``key_administrators``); none: IAM decides.
    administrators: Sequence[str] = ()


class Registry(pulumi.ComponentResource):
    """One KMS-encrypted, immutable-tag, scan-on-push repository per workload image, keeping its newest
    ``KEPT_IMAGES`` images."""

    def __init__(self, name: str, args: RegistryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:aws:Registry", name, None, opts)
        self.host = f"{registry_host(args.account)}/{args.namespace}"
        self.repositories = {
            repository: ecr.Repository(
                f"{name}-{repository.replace('/', '-')}",
                name=f"{args.namespace}/{repository}",
                image_tag_mutability="IMMUTABLE",
                image_scanning_configuration={"scan_on_push": True},
                encryption_configurations=[{"encryption_type": "KMS", "kms_key": args.key_arn}],
                force_delete=not args.protect,
                tags=dict(args.tags),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for repository in args.repositories
        }
        for repository, created in self.repositories.items():
            ecr.LifecyclePolicy(
                f"{name}-{repository.replace('/', '-')}-lifecycle",
                repository=created.name,
                policy=lifecycle_policy(),
                opts=pulumi.ResourceOptions(parent=self),
            )
        # What `pulumi up` pushes the stack's images with (components/images.py): an ECR authorization
        # token for the account's registry, read on every run (it lasts 12 hours; ECR
        # GetAuthorizationToken), after the repositories exist, as pulumi-docker-build's ECR example does.
        first = next(iter(self.repositories.values()), None)
        self.login = (
            None
            if first is None
            else _login(
                registry_host(args.account),
                args.account.region,
                first.registry_id,
                tuple(self.repositories.values()),
                self._signing_key(name, args),
            )
        )
        self.register_outputs(
            {"host": self.host, "repositories": {k: r.repository_url for k, r in self.repositories.items()}}
        )

    def _signing_key(self, name: str, args: RegistryArgs) -> ImageSigning:
        """An ECDSA P-256 signing key (KMS key spec ECC_NIST_P256, usage SIGN_VERIFY; cosign signs with
        ECDSA P-256), signed with only by the deployer. The role behind an assumed-role session is the
        principal (IAM GetSessionContext's issuer ARN): a key policy cannot name a session. Asymmetric
        keys do not rotate (AWS KMS developer guide, "Rotating AWS KMS keys"): a new key is a new stack
        output operators verify with."""
        caller = get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self))
        signer = iam.get_session_context_output(arn=caller.arn, opts=pulumi.InvokeOutputOptions(parent=self))
        key = kms.Key(
            f"{name}-signing-key",
            description=f"{name}: signs the images this stack builds (cosign)",
            customer_master_key_spec="ECC_NIST_P256",
            key_usage="SIGN_VERIFY",
            deletion_window_in_days=DELETION_WINDOW_DAYS,
            multi_region=False,
            policy=signer.issuer_arn.apply(
                lambda arn: json.dumps(signing_key_policy(args.account, arn, args.administrators))
            ),
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.signing_key_arn: pulumi.Output[str] = key.arn
        return ImageSigning(key=key.arn.apply(lambda arn: f"awskms:///{arn}"), ready=(key,))


def _login(
    address: str,
    region: str,
    registry_id: pulumi.Input[str],
    ready: tuple[pulumi.Resource, ...],
    signing: ImageSigning,
) -> RegistryLogin:
    token = ecr.get_authorization_token_output(registry_id=registry_id)
    return RegistryLogin(
        address=address,
        username=token.user_name,
        password=token.password,
        ready=ready,
        signing=signing,
        # The same token as the push's, for the attest step (AWS CLI `aws ecr get-login-password`).
        password_command=f"aws ecr get-login-password --region {shlex.quote(region)}",
    )
