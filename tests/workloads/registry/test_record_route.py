"""The registry is the lifecycle record's only writer (review rev40c A1; issue 40 item 4: each event carries
the "authenticated identity from the registry").

The reviewer's repro (rev-40c-out/repro/test_forge_record.py) put events on the record in other people's
names: carol, an approver, appended ``approve`` by alice and promoted alone; a record writer appended
``rollout-passed`` by the stack's rollout user and a version trained on another dataset was promoted over
"not comparable". Here every caller appends through the registry's route (workloads/registry/server/
guard.py ``record_events``), on the real MLflow 3.17.2 basic-auth app with the guard on loopback: the
registry writes ``by`` (the user it authenticated), ``authenticated`` and the time, whatever the body
claims, and refuses a body that names them. Direct writes to the record are the cloud's to forbid (only the
registry's workload identity may put on it: docs/lifecycle.md, "The record").
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from components.handle import ROLLOUT_USER
from tests.workloads.registry.conftest import ADMIN_PASSWORD, PASSWORDS, RESTORERS, admin_client, as_user
from workloads.delivery.monitor import RETRAIN_ACTION, WINDOW_ACTION, history, own
from workloads.registry.approval import APPROVE, PROMOTE, REJECT, REQUEST, ROLLBACK
from workloads.registry.client import RegistryClient, RegistryError
from workloads.registry.lineage import TRAINED_BY_TAG, experiment_name
from workloads.registry.lock import PASSED, PROMOTED, ROLLED_BACK, STOPPED, verdict_action
from workloads.registry.record import (
    ALIAS_MOVES,
    EventError,
    Identity,
    Kind,
    RecordError,
    authenticated_event,
    open_journal,
    open_record,
)
from workloads.registry.rollout import CHALLENGER, CHAMPION
from workloads.registry.server.guard import EVENT_AUTHORS
from workloads.registry.server.launch import AuthApi, User, bootstrap_users

NAME = "digits-record-route"
# Users with no grant on any model: eve, and the stack's drift monitor (the shared server's restorer).
EVE, MONITOR = "eve-no-grants", RESTORERS[0]
NO_GRANTS = {EVE: "eve-has-no-grant-at-all", MONITOR: "the-drift-monitor-reads"}


def _client(uri: str, user: str) -> RegistryClient:
    password = NO_GRANTS.get(user) or PASSWORDS[user]
    return RegistryClient(
        uri, environ={"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password}
    )


@pytest.fixture(scope="module")
def model(auth_registry_uri: str) -> str:
    """``NAME``: version 1 (champion, dataset a), version 2 on the same dataset and version 3 on dataset b,
    both trained by bob."""
    grants = ((NAME, "EDIT"),)
    bootstrap_users(
        AuthApi(auth_registry_uri, ADMIN_PASSWORD),
        [
            User("bob", PASSWORDS["bob"], grants, ((experiment_name(NAME), "EDIT"),)),
            *(User(user, PASSWORDS[user], grants) for user in ("alice", "carol")),
            *(User(user, password, ()) for user, password in NO_GRANTS.items()),
        ],
    )
    admin = admin_client(auth_registry_uri)
    admin.ensure_registered_model(NAME)
    for accuracy, dataset in ((0.97, "a" * 64), (0.975, "a" * 64), (0.10, "b" * 64)):
        run = admin.create_run(admin.experiment_id(NAME), NAME, {})["info"]
        admin.log_batch(
            run["run_id"], metrics={"test_accuracy": accuracy}, params={"dataset_sha256": dataset}
        )
        admin.create_version(NAME, f"{run['artifact_uri']}/model", run["run_id"], {TRAINED_BY_TAG: "bob"})
    admin.set_alias(NAME, CHAMPION, "1")
    return NAME


def test_the_registry_names_who_it_authenticated_whatever_the_caller_claims(
    auth_registry_uri: str, auth_record: Path, model: str, governed_stack: str
) -> None:
    """Part 1 of the repro: carol requests the promotion, then claims alice's approval. A body naming
    ``by`` is refused (400, the field named); a journal that believes it is alice appends as carol, so her
    approval of her own request stays refused and ``promote`` waits for a second person."""
    uri, record, stack = auth_registry_uri, auth_record, ("--stack", governed_stack)
    asked = as_user("carol", uri, record, "request-promotion", model, "2", "--reason", "drift")
    assert asked.exit_code == 0, asked.output
    carol = _client(uri, "carol")
    forged = {"model": model, "action": APPROVE, "by": "alice", "versions": {"candidate": "2"}}
    with pytest.raises(RegistryError) as refused:
        carol.append_record_event(forged)
    assert refused.value.status == 400
    assert "field 'by': set by the registry" in str(refused.value)

    posing = open_journal(carol, str(record), Identity("alice", True))
    event = posing.append(model, APPROVE, {"candidate": "2"}, reason="approved by alice")
    assert (event.by, event.authenticated) == ("carol", True)
    assert open_record(str(record)).read(model)[-1] == event, "what the registry appended, as it said"
    waiting = as_user("carol", uri, record, "promote", model, "2", *stack)
    assert waiting.exit_code == 1 and "awaits an approval" in waiting.output, waiting.output
    assert admin_client(uri).version_by_alias(model, CHAMPION).version == "1"


def test_a_passed_rollout_appended_by_another_user_admits_nothing(
    auth_registry_uri: str, auth_record: Path, model: str, governed_stack: str
) -> None:
    """Part 2 of the repro: with alice's real approval, bob appends ``rollout-passed`` with the labelled pair
    against the champion. It is on the record as bob's, not the rollout user's, so version 3 (trained on
    another dataset) stays "not comparable"."""
    uri, record, stack = auth_registry_uri, auth_record, ("--stack", governed_stack)
    asked = as_user("carol", uri, record, "request-promotion", model, "3", "--reason", "drift")
    approved = as_user("alice", uri, record, "approve", model, "3", *stack, "--reason", "if it passed")
    assert asked.exit_code == 0 and approved.exit_code == 0, asked.output + approved.output
    bob = _client(uri, "bob")
    journal = open_journal(bob, str(record), Identity(ROLLOUT_USER, True))
    numbers = {"accuracy": 0.99, "champion_accuracy": 0.98}
    with pytest.raises(RecordError) as forged:
        journal.append(
            model, verdict_action(PASSED), {CHAMPION: "1", CHALLENGER: "3"}, numbers=numbers, reason="passed"
        )
    assert "user bob may not append 'rollout-passed'" in str(forged.value), forged.value
    refused = as_user("carol", uri, record, "promote", model, "3", *stack)
    assert refused.exit_code == 1 and "not comparable" in refused.output, refused.output


def test_a_malformed_event_is_one_line_naming_the_field(auth_registry_uri: str, model: str) -> None:
    """The route refuses, 400, what is not an event: a missing or mistyped field, a field events do not
    have, the registry's own fields; and answers the record it appends to."""
    carol = _client(auth_registry_uri, "carol")
    for body, field in (
        ({"action": APPROVE}, "'model'"),
        ({"model": model, "action": APPROVE, "numbers": "many"}, "'numbers'"),
        ({"model": model, "action": APPROVE, "signed_by": "alice"}, "'signed_by'"),
        ({"model": model, "action": APPROVE, "at": "2020-01-01T00:00:00.000+00:00"}, "'at'"),
        ({"model": model, "action": APPROVE, "authenticated": True}, "'authenticated'"),
    ):
        with pytest.raises(RegistryError) as refused:
            carol.append_record_event(body)
        message = str(refused.value)
        assert refused.value.status == 400 and f"field {field}" in message and "\n" not in message, message


def test_a_caller_reading_another_record_than_the_registry_appends_to_is_refused(
    auth_registry_uri: str, auth_record: Path, tmp_path: Path
) -> None:
    """What a command appends must be what it reads: ``--record`` naming another record than the
    registry's is refused before the command acts, naming both."""
    carol = _client(auth_registry_uri, "carol")
    assert Path(carol.registry_record()) == auth_record
    elsewhere = open_journal(carol, str(tmp_path / "mine"), Identity("carol", True))
    with pytest.raises(RecordError, match=f"appends to {auth_record}; give that record"):
        elsewhere.record.ensure_ready()


def test_the_registry_sets_who_and_when() -> None:
    """``authenticated_event``: the registry's user and clock, the caller's kind and body."""
    now = datetime(2026, 11, 29, 22, 0, tzinfo=UTC)
    event = authenticated_event("carol", {"model": NAME, "action": APPROVE, "reason": "by alice"}, now)
    assert (event.by, event.authenticated, event.at) == ("carol", True, "2026-11-29T22:00:00.000+00:00")
    with pytest.raises(EventError, match="request body must be a JSON object"):
        authenticated_event("carol", [NAME], now)


def _refused(client: RegistryClient, body: dict[str, Any]) -> RegistryError:
    with pytest.raises(RegistryError) as refused:
        client.append_record_event(body)
    assert "\n" not in str(refused.value), refused.value
    return refused.value


def test_each_kind_is_appended_only_by_its_role(
    auth_registry_uri: str, auth_record: Path, model: str
) -> None:
    """Review rev40d A1, A2 (the reviewer's repro, steps 0, 2-5): eve, with no grant, appended approvals,
    rollout stops, retrains and requests that ``promote`` and the drift monitor then believed. Each kind now
    comes only from its role (guard.py ``EVENT_AUTHORS``): 403 naming the kind and the user, nothing on the
    record; an engineer with EDIT requests but does not approve; the drift monitor appends its windows."""
    uri = auth_registry_uri
    eve, bob = _client(uri, EVE), _client(uri, "bob")
    before = len(open_record(str(auth_record)).read(model))
    for client, user, kind in (
        (eve, EVE, APPROVE),
        (eve, EVE, verdict_action(STOPPED)),
        (eve, EVE, RETRAIN_ACTION),
        (eve, EVE, WINDOW_ACTION),
        (eve, EVE, REQUEST),
        (bob, "bob", APPROVE),
        (bob, "bob", verdict_action(PASSED)),
        (bob, "bob", WINDOW_ACTION),
        (admin_client(uri, reason=None), "admin", APPROVE),
        # A move of a protected alias is on the record only as the registry let it through (review rev40d
        # A4): no one appends one, an approver (carol) or the admin with a reason included.
        (_client(uri, "carol"), "carol", PROMOTE),
        (admin_client(uri), "admin", ROLLBACK),
    ):
        refused = _refused(client, {"model": model, "action": kind, "versions": {CHALLENGER: "2"}})
        assert refused.status == 403, refused
        assert f"user {user} " in str(refused) and repr(str(kind)) in str(refused), refused
    assert len(open_record(str(auth_record)).read(model)) == before
    asked = bob.append_record_event({"model": model, "action": REQUEST, "versions": {"candidate": "2"}})
    window = _client(uri, MONITOR).append_record_event(
        {"model": model, "action": WINDOW_ACTION, "versions": {CHAMPION: "1"}, "numbers": {"maxPsi": 0.01}}
    )
    assert (asked["event"]["by"], window["event"]["by"]) == ("bob", MONITOR)


def test_the_model_and_kind_are_the_platforms(auth_registry_uri: str, auth_record: Path, model: str) -> None:
    """Review rev40d A3, C2: ``model`` is a folder of the record, so ``../escaped`` wrote outside it and
    ``NAME/zz`` was read into NAME's history; a free-text action or no version was a step. Each is a 400
    naming the field, and nothing is written."""
    carol = _client(auth_registry_uri, "carol")
    versions = {"candidate": "2"}
    for body, field in (
        ({"model": "../escaped", "action": REQUEST, "versions": versions}, "'model'"),
        ({"model": f"{model}/zz", "action": REQUEST, "versions": versions}, "'model'"),
        ({"model": f"{model}\x00", "action": REQUEST, "versions": versions}, "'model'"),
        ({"model": "no-such-model", "action": REQUEST, "versions": versions}, "'model'"),
        ({"model": model, "action": "note", "versions": versions}, "'action'"),
        ({"model": model, "action": REQUEST}, "'versions'"),
    ):
        refused = _refused(carol, body)
        assert refused.status == 400 and f"field {field}" in str(refused), refused
    assert not (auth_record.parent / "escaped").exists()
    assert not (auth_record / model / "zz").exists()


def test_every_kind_has_its_authors_and_every_append_site_appends_a_kind() -> None:
    """Review rev40d C2, A4: the kinds are record.py ``Kind``; ``EVENT_AUTHORS`` names each (a new kind with
    no author would be a KeyError at the route, or a kind anyone appends), the moves of the protected
    aliases with none (only the registry appends them), and each module that appends names a ``Kind``."""
    assert set(EVENT_AUTHORS) == set(Kind)
    assert {k for k, authors in EVENT_AUTHORS.items() if not authors} == ALIAS_MOVES
    appended: set[str] = {REQUEST, APPROVE, REJECT, PROMOTE, ROLLBACK, WINDOW_ACTION, RETRAIN_ACTION}
    appended |= {verdict_action(o) for o in (PASSED, STOPPED, PROMOTED, ROLLED_BACK)}
    appended |= {f"rollout-{act}" for act in ("pause", "resume", "abort")}  # mlplatform/rollout_cmd.py
    assert appended <= set(Kind)
    assert all(
        isinstance(kind, Kind) for kind in (REQUEST, APPROVE, REJECT, PROMOTE, ROLLBACK, WINDOW_ACTION)
    )


def test_the_monitor_counts_only_its_own_windows() -> None:
    """Review rev40d A1 (repro step 4), defence in depth: a ``drift-window`` deciding ``retrain`` that eve
    appended (or the monitor's name, unauthenticated) started the cooldown; the monitor's state is its own."""
    monitor = Identity(MONITOR, True)
    body = {"model": NAME, "action": WINDOW_ACTION, "versions": {CHAMPION: "1"}}
    numbers = {"maxPsi": 9.0, "threshold": 0.1, "samples": 1000, "decision": "retrain"}
    forged = authenticated_event(EVE, {**body, "numbers": numbers})
    declared = forged.model_copy(update={"by": MONITOR, "authenticated": False})
    mine = authenticated_event(MONITOR, {**body, "numbers": {**numbers, "maxPsi": 0.01, "decision": "none"}})
    assert len(history([forged, declared, mine])[1]) == 2
    assert own([forged, declared, mine], monitor) == [mine]
    assert history(own([forged, declared, mine], monitor))[1] == []
