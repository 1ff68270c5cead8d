"""Third-party images into the stack's own registry: what the planned objects name from outside it, where
each goes, and the commands that copy it (compliance review R4: runtime pulls from registries outside the
UAE, by mutable tag).

A view of the plan, like the evidence and the cost: it reads the Kubernetes objects the plan applies (the
charts' rendered objects included), never the builders. An image is named by a container (``containers``,
``initContainers``, ``ephemeralContainers`` of a pod or a workload's pod template) or by an operator's
custom resource in the NVIDIA operators' ``repository``/``image``/``version`` shape (ClusterPolicy,
NicClusterPolicy), from which the operator makes its pods.

Each goes to ``<registry>/mirror/<source host>/<source path>`` with the source's tag. The copy is
``crane copy``, which "efficiently copy[s] a remote image from src to dst while retaining the digest
value" (google/go-containerregistry, cmd/crane/doc/crane_copy.md), every platform of an index included:
the mirror's digest is the source's, so the digest ``crane digest`` prints for the mirror is the one to
pin. The copy needs the registries; this module only says what to run (``mlplatform images mirror``).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIRROR_PATH = "mirror"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# ACR's username for a token from `az acr login --expose-token` (Azure Container Registry docs,
# "Authenticate with an Azure container registry": az acr login with --expose-token).
ACR_TOKEN_USER = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class ImageRef:
    """A reference split as the distribution reference grammar reads it (distribution/reference): a
    first path component with a ``.`` or ``:``, or ``localhost``, is a host; otherwise the host is
    ``docker.io`` and a single-component path is below ``library/``."""

    host: str
    path: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, reference: str) -> ImageRef:
        rest, _, digest = reference.partition("@")
        first, slash, remainder = rest.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            host, rest = first, remainder
        else:
            host = "docker.io"
            rest = rest if "/" in rest else f"library/{rest}"
        path, colon, tag = rest.rpartition(":") if ":" in rest.rsplit("/", 1)[-1] else (rest, "", "")
        return cls(host, path, tag if colon else None, digest or None)

    def __str__(self) -> str:
        return (
            f"{self.host}/{self.path}"
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )


@dataclass(frozen=True)
class MirroredImage:
    """One third-party image: as the objects name it, where it goes, its digest where the source names
    one (``crane copy`` keeps it), and the objects that name it."""

    source: str
    mirror: str
    repository: str  # below the registry's host: what ECR needs created before a push
    digest: str | None
    objects: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "mirror": self.mirror,
            "repository": self.repository,
            "digest": self.digest,
            "objects": list(self.objects),
        }


def _pod_specs(obj: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return
    if obj.get("kind") == "Pod":
        yield spec
    template = (spec.get("jobTemplate") or {}).get("spec", spec).get("template")
    if isinstance(template, Mapping) and isinstance(template.get("spec"), Mapping):
        yield template["spec"]


def _operator_images(node: Any) -> Iterator[str]:
    """``{repository, image, version}`` anywhere in a custom resource: the NVIDIA operators' image spec
    (gpu-operator ClusterPolicy, network-operator NicClusterPolicy), ``version`` a tag or a digest."""
    if isinstance(node, Mapping):
        repository, image, version = node.get("repository"), node.get("image"), node.get("version")
        if all(isinstance(v, str) and v for v in (repository, image, version)):
            separator = "@" if str(version).startswith("sha256:") else ":"
            yield f"{repository}/{image}{separator}{version}"
        for value in node.values():
            yield from _operator_images(value)
    elif isinstance(node, list):
        for item in node:
            yield from _operator_images(item)


def image_references(objects: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Every image the objects name → the objects (``Kind namespace/name``) that name it."""
    named: dict[str, list[str]] = {}
    for obj in objects:
        metadata = obj.get("metadata") or {}
        where = f"{obj.get('kind')} {metadata.get('namespace', '')}/{metadata.get('name')}".replace(" /", " ")
        images = [
            str(c["image"])
            for spec in _pod_specs(obj)
            for lst in _CONTAINER_LISTS
            for c in spec.get(lst) or []
            if c.get("image")
        ]
        if "/" in str(obj.get("apiVersion", "")) and "." in str(obj.get("apiVersion")).split("/")[0]:
            images += _operator_images(obj.get("spec"))
        for image in dict.fromkeys(images):
            named.setdefault(image, []).append(where)
    # In name order: the same list from a plan however its resources are ordered (a plan file's are sorted).
    return {image: sorted(where) for image, where in named.items()}


def mirror_list(objects: Sequence[Mapping[str, Any]], registry: str) -> list[MirroredImage]:
    """What the objects name from outside ``registry``, each with its place below it."""
    host, _, prefix = registry.partition("/")
    mirrored = []
    for image, where in sorted(image_references(objects).items()):
        if image.startswith(f"{registry}/"):
            continue
        ref = ImageRef.parse(image)
        repository = "/".join(p for p in (prefix, MIRROR_PATH, ref.host, ref.path) if p)
        target = (
            f"{host}/{repository}"
            + (f":{ref.tag}" if ref.tag else "")
            + (f"@{ref.digest}" if ref.digest else "")
        )
        mirrored.append(MirroredImage(image, target, repository, ref.digest, tuple(where)))
    return mirrored


def mirror_script(images: Sequence[MirroredImage], outputs: Mapping[str, Any]) -> list[str]:
    """The shell lines that copy ``images`` into the stack's registry (``outputs``: the plan's, for the
    cloud, region, registry and, on AWS, the key the stack's repositories are encrypted with)."""
    cloud, registry = str(outputs["cloud"]), str(outputs["registry"])
    host = registry.partition("/")[0]
    lines = ["set -euo pipefail"]
    if cloud == "aws":
        region = str(outputs["region"])
        lines.append(
            f"aws ecr get-login-password --region {shlex.quote(region)}"
            f" | crane auth login {shlex.quote(host)} -u AWS --password-stdin"
        )
        # As the stack's own repositories (components/aws/registry.py): immutable tags, scanned on push,
        # encrypted with the stack's key. ECR creates no repository on push.
        encryption = "encryptionType=KMS" + (
            f",kmsKey={outputs['kmsKeyArn']}" if outputs.get("kmsKeyArn") else ""
        )
        for image in images:
            create = shlex.join(
                [
                    "aws", "ecr", "create-repository", "--region", region,
                    "--repository-name", image.repository,
                    "--image-tag-mutability", "IMMUTABLE",
                    "--image-scanning-configuration", "scanOnPush=true",
                    "--encryption-configuration", encryption,
                ]
            )  # fmt: skip
            describe = shlex.join(
                [
                    "aws",
                    "ecr",
                    "describe-repositories",
                    "--region",
                    region,
                    "--repository-names",
                    image.repository,
                ]
            )
            lines.append(f"{describe} >/dev/null 2>&1 || {create} >/dev/null")
    elif cloud == "azure":
        name = host.split(".", 1)[0]
        lines.append(
            f"az acr login --name {shlex.quote(name)} --expose-token --output tsv --query accessToken"
            f" | crane auth login {shlex.quote(host)} -u {ACR_TOKEN_USER} --password-stdin"
        )
    else:
        raise ValueError(f"cloud {cloud!r}: no registry login known")
    for image in images:
        lines.append(shlex.join(["crane", "copy", image.source, image.mirror]))
        lines.append(f'echo {shlex.quote(image.mirror)} "$(crane digest {shlex.quote(image.mirror)})"')
    return lines
