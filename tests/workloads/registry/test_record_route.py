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

import pytest

from components.handle import ROLLOUT_USER
from tests.workloads.registry.conftest import ADMIN_PASSWORD, PASSWORDS, admin_client, as_user
from workloads.registry.approval import APPROVE
from workloads.registry.client import RegistryClient, RegistryError
from workloads.registry.lineage import TRAINED_BY_TAG, experiment_name
from workloads.registry.lock import PASSED, verdict_action
from workloads.registry.record import (
    EventError,
    Identity,
    RecordError,
    authenticated_event,
    open_journal,
    open_record,
)
from workloads.registry.rollout import CHALLENGER, CHAMPION
from workloads.registry.server.launch import AuthApi, User, bootstrap_users

NAME = "digits-record-route"


def _client(uri: str, user: str) -> RegistryClient:
    return RegistryClient(
        uri, environ={"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": PASSWORDS[user]}
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
    passed = journal.append(
        model, verdict_action(PASSED), {CHAMPION: "1", CHALLENGER: "3"}, numbers=numbers, reason="passed"
    )
    assert passed.by == "bob"
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
