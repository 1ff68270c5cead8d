"""Images are resources of the stack (issue 26 part 1, cluster review A5): built from the repository's
Dockerfiles, pushed to the stack's own registry, and their pushed digests are what every workload runs.

The contract judged is pulumi-docker-build 0.0.22's (``Image`` docstrings: ``push`` adds a registry
export, ``registries`` are the credentials, ``ref`` is "a single fully-qualified tag including the build's
digest"); offline the Image is only registered, and the mocks answer what a push reads back.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.azure.registry import ACR_TOKEN_USER
from components.build_context import ignore_file
from components.config import PLATFORM_KEY, ConfigError, parse_stack_config
from components.images import (
    INFERENCE_DOCKERFILE,
    REPO,
    TRAINING_DOCKERFILE,
    content_tag,
    copy_sources,
    ignore_rules,
)
from judges.signatures import judge_signatures
from mlplatform.mocks import _pushed_image
from mlplatform.plan import Plan, PlannedResource
from mlplatform.report import kubernetes_objects
from tests.stack_variants import plan_config, template

IMAGE = "docker-build:index:Image"
PINNED = re.compile(r"^[^@]+:[0-9a-f]{20}@sha256:(?!0{64})[0-9a-f]{64}$")
WORKLOADS = ("kubernetes:batch/v1:Job", "kubernetes:apps/v1:Deployment")


def _images(plan: Plan) -> list[PlannedResource]:
    return [r for r in plan.resources if r.type == IMAGE]


def _target(pod: dict[str, Any]) -> str | None:
    """The Dockerfile target a pod needs, from the fabric devices it asks for (workloads/fabric.py)."""
    limits = pod["containers"][0]["resources"].get("limits", {})
    if "vpc.amazonaws.com/efa" in limits:
        return "efa"
    if "rdma/shared_ib" in limits:
        return "infiniband"
    return "cpu"


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-enterprise-prod", "aws-smb-dev"])
def test_every_workload_runs_the_pushed_ref_of_the_image_built_for_its_fabric(
    planned: Callable[[str], Plan], stack: str
) -> None:
    plan = planned(stack)
    images = _images(plan)
    trainers = {r.inputs["target"]: r for r in images if "/ml-platform/trainer:" in r.inputs["tags"][0]}
    inference = [r for r in images if "/ml-platform/inference:" in r.inputs["tags"][0]]
    assert trainers and len(inference) == 1
    workloads = [
        r
        for r in plan.resources
        if r.type in WORKLOADS and r.inputs["metadata"].get("namespace") in ("ml-training", "ml-inference")
    ]
    assert any(r.type == WORKLOADS[0] for r in workloads) and any(r.type == WORKLOADS[1] for r in workloads)
    for workload in workloads:
        pod = workload.inputs["spec"]["template"]["spec"]
        built = trainers[_target(pod)] if workload.type == WORKLOADS[0] else inference[0]
        image = pod["containers"][0]["image"]
        # The Image resource's `ref` output, as the provider (here the mocks) reads it back after the push.
        assert image == _pushed_image(built.inputs)["ref"], workload.name
        assert PINNED.match(image), image
        assert built.urn in workload.property_dependencies["spec"], "the digest flows from the resource"


def test_an_efa_pool_runs_the_efa_target_and_infiniband_the_infiniband_target(
    planned: Callable[[str], Plan],
) -> None:
    """Cluster review A5: the EFA gate never passes on an image without libfabric and aws-ofi-nccl."""
    for stack, fabric in (("aws-enterprise-prod", "efa"), ("azure-enterprise-prod", "infiniband")):
        plan = planned(stack)
        gate = next(r for r in plan.resources if r.type == WORKLOADS[0] and "fabric-test" in r.name)
        pod = gate.inputs["spec"]["template"]["spec"]
        assert _target(pod) == fabric
        trainer = next(r for r in _images(plan) if r.inputs.get("target") == fabric)
        assert pod["containers"][0]["image"].startswith(trainer.inputs["tags"][0] + "@sha256:")


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-enterprise-prod"])
def test_images_are_pushed_to_the_stacks_registry_with_its_credentials(
    planned: Callable[[str], Plan], stack: str
) -> None:
    plan = planned(stack)
    for image in _images(plan):
        inputs = image.inputs
        assert inputs["push"] is True
        assert inputs["platforms"] == ["linux/amd64"]
        assert inputs["tags"][0].startswith(plan.outputs["registry"] + "/ml-platform/")
        assert inputs["context"] == {"location": "."}
        assert inputs["dockerfile"]["location"] in (
            "workloads/training/Dockerfile",
            "workloads/inference/Dockerfile",
            "workloads/registry/server/Dockerfile",
        )
        assert inputs["buildArgs"]["CODE_VERSION"] == inputs["tags"][0].rsplit(":", 1)[1]
        assert inputs["buildOnPreview"] is False
        assert inputs["cacheTo"] == [{"inline": {}}]
        [registry] = inputs["registries"]
        assert plan.outputs["registry"].startswith(registry["address"])
        # ECR: the user of a GetAuthorizationToken password is always AWS; ACR: the token user.
        assert registry["username"] == ("AWS" if stack.startswith("aws") else ACR_TOKEN_USER)
        assert isinstance(registry["password"], dict), "the registry password stays a secret"


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "azure-enterprise-prod"])
def test_every_build_context_is_narrowed_to_what_its_tag_names(
    planned: Callable[[str], Plan], stack: str
) -> None:
    """AWS review A2 (/work/wt-aws2-REPORT.md): the context is the repository root, so the Dockerfile's own
    ignore file (read before .dockerignore, pulumi-docker-build v0.0.22 context.go getIgnorePatterns) must
    admit exactly what the tag hashes, or a second `pulumi up` pushes a rebuild to an existing tag (ECR
    IMMUTABLE refuses it; on ACR the tag moves). tests/components/test_build_context.py edits the tree."""
    plan = planned(stack)
    for image in _images(plan):
        dockerfile = REPO / image.inputs["dockerfile"]["location"]
        assert image.inputs["context"] == {"location": "."}
        assert ignore_file(dockerfile).read_text() == ignore_rules(dockerfile)
        tag = image.inputs["tags"][0].rsplit(":", 1)[1]
        assert tag == content_tag(dockerfile, image.inputs.get("target")), plan.outputs["registry"]


def test_ecr_creates_a_repository_for_every_built_image(planned: Callable[[str], Plan]) -> None:
    plan = planned("aws-enterprise-prod")
    names = {r.inputs["name"] for r in plan.resources if r.type == "aws:ecr/repository:Repository"}
    pushed = {i.inputs["tags"][0].split("/", 1)[1].rsplit(":", 1)[0] for i in _images(plan)}
    assert pushed <= names


def test_the_tag_names_what_the_build_reads() -> None:
    """Same tree, same tag (no rebuild, no change on the next `pulumi up`); ECR's tags are immutable,
    so a changed tree must be a new tag."""
    assert content_tag(TRAINING_DOCKERFILE, "efa") == content_tag(TRAINING_DOCKERFILE, "efa")
    assert content_tag(TRAINING_DOCKERFILE, "efa") != content_tag(TRAINING_DOCKERFILE, "cpu")
    # Only what the programs load (review aws.md N2; tests/components/test_image_scope.py): no README,
    # no IaC folders.
    copied = set(copy_sources(TRAINING_DOCKERFILE))
    assert {"workloads/training/requirements.txt", "components/handle.py", "workloads/training/train.py"} <= (
        copied
    )
    for dockerfile in (TRAINING_DOCKERFILE, INFERENCE_DOCKERFILE):
        assert not {"README.md", "components/", "mlplatform/"} & set(copy_sources(dockerfile))


def _with(stack: str, **training: object) -> dict[str, Any]:
    config = copy.deepcopy(template(stack))
    config[PLATFORM_KEY]["workloads"]["training"].update(training)
    return config


def _problems(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config, "Pulumi.x.yaml")
    return caught.value.problems


DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_a_placeholder_digest_is_never_deployed() -> None:
    config = _with("aws-enterprise-prod", image="team/trainer@sha256:" + "0" * 64, imageTarget="efa")
    [problem] = _problems(config)
    assert problem.startswith(
        "Pulumi.x.yaml: ml-platform:platform.workloads.training.image: an all-zero placeholder digest"
    )


def test_a_named_image_on_a_fabric_pool_must_be_built_on_that_fabrics_target() -> None:
    for stack, wrong, right in (
        ("aws-enterprise-prod", "cpu", "efa"),
        ("azure-enterprise-prod", "efa", "infiniband"),
    ):
        [problem] = _problems(_with(stack, image=f"team/trainer@{DIGEST}", imageTarget=wrong))
        assert problem.startswith("Pulumi.x.yaml: ml-platform:platform.workloads.training.imageTarget: pool")
        assert f"it runs the {right} target, not {wrong}" in problem
        parse_stack_config(_with(stack, image=f"team/trainer@{DIGEST}", imageTarget=right), "Pulumi.x.yaml")
    # A named image that does not say its target is taken as the cpu target: refused on a fabric pool.
    assert _problems(_with("aws-enterprise-prod", image=f"team/trainer@{DIGEST}"))


def test_a_named_image_gets_its_repository_and_no_build(variant: Callable[..., Plan]) -> None:
    def edit(body: dict[str, Any]) -> None:
        body["workloads"]["training"].update(image=f"team/trainer@{DIGEST}", imageTarget="efa")

    plan = variant("aws-enterprise-prod", edit)
    repos = {r.inputs["name"] for r in plan.resources if r.type == "aws:ecr/repository:Repository"}
    assert any(name.endswith("/team/trainer") for name in repos)
    assert not any(name.endswith("/ml-platform/trainer") for name in repos)


def test_a_named_image_is_signed_with_the_stacks_key_and_verified_at_admission(tmp_path: Path) -> None:
    """The stack vouches for the image it names: signed with its key once per digest, so the admission
    verifier (components/kubernetes/image_verification.py) admits it; nothing built, nothing attested."""
    config = template("aws-smb-dev")
    config[PLATFORM_KEY]["workloads"]["training"].update(image=f"team/trainer@{DIGEST}")
    plan = plan_config(config, tmp_path, "aws-smb-dev")
    [sign] = [
        r for r in plan.resources if r.type == "command:local:Command" and r.name.endswith("-trainer-sign")
    ]
    script = sign.inputs["create"]
    assert script.splitlines()[-1].split(" || ")[1].startswith("cosign sign ")
    assert f"--key {plan.outputs['imageSigningKey']} " in script and script.endswith(
        f"/team/trainer@{DIGEST}"
    )
    assert sign.inputs["triggers"] == [script.rsplit(" ", 1)[-1]], "a new digest signs again"
    assert not [r for r in plan.resources if r.name.endswith("-trainer-cpu-attest")]
    assert judge_signatures(kubernetes_objects(plan)) == []
    # The training Job is created only once its image is signed: the verifier refuses it before.
    [job] = [r for r in plan.resources if r.type == "kubernetes:batch/v1:Job" and "ml-training" in r.name]
    assert sign.urn in job.dependencies
