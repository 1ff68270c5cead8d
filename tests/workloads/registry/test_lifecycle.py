"""The governed lifecycle (issue 40) against a real MLflow 3.17.2 on loopback (conftest.py): the trial's
defects (``../shared/reviews/lifecycle.md``), each as the user meets it through ``mlplatform models``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from components.handle import ROLLOUT_USER
from mlplatform.cli import app
from tests.workloads.delivery.fleet import champion_and_challenger
from tests.workloads.inference.conftest import model_dir  # noqa: F401  (the session's trained model)
from tests.workloads.inference.serving import Server, metric_samples, serve_alias, wait_ready
from workloads.delivery import contract
from workloads.registry.client import RegistryClient, RegistryError
from workloads.registry.lineage import TRAINED_BY_TAG, experiment_name
from workloads.registry.lock import AGAINST_TAG, OUTCOME_TAG, PASSED, RESULT_TAG, STOPPED, verdict_action
from workloads.registry.record import RecordError, identity, open_journal, open_record
from workloads.registry.rollout import CHALLENGER, CHAMPION
from workloads.registry.server import guard
from workloads.registry.server.launch import GRANT, REGISTERED_MODEL, AuthApi, User, bootstrap_users

from .conftest import (
    ADMIN_PASSWORD,
    PASSWORDS,
    admin_client,
    as_user,
    named_version,
    register_version,
    with_metadata,
)

pytestmark = pytest.mark.slow

MLPLATFORM = str(Path(sys.executable).with_name("mlplatform"))


def _models(registry_uri: str, *args: str) -> Any:
    return CliRunner().invoke(app, ["models", *args, "--registry-uri", registry_uri])


def test_a_challenger_is_chosen_by_command_and_its_rollout_outcome_listed(registry_uri: str) -> None:
    """Trial defects 14 and 5: choosing a challenger took a direct MLflow call, and ``models list`` did not
    show that a rollout had stopped a version."""
    client = RegistryClient(registry_uri)
    champion_and_challenger(client, "lifecycle-chosen")
    client.set_version_tag("lifecycle-chosen", "2", OUTCOME_TAG, "stopped")
    chosen = _models(registry_uri, "set-challenger", "lifecycle-chosen", "1", "--actor", "ops")
    assert chosen.exit_code == 0, chosen.output
    assert client.version_by_alias("lifecycle-chosen", CHALLENGER).version == "1"
    listed = _models(registry_uri, "list", "lifecycle-chosen")
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[0]: line for line in listed.output.splitlines()}
    assert rows["2"].endswith("last_rollout=stopped") and rows["1"].endswith("last_rollout=-")


def test_listing_an_unknown_model_is_one_line_naming_those_that_exist(registry_uri: str) -> None:
    """Trial defect 7: ``models list digits-mlp`` exited 0 with no output."""
    champion_and_challenger(RegistryClient(registry_uri), "lifecycle-listed")
    result = _models(registry_uri, "list", "lifecycle-listd")
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: lifecycle-listd: no such registered model (the registry has: ")
    assert "lifecycle-listed" in line


# -- a rollout killed mid-step: its lease lapses, every server returns to 0 with no command ----------------

LEASE_NAME = "digits-lease"
LEASE_POLL_S = 0.3
WINDOW_S, GRACE_S = 3, 2
# Beyond the servers' bound (window + grace + one poll interval), what lies between the lease's lapse and
# the test seeing 0 on both servers: the lapsing poll's own registry read and the challenger's unload (tens
# of ms on loopback, a few hundred on a busy 2-core runner), then the test's own look (a 0.05 s pause and
# one /metrics scrape of each server).
OBSERVED_S = 0.5
LEASE_PLAN = {
    "steps": [5, 50],
    "windowSeconds": WINDOW_S,
    "leaseGraceSeconds": GRACE_S,
    "applyTimeoutSeconds": 30,
    "bake": {"seconds": 0},
}


def _shares(server: Server) -> tuple[float, float]:
    """The split and shadow the server applies now (0 when no challenger is loaded)."""
    found = {name: value for (name, _), value in metric_samples(server).items() if name in _APPLIED}
    return found.get(contract.SPLIT_APPLIED, 0.0), found.get(contract.SHADOW_APPLIED, 0.0)


_APPLIED = (contract.SPLIT_APPLIED, contract.SHADOW_APPLIED)


def test_a_rollout_killed_mid_step_has_its_share_back_at_0_within_a_window_and_the_grace(
    registry_uri: str,
    model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Issue 40's "Done when" (trial defect 2): ``mlplatform rollout`` SIGKILLed at 5 % (OOM, a lost node)
    left the split live and unjudged for up to two hours. With the lease, both real servers are back at 0
    within ``windowSeconds + leaseGraceSeconds`` plus one poll of theirs (``SERVE_POLL_INTERVAL_S``) of the
    kill, with no command run, while the split tag still reads 5; and the next rollout is not locked out.

    Why that bound: every renewal sets the lease to its own time + window + grace, and the last one came
    before the kill, so the lease lapses at most window + grace after it; each server's next poll (at most
    one interval later) reads the lapsed lease and unloads the challenger. The test allows ``OBSERVED_S``
    more, and no other slack: that poll's registry read and the unload, and its own scrape of the servers."""
    client = RegistryClient(registry_uri)
    version_dir = named_version(model_dir, tmp_path / "version", LEASE_NAME)
    champion, challenger = (
        register_version(client, LEASE_NAME, version_dir),
        register_version(client, LEASE_NAME, version_dir),
    )
    client.set_alias(LEASE_NAME, CHAMPION, champion)
    client.set_alias(LEASE_NAME, CHALLENGER, challenger)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(LEASE_PLAN))
    servers = []
    rollout: subprocess.Popen[bytes] | None = None
    try:
        for index in range(2):
            (tmp_path / f"s{index}").mkdir()
            servers.append(
                serve_alias(
                    {"PATH": "/usr/bin:/bin"},
                    registry_uri,
                    f"models:/{LEASE_NAME}@champion",
                    LEASE_POLL_S,
                    tmp_path / f"s{index}",
                )
            )
        for server in servers:
            wait_ready(server)
        log = tmp_path / "rollout.log"
        command = [MLPLATFORM, "rollout", LEASE_NAME, "--plan", str(plan), "--registry-uri", registry_uri]
        command += [arg for server in servers for arg in ("--metrics-url", f"{server.url}/metrics")]
        with log.open("w") as sink:
            rollout = subprocess.Popen(
                command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, env=_env()
            )
        deadline = time.monotonic() + 60
        while "5%: applied on 2 servers" not in log.read_text():
            assert rollout.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert all(_shares(server) == (5.0, 0.0) for server in servers)
        os.killpg(rollout.pid, signal.SIGKILL)
        killed = time.monotonic()
        rollout.wait(10)
        bound = WINDOW_S + GRACE_S + LEASE_POLL_S + OBSERVED_S
        while any(_shares(server) != (0.0, 0.0) for server in servers):
            assert time.monotonic() - killed < bound + 5, [_shares(s) for s in servers]
            time.sleep(0.05)
        elapsed = time.monotonic() - killed
        print(f"every server back at 0 {elapsed:.2f} s after the SIGKILL (bound {bound:.1f} s)")
        assert elapsed <= bound, f"back at 0 after {elapsed:.1f} s, bound {bound:.1f} s"
        tags = client.registered_model(LEASE_NAME).tags
        assert tags[contract.SPLIT_TAG] == "5", "nobody reset the tag: the lease did it"
        # The dead rollout's lock lapsed with its lease: an abort clears it and records why.
        aborted = subprocess.run(
            [MLPLATFORM, "rollout", "abort", LEASE_NAME, "--registry-uri", registry_uri, "--actor", "ops"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=_env(),
        )
        assert aborted.returncode == 0, aborted.stderr
        assert (
            aborted.stdout.strip()
            == f"{LEASE_NAME}: traffic back to the champion; a lapsed rollout lock cleared"
        )
        assert client.registered_model(LEASE_NAME).tags == {contract.SPLIT_TAG: "0", contract.SHADOW_TAG: "0"}
        assert client.get_version(LEASE_NAME, challenger).tags[OUTCOME_TAG] == "stopped"
    finally:
        if rollout is not None and rollout.poll() is None:
            os.killpg(rollout.pid, signal.SIGKILL)
            rollout.wait(10)
        for server in servers:
            server.terminate()


def test_a_registered_version_loads_with_mlflows_own_loader(
    registry_uri: str,
    model_dir: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Trial defect 9: ``mlflow.pyfunc.load_model("models:/digits@champion")`` failed (no ``MLmodel``).
    The trainer's version is an MLflow Model with the ONNX flavour (workloads/mlmodel.py): MLflow 3.17.2's
    own loader, in a process of its own, loads ``@champion`` through the registry and predicts what ONNX
    Runtime predicts from the same file."""
    client = RegistryClient(registry_uri)
    name = "digits-mlflow-model"
    version = register_version(client, name, model_dir)
    client.set_alias(name, CHAMPION, version)
    rows = np.random.default_rng(0).uniform(0, 16, (5, 64)).astype(np.float32)
    np.save(tmp_path / "rows.npy", rows)
    script = (
        "import sys, numpy as np, mlflow.pyfunc\n"
        f"model = mlflow.pyfunc.load_model('models:/{name}@champion')\n"
        "out = model.predict(np.load(sys.argv[1]))\n"
        "np.save(sys.argv[2], np.asarray(out['logits'] if isinstance(out, dict) else out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "rows.npy"), str(tmp_path / "out.npy")],
        env={**_env(), "MLFLOW_TRACKING_URI": registry_uri},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    session = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"features": rows})
    assert np.allclose(np.load(tmp_path / "out.npy"), expected, atol=1e-5)


def _env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "USER": "lease-test", "HOME": os.environ.get("HOME", "/tmp")}


# -- promotion as a change, on the append-only record, against MLflow's basic-auth app --------------------

GOVERNED = "digits-governed"
DATASET = "a" * 64


def _governed_model(uri: str) -> None:
    """Versions 1 (champion) and 2 of one dataset, 2 registered by bob; carol may move aliases (EDIT)."""
    api = AuthApi(uri, ADMIN_PASSWORD)
    admin = admin_client(uri)
    bootstrap_users(api, [User(user, password) for user, password in PASSWORDS.items()])
    admin.ensure_registered_model(GOVERNED)
    experiment = admin.experiment_id(GOVERNED)
    for accuracy in (0.95, 0.96):
        run = admin.create_run(experiment, "governed", {})["info"]
        admin.log_batch(
            run["run_id"], metrics={"test_accuracy": accuracy}, params={"dataset_sha256": DATASET}
        )
        source = with_metadata(admin, f"{run['artifact_uri']}/model", f"governed {accuracy}")
        admin.create_version(GOVERNED, source, run["run_id"], {TRAINED_BY_TAG: "bob"})
    admin.set_alias(GOVERNED, CHAMPION, "1")
    for user in ("carol", "alice"):
        grant = {"username": user, "resource_type": REGISTERED_MODEL, "resource_id": GOVERNED}
        api.created("POST", GRANT, {**grant, "permission": "EDIT"})


def test_a_promotion_needs_a_second_persons_approval_and_every_step_is_on_the_record(
    auth_registry_uri: str, auth_record: Path, governed_stack: str
) -> None:
    """Issue 40's "Promotion as a change" and "An append-only record" (compliance review S1, L4; trial
    defects 4 and 5): carol requests; bob, who trained the version, and carol, who requested it, may not
    approve; promotion waits for alice's approval; --force is the approver role's only. ``models history``
    shows every step with the registry's authenticated user (not ``$USER``) and the versions' digests."""
    _governed_model(auth_registry_uri)
    uri, record = auth_registry_uri, auth_record
    stack = ("--stack", governed_stack)

    asked = as_user(
        "carol", uri, record, "request-promotion", GOVERNED, "2", "--reason", "better on the same set"
    )
    assert asked.exit_code == 0, asked.output
    early = as_user("carol", uri, record, "promote", GOVERNED, "2", *stack)
    assert early.exit_code == 1 and "awaits an approval" in early.output, early.output
    for user, why in (
        ("bob", "bob is not in the approver role"),
        ("carol", "carol requested this promotion"),
    ):
        refused = as_user(user, uri, record, "approve", GOVERNED, "2", *stack)
        assert refused.exit_code == 1 and why in refused.output, refused.output
    forced = as_user("bob", uri, record, "promote", GOVERNED, "2", *stack, "--force")
    assert forced.exit_code == 1 and "--force is for the approver role" in forced.output, forced.output
    approved = as_user("alice", uri, record, "approve", GOVERNED, "2", *stack, "--reason", "checked")
    assert approved.exit_code == 0, approved.output
    promoted = as_user("carol", uri, record, "promote", GOVERNED, "2", *stack)
    assert promoted.exit_code == 0, promoted.output
    admin = admin_client(uri)
    assert admin.version_by_alias(GOVERNED, CHAMPION).version == "2"
    rolled = as_user("alice", uri, record, "rollback", GOVERNED)
    assert rolled.exit_code == 0, rolled.output

    shown = CliRunner().invoke(app, ["models", "history", GOVERNED, "--record", str(record), "--json"])
    assert shown.exit_code == 0, shown.output
    events = [json.loads(line) for line in shown.output.splitlines()]
    # Each move of a protected alias is one event, appended by the registry as it let the move through
    # (guard.py; review rev40d A4), the test's own seeding of the champion (break-glass) included.
    assert [(e["action"], e["by"], e["authenticated"]) for e in events] == [
        ("promote", "admin", True),
        ("request-promotion", "carol", True),
        ("approve", "alice", True),
        ("set-previous-champion", "carol", True),
        ("promote", "carol", True),
        ("set-previous-champion", "alice", True),
        ("rollback", "alice", True),
    ]
    promote = events[4]
    assert promote["versions"] == {"champion": "2", "replaced": "1"}
    assert promote["reason"].startswith(f"approved by alice at {events[2]['at']}; carol says: promote")
    assert events[6]["versions"] == {"champion": "1", "replaced": "2"}
    assert (
        promote["numbers"]["candidate"]["metric"] == 0.96 and promote["numbers"]["champion"]["metric"] == 0.95
    )
    assert set(promote["digests"]) == {"1", "2"}
    # The alias tags name the authenticated user too, not $USER.
    assert admin.get_version(GOVERNED, "2").tags["mlplatform.alias.champion.by"] == "carol"


SELF_TRAINED = "digits-self-trained"


def test_a_trainer_who_is_also_an_approver_may_not_approve_what_they_trained(
    auth_registry_uri: str, auth_record: Path, governed_stack: str
) -> None:
    """Issue 40 item 3 and "Done when" ("an approval by the trainer is refused"); review rev40b B1: the
    rule read ``mlplatform.trained_by``, a version tag any EDIT holder rewrites (3.17.2
    ``SetModelVersionTag`` needs ``update``), and MLflow records no authenticated creator (a version's
    ``user_id`` is never set, a run's is the client's claim: mlflow/server/handlers.py). The registry's
    guard makes the tag the registering user's own, once: alice, an approver who trains with her own
    registry user, registers version 2; her approval of it is refused, and neither naming bob at
    registration nor rewriting or deleting the tag afterwards changes who trained it."""
    assert guard.TRAINED_BY_TAG == TRAINED_BY_TAG  # the guard's own copy (it imports nothing of ours)
    uri, record = auth_registry_uri, auth_record
    grants = ((SELF_TRAINED, "EDIT"),)
    experiments = ((experiment_name(SELF_TRAINED), "EDIT"),)
    bootstrap_users(
        AuthApi(uri, ADMIN_PASSWORD),
        [User(user, PASSWORDS[user], grants, experiments) for user in ("alice", "bob", "carol")],
    )
    admin, alice = admin_client(uri), _user(uri, "alice", PASSWORDS["alice"])
    admin.ensure_registered_model(SELF_TRAINED)
    versions = []
    for client in (admin, alice):
        run = client.create_run(client.experiment_id(SELF_TRAINED), SELF_TRAINED, {})["info"]
        client.log_batch(run["run_id"], metrics={"test_accuracy": 0.9}, params={"dataset_sha256": DATASET})
        source, trainer = f"{run['artifact_uri']}/model", "bob" if client is admin else "alice"
        if client is alice:
            with pytest.raises(RegistryError, match="alice may not name 'bob' as who trained a version"):
                alice.create_version(SELF_TRAINED, source, run["run_id"], {TRAINED_BY_TAG: "bob"})
        versions.append(client.create_version(SELF_TRAINED, source, run["run_id"], {TRAINED_BY_TAG: trainer}))
    assert [v.tags[TRAINED_BY_TAG] for v in versions] == ["bob", "alice"]
    admin.set_alias(SELF_TRAINED, CHAMPION, "1")
    with pytest.raises(RegistryError, match=f"alice may not rewrite {TRAINED_BY_TAG}"):
        alice.set_version_tag(SELF_TRAINED, "2", TRAINED_BY_TAG, "bob")
    with pytest.raises(RegistryError, match=f"alice may not rewrite {TRAINED_BY_TAG}"):
        # MLflow's DeleteModelVersionTag, which the project's client never sends.
        alice._call(
            "DELETE",
            "model-versions/delete-tag",
            {"name": SELF_TRAINED, "version": "2", "key": TRAINED_BY_TAG},
        )
    assert admin.get_version(SELF_TRAINED, "2").tags[TRAINED_BY_TAG] == "alice"
    stack = ("--stack", governed_stack)
    asked = as_user("bob", uri, record, "request-promotion", SELF_TRAINED, "2", "--reason", "retrained")
    assert asked.exit_code == 0, asked.output
    refused = as_user("alice", uri, record, "approve", SELF_TRAINED, "2", *stack, "--reason", "mine")
    assert refused.exit_code == 1, refused.output
    assert "alice trained version 2; another approver must review it" in refused.output
    approved = as_user("carol", uri, record, "approve", SELF_TRAINED, "2", *stack, "--reason", "checked")
    assert approved.exit_code == 0, approved.output


# -- the rollout's verdict, as promote takes it: from the record, by the stack's rollout user --------------

FORGED = "digits-forged"
ROLLOUT_PASSWORD = "the-rollout-jobs-password"


def _user(uri: str, user: str, password: str) -> RegistryClient:
    return RegistryClient(
        uri, environ={"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password}
    )


def test_a_passed_rollout_counts_only_from_the_record_by_the_stacks_rollout_user(
    auth_registry_uri: str, auth_record: Path, governed_stack: str
) -> None:
    """Review rev40b A1; issue 40 item 5 (promotion "compares like with like ... and respects a stopped
    rollout"). MLflow 3.17.2 lets any EDIT holder set a version tag (``SetModelVersionTag`` needs
    ``update``: mlflow/server/auth/__init__.py; EDIT has it: permissions.py), training's user included, so
    bob, who trained version 2 on another dataset, could write ``passed`` against the champion over a
    stopped rollout and an approver's ``promote`` skipped the dataset rule. The verdict is the record's:
    a ``rollout-passed`` by the stack's rollout user (ml-inference-rollout) naming this champion; a stop
    refuses whatever the tags say; bob's own rollout events are refused by the registry."""
    uri, record = auth_registry_uri, auth_record
    grants = ((FORGED, "EDIT"),)
    bootstrap_users(
        AuthApi(uri, ADMIN_PASSWORD),
        [
            User("bob", PASSWORDS["bob"], grants, ((experiment_name(FORGED), "EDIT"),)),
            *(User(user, PASSWORDS[user], grants) for user in ("alice", "carol")),
            User(ROLLOUT_USER, ROLLOUT_PASSWORD, grants),
        ],
    )
    admin, bob = admin_client(uri), _user(uri, "bob", PASSWORDS["bob"])
    for client, accuracy, dataset in ((admin, 0.97, DATASET), (bob, 0.10, "b" * 64)):
        run = client.create_run(client.experiment_id(FORGED), FORGED, {})["info"]
        client.log_batch(
            run["run_id"], metrics={"test_accuracy": accuracy}, params={"dataset_sha256": dataset}
        )
        source = with_metadata(client, f"{run['artifact_uri']}/model", f"forged {accuracy}")
        client.create_version(FORGED, source, run["run_id"], {TRAINED_BY_TAG: "bob"})
    admin.set_alias(FORGED, CHAMPION, "1")
    stack = ("--stack", governed_stack)
    asked = as_user("carol", uri, record, "request-promotion", FORGED, "2", "--reason", "drift")
    approved = as_user("alice", uri, record, "approve", FORGED, "2", *stack, "--reason", "if it passed")
    assert asked.exit_code == 0 and approved.exit_code == 0, asked.output + approved.output
    runner = _user(uri, ROLLOUT_USER, ROLLOUT_PASSWORD)
    rollouts = open_journal(runner, str(record), identity(runner, "declared"))
    own = open_journal(bob, str(record), identity(bob, "declared"))
    judged = {CHAMPION: "1", CHALLENGER: "2"}

    def promote() -> Any:
        return as_user("carol", uri, record, "promote", FORGED, "2", *stack)

    # bob's tags say passed against the champion, with no rollout on the record; then a rollout of his own
    # (his plan, his metrics URLs) passes on the record: neither is the stack's rollout.
    for key, value in ((OUTCOME_TAG, "passed"), (AGAINST_TAG, "1"), (RESULT_TAG, "passed shadow, 50%")):
        bob.set_version_tag(FORGED, "2", key, value)
    refused = promote()
    assert refused.exit_code == 1 and "not comparable" in refused.output, refused.output
    # bob's rollout events are not appended at all: the registry takes them only from the promotion
    # identities (guard.py ``EVENT_AUTHORS``, review rev40d A2).
    with pytest.raises(RecordError, match="user bob may not append 'rollout-passed'"):
        own.append(FORGED, verdict_action(PASSED), judged, reason="passed shadow, 50%")
    # The stack's rollout stops it: refused whatever the tags say.
    rollouts.append(FORGED, verdict_action(STOPPED), judged, reason="stopped at shadow: accuracy 10.00%")
    refused = promote()
    assert refused.exit_code == 1, refused.output
    assert "version 2's last rollout ended stopped: stopped at shadow: accuracy 10.00%" in refused.output
    # The stack's rollout passes it against this champion, but its plan had no labelled set: nothing
    # compared the two versions' accuracy (review rev40b A2), so the dataset rule stands.
    rollouts.append(FORGED, verdict_action(PASSED), judged, reason="passed shadow, 50%")
    refused = promote()
    assert refused.exit_code == 1 and "(the plan has no labelledSet)" in refused.output, refused.output
    # Measured beside the champion on the plan's labelled set, within the tolerance: admitted.
    beside = {"accuracy": 0.93, "champion_accuracy": 0.935}
    rollouts.append(FORGED, verdict_action(PASSED), judged, reason="passed shadow, 50%", numbers=beside)
    promoted = promote()
    assert promoted.exit_code == 0, promoted.output
    assert admin.version_by_alias(FORGED, CHAMPION).version == "2"


def test_an_abort_with_a_record_is_never_left_unrecorded(registry_uri: str, tmp_path: Path) -> None:
    """Review 35b A1: ``rollout abort --record`` aborted, then failed to append, exit 2 with the abort
    done and nothing saying so. Now a record that cannot take the event refuses the abort before it acts
    (the traffic as it was); one that refuses the append after it acts (a write right the check cannot
    see) says in one line that the abort was done and is not on the record, exit 2; a good one has it."""
    client = RegistryClient(registry_uri)
    name = "lifecycle-abort-recorded"
    champion_and_challenger(client, name)
    client.set_model_tag(name, contract.SPLIT_TAG, "5")

    def abort(record: Path | str) -> Any:
        command = ["rollout", "abort", name, "--registry-uri", registry_uri, "--actor", "ops"]
        return CliRunner().invoke(app, [*command, "--record", str(record)])

    refused = abort("s3:///lifecycle")
    assert refused.exit_code == 2
    [line] = refused.output.strip().splitlines()
    assert line.startswith("error: lifecycle record 's3:///lifecycle': give it as s3://BUCKET/PREFIX"), line
    assert line.endswith(f"; nothing done, {name}'s rollout is as it was"), line
    assert client.registered_model(name).tags[contract.SPLIT_TAG] == "5", "refused, yet acted"

    # The model's folder is a file: the record opens and is ready, the append itself fails after the abort.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / name).write_text("")
    unrecorded = abort(broken)
    assert unrecorded.exit_code == 2
    [line] = unrecorded.output.strip().splitlines()
    assert line.startswith(
        f"error: {name}: no rollout is running; split and shadow are at 0; done but NOT on the lifecycle "
        f"record: lifecycle record {broken}: cannot append"
    ), line
    assert client.registered_model(name).tags[contract.SPLIT_TAG] == "0"

    record = tmp_path / "record"
    client.set_model_tag(name, contract.SPLIT_TAG, "5")
    recorded = abort(record)
    assert recorded.exit_code == 0, recorded.output
    assert client.registered_model(name).tags[contract.SPLIT_TAG] == "0"
    [event] = open_record(str(record)).read(name)
    assert (event.action, event.by, event.versions) == (
        "rollout-abort",
        "ops",
        {"champion": "1", "challenger": "2"},
    )


# -- the record's events belong to a version as it is, not to its number ----------------------------------

RECREATED = "digits-recreated"


def _register_with_metadata(admin: RegistryClient, folder: Path, metadata: str) -> str:
    """Register a version of RECREATED whose metadata.json (what its digest is taken of) is ``metadata``."""
    run = admin.create_run(admin.experiment_id(RECREATED), RECREATED, {})["info"]
    folder.mkdir()
    (folder / "metadata.json").write_text(metadata)
    source = f"{run['artifact_uri']}/model"
    admin.upload(source, folder)
    return admin.create_version(RECREATED, source, run["run_id"], {TRAINED_BY_TAG: "bob"}).version


def test_a_decision_on_a_version_number_reused_by_a_recreated_model_is_refused(
    auth_registry_uri: str, auth_record: Path, governed_stack: str, tmp_path: Path
) -> None:
    """Review rev40c C3: events were matched to versions by number only, and MLflow restarts the numbers
    of a model deleted and re-created under its name, so the old version 1's request and approval promoted
    the new version 1. Each event carries the digests of the versions it names (record.py); one naming
    another digest than the version has now counts for nothing, and the refusal says so in one line."""
    uri, record = auth_registry_uri, auth_record
    # carol requests: EDIT on the model (guard.py ``EVENT_AUTHORS``), granted again on the re-created one.
    users = [User(u, PASSWORDS[u], ((RECREATED, "EDIT"),)) for u in ("alice", "bob", "carol")]
    bootstrap_users(AuthApi(uri, ADMIN_PASSWORD), users)
    admin, stack = admin_client(uri), ("--stack", governed_stack)
    admin.ensure_registered_model(RECREATED)
    assert _register_with_metadata(admin, tmp_path / "old", '{"files": {"model.onnx": "old"}}') == "1"
    asked = as_user("carol", uri, record, "request-promotion", RECREATED, "1", "--reason", "old")
    approved = as_user("alice", uri, record, "approve", RECREATED, "1", *stack, "--reason", "old")
    assert asked.exit_code == 0 and approved.exit_code == 0, asked.output + approved.output

    admin._call("DELETE", "registered-models/delete", {"name": RECREATED})
    admin.ensure_registered_model(RECREATED)
    bootstrap_users(AuthApi(uri, ADMIN_PASSWORD), users)
    assert _register_with_metadata(admin, tmp_path / "new", '{"files": {"model.onnx": "new"}}') == "1"
    stale = "version 1's promotion request of "
    for command in (("promote", RECREATED, "1", *stack), ("approve", RECREATED, "1", *stack)):
        refused = as_user("alice", uri, record, *command)
        assert refused.exit_code == 1, refused.output
        assert stale in refused.output and "(the model was re-created since)" in refused.output
        assert len(refused.output.strip().splitlines()) == 1, refused.output
    asked = as_user("carol", uri, record, "request-promotion", RECREATED, "1", "--reason", "new")
    approved = as_user("alice", uri, record, "approve", RECREATED, "1", *stack, "--reason", "new")
    assert asked.exit_code == 0 and approved.exit_code == 0, asked.output + approved.output
