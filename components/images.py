"""The workload images as resources of the stack: built from the repository's Dockerfiles with buildx and
pushed to the stack's own registry by ``pulumi up`` (pulumi-docker-build), their digests flowing into
the Jobs and Deployments like any other output.

One training image per Dockerfile target a pool needs (``IMAGE_TARGETS``: cpu, efa, infiniband), one
inference image. A stack that names an image by digest (``workloads.<name>.image``) gets that instead.
Each build is tagged with a hash of everything it reads (the Dockerfile, its target, the files its COPY
lines take with their modes), so an unchanged tree is the same tag and no rebuild on the next
``pulumi up``, and a changed one a new tag in ECR's immutable-tag repositories. Each Dockerfile's own
ignore file (``<Dockerfile>.dockerignore``, generated from its COPY lines) makes its build context hold
just those files, so the context hash pulumi-docker-build diffs on changes exactly when the tag does.
The workloads run the Image's ``ref`` output: that tag with the pushed manifest's digest
(``<repo>:<tag>@sha256:...``, pulumi-docker-build ``Image.ref``), so a pod runs exactly the bytes this
update pushed.

Provenance: pulumi-docker-build 0.0.22 cannot ask buildx for attestations (its Image has no ``attest``,
``sbom`` or ``provenance`` input, and neither ``exports`` nor ``build_args`` reaches buildx's ``--attest``:
pulumi/pulumi-docker-build#73, open). So each pushed image is attested and signed after the push, by a
local Command on the deployer's machine that names the pushed digest: a Syft SPDX SBOM of the image in the
registry and a SLSA v1 provenance predicate, each a cosign attestation, and a cosign signature, all with
the stack's KMS / Key Vault key (``ImageSigning``) and stored beside the image as OCI 1.1 referrers (no
tags: ECR's immutable tags would refuse cosign's ``sha256-<digest>.sig``/``.att`` tags on a second
signature; docs/security.md). Nothing goes to the public Rekor log (``--tlog-upload=false``): the
signature is checked against the stack's key, and the image's digest stays in the stack's region.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_docker_build as docker_build
from pulumi_command import local

from components.build_context import context_files, ignore_file
from components.config import PlatformConfig
from components.handle import ClusterHandle, Fabric, RegistryLogin
from components.image_requirements import pin_problems
from workloads.fabric import IMAGE_TARGETS, ImageTarget

REPO = Path(__file__).resolve().parents[1]
TRAINING_DOCKERFILE = REPO / "workloads" / "training" / "Dockerfile"
INFERENCE_DOCKERFILE = REPO / "workloads" / "inference" / "Dockerfile"
REGISTRY_DOCKERFILE = REPO / "workloads" / "registry" / "server" / "Dockerfile"
DOCKERFILES = (TRAINING_DOCKERFILE, INFERENCE_DOCKERFILE, REGISTRY_DOCKERFILE)
# The pyproject.toml extra each Python image installs, from the requirements.txt beside its Dockerfile
# (generated: components/image_requirements.py). The registry's requirements are its own, written by hand.
INSTALLS = {TRAINING_DOCKERFILE: "train", INFERENCE_DOCKERFILE: "serve"}
# Repositories below the stack's registry (ECR creates them, components/aws/registry.py; ACR on push).
TRAINER_REPOSITORY = "ml-platform/trainer"
INFERENCE_REPOSITORY = "ml-platform/inference"
REGISTRY_REPOSITORY = "ml-platform/registry"
# Every pool in both clouds' catalogs is x86_64 (p5en, ND96isr_H100_v5, the CPU pools).
PLATFORM = docker_build.Platform.LINUX_AMD64
# Paths no build reads, left out of every context (caches Python and the linters write into the tree).
NEVER_IN_CONTEXT = ("**/__pycache__", "**/*.pyc", "**/.mypy_cache", "**/.ruff_cache", "**/.pytest_cache")


def instructions(dockerfile: Path) -> list[str]:
    """The Dockerfile's instructions, a line ending in ``\\`` joined with the next (Dockerfile reference,
    "Escape character": the default escape character continues an instruction on the next line)."""
    joined: list[str] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        joined.append(pending + line)
        pending = ""
    return joined


def copy_sources(dockerfile: Path) -> list[str]:
    """The build-context paths a Dockerfile's COPY lines read (``--from`` copies read another stage)."""
    sources: list[str] = []
    for line in instructions(dockerfile):
        words = shlex.split(line) if line.startswith("COPY ") else []
        if words and not any(w.startswith("--from=") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def ignore_rules(dockerfile: Path) -> str:
    """The Dockerfile's own ignore file: everything out, then back in exactly what its COPY lines read.

    pulumi-docker-build diffs an Image on a hash of its whole build context (every admitted file's
    content, path and mode, ``provider/internal/context.go`` ``hashBuildContext``) and the context is the
    repository root; a file the build does not read would otherwise change that hash but not the tag,
    and the rebuild's push to the same tag is refused by ECR's immutable tags (cluster review A2).
    """
    lines = [
        f"# From {dockerfile.relative_to(REPO).as_posix()}'s COPY lines, by `python -m components.images`.",
        "# buildx and pulumi-docker-build read it instead of the root .dockerignore: the build context, and",
        "# the hash pulumi-docker-build diffs on, hold exactly the files the image tag names.",
        "*",
        *(f"!{source}" for source in copy_sources(dockerfile)),
        *NEVER_IN_CONTEXT,
    ]
    return "\n".join(lines) + "\n"


def content_tag(dockerfile: Path, target: str | None, root: Path = REPO) -> str:
    """A tag naming what the build reads: the Dockerfile, its target, and every file of its build context
    with its path and mode, the inputs pulumi-docker-build hashes. The same tree builds the same tag (no
    change on the next ``pulumi up``), any change to what the provider hashes a new one."""
    digest = hashlib.sha256()
    for part in (dockerfile.relative_to(root).as_posix(), dockerfile.read_text(), target or ""):
        digest.update(part.encode() + b"\0")
    for file in context_files(root, dockerfile):
        mode = stat.filemode(file.lstat().st_mode)
        digest.update(f"{file.relative_to(root).as_posix()}\0{mode}\0".encode() + file.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def requirements_file(dockerfile: Path) -> Path:
    """The generated requirements file a Python image's build installs (``INSTALLS``)."""
    return dockerfile.with_name("requirements.txt")


def stale_build_files() -> list[str]:
    """The Dockerfiles' ignore files that are missing or admit other files than their COPY lines read, and
    each line of a generated requirements file that pyproject.toml or constraints.txt pins otherwise."""
    stale = [
        f"{ignore_file(d).relative_to(REPO).as_posix()}: not what the Dockerfile's COPY lines read"
        for d in DOCKERFILES
        if not ignore_file(d).is_file() or ignore_file(d).read_text() != ignore_rules(d)
    ]
    for dockerfile, extra in INSTALLS.items():
        stale += pin_problems(REPO, extra, requirements_file(dockerfile))
    return stale


@dataclass(frozen=True)
class WorkloadImages:
    """The image each workload runs: a training image per Dockerfile target, the inference image and the
    model registry's."""

    training: Mapping[ImageTarget, pulumi.Input[str]] = field(default_factory=dict)
    inference: pulumi.Input[str] | None = None
    registry: pulumi.Input[str] | None = None

    def for_fabric(self, fabric: Fabric) -> pulumi.Input[str]:
        return self.training[IMAGE_TARGETS[fabric]]


def training_targets(handle: ClusterHandle, config: PlatformConfig) -> list[ImageTarget]:
    """The targets the training run and the fabric tests need, one per fabric among their pools."""
    training = config.workloads.training
    if training is None or not training.enabled:
        return []
    fabrics = [handle.pool(training.pool).fabric]
    if config.workloads.fabric_test.enabled:
        fabrics += [p.fabric for p in handle.pools if p.fabric is not Fabric.NONE]
    return list(dict.fromkeys(IMAGE_TARGETS[f] for f in fabrics))


def workload_images(config: PlatformConfig) -> list[str]:
    """The stack's image references below its registry: a named image, or the repository a build is
    pushed to (ECR needs a repository for each, components/aws/registry.py)."""
    named = {TRAINER_REPOSITORY: config.workloads.training, INFERENCE_REPOSITORY: config.workloads.inference}
    images = [w.image or repository for repository, w in named.items() if w is not None]
    if config.workloads.registry.enabled:
        images.append(config.workloads.registry.image or REGISTRY_REPOSITORY)
    return images


class StackImages(pulumi.ComponentResource):
    """Builds and pushes the images the stack's workloads run, or takes the ones the stack names."""

    def __init__(
        self,
        name: str,
        handle: ClusterHandle,
        config: PlatformConfig,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("ml-platform:index:Images", name, None, opts)
        self._name, self._handle = name, handle
        training, inference = config.workloads.training, config.workloads.inference
        refs: dict[ImageTarget, pulumi.Input[str]] = {}
        # A named training image serves every target it was built for (config checks its imageTarget).
        named = (
            self._sign(TRAINER_REPOSITORY, f"{handle.registry}/{training.image}")
            if training is not None and training.image is not None and training_targets(handle, config)
            else None
        )
        for target in training_targets(handle, config):
            refs[target] = named or self._build(TRAINER_REPOSITORY, TRAINING_DOCKERFILE, target)
        inference_ref: pulumi.Input[str] | None = None
        if inference is not None and inference.enabled:
            inference_ref = (
                self._sign(INFERENCE_REPOSITORY, f"{handle.registry}/{inference.image}")
                if inference.image is not None
                else self._build(INFERENCE_REPOSITORY, INFERENCE_DOCKERFILE, None)
            )
        registry = config.workloads.registry
        registry_ref: pulumi.Input[str] | None = None
        if registry.enabled:
            registry_ref = (
                self._sign(REGISTRY_REPOSITORY, f"{handle.registry}/{registry.image}")
                if registry.image is not None
                else self._build(REGISTRY_REPOSITORY, REGISTRY_DOCKERFILE, None)
            )
        self.images = WorkloadImages(refs, inference_ref, registry_ref)
        self.register_outputs({"training": dict(refs), "inference": inference_ref, "registry": registry_ref})

    def _sign(self, repository: str, ref: str) -> pulumi.Output[str]:
        """A named image (``workloads.<name>.image``), signed with the stack's key once per digest."""
        login = self._signing_login()
        assert login.signing is not None and login.password_command is not None
        signed = local.Command(
            f"{self._name}-{repository.rsplit('/', 1)[-1]}-sign",
            create=pulumi.Output.all(login.signing.key, login.password_command).apply(
                lambda a: sign_named(ref, a[0], a[1])
            ),
            triggers=[ref],
            environment={"REGISTRY_USERNAME": login.username},
            interpreter=["/bin/bash", "-c"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(login.signing.ready)),
        )
        # The workloads wait for the signature: the admission verifier refuses an unsigned image.
        return signed.stdout.apply(lambda _: ref)

    def _signing_login(self) -> RegistryLogin:
        login = self._handle.registry_login
        if login is None or login.signing is None or login.password_command is None:
            raise ValueError(f"{self._handle.name}: the cloud adapter gave no key to sign its images with")
        return login

    def _build(self, repository: str, dockerfile: Path, target: ImageTarget | None) -> pulumi.Output[str]:
        login = self._handle.registry_login
        if login is None:
            raise ValueError(f"{self._handle.name}: the cloud adapter gave no registry login to push with")
        stale = stale_build_files()
        if stale:
            raise pulumi.RunError(
                f"{'; '.join(stale)}: a build would hash or install other files than its tag names. "
                "Run `.venv/bin/python -m components.images` and commit the result."
            )
        tag = content_tag(dockerfile, target)
        resource_name = f"{self._name}-{repository.rsplit('/', 1)[-1]}" + (f"-{target}" if target else "")
        image = docker_build.Image(
            resource_name,
            docker_build.ImageArgs(
                # Relative to the project directory, where Pulumi runs the program: the same inputs from
                # any checkout. The Dockerfile's ignore file narrows the context to what the tag hashes,
                # so another deployer's `pulumi up` is no change (file modes count: same umask).
                context=docker_build.BuildContextArgs(location="."),
                dockerfile=docker_build.DockerfileArgs(location=dockerfile.relative_to(REPO).as_posix()),
                target=target.value if target else None,
                # The image records what it was built from (MLPLATFORM_CODE_VERSION, model metadata).
                build_args={"CODE_VERSION": tag},
                platforms=[PLATFORM],
                tags=[f"{self._handle.registry}/{repository}:{tag}"],
                push=True,
                registries=[_registry(login)],
                # BuildKit cache metadata rides in the pushed image (the only cache export the default
                # docker driver supports); the same tag is the cache a rebuild of this tree reads.
                cache_to=[docker_build.CacheToArgs(inline=docker_build.CacheToInlineArgs())],  # type: ignore[no-untyped-call]
                cache_from=[
                    docker_build.CacheFromArgs(
                        registry=docker_build.CacheFromRegistryArgs(
                            ref=f"{self._handle.registry}/{repository}:{tag}"
                        )
                    )
                ],
                # A preview never exports (docker-build docs), so building there only spends time on a
                # multi-GB CUDA image; the Dockerfile is still parsed.
                build_on_preview=False,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(login.ready)),
        )
        if login.signing is None or login.password_command is None:
            raise ValueError(f"{self._handle.name}: the cloud adapter gave no key to sign its pushed images")
        provenance = provenance_predicate(repository, dockerfile, target, tag)
        attested = local.Command(
            f"{resource_name}-attest",
            create=pulumi.Output.all(image.ref, login.signing.key, login.password_command).apply(
                lambda a: attest_and_sign(a[0], a[1], provenance, a[2])
            ),
            # A new digest is a new image to attest and sign; the same digest was signed already. No input
            # changes between runs otherwise (the password is read by the command, not passed to it).
            triggers=[image.digest],
            environment={
                "COSIGN_EXPERIMENTAL": "1",
                "REGISTRY_USERNAME": login.username,
                "SYFT_REGISTRY_AUTH_AUTHORITY": login.address,
                "SYFT_REGISTRY_AUTH_USERNAME": login.username,
            },
            interpreter=["/bin/bash", "-c"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[image, *login.signing.ready]),
        )
        # The workloads wait for the signature: the admission verifier refuses an unsigned image.
        return pulumi.Output.all(image.ref, attested.stdout).apply(lambda a: str(a[0]))


def provenance_predicate(repository: str, dockerfile: Path, target: ImageTarget | None, tag: str) -> str:
    """The SLSA v1 provenance predicate of a build (slsa.dev/spec/v1.0/provenance): what was built from
    what, by which build. The subject (the pushed digest) is added by ``cosign attest``."""
    predicate = {
        "buildDefinition": {
            # The project's own type URIs (SLSA lets a builder define its build type and id).
            "buildType": "urn:ml-platform:build-type:pulumi-docker-build-image:v1",
            "externalParameters": {
                "repository": repository,
                "dockerfile": dockerfile.relative_to(REPO).as_posix(),
                "target": target.value if target else None,
                "platform": PLATFORM.value,
                "buildArgs": {"CODE_VERSION": tag},
            },
            # The content tag hashes the Dockerfile, its target and every file of the build context.
            "resolvedDependencies": [{"name": "build-context", "digest": {"mlplatformContentTag": tag}}],
        },
        "runDetails": {"builder": {"id": "urn:ml-platform:builder:pulumi-up"}},
    }
    return json.dumps(predicate, sort_keys=True)


def attest_and_sign(ref: str, key: str, provenance: str, password_command: str) -> str:
    """The deployer's commands for one pushed image ``ref`` (``<repo>:<tag>@sha256:...``), with the
    registry password ``password_command`` prints: Syft's SPDX SBOM of the image as the registry holds
    it and cosign attestations of it and of the provenance, with ``key`` in the new bundle format as OCI
    1.1 referrers of the digest (cosign ``--registry-referrers-mode=oci-1-1``, experimental:
    ``COSIGN_EXPERIMENTAL=1``; sigstore/docs#411); and a cosign signature in the legacy format, the one
    the admission verifier checks with a key (components/kubernetes/image_verification.py), stored as
    cosign's ``sha256-<digest>.sig`` tag. That tag is written once per digest: a rerun finds the signature
    verifying and signs no second time (ECR's immutable tags would refuse the appended one)."""
    cosign = (
        f"--yes --key {shlex.quote(key)} --tlog-upload=false --new-bundle-format "
        f"--registry-referrers-mode=oci-1-1 {_REGISTRY_LOGIN}"
    )
    image = shlex.quote(ref)
    return "\n".join(
        [
            "set -euo pipefail",
            f'REGISTRY_PASSWORD="$({password_command})"',
            'export SYFT_REGISTRY_AUTH_PASSWORD="$REGISTRY_PASSWORD"',
            'work="$(mktemp -d)"; trap \'rm -rf "$work"\' EXIT',
            f'syft scan registry:{image} --output spdx-json="$work/sbom.spdx.json"',
            f'printf %s {shlex.quote(provenance)} > "$work/provenance.json"',
            f'cosign attest {cosign} --type spdxjson --predicate "$work/sbom.spdx.json" {image}',
            f'cosign attest {cosign} --type slsaprovenance1 --predicate "$work/provenance.json" {image}',
            sign_once(image, shlex.quote(key)),
        ]
    )


_REGISTRY_LOGIN = '--registry-username "$REGISTRY_USERNAME" --registry-password "$REGISTRY_PASSWORD"'


def sign_once(image: str, key: str) -> str:
    """cosign's legacy signature of ``image`` with ``key``, unless one by that key verifies already: the
    one command that signs with the stack's key, for the images ``pulumi up`` pushes or names and for the
    third-party copies ``mlplatform images mirror`` makes (mlplatform/mirror.py), so the admission
    verifier checks both alike. ``image`` (by digest) and ``key`` are shell words, a quoted value or a
    double-quoted ``$VARIABLE`` that the script sets before; the registry login is ``$REGISTRY_USERNAME``
    and ``$REGISTRY_PASSWORD``."""
    legacy = f"--key {key} --new-bundle-format=false {_REGISTRY_LOGIN}"
    return (
        f"cosign verify {legacy} --insecure-ignore-tlog=true {image} > /dev/null 2>&1"
        f" || cosign sign --yes --tlog-upload=false {legacy} {image}"
    )


def sign_named(ref: str, key: str, password_command: str) -> str:
    """The deployer's commands for an image the stack names by digest instead of building: the stack
    vouches for it with its key, so the admission verifier admits it (its SBOM and provenance are its
    builder's to attest)."""
    return "\n".join(
        [
            "set -euo pipefail",
            f'REGISTRY_PASSWORD="$({password_command})"',
            sign_once(shlex.quote(ref), shlex.quote(key)),
        ]
    )


def _registry(login: RegistryLogin) -> docker_build.RegistryArgs:
    return docker_build.RegistryArgs(
        address=login.address, username=login.username, password=pulumi.Output.secret(login.password)
    )


if __name__ == "__main__":
    from components.image_requirements import requirements_text

    for dockerfile, extra in INSTALLS.items():
        image = dockerfile.relative_to(REPO).as_posix()
        requirements_file(dockerfile).write_text(requirements_text(REPO, extra, image))
        sys.stdout.write(f"wrote {requirements_file(dockerfile).relative_to(REPO)}\n")
    for dockerfile in DOCKERFILES:
        ignore_file(dockerfile).write_text(ignore_rules(dockerfile))
        sys.stdout.write(f"wrote {ignore_file(dockerfile).relative_to(REPO)}\n")
