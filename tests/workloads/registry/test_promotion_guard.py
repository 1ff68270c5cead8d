"""Only the promotion identities move ``@champion``, against MLflow 3.17.2's real permission checks (issue 40,
"Done when": training's and teams' registry identities cannot move ``@champion``; the control review,
``compliance.md`` S1).

MLflow grants per registered model: moving any alias needs ``can_update`` (EDIT) on it, as registering a
version does (mlflow/server/auth/__init__.py 3.17.2, ``validate_can_set_model_or_prompt_version_alias``,
``_authorize_create_version``), so training's EDIT alone would let it promote itself. The registry's
authorization function (workloads/registry/server/guard.py) refuses a set or delete of ``champion`` and
``previous-champion`` to all but the stack's promotion identities (components/kubernetes/workloads.py
``promoters``: the rollout's user and the approver role), and the launcher creates the served model as the
admin and keeps model grants exactly as declared, so training never holds the creator's MANAGE.

The users, grants and promoters are the stack's own (``registry_users``, ``promoters`` of the enterprise
template with an approver and two teams), bootstrapped by the launcher's ``bootstrap_users`` on the shared
basic-auth server (conftest.py: the image's authorization function, ``PROMOTERS``).
"""

from __future__ import annotations

import copy
import json
import tempfile
import urllib.parse
from pathlib import Path

import pytest
from typer.testing import CliRunner

from components.config import PLATFORM_KEY, PlatformConfig, parse_stack_config
from components.handle import MONITOR_USER, ROLLOUT_USER
from components.kubernetes.workloads import promoters, registry_users, restorers
from mlplatform.cli import app
from tests.stack_variants import with_teams
from workloads.registry.approval import CANDIDATE, Policy
from workloads.registry.client import (
    ALIAS_ENDPOINT,
    BREAK_GLASS_HEADER,
    BREAK_GLASS_REASON_ENV,
    RegistryClient,
    RegistryError,
)
from workloads.registry.lineage import TRAINED_BY_TAG, experiment_name
from workloads.registry.record import ALIAS_MOVES, Event, Journal, Kind, identity, open_journal, open_record
from workloads.registry.rollout import CHALLENGER, CHAMPION
from workloads.registry.server.guard import BREAK_GLASS_HEADER as GUARD_HEADER
from workloads.registry.server.guard import (
    Move,
    Standing,
    break_glass,
    break_glass_refusal,
    move_decision,
    user_change,
)
from workloads.registry.server.launch import (
    BREAK_GLASS_HEADER as LAUNCHER_HEADER,
)
from workloads.registry.server.launch import (
    DELETE_USER,
    GRANT,
    LAUNCHER_REASON,
    LIST_PERMISSIONS,
    REGISTERED_MODEL,
    UPDATE_PASSWORD,
    AuthApi,
    User,
    bootstrap_users,
)

from .conftest import ADMIN_PASSWORD, PASSWORDS, PROMOTERS, RESTORERS, admin_client

STACK = "aws-enterprise-prod"
APPROVER = "approver-ana"
ALIAS_PATH = "/api/2.0/mlflow/registered-models/alias"


def _stack() -> PlatformConfig:
    raw = copy.deepcopy(with_teams(STACK))
    raw[PLATFORM_KEY]["workloads"].setdefault("registry", {})["approvers"] = [APPROVER]
    # The rollout's gates declared the pre-approved path (approval is required: unset, it would not be).
    raw[PLATFORM_KEY]["workloads"]["inference"]["rollout"]["promote"] = True
    return parse_stack_config(raw, f"Pulumi.{STACK}.yaml")


CONFIG = _stack()
STACK_USERS = {u.username: u for u in registry_users(CONFIG)}
MODEL = STACK_USERS["ml-training"].grants[0][0]


def _password(name: str) -> str:
    return f"{name}-password-guard"


def _client(uri: str, name: str) -> RegistryClient:
    environ = {"MLFLOW_TRACKING_USERNAME": name, "MLFLOW_TRACKING_PASSWORD": _password(name)}
    return RegistryClient(uri, environ=environ, attempts=1)


@pytest.fixture(scope="module")
def registry(auth_registry_uri: str) -> tuple[str, AuthApi, str]:
    """The stack's users on the registry (the launcher's bootstrap), an approver made by an admin with EDIT
    on the model (a person, not a stack user), and a version training registered as ``@challenger``."""
    api = AuthApi(auth_registry_uri, ADMIN_PASSWORD)
    users = [
        User(
            u.username,
            _password(u.username),
            tuple((m, str(p)) for m, p in u.grants),
            tuple((e, str(p)) for e, p in u.experiments),
        )
        for u in STACK_USERS.values()
    ]
    bootstrap_users(api, [*users, User(APPROVER, _password(APPROVER), ((MODEL, "EDIT"),))])
    training = _client(auth_registry_uri, "ml-training")
    run = training.create_run(training.experiment_id(experiment_name(MODEL)), "guard-run", {})
    training.ensure_registered_model(MODEL)  # made by the launcher as the admin: found, not created
    version = training.create_version(MODEL, run["info"]["artifact_uri"], run["info"]["run_id"], {}).version
    training.set_alias(MODEL, "challenger", version)  # what training does: still allowed
    return auth_registry_uri, api, version


def test_the_promotion_identities_are_the_rollout_user_and_the_approvers_never_a_caller() -> None:
    assert promoters(CONFIG) == (APPROVER, ROLLOUT_USER)
    assert set(promoters(CONFIG)) <= set(PROMOTERS)  # what the server runs with
    # The enterprise template runs a drift monitor, which only rolls back: a restorer, never a promoter.
    assert restorers(CONFIG) == (MONITOR_USER,) and set(restorers(CONFIG)) <= set(RESTORERS)
    assert not {"ml-training", "ml-inference", "team-nlp", "team-vision"} & set(promoters(CONFIG))


@pytest.mark.parametrize("alias", ["champion", "previous-champion"])
def test_training_cannot_move_champion_and_the_refusal_names_the_user_and_who_may(
    registry: tuple[str, AuthApi, str], alias: str
) -> None:
    uri, _, version = registry
    with pytest.raises(RegistryError) as refused:
        _client(uri, "ml-training").set_alias(MODEL, alias, version)
    assert refused.value.status == 403
    assert str(refused.value) == (
        f"registry {uri}: user ml-training may not move alias {alias!r} of registered model {MODEL!r}:"
        " only the promotion identities move champion and previous-champion"
        f" ({', '.join(sorted({'admin', *PROMOTERS}))};"
        " the stack's rollout user and workloads.registry.approvers); ask for a"
        " promotion with mlplatform models request-promotion (docs/lifecycle.md) (HTTP 403 on POST"
        " registered-models/alias)"
    )


def test_training_holds_edit_not_the_creators_manage(registry: tuple[str, AuthApi, str]) -> None:
    _, api, _ = registry
    rows = api.ok("GET", LIST_PERMISSIONS, {"username": "ml-training"})["permissions"]
    assert isinstance(rows, list)
    assert {
        r["resource_pattern"]: r["permission"] for r in rows if r["resource_type"] == "registered_model"
    } == {MODEL: "EDIT"}


def test_a_team_cannot_move_champion_of_the_served_model_nor_of_its_own(
    registry: tuple[str, AuthApi, str],
) -> None:
    uri, api, version = registry
    team = _client(uri, "team-nlp")
    # The served model: the guard answers first; a team only reads it (default READ), so MLflow's own
    # check refuses it any other alias too.
    with pytest.raises(RegistryError) as refused:
        team.set_alias(MODEL, "champion", version)
    assert refused.value.status == 403
    assert f"user team-nlp may not move alias 'champion' of registered model {MODEL!r}" in str(refused.value)
    with pytest.raises(RegistryError) as refused:
        team.set_alias(MODEL, "challenger", version)
    assert refused.value.status == 403
    assert "user team-nlp has no grant for POST registered-models/alias" in str(refused.value)
    # Its own model: MANAGE as its creator, yet @champion is the promotion identities' (guard.py).
    own = "team-nlp-own-model"
    team.ensure_registered_model(own)
    run = team.create_run(team.experiment_id("team-nlp-own"), "own-run", {})
    own_version = team.create_version(own, run["info"]["artifact_uri"], run["info"]["run_id"], {}).version
    team.set_alias(own, "challenger", own_version)
    with pytest.raises(RegistryError) as refused:
        team.set_alias(own, "champion", own_version)
    assert refused.value.status == 403
    assert f"user team-nlp may not move alias 'champion' of registered model {own!r}" in str(refused.value)
    # Nor remove it: a DELETE with a JSON body, and one with the query string (the two ways MLflow reads it).
    team_credentials = ("team-nlp", _password("team-nlp"))
    status, body = api.call("DELETE", ALIAS_PATH, {"name": own, "alias": "champion"}, team_credentials)
    assert (status, body["error_code"]) == (403, "PERMISSION_DENIED")
    query = urllib.parse.urlencode({"name": own, "alias": "champion"})
    status, body = api.call("DELETE", f"{ALIAS_PATH}?{query}", None, team_credentials)
    assert (status, body["error_code"]) == (403, "PERMISSION_DENIED")
    assert "user team-nlp may not move alias 'champion'" in str(body["message"])


def test_promote_as_training_is_one_line_naming_the_user_and_exit_2(
    registry: tuple[str, AuthApi, str],
) -> None:
    """Even ``--force`` (skipping the CLI's own checks, no stack rules given) and a declared ``--actor``
    naming an approver meet the registry's rule, which knows the caller by its credentials."""
    uri, _, version = registry
    before = _client(uri, "ml-inference").alias_or_none(MODEL, "champion")
    environ = {
        "MLFLOW_TRACKING_USERNAME": "ml-training",
        "MLFLOW_TRACKING_PASSWORD": _password("ml-training"),
    }
    result = CliRunner().invoke(
        app,
        ["models", "promote", MODEL, version, "--force", "--registry-uri", uri, "--actor", "approver-ana"],
        env=environ,
    )
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith(f"error: registry {uri}: user ml-training may not move alias '"), line
    assert f"of registered model {MODEL!r}: only the promotion identities move" in line
    after = _client(uri, "ml-inference").alias_or_none(MODEL, "champion")
    assert (after and after.version) == (before and before.version)  # nothing moved


# -- every move of a protected alias rests on the record and is on it (review rev40d A4) --------------------


def _trained(uri: str, accuracy: float) -> str:
    """A version training registers, with the ``metadata.json`` its digest is taken of (record.py
    ``version_digest``) and itself as who trained it, as ``mlplatform train`` does."""
    training = _client(uri, "ml-training")
    run = training.create_run(training.experiment_id(experiment_name(MODEL)), "guard-run", {})["info"]
    source = f"{run['artifact_uri']}/model"
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "metadata.json").write_text(json.dumps({"accuracy": accuracy, "run": run["run_id"]}))
        training.upload(source, Path(folder))
    tags = {TRAINED_BY_TAG: "ml-training"}
    return training.create_version(MODEL, source, run["run_id"], tags).version


def _seeded(uri: str) -> tuple[str, str]:
    """A champion (the admin's break-glass move) and a new version training registered beside it."""
    champion = _trained(uri, 0.95)
    admin_client(uri).set_alias(MODEL, "champion", champion)
    return champion, _trained(uri, 0.96)


def _moves(record: Path) -> list[tuple[str, str, dict[str, str]]]:
    """The record's moves of the protected aliases of MODEL (kind, by, versions), oldest first."""
    return [
        (e.action, e.by, e.versions) for e in open_record(str(record)).read(MODEL) if e.action in ALIAS_MOVES
    ]


@pytest.fixture(scope="module")
def people(registry: tuple[str, AuthApi, str]) -> None:
    """carol (EDIT: she requests) and alice (an approver other than approver-ana) on the model."""
    bootstrap_users(registry[1], [User(u, PASSWORDS[u], ((MODEL, "EDIT"),)) for u in ("alice", "carol")])


def _journal(uri: str, user: str, record: Path) -> Journal:
    client = RegistryClient(
        uri, environ={"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": PASSWORDS[user]}
    )
    return open_journal(client, str(record), identity(client, user))


def test_an_approvers_direct_move_of_champion_needs_another_approvers_approval_on_the_record(
    registry: tuple[str, AuthApi, str], people: None, auth_record: Path
) -> None:
    """Review rev40d A4; issue 40 item 3 ("a promotion needs a recorded approval by a member of the approver
    role other than who trained or requested it") and item 4 ("every alias move ... is appended"). An
    approver sends MLflow's own ``SetRegisteredModelAlias`` (no ``mlplatform models promote``): refused,
    403, one line naming what is missing, while the record holds no approval; let through once another
    approver's approval of carol's request is on it, and then on the record, appended by the registry with
    what it rests on (one event per move), as ``models history`` shows it."""
    uri, _, _ = registry
    champion, version = _seeded(uri)
    ana = _client(uri, APPROVER)
    ana.set_alias(MODEL, "previous-champion", champion)  # onto the champion: promote's first move
    before = _moves(auth_record)
    with pytest.raises(RegistryError) as refused:
        ana.set_alias(MODEL, "champion", version)
    assert refused.value.status == 403
    assert str(refused.value) == (
        f"registry {uri}: user {APPROVER} may not move 'champion' of registered model {MODEL!r} to version"
        f" {version}: version {version} needs an approved promotion request (mlplatform models"
        " request-promotion) (HTTP 403 on POST registered-models/alias)"
    )
    _journal(uri, "carol", auth_record).append(MODEL, Kind.REQUEST, {CANDIDATE: version}, reason="better")
    with pytest.raises(RegistryError, match=f"version {version}'s promotion request awaits an approval"):
        ana.set_alias(MODEL, "champion", version)
    assert _moves(auth_record) == before  # nothing moved, nothing appended
    approved = _journal(uri, "alice", auth_record).append(MODEL, Kind.APPROVE, {CANDIDATE: version})
    # Review rev40f A2: MLflow compares alias names exactly, so another spelling would be another alias that
    # no server follows, and, folded by the guard, two false promotions on the record. Refused, for anyone.
    for spelling in ("Champion", "CHAMPION", "\uff43hampion"):
        with pytest.raises(RegistryError) as other:
            ana.set_alias(MODEL, spelling, version)
        assert other.value.status == 400
        assert f"alias {spelling!r} is another spelling of the protected alias 'champion'" in str(other.value)
    assert _moves(auth_record) == before
    assert admin_client(uri).version_by_alias(MODEL, "champion").version == champion
    ana.set_alias(MODEL, "champion", version, {"reason": "as approved"})
    assert admin_client(uri).version_by_alias(MODEL, "champion").version == version
    assert _moves(auth_record)[len(before) :] == [
        (Kind.PROMOTE, APPROVER, {"champion": version, "replaced": champion})
    ]
    shown = CliRunner().invoke(app, ["models", "history", MODEL, "--record", str(auth_record)])
    assert shown.exit_code == 0, shown.output
    last = shown.output.strip().splitlines()[-1]
    assert f"promote            {APPROVER:<24} champion={version} replaced={champion}" in last, last
    assert f"approved by alice at {approved.at}; {APPROVER} says: as approved" in last, last


def test_the_rollout_users_direct_move_of_champion_needs_its_own_rollout_passed_against_the_champion(
    registry: tuple[str, AuthApi, str], auth_record: Path
) -> None:
    """The rollout's gates as the declared pre-approved path (``promote: true``): the rollout user moves
    ``@champion`` only onto a version its own ``rollout-passed`` against the champion now is on the record
    for (workloads/delivery/runner.py appends it before promoting); its password, a Secret in the cluster,
    moves nothing else."""
    uri, _, _ = registry
    champion, version = _seeded(uri)
    runner = _client(uri, ROLLOUT_USER)
    with pytest.raises(RegistryError) as refused:
        runner.set_alias(MODEL, "champion", version)
    assert refused.value.status == 403
    assert (
        f"user {ROLLOUT_USER} may not move 'champion' of registered model {MODEL!r} to version {version}:"
        in (str(refused.value))
    )
    assert f"no rollout-passed of version {version} (digest sha256:" in str(refused.value)
    assert f"by {ROLLOUT_USER} against the champion now (version {champion}) on the record" in str(
        refused.value
    )
    journal = open_journal(runner, str(auth_record), identity(runner, ROLLOUT_USER))
    journal.append(MODEL, Kind.ROLLOUT_PASSED, {CHALLENGER: version, CHAMPION: champion}, reason="passed")
    runner.set_alias(MODEL, "previous-champion", champion)
    runner.set_alias(MODEL, "champion", version)
    first, second = _moves(auth_record)[-2:]
    assert first[:2] == (Kind.SET_PREVIOUS_CHAMPION, ROLLOUT_USER)
    assert first[2]["previous-champion"] == champion  # and what it held before, as "replaced"
    assert second == (Kind.PROMOTE, ROLLOUT_USER, {"champion": version, "replaced": champion})


def test_previous_champion_is_set_only_onto_the_champion_so_no_rollback_promotes(
    registry: tuple[str, AuthApi, str], auth_record: Path
) -> None:
    """A rollback (``champion`` onto ``previous-champion``) needs no approval; so ``previous-champion`` may
    be set only onto the version ``champion`` holds, else an approver would set it onto any version and
    roll back onto it. A rollback by a promotion identity is on the record as the registry's own."""
    uri, _, _ = registry
    champion, version = _seeded(uri)
    ana = _client(uri, APPROVER)
    with pytest.raises(RegistryError) as refused:
        ana.set_alias(MODEL, "previous-champion", version)
    assert refused.value.status == 403
    assert str(refused.value).startswith(
        f"registry {uri}: user {APPROVER} may not move 'previous-champion' of registered model {MODEL!r} to"
        f" version {version}: previous-champion is set only onto the version champion holds (version"
        f" {champion})"
    )
    with pytest.raises(RegistryError, match="a protected alias is removed only by the admin"):
        ana._call("DELETE", ALIAS_ENDPOINT, {"name": MODEL, "alias": "previous-champion"})
    admin_client(uri).set_alias(MODEL, "previous-champion", version)  # break-glass, on the record
    admin_client(uri).set_alias(MODEL, "champion", champion)
    ana.set_alias(MODEL, "champion", version)  # onto previous-champion: a rollback
    assert _moves(auth_record)[-1] == (Kind.ROLLBACK, APPROVER, {"champion": version, "replaced": champion})


def test_the_drift_monitor_rolls_champion_back_but_cannot_promote_what_it_retrained(
    registry: tuple[str, AuthApi, str],
) -> None:
    """Issue 40: a retrain the monitor launched reaches ``@champion`` through the gates and an approval,
    never through the monitor, which holds EDIT on the model (it rolls back). The registry lets it set
    ``champion`` only onto the version ``previous-champion`` holds now (guard.py ``restore_refusal``, read
    from the registry's own store), and no other move of the protected aliases."""
    uri, api, challenger = registry
    admin = admin_client(uri)
    run = admin.create_run(admin.experiment_id(experiment_name(MODEL)), "guard-run", {})
    held = admin.create_version(MODEL, run["info"]["artifact_uri"], run["info"]["run_id"], {}).version
    current = admin.create_version(MODEL, run["info"]["artifact_uri"], run["info"]["run_id"], {}).version
    admin.set_alias(MODEL, "previous-champion", held)
    admin.set_alias(MODEL, "champion", current)
    monitor = _client(uri, MONITOR_USER)
    for alias, version in (
        ("champion", challenger),
        ("previous-champion", challenger),
        ("champion", current),
    ):
        with pytest.raises(RegistryError) as refused:
            monitor.set_alias(MODEL, alias, version)
        assert refused.value.status == 403
        assert str(refused.value).startswith(
            f"registry {uri}: user {MONITOR_USER} may only roll 'champion' of registered model {MODEL!r}"
            f" back to 'previous-champion' (version {held}), not move {alias!r} to version {version}: a new"
            " version reaches champion through the rollout's gates and an approval"
        ), str(refused.value)
    credentials = (MONITOR_USER, _password(MONITOR_USER))
    status, body = api.call("DELETE", ALIAS_PATH, {"name": MODEL, "alias": "champion"}, credentials)
    assert (status, body["error_code"]) == (403, "PERMISSION_DENIED")
    assert admin.version_by_alias(MODEL, "champion").version == current  # nothing moved
    monitor.set_alias(MODEL, "champion", held)  # the rollback
    assert admin.version_by_alias(MODEL, "champion").version == held


def test_an_admin_move_of_champion_needs_a_reason_and_is_logged_as_break_glass(
    registry: tuple[str, AuthApi, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Review 35 A7: the admin is exempt from the guard (MLflow exempts it from every check) and any
    cluster admin can read its password (Secret ``registry-admin``), so its move of a protected alias is a
    promotion with no approval: break-glass (docs/security.md, "Break-glass: the registry's admin moves the
    champion"). The registry refuses one that names no reason in ``X-ML-Platform-Break-Glass-Reason`` (the
    client sends ``$MLPLATFORM_BREAK_GLASS_REASON``), in one line naming the header, and logs each one it
    lets through with its reason (guard.py ``break_glass``). A promotion identity's move is no such event."""
    uri, api, version = registry
    before = admin_client(uri).alias_or_none(MODEL, "champion")
    for protected in ("champion", "previous-champion"):
        with pytest.raises(RegistryError) as refused:
            admin_client(uri, reason=None).set_alias(MODEL, protected, version)
        assert refused.value.status == 403
        assert str(refused.value) == (
            f"registry {uri}: user admin moves alias {protected!r} of registered model {MODEL!r} with no"
            f" reason: a break-glass move names why in the request header {BREAK_GLASS_HEADER} (mlplatform"
            " models: set MLPLATFORM_BREAK_GLASS_REASON; docs/security.md, 'Break-glass: the registry's admin"
            " moves the champion'), or goes through an approval (mlplatform models request-promotion)"
            f" (HTTP 403 on POST {ALIAS_ENDPOINT})"
        )
    admin = ("admin", ADMIN_PASSWORD)
    status, body = api.call("DELETE", ALIAS_PATH, {"name": MODEL, "alias": "champion"}, admin)
    assert (status, body["error_code"]) == (403, "PERMISSION_DENIED")
    assert admin_client(uri).alias_or_none(MODEL, "champion") == before  # nothing moved
    admin_client(uri, reason="INC-4711 roll back a bad version").set_alias(MODEL, "champion", version)
    _client(uri, ROLLOUT_USER).set_alias(MODEL, "previous-champion", version)  # onto the champion
    admin_client(uri, reason=None).set_alias(MODEL, "challenger", version)  # not protected: no reason needed
    # The shared basic-auth server's log (conftest.py ``auth_registry_uri``; pytest links ``<name>current``).
    [log] = {path.resolve() for path in tmp_path_factory.getbasetemp().glob("mlflow-auth*/server.log")}
    events = [json.loads(line) for line in log.read_text().splitlines() if "registry-break-glass" in line]
    ours = [
        e for e in events if e.get("model") == MODEL and e["reason"] == "INC-4711 roll back a bad version"
    ]
    assert all(e["user"] == "admin" and e["reason"] for e in events)
    # One move (a request may pass the authorization function more than once: the FastAPI bridge too).
    assert {(e["alias"], e["action"], e["version"]) for e in ours} == {("champion", "set", version)}
    assert break_glass("admin", MODEL, "Previous-Champion", None, "restore") == {
        "event": "registry-break-glass",
        "user": "admin",
        "model": MODEL,
        "alias": "Previous-Champion",
        "action": "delete",
        "version": None,
        "reason": "restore",
    }
    assert break_glass(ROLLOUT_USER, MODEL, "champion", version) is None
    assert break_glass_refusal(MODEL, "champion", "  ") is not None


def test_the_client_and_the_launcher_name_the_reason_in_the_guards_header() -> None:
    """The client, the launcher and the image's guard agree on the header (the guard ships alone in the
    image), and a reason a header cannot carry is refused in one line before any request."""
    assert (BREAK_GLASS_HEADER, LAUNCHER_HEADER, ALIAS_ENDPOINT) == (
        GUARD_HEADER,
        GUARD_HEADER,
        "registered-models/alias",
    )
    with pytest.raises(ValueError, match=r"^MLPLATFORM_BREAK_GLASS_REASON must be printable ASCII"):
        RegistryClient("https://registry:5000", environ={BREAK_GLASS_REASON_ENV: "rollback\nX-Evil: 1"})


def test_an_admin_change_of_another_users_password_or_grants_needs_a_reason_and_is_logged(
    registry: tuple[str, AuthApi, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Review 35 A5: MLflow 3.17.2 exempts the admin from every check (``_before_request``:
    ``sender_is_admin``), ``users/update-password`` of another user included, so without this rule the admin
    would reset the rollout user's password and move ``@champion`` as that user, with no reason and no
    break-glass line. The registry refuses the admin's change of another user's password, grants or
    existence that names no reason in ``X-ML-Platform-Break-Glass-Reason`` (guard.py ``user_change``), and
    logs each it lets through; the launcher's reconciliation names its own reason (launch.py
    ``LAUNCHER_REASON``), which the registry fixture's bootstrap above went through."""
    uri, _, version = registry
    unreasoned = AuthApi(uri, ADMIN_PASSWORD, reason="")
    taken = {"username": ROLLOUT_USER, "password": "taken-over-by-admin"}
    grant = {"username": "ml-training", "resource_type": REGISTERED_MODEL, "resource_id": "another-model"}
    for method, path, payload, action, target in (
        ("PATCH", UPDATE_PASSWORD, taken, "update-password", ROLLOUT_USER),
        ("DELETE", DELETE_USER, {"username": ROLLOUT_USER}, "delete-user", ROLLOUT_USER),
        ("POST", GRANT, {**grant, "permission": "MANAGE"}, "grant-permission", "ml-training"),
    ):
        status, body = unreasoned.call(method, path, payload)
        assert (status, body["error_code"]) == (403, "PERMISSION_DENIED"), path
        assert body["message"] == (
            f"user admin changes {target!r} ({action}) with no reason: a change of another user's"
            " password or permissions lets the admin act as that user (move champion as the rollout user),"
            f" so it names why in the request header {BREAK_GLASS_HEADER} (docs/security.md,"
            " 'Break-glass: the registry's admin moves the champion')"
        )
    # Nothing changed: the rollout user still logs in with its own password and moves previous-champion.
    held = admin_client(uri).version_by_alias(MODEL, "champion").version
    _client(uri, ROLLOUT_USER).set_alias(MODEL, "previous-champion", held)
    with pytest.raises(RegistryError) as refused:
        RegistryClient(
            uri,
            environ={"MLFLOW_TRACKING_USERNAME": ROLLOUT_USER, "MLFLOW_TRACKING_PASSWORD": taken["password"]},
            attempts=1,
        ).set_alias(MODEL, "champion", version)
    assert refused.value.status == 401
    # With a reason: let through (the same password again, so the module's other tests are unaffected) and
    # logged as break-glass, naming the user changed.
    reason = "INC-4712 rotate the rollout user's password"
    AuthApi(uri, ADMIN_PASSWORD, reason=reason).ok(
        "PATCH", UPDATE_PASSWORD, {"username": ROLLOUT_USER, "password": _password(ROLLOUT_USER)}
    )
    [log] = {path.resolve() for path in tmp_path_factory.getbasetemp().glob("mlflow-auth*/server.log")}
    events = [json.loads(line) for line in log.read_text().splitlines() if "registry-break-glass" in line]
    assert {(e["action"], e["target"]) for e in events if e["reason"] == reason} == {
        ("update-password", ROLLOUT_USER)
    }
    assert any(e["reason"] == LAUNCHER_REASON for e in events)
    assert user_change("admin", "update-password", "admin") is None  # its own password
    assert user_change(ROLLOUT_USER, "update-password", ROLLOUT_USER) is None  # MLflow's own check


def _event(action: str, by: str, versions: dict[str, str], digest: str = "sha256:7") -> Event:
    stamp = f"2026-11-30T00:00:{len(by):02d}.000+00:00"
    digests = {v: digest for v in versions.values()}
    return Event(
        at=stamp, model=MODEL, action=action, by=by, authenticated=True, versions=versions, digests=digests
    )


@pytest.mark.parametrize(
    ("user", "version", "events", "force", "required", "expected"),
    [
        # An approver's own --force (the header the client sends): admitted, named as such.
        (APPROVER, "7", (), True, True, (Kind.PROMOTE, f"promote --force by approver {APPROVER}")),
        # --force is the approver role's: the rollout user's claim of it changes nothing.
        (
            ROLLOUT_USER,
            "7",
            (),
            True,
            True,
            f"no rollout-passed of version 7 (digest sha256:7) by {ROLLOUT_USER}",
        ),
        # Approval off (promotionApproval false): an approver promotes, said so.
        (
            APPROVER,
            "7",
            (),
            False,
            False,
            (Kind.PROMOTE, f"promote by approver {APPROVER} (promotionApproval off"),
        ),
        # The second move of a swapping rollback: champion onto what previous-champion held before the first.
        (
            APPROVER,
            "5",
            (_event(Kind.SET_PREVIOUS_CHAMPION, APPROVER, {"previous-champion": "6", "replaced": "5"}),),
            False,
            True,
            (Kind.ROLLBACK, "rollback onto the former previous-champion (version 5)"),
        ),
        # ... only right after it: a later move ends it.
        (
            APPROVER,
            "5",
            (
                _event(Kind.SET_PREVIOUS_CHAMPION, APPROVER, {"previous-champion": "6", "replaced": "5"}),
                _event(Kind.PROMOTE, APPROVER, {"champion": "6", "replaced": "4"}),
            ),
            False,
            True,
            "version 5 needs an approved promotion request",
        ),
    ],
)
def test_the_registry_rule_for_a_move_of_champion(
    user: str,
    version: str,
    events: tuple[Event, ...],
    force: bool,
    required: bool,
    expected: tuple[Kind, str] | str,
) -> None:
    """guard.py ``move_decision``, the rule behind the REST tests above, case by case (champion 6,
    previous-champion 4)."""
    policy = Policy(required=required, approvers=(APPROVER,), rollout_user=ROLLOUT_USER)
    digest = "sha256:7" if version == "7" else "sha256:5"
    standing = Standing("6", "4", events, digest, "ml-training")
    decided = move_decision(user, MODEL, "champion", version, standing, policy, force=force)
    if isinstance(expected, str):
        assert isinstance(decided, str) and expected in decided, decided
    else:
        assert isinstance(decided, Move) and decided.kind == expected[0], decided
        assert decided.basis.startswith(expected[1]) and decided.replaced == "6", decided
    unreadable = Standing("6", "4", events, "unknown (no metadata.json)", "ml-training")
    if version == "7":
        refused = move_decision(user, MODEL, "champion", version, unreadable, policy, force=force)
        assert isinstance(refused, str) and "cannot read the version's metadata.json" in refused
