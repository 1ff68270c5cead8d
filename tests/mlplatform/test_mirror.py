"""The mirror list and the script that copies third-party images into the stack's registry
(mlplatform/mirror.py, ``mlplatform images mirror``; review compliance.md R4).

Rules and their sources:
- distribution/reference (the grammar Docker and containerd read): a first component with ``.`` or ``:``,
  or ``localhost``, is a host; otherwise the host is ``docker.io``, and a one-component name is below
  ``library/``.
- ``crane copy`` keeps the digest (google/go-containerregistry cmd/crane/doc/crane_copy.md), so a source
  named by digest is the mirror's digest.
- ECR creates no repository on push: each mirror repository is created first, like the stack's own
  (immutable tags, scan on push, KMS with the stack's key: components/aws/registry.py).
- Where an image is named besides a container's ``image``: an operator's ``*_IMAGE`` environment
  variable (GPU operator, network operator), prometheus-operator's ``--prometheus-config-reloader`` and
  ``--thanos-default-base-image`` flags, a custom resource's ``spec.image`` (Prometheus, Alertmanager:
  prometheus-operator API reference, "image ... has precedence over baseImage, tag and sha").
- The script writes the mirror lock the program reads (components/image_mirror.py) from ``crane digest``.
- Each copy is signed by that digest with the stack's key as the stack signs its own images
  (components/images.py ``sign_once``: cosign's legacy format, no Rekor upload, once per digest), the key
  the deployed stack outputs (``pulumi stack output imageSigningKey``), before the lock says it is signed.
- The script copies into the deployed stack's registry (``pulumi stack output registry``), ECR
  repositories under the images domain's key (``kmsKeys``), never the plan's: a plan runs under Pulumi's
  mocks (account 123456789012, pulumi/pulumi sdk/python/lib/pulumi/runtime/mocks.py ``MockMonitor``);
  the lock names each copy below the registry (components/image_mirror.py, version 2).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from components.driver_images import NodeOs
from components.image_mirror import ImageRef, read_lock
from components.images import sign_once
from mlplatform.analyzer import PackInfo, StackReport
from mlplatform.check import DEFAULT_PACK
from mlplatform.cli import app
from mlplatform.evidence import write_evidence
from mlplatform.mirror import (
    ACR_TOKEN_USER,
    MirroredImage,
    NodeOsError,
    image_references,
    mirror_list,
    mirror_script,
    plan_node_os,
)
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects, write_document

STACKS = ["aws-smb-dev", "azure-smb-dev"]
LOCK = "stacks/x.images.json"


@pytest.mark.parametrize(
    ("reference", "parts"),
    [
        ("busybox", ("docker.io", "library/busybox", None, None)),
        ("bitnami/kubectl:1.33", ("docker.io", "bitnami/kubectl", "1.33", None)),
        ("localhost/x:1", ("localhost", "x", "1", None)),
        ("registry:5000/team/x", ("registry:5000", "team/x", None, None)),
        (
            "quay.io/prometheus/prometheus:v3.14.0-distroless@sha256:" + "a" * 64,
            ("quay.io", "prometheus/prometheus", "v3.14.0-distroless", "sha256:" + "a" * 64),
        ),
    ],
)
def test_a_reference_is_split_as_the_distribution_grammar_reads_it(
    reference: str, parts: tuple[str, str, str | None, str | None]
) -> None:
    assert ImageRef.parse(reference) == ImageRef(*parts)


def test_an_operator_resource_names_its_images_in_repository_image_version() -> None:
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {
            "driver": {"repository": "nvcr.io/nvidia", "image": "driver", "version": "595.91.07"},
            "toolkit": {
                "repository": "nvcr.io/nvidia/k8s",
                "image": "container-toolkit",
                "version": "sha256:" + "b" * 64,
            },
        },
    }
    nic = {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
        "spec": {
            "ofedDriver": {"repository": "nvcr.io/nvidia/mellanox", "image": "doca-driver", "version": "d1"}
        },
    }
    # The drivers as the operators pull them: gpu-operator resolveDriverTag appends -<ID><VERSION_ID>,
    # network-operator getMofedDriverImageName -<os><version>-<arch> (components/driver_images.py).
    assert image_references([policy, nic], NodeOs("ubuntu", "24.04", "amd64")) == {
        "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04": ["ClusterPolicy cluster-policy"],
        "nvcr.io/nvidia/k8s/container-toolkit@sha256:" + "b" * 64: ["ClusterPolicy cluster-policy"],
        "nvcr.io/nvidia/mellanox/doca-driver:d1-ubuntu24.04-amd64": ["NicClusterPolicy nic-cluster-policy"],
    }
    # Without the nodes' OS no tag can be named; a driver switched off (EKS: the node image has it) is
    # pulled by no one, so not mirrored.
    with pytest.raises(NodeOsError, match=r"nvcr\.io/nvidia/driver:595\.91\.07: its operator adds"):
        image_references([policy], None)
    policy["spec"]["driver"]["enabled"] = False  # type: ignore[index]
    assert image_references([policy], None) == {
        "nvcr.io/nvidia/k8s/container-toolkit@sha256:" + "b" * 64: ["ClusterPolicy cluster-policy"]
    }


def test_an_operators_image_variables_flags_and_custom_resource_images_are_listed() -> None:
    operator = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "op", "namespace": "monitoring"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "op",
                            "image": "quay.io/prometheus-operator/prometheus-operator:v0.93.1",
                            "args": [
                                "--prometheus-config-reloader=quay.io/p/config-reloader:v0.93.1",
                                "--thanos-default-base-image=quay.io/thanos/thanos:v0.42.4",
                                "--log-level=info",
                            ],
                            "env": [
                                {"name": "VALIDATOR_IMAGE", "value": "nvcr.io/nvidia/gpu-operator:v26.7.0"},
                                {"name": "WATCH_NAMESPACE", "value": "quay.io/not/an-image:1"},
                            ],
                        }
                    ]
                }
            }
        },
    }
    prometheus = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "p", "namespace": "monitoring"},
        "spec": {"image": "quay.io/prometheus/prometheus:v3.14.0-distroless", "version": "v3.14.0"},
    }
    assert sorted(image_references([operator, prometheus], None)) == [
        "nvcr.io/nvidia/gpu-operator:v26.7.0",
        "quay.io/p/config-reloader:v0.93.1",
        "quay.io/prometheus-operator/prometheus-operator:v0.93.1",
        "quay.io/prometheus/prometheus:v3.14.0-distroless",
        "quay.io/thanos/thanos:v0.42.4",
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_every_image_from_outside_the_registry_is_listed_with_its_place_below_it(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    plan = planned(stack)
    registry = str(plan.outputs["registry"])
    node_os = plan_node_os(plan.outputs)
    named = image_references(kubernetes_objects(plan), node_os)
    mirrored = {m.source: m for m in mirror_list(kubernetes_objects(plan), registry, node_os)}
    outside = {image for image in named if not image.startswith(f"{registry}/")}
    assert outside and set(mirrored) == outside
    for source, image in mirrored.items():
        ref = ImageRef.parse(source)
        assert image.mirror.startswith(f"{registry}/mirror/{ref.host}/{ref.path}")
        assert image.mirror.endswith(f":{ref.tag}" if ref.digest is None else f"@{ref.digest}")
        assert image.objects == tuple(named[source])


def _script(
    stack: str, planned: Callable[[str], Plan], lock: str = LOCK
) -> tuple[list[MirroredImage], list[str]]:
    plan = planned(stack)
    images = mirror_list(kubernetes_objects(plan), str(plan.outputs["registry"]), plan_node_os(plan.outputs))
    return images, mirror_script(images, plan.outputs, stack, lock)


@pytest.mark.parametrize("stack", STACKS)
def test_the_script_logs_in_to_the_deployed_registry_then_copies_every_image_and_prints_its_digest(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    images, lines = _script(stack, planned)
    assert lines[:3] == [
        "set -euo pipefail",
        f'REGISTRY="$(pulumi stack output registry --stack {stack})"',
        f'SIGNING_KEY="$(pulumi stack output imageSigningKey --stack {stack})"',
    ]
    login = 'printf %s "$REGISTRY_PASSWORD" | crane auth login "${REGISTRY%%/*}" -u "$REGISTRY_USERNAME"'
    assert f"{login} --password-stdin" in lines
    for image in images:
        assert f'crane copy {image.source} "$REGISTRY/{image.below}"' in lines
        assert f'=$(crane digest "$REGISTRY/{image.below}")' in "\n".join(lines)
        assert image.mirror == f"{planned(stack).outputs['registry']}/{image.below}"
    # Nothing of the plan's registry: its host names the mocks' account (AWS) or a mock name (Azure).
    host = str(planned(stack).outputs["registry"]).partition("/")[0]
    assert not [line for line in lines if host in line]
    if stack.startswith("aws"):
        creates = [line for line in lines if "aws ecr create-repository" in line]
        assert len(creates) == len(images)
        for line, image in zip(creates, images, strict=True):
            untagged = ImageRef.parse(image.source).repository
            assert f'--repository-name "${{REGISTRY#*/}}/mirror/{untagged}" ' in line
            assert "--image-tag-mutability IMMUTABLE" in line and "kmsKey=$IMAGES_KEY" in line
        # Each repository exists before the copy into it.
        assert max(lines.index(c) for c in creates) < min(
            i for i, x in enumerate(lines) if x.startswith("crane copy")
        )
    else:
        assert any('az acr login --name "${REGISTRY%%.*}"' in line for line in lines)
        assert not any("aws " in line for line in lines)


@pytest.mark.parametrize("stack", STACKS)
def test_each_copy_is_signed_by_its_digest_as_the_stack_signs_its_own_images(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    """The same command as the stack's own images' (one function), with the key the stack outputs and
    the digest `crane digest` printed; after the copy, before the lock is written."""
    images, lines = _script(stack, planned)
    signs = [line for line in lines if line.startswith("cosign verify ")]
    assert len(signs) == len(images)
    lock_written = next(i for i, line in enumerate(lines) if line.startswith("cat > "))
    for number, (image, line) in enumerate(zip(images, signs, strict=True), 1):
        untagged = ImageRef.parse(image.source).repository
        by_digest = f'"$REGISTRY/mirror/{untagged}@$digest_{number}"'
        assert line == sign_once(by_digest, '"$SIGNING_KEY"')
        verify, sign = line.split(" || ")
        assert verify.startswith('cosign verify --key "$SIGNING_KEY" ')
        assert verify.endswith(f" {by_digest} > /dev/null 2>&1"), "signs only where no signature verifies"
        assert sign.startswith('cosign sign --yes --tlog-upload=false --key "$SIGNING_KEY" ')
        assert "--new-bundle-format=false" in sign and sign.endswith(f" {by_digest}")
        digest = next(i for i, x in enumerate(lines) if x.startswith(f"digest_{number}=$(crane digest "))
        assert digest < lines.index(line) < lock_written


# Stand-ins for crane, cosign, Pulumi and the clouds' CLIs (no registry here): `crane auth` reads the
# password from stdin and records the host it logs in to, `crane copy` succeeds, `crane digest` prints a
# digest of its argument (or fails, ``digests=False``); `cosign sign` records its last argument (the
# image) in signed.txt with the key and login it was given (or fails, ``signs=False``), and `cosign
# verify` succeeds for an image recorded there; `pulumi stack output` prints the deployed stack's
# outputs; `aws` records its calls and finds no repository.
_CRANE = """echo "$@" >> crane.log
if [ "$1" = auth ]; then cat >/dev/null; fi
if [ "$1" = digest ]; then {digest}; fi"""
_DIGEST = 'printf "sha256:%s\\n" "$(printf %s "$2" | sha256sum | cut -c1-64)"'
_COSIGN = """for last; do :; done
if [ "$1" = verify ]; then grep -qx "$last" signed.txt 2>/dev/null; exit $?; fi
{sign}
echo "$@" >> signed.log; echo "$last" >> signed.txt"""
_PULUMI = """case "$3" in
registry) echo {registry};;
imageSigningKey) echo {key};;
kmsKeys) echo '{{"images": "{images_key}", "object-data": "arn:aws:kms:me-central-1:111122223333:key/o"}}';;
*) exit 1;;
esac"""
_AWS = """echo "$@" >> aws.log
case "$2" in get-login-password) echo ecr-token;; describe-repositories) exit 254;; esac"""
DEPLOYED_KEY = "awskms:///arn:aws:kms:me-central-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
DEPLOYED_IMAGES_KEY = "arn:aws:kms:me-central-1:111122223333:key/images"


def _deployed_registry(plan: Plan) -> str:
    """The registry the deployed stack outputs: its real account (AWS) or registry name (Azure)."""
    if plan.outputs["cloud"] == "aws":
        return (
            "111122223333.dkr.ecr.me-central-1.amazonaws.com/" + str(plan.outputs["registry"]).split("/")[1]
        )
    return "mlpdeployed.azurecr.io"


def _run_script(
    lines: list[str],
    tmp_path: Path,
    registry: str,
    *,
    digests: bool = True,
    signs: bool = True,
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    crane = _CRANE.format(digest=_DIGEST if digests else "exit 1")
    cosign = _COSIGN.format(sign="" if signs else "exit 1")
    stand_ins = {
        "crane": crane,
        "cosign": cosign,
        "pulumi": _PULUMI.format(registry=registry, key=DEPLOYED_KEY, images_key=DEPLOYED_IMAGES_KEY),
        "aws": _AWS,
        "az": 'echo "$@" >> az.log; echo token',
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "stacks").mkdir(exist_ok=True)
    script = tmp_path / "mirror.sh"
    script.write_text("\n".join(lines) + "\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    return subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("sha256sum") is None, reason="runs bash")
@pytest.mark.parametrize("stack", STACKS)
def test_the_script_writes_the_lock_the_program_reads(
    stack: str, planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    images, lines = _script(stack, planned)
    registry = _deployed_registry(planned(stack))
    done = _run_script(lines, tmp_path, registry)
    assert done.returncode == 0, done.stderr
    lock = read_lock(tmp_path / LOCK, LOCK)
    assert set(lock.images) == {image.source for image in images}
    signed = (tmp_path / "signed.txt").read_text().splitlines()
    for image in images:
        mirror, digest = lock.images[image.source]
        # Below the registry in the lock; copied into, printed and signed in the deployed stack's.
        assert mirror == image.below and f"{registry}/{image.below} {digest}" in done.stdout.splitlines()
        assert f"{ImageRef.parse(f'{registry}/{mirror}').repository}@{digest}" in signed
        assert f"copy {image.source} {registry}/{image.below}" in (tmp_path / "crane.log").read_text()
    assert lock.signed and len(signed) == len(images)
    assert lock.under(registry).pin(images[0].source).startswith(f"{registry}/mirror/")
    # With the deployed stack's key and the registry login crane was given.
    user = "AWS" if stack.startswith("aws") else ACR_TOKEN_USER
    password = "ecr-token" if stack.startswith("aws") else "token"
    for call in (tmp_path / "signed.log").read_text().splitlines():
        assert f"--key {DEPLOYED_KEY} " in call
        assert f"--registry-username {user} --registry-password {password} " in call
    assert f"auth login {registry.partition('/')[0]} -u {user} --password-stdin" in (
        (tmp_path / "crane.log").read_text().splitlines()
    )
    if stack.startswith("aws"):
        # Each mirror repository under the stack's namespace in the deployed account, with the images key.
        creates = [c for c in (tmp_path / "aws.log").read_text().splitlines() if c.startswith("ecr create")]
        namespace = registry.split("/")[1]
        assert [c.split("--repository-name ")[1].split(" ")[0] for c in creates] == [
            f"{namespace}/mirror/{ImageRef.parse(i.source).repository}" for i in images
        ]
        assert all(f"encryptionType=KMS,kmsKey={DEPLOYED_IMAGES_KEY}" in c for c in creates)
    else:
        assert (tmp_path / "az.log").read_text().startswith("acr login --name mlpdeployed --expose-token")
    assert not (tmp_path / f"{LOCK}.tmp").exists()
    # Run again (a chart bump's new image, say): each copy already verifies with the key, none is signed
    # a second time (the `.sig` tag is immutable in ECR).
    assert _run_script(lines, tmp_path, registry).returncode == 0
    assert (tmp_path / "signed.txt").read_text().splitlines() == signed


# What AKS runs and the operators pull on azure-enterprise-prod's GPU pool (Kubernetes 1.35, osSku
# Ubuntu, Standard_ND96isr_H100_v5): Ubuntu 24.04, the default for 1.35+ (learn.microsoft.com/azure/aks/
# upgrade-os-version, "Supported OS versions"), on x86-64 (amd64).
AZURE_DRIVERS = [
    "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04",
    "nvcr.io/nvidia/mellanox/doca-driver:doca3.4.1-26.04-1.1.0.0-1-ubuntu24.04-amd64",
]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("sha256sum") is None, reason="runs bash")
def test_the_script_copies_the_driver_tags_the_operators_pull_on_the_stacks_gpu_nodes(
    planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    images, lines = _script("azure-enterprise-prod", planned)
    assert planned("azure-enterprise-prod").outputs["gpuNodeOs"] == {
        "id": "ubuntu",
        "version": "24.04",
        "arch": "amd64",
    }
    sources = {image.source for image in images}
    assert set(AZURE_DRIVERS) <= sources
    assert not {s for s in sources if s.endswith((":595.91.07", ":doca3.4.1-26.04-1.1.0.0-1"))}
    done = _run_script(lines, tmp_path, _deployed_registry(planned("azure-enterprise-prod")))
    assert done.returncode == 0, done.stderr
    lock = read_lock(tmp_path / LOCK, LOCK)
    for driver in AZURE_DRIVERS:
        [copy] = [line for line in lines if line.startswith(f"crane copy {driver} ")]
        mirror, _ = lock.images[driver]
        assert copy == f'crane copy {driver} "$REGISTRY/{mirror}"' and mirror == f"mirror/{driver}"


def test_an_os_sku_the_drivers_have_no_tag_for_is_one_line_and_exit_2(tmp_path: Path) -> None:
    document = yaml.safe_load(Path("stacks/Pulumi.azure-enterprise-prod.yaml").read_text())
    document["config"]["ml-platform:platform"]["azure"]["osSku"] = "AzureLinux"
    stack_file = tmp_path / "Pulumi.azure-enterprise-prod.yaml"
    stack_file.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(app, ["images", "mirror", "--stack-file", str(stack_file)])
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith(
        f"error: {stack_file.name}: ml-platform:platform.azure.osSku: Input should be 'Ubuntu'"
    )
    assert result.stdout == ""


def test_a_plan_file_without_the_gpu_nodes_os_is_one_line_and_exit_2(
    planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    """A plan written before the plan exported ``gpuNodeOs``: no driver tag can be named."""
    document = planned("azure-smb-dev").to_dict()
    del document["outputs"]["gpuNodeOs"]
    plan_file = tmp_path / "plan.json"
    write_document(plan_file, document)
    result = CliRunner().invoke(app, ["images", "mirror", "--plan", str(plan_file)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: stack azure-smb-dev: nvcr.io/nvidia/driver:595.91.07: its operator adds the GPU nodes' OS"
        " to the tag; the plan exports no gpuNodeOs; plan it again with this version of mlplatform"
    ]


@pytest.mark.skipif(shutil.which("bash") is None, reason="runs bash")
def test_a_failed_digest_stops_the_script_and_leaves_the_lock_as_it_was(
    planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    _, lines = _script("aws-smb-dev", planned)
    (tmp_path / "stacks").mkdir()
    (tmp_path / LOCK).write_text("previous")
    registry = _deployed_registry(planned("aws-smb-dev"))
    assert _run_script(lines, tmp_path, registry, digests=False).returncode != 0
    assert (tmp_path / LOCK).read_text() == "previous"


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("sha256sum") is None, reason="runs bash")
def test_a_failed_signature_stops_the_script_and_leaves_the_lock_as_it_was(
    planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    """A deployer without the right to sign with the key (kms:Sign): no lock says a copy is signed."""
    _, lines = _script("azure-smb-dev", planned)
    (tmp_path / "stacks").mkdir()
    (tmp_path / LOCK).write_text("previous")
    done = _run_script(lines, tmp_path, _deployed_registry(planned("azure-smb-dev")), signs=False)
    assert done.returncode != 0
    assert (tmp_path / LOCK).read_text() == "previous"
    assert len([line for line in done.stdout.splitlines() if " sha256:" in line]) == 1, "stops at the first"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash parses the script")
@pytest.mark.parametrize("stack", STACKS)
def test_the_script_is_bash(stack: str, planned: Callable[[str], Plan], tmp_path: Path) -> None:
    _, lines = _script(stack, planned)
    script = tmp_path / "mirror.sh"
    script.write_text("\n".join(lines) + "\n")
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_cli_prints_the_script_and_writes_the_list(
    planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    plan_file, list_file = tmp_path / "plan.json", tmp_path / "mirror.json"
    write_document(plan_file, planned("aws-smb-dev").to_dict())
    result = CliRunner().invoke(app, ["images", "mirror", "--plan", str(plan_file), "--json", str(list_file)])
    # The lock goes beside the stack's file by default.
    images, lines = _script("aws-smb-dev", planned, "stacks/aws-smb-dev.images.json")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == lines
    assert json.loads(list_file.read_text()) == [i.as_dict() for i in images]
    elsewhere = CliRunner().invoke(app, ["images", "mirror", "--plan", str(plan_file), "--lock", LOCK])
    assert elsewhere.stdout.splitlines() == _script("aws-smb-dev", planned)[1]


def test_a_plan_without_a_registry_is_one_line_and_exit_2(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    write_document(plan_file, Plan("p", "s", [], {"cloud": "aws"}).to_dict())
    result = CliRunner().invoke(app, ["images", "mirror", "--plan", str(plan_file)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: stack s: the plan exports no registry, so no registry to mirror to"
    ]


def test_the_evidence_keeps_the_mirror_list(planned: Callable[[str], Plan], tmp_path: Path) -> None:
    images, _ = _script("aws-smb-dev", planned)
    report = StackReport("aws-smb-dev", "ml-platform", "aws-smb-dev", None, 1, (), mirrored=tuple(images))
    pack = PackInfo("pack", "1.0", "", DEFAULT_PACK, ())
    written = write_evidence(tmp_path, pack, [report], {}, frozenset())
    assert "results/aws-smb-dev/mirrored-images.json" in written
    kept = json.loads((tmp_path / "results/aws-smb-dev/mirrored-images.json").read_text())
    assert kept == [i.as_dict() for i in images] and kept


def test_a_plan_file_and_a_stack_together_are_one_line_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["images", "mirror", "aws-smb-dev", "--plan", str(tmp_path / "p.json")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --plan reads a plan file; name no stack, --stack-file or --program with it"
    ]
