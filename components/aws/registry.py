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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_aws import ecr

from components.aws.account import AwsAccount
from components.handle import RegistryLogin

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
            else _login(registry_host(args.account), first.registry_id, tuple(self.repositories.values()))
        )
        self.register_outputs(
            {"host": self.host, "repositories": {k: r.repository_url for k, r in self.repositories.items()}}
        )


def _login(address: str, registry_id: pulumi.Input[str], ready: tuple[pulumi.Resource, ...]) -> RegistryLogin:
    token = ecr.get_authorization_token_output(registry_id=registry_id)
    return RegistryLogin(address=address, username=token.user_name, password=token.password, ready=ready)
