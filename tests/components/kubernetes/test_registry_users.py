"""The callers' registry users, as the stack plans them (docs/registry.md, "Access").

- Each caller namespace holds Secret ``registry-client`` (``username``, ``password``); the inference
  namespace also ``registry-rollout`` (progressive delivery's identity). The servers mount every password
  in ``registry-users`` and their launcher (workloads/registry/server/launch.py ``read_users``) must
  reconstruct exactly the callers' credentials from the Deployment's env and that Secret's files (the
  kubelet mounts one file per key: kubernetes.io "Secrets", "Using Secrets as files from a Pod").
- The least permission each needs on its model (mlflow/server/auth/__init__.py 3.17.2): registering a
  version and moving ``@challenger`` need ``can_update`` (EDIT), serving reads (READ), the rollout moves
  aliases and sets registered-model tags (``SetRegisteredModelAlias`` / ``SetRegisteredModelTag``:
  ``can_update``, EDIT); a team's user creates and so owns its models (MANAGE on creation).
- Day 2: the passwords are pulumi_random RandomPasswords, kept in state (a second ``pulumi up`` is no
  change); they are replaced only when their ``keepers`` change (pulumi_random docs, "keepers"), which
  ``workloads.registry.credentialsRotation`` does, and the same key rolls the servers so the launcher sets
  the new passwords. Secret outputs stay secret (RandomPassword marks ``result`` secret).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components.config import PLATFORM_KEY, ConfigError, parse_stack_config, rollout_plan
from components.handle import MONITOR_USER, ROLLOUT_USER, Cloud, ClusterHandle, StorageHandle
from components.kubernetes.registry import (
    CA_SECRET,
    CLIENT_SECRET,
    ROLLOUT_SECRET,
    ROTATION_ANNOTATION,
    TLS_SECRET,
    USERS_SECRET,
    registry_objects,
)
from components.kubernetes.workloads import (
    MONITOR_SECRET,
    promoters,
    registry_users,
    restorers,
    rollout_job,
)
from mlplatform.graph import is_secret
from mlplatform.plan import Plan
from mlplatform.report import kubernetes_objects
from tests.stack_variants import plan_config, template, with_teams
from workloads.registry.approval import Policy
from workloads.registry.lineage import experiment_name
from workloads.registry.server.guard import promoters as guard_promoters
from workloads.registry.server.guard import promotion_policy
from workloads.registry.server.guard import restorers as guard_restorers
from workloads.registry.server.launch import User, read_users

from .test_registry import _spec


def _config(stack: str, raw: dict[str, Any] | None = None) -> Any:
    return parse_stack_config(raw or template(stack), f"Pulumi.{stack}.yaml")


def test_each_caller_gets_a_user_with_the_least_it_needs() -> None:
    users = {
        u.username: u
        for u in registry_users(_config("aws-enterprise-prod", with_teams("aws-enterprise-prod")))
    }
    assert {n: (u.namespace, u.secret, dict(u.grants)) for n, u in users.items()} == {
        "ml-training": ("ml-training", CLIENT_SECRET, {"digits-mlp": "EDIT"}),
        "ml-inference": ("ml-inference", CLIENT_SECRET, {"digits-mlp": "READ"}),
        ROLLOUT_USER: ("ml-inference", ROLLOUT_SECRET, {"digits-mlp": "EDIT"}),
        # The stack's driftMonitor: it rolls back (docs/lifecycle.md).
        MONITOR_USER: ("ml-inference", MONITOR_SECRET, {"digits-mlp": "EDIT"}),
        "team-nlp": ("team-nlp", CLIENT_SECRET, {}),
        "team-vision": ("team-vision", CLIENT_SECRET, {}),
    }
    # Training logs runs in the experiment lineage.py names after its model: EDIT there too (creating a
    # run needs ``update`` on the experiment, ``validate_can_create_run``, mlflow/server/auth/__init__.py).
    assert {n: dict(u.experiments) for n, u in users.items() if u.experiments} == {
        "ml-training": {experiment_name("digits-mlp"): "EDIT"}
    }


def test_no_users_without_basic_auth() -> None:
    raw = template("aws-smb-dev")
    raw[PLATFORM_KEY].setdefault("workloads", {})["registry"] = {"auth": False}
    assert registry_users(_config("aws-smb-dev", raw)) == ()
    assert registry_objects(_spec(auth=False)).secrets == []


def test_the_launcher_reads_back_exactly_the_callers_credentials(tmp_path: Path) -> None:
    config = _config("aws-enterprise-prod", with_teams("aws-enterprise-prod"))
    users = registry_users(config)
    passwords = {u.username: f"password-of-{u.username}" for u in users}
    objects = registry_objects(_spec(users=users, passwords=passwords))
    secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]): s["stringData"] for s in objects.secrets}
    # The kubelet's view of registry-users: one file per key.
    for key, value in secrets.pop(("ml-registry", USERS_SECRET)).items():
        (tmp_path / key).write_text(value)
    [deployment] = [o for o in objects.after if o["kind"] == "Deployment"]
    [server] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in server["env"]}
    mount = next(m for m in server["volumeMounts"] if m["mountPath"] == env["REGISTRY_USERS_DIR"])
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == USERS_SECRET and mount["readOnly"]

    launched = read_users({**env, "REGISTRY_USERS_DIR": str(tmp_path)})
    assert {(u.username, u.password) for u in launched} == {
        (s["username"], s["password"]) for s in secrets.values()
    }
    assert len(secrets) == len(users)
    assert User(ROLLOUT_USER, passwords[ROLLOUT_USER], (("digits-mlp", "EDIT"),)) in launched
    edit = (("digits-mlp", "EDIT"),)
    assert (
        User("ml-training", passwords["ml-training"], edit, ((experiment_name("digits-mlp"), "EDIT"),))
        in launched
    )
    # No caller's pod can read another's password: each namespace holds only its own (ml-inference also
    # the rollout's and the drift monitor's, each in a Secret only its own Job mounts).
    assert all(s["username"] in (ns, ROLLOUT_USER, MONITOR_USER) for (ns, _), s in secrets.items())


def test_a_caller_secret_names_a_user_the_launcher_creates() -> None:
    with pytest.raises(ValueError, match="a password for each user"):
        _spec(users=registry_users(_config("aws-enterprise-prod")), passwords={})


def _rollout_and_passwords(plan: Plan) -> tuple[str, list[Any]]:
    [deployment] = [
        o
        for o in kubernetes_objects(plan)
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "registry"
    ]
    passwords = [
        r
        for r in plan.resources
        if r.type == "random:index/randomPassword:RandomPassword" and "-registry-admin-" not in r.name
    ]
    return deployment["spec"]["template"]["metadata"]["annotations"][ROTATION_ANNOTATION], passwords


def test_passwords_are_kept_in_state_secret_and_replaced_by_a_rotation(tmp_path: Path) -> None:
    stack = "aws-enterprise-dev"
    raw = template(stack)
    first = plan_config(raw, tmp_path, stack)
    generation, passwords = _rollout_and_passwords(first)
    assert generation == "1"
    assert {p.name.rsplit("-registry-", 1)[1] for p in passwords} == {
        "ml-training",
        "ml-inference",
        ROLLOUT_USER,
    }
    assert all(p.inputs["keepers"] == {"rotation": "1"} and p.inputs["length"] >= 12 for p in passwords)
    secrets = [
        r
        for r in first.resources
        if r.type == "kubernetes:core/v1:Secret"
        and "registry" in r.name
        and r.inputs["metadata"]["name"] not in (TLS_SECRET, CA_SECRET)  # the certificates' Secrets
    ]
    # Three callers', the servers' registry-users and registry-admin, whose generated values no rotation
    # replaces (MLflow reads the admin's password only when it first creates the admin).
    assert len(secrets) == 5
    admin = [
        r
        for r in first.resources
        if r.type == "random:index/randomPassword:RandomPassword" and "-registry-admin-" in r.name
    ]
    assert len(admin) == 2 and not any(r.inputs.get("keepers") for r in admin)
    for secret in secrets:
        data = secret.inputs["stringData"]
        assert all(is_secret(v) for v in ([data["password"]] if "password" in data else data.values()))

    raw[PLATFORM_KEY].setdefault("workloads", {}).setdefault("registry", {})["credentialsRotation"] = 2
    rotated = plan_config(raw, tmp_path, stack)
    generation, passwords = _rollout_and_passwords(rotated)
    assert generation == "2" and all(p.inputs["keepers"] == {"rotation": "2"} for p in passwords)


def _with_approvers(stack: str, approvers: list[str]) -> Any:
    raw = with_teams(stack)
    raw[PLATFORM_KEY].setdefault("workloads", {}).setdefault("registry", {})["approvers"] = approvers
    return _config(stack, raw)


def _promoting(stack: str, approvers: list[str], promote: bool | None) -> Any:
    """``stack`` with the approver role ``approvers`` and, unless None, ``rollout.promote`` declared."""
    raw = with_teams(stack)
    workloads = raw[PLATFORM_KEY].setdefault("workloads", {})
    workloads.setdefault("registry", {})["approvers"] = approvers
    if promote is not None:
        workloads["inference"].setdefault("rollout", {})["promote"] = promote
    return _config(stack, raw)


def test_only_the_rollout_user_and_the_approvers_are_promotion_identities() -> None:
    """The servers' authorization function lets only these move ``@champion`` (workloads/registry/server/
    guard.py): never training's or a team's user, whose EDIT on a model MLflow lets move any alias
    (control review S1; issue 40 "Promotion as a change")."""
    config = _promoting("aws-enterprise-prod", ["ana", "omar"], True)
    assert promoters(config) == ("ana", ROLLOUT_USER, "omar")
    # Its drift monitor only rolls back (guard.py ``restore_refusal``): a restorer, not a promoter.
    assert restorers(config) == (MONITOR_USER,)
    spec = _spec(
        promoters=promoters(config),
        restorers=restorers(config),
        approvers=("omar", "ana"),
        approval_required=True,
        rollout_user=ROLLOUT_USER,
    )
    objects = registry_objects(spec)
    [deployment] = [o for o in objects.after if o["kind"] == "Deployment"]
    [server] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in server["env"]}
    assert guard_promoters(env) == ("admin", "ana", ROLLOUT_USER, "omar")
    assert guard_restorers(env) == (MONITOR_USER,)
    # The rules the registry decides each move of @champion on, as ``models promote --stack`` does
    # (review rev40d A4): the approver role, approval required, and whose rollout-passed counts.
    assert promotion_policy(env) == Policy(
        required=True, approvers=("ana", "omar"), rollout_user=ROLLOUT_USER
    )
    # A plan that does not promote (no pre-approved path: every promotion a person's) leaves the rollout's
    # user no right to move @champion.
    assert promoters(_promoting("aws-enterprise-prod", ["ana", "omar"], False)) == ("ana", "omar")


@pytest.mark.parametrize(
    ("stack", "promote", "promotes", "exempted"),
    [
        ("aws-enterprise-prod", None, False, False),  # approval required (the tier's), promote unset
        ("aws-enterprise-dev", None, False, False),  # ... and no rollout plan at all
        ("aws-enterprise-prod", True, True, True),  # the pre-approved path, declared: an exemption
        ("aws-smb-dev", None, True, False),  # no approval required: the gates promote, nothing waived
    ],
)
def test_the_rollouts_pre_approved_path_is_declared_where_approval_is_required(
    stack: str, promote: bool | None, promotes: bool, exempted: bool
) -> None:
    """Issue 40 item 3: a promotion needs "a recorded approval ... or a pre-approved automatic path (the
    rollout's gates) declared in the stack"; review rev40b A4 found ``promote`` true by default, so every
    enterprise stack had the path without a word in its file. Where approval is required an unset
    ``promote`` is false: the rollout Job's plan says so and its user is no promotion identity. A declared
    ``promote: true`` there is an exemption from the approval, with its reason on the rollout's CronJob
    (the evidence pack's exceptions register lists it: tests/mlplatform/test_evidence.py)."""
    config = _promoting(stack, ["ana"], promote)
    assert rollout_plan(config).promote is promotes
    assert (ROLLOUT_USER in promoters(config)) is promotes
    kubeconfig = pulumi.Output.from_input("kubeconfig")
    handle = ClusterHandle(Cloud.AWS, "c", kubeconfig, "1.35", (), StorageHandle("s3://b"), "reg")
    job = rollout_job(config, config.workloads.inference, handle)
    assert job.plan is not None or promotes
    if job.plan is not None:
        assert json.loads(job.plan)["promote"] is promotes
    assert (job.pre_approved is not None) is exempted

    # Without basic-auth nothing authenticates anyone: no promoters, and a spec refuses them.
    raw = template("aws-smb-dev")
    raw[PLATFORM_KEY].setdefault("workloads", {})["registry"] = {"auth": False}
    assert promoters(_config("aws-smb-dev", raw)) == ()
    with pytest.raises(
        ValueError, match="promoters, restorers, approvers and the rollout user need basic-auth"
    ):
        _spec(auth=False, promoters=("ana",))


@pytest.mark.parametrize("user", ["ml-training", "ml-inference", "team-nlp", ROLLOUT_USER, MONITOR_USER])
def test_a_workloads_own_user_is_refused_as_an_approver(user: str) -> None:
    """An approver is a person (docs/security.md, "Who can do what"): the drift monitor's user would
    promote the retrains it launches, the rollout's approve its own gates (review 35 A4)."""
    with pytest.raises(ConfigError, match=rf"workloads\.registry\.approvers.*{user} is a workload's own"):
        _with_approvers("aws-enterprise-prod", ["ana", user])
