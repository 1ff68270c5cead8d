"""Third-party images into the stack's own registry: what the planned objects name from outside it, where
each goes, and the commands that copy it (compliance review R4: runtime pulls from registries outside the
UAE, by mutable tag).

A view of the plan, like the evidence and the cost: it reads the Kubernetes objects the plan applies (the
charts' rendered objects included), never the builders. An image is named by a container (``containers``,
``initContainers``, ``ephemeralContainers`` of a pod or a workload's pod template) or by an operator's
custom resource in the NVIDIA operators' ``repository``/``image``/``version`` shape (ClusterPolicy,
NicClusterPolicy), from which the operator makes its pods; or, for an operator to run, in a container's
``*_IMAGE`` variable, a prometheus-operator image flag, or a custom resource's ``spec.image``.

A driver image the NVIDIA operators install (ClusterPolicy ``driver``, NicClusterPolicy ``ofedDriver``)
is pulled by a tag the operator completes with the node's OS (and arch): the list names that tag, from
the plan's ``gpuNodeOs`` output, by the rule the program pins it with (components/driver_images.py).

Each goes to ``<registry>/mirror/<source host>/<source path>`` with the source's tag. The copy is
``crane copy``, which "efficiently copy[s] a remote image from src to dst while retaining the digest
value" (google/go-containerregistry, cmd/crane/doc/crane_copy.md), every platform of an index included:
the mirror's digest is the source's, so the digest ``crane digest`` prints for the mirror is the one to
pin. Each copy is then signed by that digest with the stack's key, by the command that signs the
stack's own images (components/images.py ``sign_once``), so the admission verifier can hold the operator
namespaces to the key as it does the workload namespaces. The copy needs the registries; this module
only says what to run (``mlplatform images mirror``), ending with the stack's mirror lock
(components/image_mirror.py), through which the program then names each image by the mirror's digest;
such an image is listed ``mirrored``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from components.config import PLATFORM_KEY
from components.driver_images import DRIVER_TAGS, NodeOs
from components.image_mirror import LOCK_VERSION, MIRROR_PATH, SOURCES_ANNOTATION, ImageRef
from components.images import sign_once

_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# prometheus-operator's flags naming the images it runs beside Prometheus and Alertmanager
# (prometheus-operator cmd/operator/main.go; kube-prometheus-stack templates/prometheus-operator).
_IMAGE_FLAGS = ("--prometheus-config-reloader=", "--thanos-default-base-image=")
# An operator's environment variable naming an image it deploys (GPU operator DRIVER_MANAGER_IMAGE and
# VALIDATOR_IMAGE, network operator OFED_INIT_CONTAINER_IMAGE) ends so.
_IMAGE_ENV_SUFFIX = "_IMAGE"
# ACR's username for a token from `az acr login --expose-token` (Azure Container Registry docs,
# "Authenticate with an Azure container registry": az acr login with --expose-token).
ACR_TOKEN_USER = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class MirroredImage:
    """One third-party image: as the objects name it, where it goes (in the plan's registry, and below
    any registry: what the lock names), its digest where the source names one (``crane copy`` keeps it),
    and the objects that name it."""

    source: str
    mirror: str
    repository: str  # below the registry's host: what ECR needs created before a push
    digest: str | None
    objects: tuple[str, ...]
    # The objects name the mirror by digest already (the stack's mirror lock): nothing left to copy.
    mirrored: bool = False
    # ``mirror`` below the registry, ``mirror/<source host>/<path>[:tag][@digest]``: what the lock names,
    # and where the script copies to below the deployed stack's registry.
    below: str = ""
    # Mirrored, and the stack's lock says its key signed every copy (the plan's ``imageLock`` output).
    signed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "mirror": self.mirror,
            "repository": self.repository,
            "digest": self.digest,
            "mirrored": self.mirrored,
            "signed": self.signed,
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


class NodeOsError(ValueError):
    """A driver image whose tag the operator completes with a node OS the plan does not export."""


def plan_node_os(outputs: Mapping[str, Any]) -> NodeOs | None:
    """The GPU nodes' OS a plan exports (``gpuNodeOs``: Azure stacks with GPU pools), or None."""
    found = outputs.get("gpuNodeOs")
    return NodeOs.from_dict(found) if isinstance(found, Mapping) else None


def plan_lock_signed(outputs: Mapping[str, Any]) -> bool:
    """Whether the plan's mirror lock says the stack's key signed every copy (output ``imageLock``,
    exported by a stack that names a lock)."""
    found = outputs.get("imageLock")
    return isinstance(found, Mapping) and found.get("signed") is True


def _driver_images(obj: Mapping[str, Any], node_os: NodeOs | None) -> dict[str, str | None]:
    """A custom resource's driver images as its spec names them → as the operator pulls them, or None
    where it pulls none (ClusterPolicy ``driver.enabled: false``: the node image has the driver, EKS)."""
    spec = obj.get("spec") or {}
    found: dict[str, str | None] = {}
    for (kind, field), complete in DRIVER_TAGS.items():
        block = spec.get(field) if obj.get("kind") == kind and isinstance(spec, Mapping) else None
        if not isinstance(block, Mapping):
            continue
        version = str(block.get("version", ""))
        named = f"{block.get('repository')}/{block.get('image')}" + (
            "@" if version.startswith("sha256:") else ":"
        )
        if block.get("enabled") is False:
            found[named + version] = None
            continue
        if not version or version.startswith("sha256") or "@" in version:
            continue  # by digest: pulled as named
        named += version
        if node_os is None:
            raise NodeOsError(
                f"{named}: its operator adds the GPU nodes' OS to the tag; the plan exports no gpuNodeOs"
            )
        found[named] = f"{block['repository']}/{block['image']}:{complete(version, node_os)}"
    return found


def image_references(objects: Sequence[Mapping[str, Any]], node_os: NodeOs | None) -> dict[str, list[str]]:
    """Every image the objects name → the objects (``Kind namespace/name``) that name it; a driver
    image as its operator pulls it on ``node_os`` (``NodeOsError`` without one)."""
    named: dict[str, list[str]] = {}
    for obj in objects:
        metadata = obj.get("metadata") or {}
        where = f"{obj.get('kind')} {metadata.get('namespace', '')}/{metadata.get('name')}".replace(" /", " ")
        containers = [c for spec in _pod_specs(obj) for lst in _CONTAINER_LISTS for c in spec.get(lst) or []]
        images = [str(c["image"]) for c in containers if c.get("image")]
        images += [
            str(env["value"])
            for c in containers
            for env in c.get("env") or []
            if str(env.get("name", "")).endswith(_IMAGE_ENV_SUFFIX) and env.get("value")
        ]
        images += [
            str(arg).split("=", 1)[1]
            for c in containers
            for arg in c.get("args") or []
            if str(arg).startswith(_IMAGE_FLAGS)
        ]
        if "/" in str(obj.get("apiVersion", "")) and "." in str(obj.get("apiVersion")).split("/")[0]:
            spec = obj.get("spec")
            drivers = _driver_images(obj, node_os)
            images += [i for i in (drivers.get(image, image) for image in _operator_images(spec)) if i]
            # A custom resource's own image (Prometheus, Alertmanager: spec.image).
            if isinstance(spec, Mapping) and isinstance(spec.get("image"), str) and spec["image"]:
                images.append(spec["image"])
        for image in dict.fromkeys(images):
            named.setdefault(image, []).append(where)
    # In name order: the same list from a plan however its resources are ordered (a plan file's are sorted).
    return {image: sorted(where) for image, where in named.items()}


def mirror_list(
    objects: Sequence[Mapping[str, Any]], registry: str, node_os: NodeOs | None, *, signed: bool = False
) -> list[MirroredImage]:
    """What the objects name from outside ``registry`` (a driver as pulled on ``node_os``), each with its
    place below it; and what they name from its mirror by digest (a stack with a mirror lock),
    ``mirrored``, its source read back from the path below the mirror, or, where the reference has no
    tag (the DOCA driver), from the object's ``SOURCES_ANNOTATION``; ``signed`` where the lock says the
    stack's key signed every copy (``plan_lock_signed``)."""
    prefix = registry.partition("/")[2]
    root = f"{registry}/{MIRROR_PATH}/"
    # Sources the objects name for the mirror's images they name by bare digest (SOURCES_ANNOTATION).
    annotated: dict[str, str] = {}
    for obj in objects:
        found = ((obj.get("metadata") or {}).get("annotations") or {}).get(SOURCES_ANNOTATION)
        annotated |= json.loads(found) if found else {}
    mirrored = []
    for image, where in sorted(image_references(objects, node_os).items()):
        if image.startswith(root) and ImageRef.parse(image).digest:
            # Pinned through the stack's mirror lock: the source is the path below the mirror.
            ref = ImageRef.parse(image)
            source = ImageRef.parse(image.removeprefix(root))
            mirrored.append(
                MirroredImage(
                    annotated.get(image, str(replace(source, digest=None))),
                    image,
                    ref.path,
                    ref.digest,
                    tuple(where),
                    mirrored=True,
                    below=image.removeprefix(f"{registry}/"),
                    signed=signed,
                )
            )
            continue
        if image.startswith(f"{registry}/"):
            continue
        ref = ImageRef.parse(image)
        below = f"{MIRROR_PATH}/{ref}"
        repository = "/".join(p for p in (prefix, MIRROR_PATH, ref.host, ref.path) if p)
        mirrored.append(
            MirroredImage(image, f"{registry}/{below}", repository, ref.digest, tuple(where), below=below)
        )
    return mirrored


def mirror_script(
    images: Sequence[MirroredImage], outputs: Mapping[str, Any], stack: str, lock: str
) -> list[str]:
    """The shell lines that copy ``images`` into the deployed ``stack``'s registry, sign each copy by its
    digest with the stack's key, and write the stack's mirror lock to ``lock`` from each copy's ``crane
    digest`` (components/image_mirror.py reads it), every copy marked signed: written whole at the end,
    so a failed copy or signature leaves the previous lock as it was.

    The registry, the signing key and, on AWS, the key the stack's repositories are encrypted with are
    the deployed stack's outputs, read by the script (``pulumi stack output``): a plan runs under Pulumi's
    mocks, whose account, registry name and keys are not the stack's. From the plan (``outputs``) only
    what the stack's configuration says: the cloud and the region. The lock names each copy below the
    registry (``MirroredImage.below``)."""
    cloud = str(outputs["cloud"])
    # Read first, so a machine without the stack's state copies nothing.
    lines = [
        "set -euo pipefail",
        f'REGISTRY="$({_stack_output("registry", stack)})"',
        f'SIGNING_KEY="$({_stack_output("imageSigningKey", stack)})"',
    ]
    # One login for crane and cosign (sign_once reads $REGISTRY_USERNAME and $REGISTRY_PASSWORD).
    login = 'printf %s "$REGISTRY_PASSWORD" | crane auth login "${REGISTRY%%/*}" -u "$REGISTRY_USERNAME"'
    if cloud == "aws":
        region = str(outputs["region"])
        lines += [
            # The images domain's key, which encrypts the stack's own repositories (components/aws/
            # registry.py): the `images` entry of the stack's `kmsKeys` output.
            f'IMAGES_KEY="$({_stack_output("kmsKeys", stack)} --json'
            ' | python3 -c \'import json, sys; print(json.load(sys.stdin)["images"])\')"',
            "REGISTRY_USERNAME=AWS",
            f'REGISTRY_PASSWORD="$(aws ecr get-login-password --region {shlex.quote(region)})"',
            f"{login} --password-stdin",
        ]
        # As the stack's own repositories (components/aws/registry.py): immutable tags, scanned on push,
        # encrypted with the images key; each below the stack's namespace, the registry output's path
        # (`<account>.dkr.ecr.<region>.amazonaws.com/<cluster>`). ECR creates no repository on push.
        for image in images:
            name = f'"${{REGISTRY#*/}}/{_untagged(image.below)}"'
            describe = (
                f"aws ecr describe-repositories --region {shlex.quote(region)} --repository-names {name}"
            )
            create = (
                f"aws ecr create-repository --region {shlex.quote(region)} --repository-name {name}"
                " --image-tag-mutability IMMUTABLE --image-scanning-configuration scanOnPush=true"
                ' --encryption-configuration "encryptionType=KMS,kmsKey=$IMAGES_KEY"'
            )
            lines.append(f"{describe} >/dev/null 2>&1 || {create} >/dev/null")
    elif cloud == "azure":
        # The registry's name: the login server's first label (<name>.azurecr.io).
        token = 'az acr login --name "${REGISTRY%%.*}" --expose-token --output tsv --query accessToken'
        lines += [
            f"REGISTRY_USERNAME={ACR_TOKEN_USER}",
            f'REGISTRY_PASSWORD="$({token})"',
            f"{login} --password-stdin",
        ]
    else:
        raise ValueError(f"cloud {cloud!r}: no registry login known")
    entries = []
    # References hold no `"`, `$`, backquote or backslash (distribution/reference): in double quotes, the
    # shell expands only $REGISTRY and the digests.
    for number, image in enumerate(images, 1):
        copy = f'"$REGISTRY/{image.below}"'
        lines.append(f"crane copy {shlex.quote(image.source)} {copy}")
        # An assignment fails with its command substitution, so `set -e` stops on a failed digest.
        lines.append(f"digest_{number}=$(crane digest {copy})")
        lines.append(f'echo {copy} "$digest_{number}"')
        # By digest, the one `crane digest` printed.
        by_digest = f'"$REGISTRY/{_untagged(image.below)}@$digest_{number}"'
        lines.append(sign_once(by_digest, '"$SIGNING_KEY"'))
        entry = {"mirror": image.below, "digest": f"$digest_{number}", "signed": True}
        entries.append(f"{json.dumps(image.source)}: {json.dumps(entry)}")
    # References hold no `$`, backquote or backslash (distribution/reference), so the unquoted here-document
    # expands only the digests.
    lines += [
        f"cat > {shlex.quote(lock + '.tmp')} <<EOF",
        "{",
        f'  "version": {LOCK_VERSION},',
        '  "images": {',
        *(f"    {entry}" + ("," if n < len(entries) else "") for n, entry in enumerate(entries, 1)),
        "  }",
        "}",
        "EOF",
        shlex.join(["mv", f"{lock}.tmp", lock]),
        shlex.join(["echo", f"wrote {lock}: name it in the stack as {PLATFORM_KEY}.kubernetes.imageLock"]),
    ]
    return lines


def _stack_output(name: str, stack: str) -> str:
    """The command that prints the deployed ``stack``'s output ``name``."""
    return shlex.join(["pulumi", "stack", "output", name, "--stack", stack])


def _untagged(below: str) -> str:
    """``mirror/<host>/<path>`` of ``below``, without its tag or digest."""
    head, _, last = below.partition("@")[0].rpartition("/")
    return f"{head}/{last.partition(':')[0]}"
