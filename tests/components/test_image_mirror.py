"""A stack with a mirror lock runs every third-party image from its own registry by digest
(components/image_mirror.py, components/kubernetes/chart_images.py; issue 36 item 2, review compliance.md
R4).

The locks here are FIXTURES: each is made from the stack's own mirror list (what `mlplatform images
mirror` copies) with a synthetic digest per image, ``sha256:`` + the SHA-256 of the source's name, since
no registry is reachable. A real lock holds what ``crane digest`` printed for each copy, and (version 2)
that the script signed it with the stack's key; a version 1 lock is one written before the script signed.

Rules and their sources:
- OCI image-spec, descriptor ``digest``: ``sha256:`` and 64 lowercase hex digits.
- distribution/reference: ``name:tag@digest`` is one reference, resolved by its digest.
- The image ValidatingAdmissionPolicy denies, in a ``deny`` or ``mirror`` namespace, any image not below
  the stack's registry by digest (components/kubernetes/image_admission.py).
- policy-controller 0.10.6 (app v0.13.1) verifies pods in the namespaces its fail-closed webhook selects
  (chart templates/_helpers.tpl ``policy.sigstore.dev/include``), against every ClusterImagePolicy whose
  glob matches (``pkg/apis/glob/glob.go``); it must not select its own namespace (its running webhook
  guards pod creation: cmd/webhook/main.go ``types``; components/kubernetes/image_verification.py).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from components.config import PLATFORM_KEY
from components.image_mirror import DIGEST, ImageRef, LockError, MirrorLock, read_lock
from components.kubernetes.image_admission import LABEL, POLICY
from components.kubernetes.image_verification import INCLUDE_LABEL
from components.kubernetes.image_verification import NAMESPACE as VERIFIER_NAMESPACE
from components.kubernetes.image_verification import POLICY as VERIFIER_POLICY
from judges import Subject
from judges.cel import judge_cel
from judges.kube import namespace_labels, pods
from judges.signatures import POLICY as SIGNATURE_POLICY
from judges.signatures import POLICY_SELF as VERIFIER_SELF_POLICY
from judges.signatures import glob_pattern, judge_signatures
from mlplatform.cli import app
from mlplatform.graph import HELM_RELEASE
from mlplatform.judging import judge_plan
from mlplatform.mirror import image_references, mirror_list, plan_lock_signed, plan_node_os
from mlplatform.plan import Plan, resolve_target, run_plan
from mlplatform.report import kubernetes_objects
from tests.stack_variants import as_written

STACKS = ["aws-enterprise-prod", "azure-enterprise-prod"]
PINNED = re.compile(r"@sha256:[0-9a-f]{64}$")


def _fixture_lock(plan: Plan, signed: bool = True) -> dict[str, Any]:
    """A lock for every image the stack's plan names from outside its registry (synthetic digests): the
    script's, each copy signed (version 2), or (``signed=False``) one written before it signed (version 1)."""
    images = mirror_list(kubernetes_objects(plan), str(plan.outputs["registry"]), plan_node_os(plan.outputs))
    digests = {
        image.source: "sha256:" + hashlib.sha256(image.source.encode()).hexdigest() for image in images
    }
    if not signed:
        # Version 1 named each copy by its whole reference.
        entries = {i.source: {"mirror": i.mirror, "digest": digests[i.source]} for i in images}
        return {"version": 1, "images": entries}
    # Version 2: below the registry, as the script writes it.
    return {
        "version": 2,
        "images": {
            i.source: {"mirror": i.below, "digest": digests[i.source], "signed": True} for i in images
        },
    }


def _locked_stack_file(stack: str, lock: dict[str, Any], directory: Path) -> Path:
    """The shipped template, naming ``lock`` (written beside it) as its ``kubernetes.imageLock``."""
    lock_file = directory / f"{stack}.images.json"
    lock_file.write_text(json.dumps(lock, indent=2))
    document = yaml.safe_load(resolve_target(stack).stack_file.read_text())
    document["config"][PLATFORM_KEY].setdefault("kubernetes", {})["imageLock"] = str(lock_file)
    path = directory / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def locked(
    planned: Callable[[str], Plan], tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., tuple[Plan, MirrorLock]]:
    """``locked(stack)`` → the plan of the shipped template with a fixture lock (``signed=False``: a
    version 1 lock), and the lock."""
    cache: dict[tuple[str, bool], tuple[Plan, MirrorLock]] = {}

    def plan(stack: str, signed: bool = True) -> tuple[Plan, MirrorLock]:
        if (stack, signed) not in cache:
            directory = tmp_path_factory.mktemp(stack)
            path = _locked_stack_file(stack, _fixture_lock(planned(stack), signed), directory)
            plan = run_plan(resolve_target(stack_file=path))
            # Rooted at the registry the plan renders with, as the program roots it.
            lock_file = directory / f"{stack}.images.json"
            lock = read_lock(lock_file, str(lock_file)).under(str(plan.outputs["registry"]))
            cache[stack, signed] = (plan, lock)
        return cache[stack, signed]

    return plan


def _repository_digest(reference: str) -> tuple[str, str | None]:
    ref = ImageRef.parse(reference)
    return ref.repository, ref.digest


@pytest.mark.parametrize("stack", STACKS)
def test_every_rendered_image_is_the_stacks_registry_by_digest_and_each_third_party_one_its_mirror(
    stack: str, locked: Callable[..., tuple[Plan, MirrorLock]]
) -> None:
    plan, lock = locked(stack)
    registry = str(plan.outputs["registry"])
    named = image_references(kubernetes_objects(plan), plan_node_os(plan.outputs))
    assert [i for i in named if not (i.startswith(f"{registry}/") and PINNED.search(i))] == []
    # Every lock entry is used, and nothing third-party is named but through the lock: the same repository
    # and digest (the DOCA driver by digest alone, as the network operator takes it: chart_images.split).
    third_party = {_repository_digest(i) for i in named if "/mirror/" in i}
    assert third_party == {_repository_digest(lock.pin(source)) for source in lock.images}


@pytest.mark.parametrize("stack", STACKS)
def test_the_operator_namespaces_deny_and_are_held_to_the_stacks_key_and_the_judges_pass(
    stack: str, planned: Callable[[str], Plan], locked: Callable[..., tuple[Plan, MirrorLock]]
) -> None:
    """Every copy signed (the lock says so): each operator namespace is verified as the workload ones are,
    but the verifier's own (cosign-system), which stays denied off the mirror by the `mirror` binding."""
    plan, lock = locked(stack)
    assert lock.signed
    objects = kubernetes_objects(plan)
    found = namespace_labels(objects)
    labels = {name: found.get(LABEL) for name, found in found.items() if LABEL in found}
    operators = {"gpu-operator", "monitoring", "kueue-system"}
    assert "warn" not in labels.values()
    assert {n for n, v in labels.items() if v == "mirror"} == {VERIFIER_NAMESPACE}
    assert operators <= {n for n, v in labels.items() if v == "deny"}
    verified = {n for n, f in found.items() if f.get(INCLUDE_LABEL) == "true"}
    assert operators <= verified and VERIFIER_NAMESPACE not in verified
    [binding] = [o for o in objects if o["metadata"]["name"] == f"{POLICY}-mirror"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    # The stack's ClusterImagePolicy covers the mirror's path: every copy an operator namespace runs is
    # checked against the stack's key.
    [policy] = [o for o in objects if o["kind"] == "ClusterImagePolicy"]
    [glob] = [glob_pattern(g["glob"]) for g in policy["spec"]["images"]]
    mirrored = {str(c["image"]) for p in pods(objects) if p.namespace in operators for c in p.containers()}
    assert mirrored and all("/mirror/" in i and glob.match(i) for i in mirrored)
    # Day 2 too: adopting the lock on the running stack (the plan without it) changes nothing immutable.
    # The lock moves no workload's command: the exit-code judge (it runs torchrun) is left to
    # tests/judges/test_stacks.py.
    violations = judge_plan(plan, skip=frozenset({"exit-codes"}), previous=planned(stack))
    assert [str(v) for v in violations if v.enforcement == "mandatory"] == []
    assert [v.message for v in violations if v.policy == "admission-policy-cel"] == []


@pytest.mark.parametrize("stack", STACKS)
def test_the_evidence_list_marks_each_image_mirrored_with_the_locks_digest(
    stack: str, locked: Callable[..., tuple[Plan, MirrorLock]]
) -> None:
    plan, lock = locked(stack)
    # The lock's signed state is the plan's too (output imageLock), so the evidence (mlplatform/check.py)
    # marks each copy signed.
    assert plan.outputs["imageLock"] == {"path": lock.path, "signed": True}
    listed = mirror_list(
        kubernetes_objects(plan),
        str(plan.outputs["registry"]),
        plan_node_os(plan.outputs),
        signed=plan_lock_signed(plan.outputs),
    )
    assert listed and all(image.mirrored and image.as_dict()["signed"] for image in listed)
    digests = {digest for _, digest in lock.images.values()}
    assert {image.digest for image in listed} == digests
    # Each driver by the tag its operator pulls, as the lock has it, the DOCA driver's (pinned by bare
    # digest) from its NicClusterPolicy's annotation.
    drivers = {source for source in lock.images if ImageRef.parse(source).path.endswith("driver")}
    assert drivers <= {image.source for image in listed}
    if stack.startswith("azure"):
        assert {ImageRef.parse(s).tag for s in drivers} == {
            "595.91.07-ubuntu24.04",
            "doca3.4.1-26.04-1.1.0.0-1-ubuntu24.04-amd64",
        }


def test_the_release_values_name_the_mirror_so_pulumi_up_installs_what_the_plan_shows(
    locked: Callable[..., tuple[Plan, MirrorLock]],
) -> None:
    """The charts' images come from the values the Release resource carries, not from a rewrite of the
    rendered objects: the values hold the digest of every image but the NicClusterPolicy's (an object
    of the program's own)."""
    plan, lock = locked("aws-enterprise-prod")
    values = json.dumps([r.inputs.get("values") for r in plan.resources if r.type == HELM_RELEASE])
    for _, digest in lock.images.values():
        assert digest.removeprefix("sha256:") in values


def _plan_refused(stack_file: Path, output: Path) -> list[str]:
    """``mlplatform plan --stack-file STACK_FILE -q --json OUTPUT``, refused: what it printed, by line."""
    result = CliRunner().invoke(app, ["plan", "--stack-file", str(stack_file), "-q", "--json", str(output)])
    assert result.exit_code == 2, result.output
    return result.output.strip().splitlines()


def test_a_lock_missing_an_image_the_stack_renders_is_one_line_and_exit_2(
    planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    lock = _fixture_lock(planned("aws-smb-dev"))
    missing = sorted(lock["images"])[0]
    del lock["images"][missing]
    lines = _plan_refused(_locked_stack_file("aws-smb-dev", lock, tmp_path), tmp_path / "plan.json")
    assert len(lines) == 1 and lines[0].startswith(f"error: image {missing} is not in the mirror lock ")
    assert str(tmp_path / "aws-smb-dev.images.json") in lines[0]
    assert not (tmp_path / "plan.json").exists()


def test_the_same_lock_twice_plans_the_same_objects(locked: Callable[..., tuple[Plan, MirrorLock]]) -> None:
    """Day 2: a second `pulumi up` with the lock unchanged is a no-op."""
    first, lock = locked("aws-smb-dev")
    second = run_plan(resolve_target(stack_file=Path(lock.path).with_name("Pulumi.aws-smb-dev.yaml")))
    # Each as `mlplatform plan --json` writes it: the engine registers concurrently.
    first, second = as_written(first), as_written(second)
    assert [(r.urn, r.inputs) for r in first.resources] == [(r.urn, r.inputs) for r in second.resources]


def test_a_digest_that_is_not_sha256_and_64_hex_is_one_line_at_config(tmp_path: Path) -> None:
    source = "registry.k8s.io/kueue/kueue:v0.19.2"
    lock = {"version": 1, "images": {source: {"mirror": "r.example/mirror/x:1", "digest": "sha256:abc"}}}
    lines = _plan_refused(_locked_stack_file("aws-smb-dev", lock, tmp_path), tmp_path / "plan.json")
    assert len(lines) == 1
    assert f"{PLATFORM_KEY}.kubernetes.imageLock: mirror lock " in lines[0]
    assert f"images[{source!r}].digest: 'sha256:abc' is not sha256: and 64 lowercase hex" in lines[0]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not JSON"),
        ('{"images": {}}', '"version": 2'),
        ('{"version": 1, "images": []}', "images: expected a mapping"),
        ('{"version": 1, "images": {"a:1": {"digest": "sha256:' + "0" * 64 + '"}}}', "mirror: expected"),
        (
            '{"version": 1, "images": {"a:1": {"mirror": "m:1", "digest": "SHA256:' + "0" * 64 + '"}}}',
            "digest",
        ),
    ],
)
def test_a_lock_that_cannot_be_used_is_one_line_naming_the_file(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "lock.json"
    path.write_text(text)
    with pytest.raises(LockError) as error:
        read_lock(path, "stacks/s.images.json")
    assert str(error.value).startswith("mirror lock stacks/s.images.json: ")
    assert says in str(error.value) and "\n" not in str(error.value)


def test_a_pinned_reference_is_the_mirror_with_its_tag_and_the_locks_digest() -> None:
    digest = "sha256:" + "ab" * 32
    lock = MirrorLock(
        "lock",
        {
            "quay.io/prometheus/prometheus:v3.14.0": (
                "r.example/s/mirror/quay.io/prometheus/prometheus:v3.14.0",
                digest,
            ),
            # A source named by digest: its mirror is too, and the lock's digest is the one pinned.
            "ghcr.io/x/y@sha256:" + "0" * 64: ("r.example/s/mirror/ghcr.io/x/y@sha256:" + "0" * 64, digest),
        },
    )
    assert lock.pin("quay.io/prometheus/prometheus:v3.14.0") == (
        f"r.example/s/mirror/quay.io/prometheus/prometheus:v3.14.0@{digest}"
    )
    assert lock.pin("ghcr.io/x/y@sha256:" + "0" * 64) == f"r.example/s/mirror/ghcr.io/x/y@{digest}"
    assert DIGEST.fullmatch(digest)
    with pytest.raises(LockError, match=r"^image quay.io/other:1 is not in the mirror lock lock: "):
        lock.pin("quay.io/other:1")


def test_images_mirror_on_a_locked_stack_lists_every_upstream_image(
    planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    """The list is what the stack renders upstream, so a chart bump's new images are in it: a stack that
    names a lock is planned without it."""
    upstream = planned("aws-smb-dev")
    stack_file = _locked_stack_file("aws-smb-dev", _fixture_lock(upstream), tmp_path)
    listed = tmp_path / "list.json"
    result = CliRunner().invoke(
        app, ["images", "mirror", "--stack-file", str(stack_file), "--json", str(listed)]
    )
    assert result.exit_code == 0, result.output
    expected = mirror_list(
        kubernetes_objects(upstream), str(upstream.outputs["registry"]), plan_node_os(upstream.outputs)
    )
    assert json.loads(listed.read_text()) == [image.as_dict() for image in expected] and expected


@pytest.mark.parametrize("stack", STACKS)
def test_without_a_lock_the_shipped_stack_names_its_upstream_images_and_warns(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    plan = planned(stack)
    objects = kubernetes_objects(plan)
    listed = mirror_list(objects, str(plan.outputs["registry"]), plan_node_os(plan.outputs))
    assert listed and not any(image.mirrored for image in listed)
    labels = {name: found.get(LABEL) for name, found in namespace_labels(objects).items() if LABEL in found}
    assert labels["gpu-operator"] == labels["monitoring"] == "warn"
    assert "mirror" not in labels.values()
    assert not [o for o in objects if o["metadata"]["name"] == f"{POLICY}-mirror"]


def test_images_mirror_refuses_a_plan_that_names_the_mirror_already(
    locked: Callable[..., tuple[Plan, MirrorLock]], tmp_path: Path
) -> None:
    """A script from it would write a lock without the images already mirrored."""
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(locked("aws-enterprise-prod")[0].to_dict()))
    result = CliRunner().invoke(app, ["images", "mirror", "--plan", str(plan_file)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {plan_file}: the plan names images from the stack's mirror (its stack has a mirror lock);"
        " give the stack instead, which is planned without its lock"
    ]


@pytest.mark.parametrize(
    "image",
    [
        "quay.io/prometheus-operator/prometheus-operator:v0.93.1",  # upstream again, by tag
        # From another registry, by digest.
        "other.example/mirror/quay.io/prometheus-operator/prometheus-operator@sha256:" + "1" * 64,
    ],
)
def test_a_planted_operator_pod_off_the_mirror_is_refused_in_a_mirror_namespace(
    image: str, locked: Callable[..., tuple[Plan, MirrorLock]]
) -> None:
    """The `mirror` binding denies: the CEL judge, as the API server, refuses the operator's Deployment."""
    objects = copy.deepcopy(kubernetes_objects(locked("aws-enterprise-prod")[0]))
    [operator] = [
        o
        for o in objects
        if (o["kind"], o["metadata"]["name"]) == ("Deployment", "kube-prometheus-stack-operator")
    ]
    assert not [f for f in judge_cel(objects) if f.subject == Subject.of(operator)]
    operator["spec"]["template"]["spec"]["containers"][0]["image"] = image
    refused = [f for f in judge_cel(objects) if f.subject == Subject.of(operator)]
    assert refused and all(f.mandatory and f.policy == "admission-policy-cel" for f in refused)


def test_a_version_1_lock_still_loads_and_keeps_the_operator_namespaces_unverified(
    locked: Callable[..., tuple[Plan, MirrorLock]],
) -> None:
    """A lock written before the script signed: its copies carry no signature by the stack's key, so the
    verifier (which would refuse them) does not see the operator namespaces; denied off the mirror."""
    plan, lock = locked("aws-enterprise-prod", signed=False)
    assert lock.images and not lock.signed
    assert not plan_lock_signed(plan.outputs) and plan.outputs["imageLock"]["signed"] is False
    found = namespace_labels(kubernetes_objects(plan))
    operators = {"gpu-operator", "monitoring", "kueue-system", VERIFIER_NAMESPACE}
    assert {n for n, f in found.items() if f.get(LABEL) == "mirror"} == operators
    assert not {n for n in operators if INCLUDE_LABEL in found[n]}
    # Signing the copies later (the version 2 lock) changes the namespaces' labels, in place: no object
    # is replaced and nothing is refused.
    signed, _ = locked("aws-enterprise-prod")
    violations = judge_plan(signed, skip=frozenset({"exit-codes"}), previous=plan)
    assert [str(v) for v in violations if v.enforcement == "mandatory"] == []
    assert [str(v) for v in violations if v.policy == "replaced-on-update"] == []


def test_a_lock_entry_without_its_signed_flag_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    entry = {"mirror": "mirror/docker.io/library/x:1", "digest": "sha256:" + "0" * 64}
    path.write_text(json.dumps({"version": 2, "images": {"x:1": entry}}))
    with pytest.raises(LockError) as error:
        read_lock(path, "stacks/s.images.json")
    assert str(error.value) == (
        "mirror lock stacks/s.images.json: images['x:1'].signed: expected true or false (whether the script"
        " signed the copy with the stack's key)"
    )
    path.write_text(json.dumps({"version": 2, "images": {"x:1": {**entry, "signed": False}}}))
    assert not read_lock(path, "lock").signed


def test_a_version_2_lock_names_each_copy_below_the_registry_the_stack_renders_with(tmp_path: Path) -> None:
    """The script runs against the deployed stack, whose registry a plan under Pulumi's mocks does not
    know (the mocks' account): the lock names no registry, and the program roots each copy at its own."""
    path = tmp_path / "lock.json"
    digest = "sha256:" + "0" * 64
    entry = {"mirror": "mirror/quay.io/p/p:v1", "digest": digest, "signed": True}
    path.write_text(json.dumps({"version": 2, "images": {"quay.io/p/p:v1": entry}}))
    lock = read_lock(path, "lock")
    deployed = "210987654321.dkr.ecr.me-central-1.amazonaws.com/s"
    assert lock.under(deployed).pin("quay.io/p/p:v1") == f"{deployed}/mirror/quay.io/p/p:v1@{digest}"
    # A whole reference (a registry, the mocks' account say) is refused in one line naming the entry.
    entry["mirror"] = "123456789012.dkr.ecr.me-central-1.amazonaws.com/s/mirror/quay.io/p/p:v1"
    path.write_text(json.dumps({"version": 2, "images": {"quay.io/p/p:v1": entry}}))
    with pytest.raises(LockError) as error:
        read_lock(path, "stacks/s.images.json")
    assert str(error.value).startswith(
        "mirror lock stacks/s.images.json: images['quay.io/p/p:v1'].mirror: '123456789012.dkr.ecr."
    )
    assert "is not the copy's place below the stack's registry (mirror/<source host>" in str(error.value)


def _planted(plan: Plan, namespace: str) -> tuple[list[dict[str, Any]], Subject]:
    """The plan's objects and a Pod planted in ``namespace`` that runs the copy of prometheus-operator the
    plan runs (a signed copy, from the stack's mirror by digest)."""
    objects = copy.deepcopy(kubernetes_objects(plan))
    [operator] = [
        o
        for o in objects
        if (o["kind"], o["metadata"]["name"]) == ("Deployment", "kube-prometheus-stack-operator")
    ]
    image = operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert "/mirror/quay.io/" in image
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "planted", "namespace": namespace},
        "spec": {"containers": [{"name": "planted", "image": image}]},
    }
    return [*objects, pod], Subject.of(pod)


def _named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objects if (o["kind"], o["metadata"]["name"]) == (kind, name)]
    return found


def _unverified_namespace(objects: list[dict[str, Any]], _: str) -> None:
    del _named(objects, "Namespace", "gpu-operator")["metadata"]["labels"][INCLUDE_LABEL]


def _policy_misses_the_mirror(objects: list[dict[str, Any]], registry: str) -> None:
    _named(objects, "ClusterImagePolicy", VERIFIER_POLICY)["spec"]["images"] = [
        {"glob": f"{registry}/ml-platform/**"}
    ]


def _mirror_let_through_unsigned(objects: list[dict[str, Any]], registry: str) -> None:
    objects.append(
        {
            "apiVersion": "policy.sigstore.dev/v1beta1",
            "kind": "ClusterImagePolicy",
            "metadata": {"name": "mirror-unsigned"},
            "spec": {
                "images": [{"glob": f"{registry}/mirror/**"}],
                "authorities": [{"name": "unsigned", "static": {"action": "pass"}}],
            },
        }
    )


@pytest.mark.parametrize(
    ("plant", "says"),
    [
        (_unverified_namespace, "no fail-closed policy.sigstore.dev webhook selects it"),
        (_policy_misses_the_mirror, "matches no enforcing ClusterImagePolicy: refused at admission"),
        (_mirror_let_through_unsigned, "ClusterImagePolicy mirror-unsigned admits image"),
    ],
)
def test_a_planted_pod_in_an_operator_namespace_of_a_signed_lock_stack_runs_only_a_verified_copy(
    plant: Callable[[list[dict[str, Any]], str], None],
    says: str,
    locked: Callable[..., tuple[Plan, MirrorLock]],
) -> None:
    """The judge holds the operator namespaces of a signed-lock stack to the stack's key: a mirrored copy
    there that would start with no signature check (the namespace unseen by the verifier, an image no
    policy with a key matches, a policy that passes the mirror unsigned) is one mandatory finding."""
    plan, _ = locked("aws-enterprise-prod")
    objects, pod = _planted(plan, "gpu-operator")
    assert judge_signatures(objects) == []
    plant(objects, str(plan.outputs["registry"]))
    found = [f for f in judge_signatures(objects) if f.subject == pod]
    assert [(f.policy, f.mandatory) for f in found] == [(SIGNATURE_POLICY, True)]
    assert says in found[0].message


def test_the_verifiers_own_namespace_is_not_held_to_it_and_may_not_be(
    locked: Callable[..., tuple[Plan, MirrorLock]],
) -> None:
    """cosign-system runs the verifier: a pod there is not required to be verified (even labelled
    ``deny``), and the verifier selecting its own namespace is itself mandatory: with its pods gone,
    their replacements would be refused by the webhook they are to serve."""
    plan, _ = locked("aws-enterprise-prod")
    objects, pod = _planted(plan, VERIFIER_NAMESPACE)
    labels = _named(objects, "Namespace", VERIFIER_NAMESPACE)["metadata"]["labels"]
    labels[LABEL] = "deny"
    assert judge_signatures(objects) == []
    labels[INCLUDE_LABEL] = "true"
    found = judge_signatures(objects)
    assert {(f.policy, f.mandatory, str(f.subject)) for f in found} == {
        (VERIFIER_SELF_POLICY, True, f"{kind} policy.sigstore.dev")
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    }
    assert all(f"selects {VERIFIER_NAMESPACE}, the namespace of its own Service" in f.message for f in found)
    assert not [f for f in found if f.subject == pod]
