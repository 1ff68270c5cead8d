"""The registry reads each request once, keeps a registered version's files, renames only break-glass
(review rev40e A1-A4, against MLflow 3.17.2's real permission checks on the shared basic-auth server).

MLflow's permission checks and its handlers read a request's parameters from different places
(mlflow/server/auth/__init__.py ``_get_request_param``: a DELETE's query string unless its body is declared
JSON; handlers.py ``_get_request_message``: any non-GET body, parsed as JSON whatever its Content-Type; the
UI's upload checks ``run_id`` and writes ``run_uuid``), so a request naming the caller's own object to the
check and the served model to the handler passed (the class of mlflow-oidc-auth issue #285). The guard
(workloads/registry/server/guard.py ``parameter_problem``) refuses such a request before either reads it;
``artifact_refusal`` keeps the files of every run a version was registered from; ``rename_refusal`` keeps the
served model's name. Each attack below is the review's, sent as it sent it; each is answered 400 or 403 and
changes nothing.
"""

from __future__ import annotations

import base64
import json
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from workloads.registry.client import RegistryClient, artifact_path
from workloads.registry.lineage import TRAINED_BY_TAG
from workloads.registry.server.guard import (
    ALIAS_ROUTES,
    BREAK_GLASS_HEADER,
    RENAME_ROUTES,
    artifact_unit,
    parameter_problem,
)
from workloads.registry.server.launch import AuthApi, User, bootstrap_users

from .conftest import ADMIN_PASSWORD, admin_client

SERVED = "rv40e-served"
EXPERIMENT = "rv40e-training"
OWN = "rv40e-eve-own"
EVE, BOB = "eve-rv40e", "bob-rv40e"  # no grant at all; training's grants (EDIT on the model and experiment)
PASSWORD = {EVE: "eve-has-no-grant", BOB: "bob-trains-rv40e"}
API, AJAX = "/api/2.0/mlflow", "/ajax-api/2.0/mlflow"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"


def _send(
    uri: str,
    user: str,
    method: str,
    path: str,
    body: Any = None,
    content_type: str | None = "application/json",
    reason: str = "",
) -> tuple[int, dict[str, Any]]:
    """``(status, JSON answer)`` of one raw request as ``user`` (the admin with its password, and its
    break-glass ``reason`` if any)."""
    password = ADMIN_PASSWORD if user == "admin" else PASSWORD[user]
    headers = {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    if reason:
        headers[BREAK_GLASS_HEADER] = reason
    if content_type:
        headers["Content-Type"] = content_type
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(uri + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw.strip() else {}
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, {"message": raw.decode(errors="replace")}


def _client(uri: str, user: str) -> RegistryClient:
    environ = {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": PASSWORD[user]}
    return RegistryClient(uri, environ=environ, attempts=1)


def _version(client: RegistryClient, experiment: str, name: str, content: str) -> tuple[str, dict[str, Any]]:
    run = client.create_run(client.experiment_id(experiment), name, {})["info"]
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "model.onnx").write_text(content)
        client.upload(f"{run['artifact_uri']}/model", Path(folder))
    version = client.create_version(name, f"{run['artifact_uri']}/model", run["run_id"], {})
    return version.version, run


@pytest.fixture(scope="module")
def served(auth_registry_uri: str) -> dict[str, Any]:
    """The served model with its ``@champion`` (the admin's break-glass, as the launcher and the project's
    tests make it), bob with training's grants, eve with none and a model of her own (any user may create
    one, and so holds MANAGE on it: the grant the review presented to MLflow's check)."""
    uri = auth_registry_uri
    admin = admin_client(uri)
    admin.ensure_registered_model(SERVED)
    admin.experiment_id(EXPERIMENT)
    bootstrap_users(
        AuthApi(uri, ADMIN_PASSWORD),
        [
            User(BOB, PASSWORD[BOB], ((SERVED, "EDIT"),), ((EXPERIMENT, "EDIT"),)),
            User(EVE, PASSWORD[EVE]),
        ],
    )
    bob = _client(uri, BOB)
    champion, run = _version(bob, EXPERIMENT, SERVED, "good-v1")
    admin.set_alias(SERVED, "champion", champion)
    admin.set_version_tag(SERVED, champion, TRAINED_BY_TAG, BOB)
    eve = _client(uri, EVE)
    eve.ensure_registered_model(OWN)
    own_version, _ = _version(eve, "rv40e-eve", OWN, "eve-v1")
    eve.set_alias(OWN, "x", own_version)
    return {"uri": uri, "champion": champion, "run": run, "own": own_version}


def _champion(uri: str) -> str | None:
    found = admin_client(uri).alias_or_none(SERVED, "champion")
    return None if found is None else found.version


@pytest.mark.parametrize("prefix", [API, AJAX])
@pytest.mark.parametrize("content_type", [None, "text/plain"])
def test_a_delete_naming_ones_own_model_in_the_query_and_the_served_one_in_the_body_is_refused(
    served: dict[str, Any], prefix: str, content_type: str | None
) -> None:
    """Review rev40e A1: MLflow checked ``can_delete`` on the query's model (eve's own) and deleted the body's
    ``@champion``, answering 200 with nothing on the record."""
    uri = served["uri"]
    query = urllib.parse.urlencode({"name": OWN, "alias": "x"})
    body = {"name": SERVED, "alias": "champion"}
    path = f"{prefix}/registered-models/alias?{query}"
    status, answer = _send(uri, EVE, "DELETE", path, body, content_type)
    assert status == 400, answer
    assert answer["message"].startswith(
        "parameter 'name': the query string gives name='rv40e-eve-own' and the JSON body name='rv40e-served'"
    )
    assert len(answer["message"].splitlines()) == 1
    assert _champion(uri) == served["champion"]


def test_a_delete_whose_body_the_check_does_not_read_is_refused_and_a_json_one_is_not(
    served: dict[str, Any],
) -> None:
    """The body alone, not declared JSON: MLflow's check reads the (empty) query string, its handler the
    body; refused naming the parameter. The same DELETE as JSON is MLflow's to judge as before (eve's own
    non-protected alias: removed). (In the query string alone MLflow's handler finds no name: it reads a
    DELETE's body only.)"""
    uri = served["uri"]
    status, answer = _send(
        uri, EVE, "DELETE", f"{API}/registered-models/alias", {"name": SERVED}, "text/plain"
    )
    assert status == 400
    assert answer["message"].startswith(
        "parameter 'name': a DELETE body not declared Content-Type application/json"
    )
    eve = _client(uri, EVE)
    status, _ = _send(uri, EVE, "DELETE", f"{API}/registered-models/alias", {"name": OWN, "alias": "x"})
    assert status == 200
    eve.set_alias(OWN, "x", served["own"])


@pytest.mark.parametrize(
    ("endpoint", "own", "victim"),
    [
        ("model-versions/delete", {"name": OWN, "version": "1"}, {"name": SERVED, "version": "1"}),
        ("registered-models/delete", {"name": OWN}, {"name": SERVED}),
        (
            "model-versions/delete-tag",
            {"name": OWN, "version": "1", "key": "harmless"},
            {"name": SERVED, "version": "1", "key": TRAINED_BY_TAG},
        ),
    ],
)
def test_the_same_desync_on_deleting_a_version_a_model_or_the_pinned_trainer_is_refused(
    served: dict[str, Any], endpoint: str, own: dict[str, str], victim: dict[str, str]
) -> None:
    """Review rev40e A1 (the champion's version, the served model) and A4 (``mlplatform.trained_by``):
    MLflow's own checks (``DeleteModelVersion``, ``DeleteRegisteredModel``, ``DeleteModelVersionTag``) are
    protected by the same rule."""
    uri = served["uri"]
    query = urllib.parse.urlencode(own)
    status, answer = _send(
        uri, EVE if "tag" not in endpoint else BOB, "DELETE", f"{API}/{endpoint}?{query}", victim, None
    )
    assert status == 400, answer
    assert answer["message"].startswith("parameter 'name': the query string gives")
    version = admin_client(uri).get_version(SERVED, served["champion"])
    assert _champion(uri) == served["champion"] and version.tags.get(TRAINED_BY_TAG) == BOB


def _served_bytes(uri: str, run: dict[str, Any]) -> bytes:
    return admin_client(uri).read_artifact(f"{run['artifact_uri']}/model/model.onnx")


def test_the_ui_upload_naming_two_runs_is_refused(served: dict[str, Any]) -> None:
    """Review rev40e A2: MLflow's UI upload is checked on ``run_id`` (eve's own run) and writes to
    ``run_uuid`` (the champion's run): one parameter under two names, which must agree."""
    uri, run = served["uri"], served["run"]
    eve_run = _client(uri, EVE).create_run(_client(uri, EVE).experiment_id("rv40e-eve"), "eve", {})["info"]
    query = urllib.parse.urlencode(
        {"run_id": eve_run["run_id"], "run_uuid": run["run_id"], "path": "model/model.onnx"}
    )
    status, answer = _send(uri, EVE, "POST", f"{AJAX}/upload-artifact?{query}", b"EVE-REPLACED", "text/plain")
    assert status == 400, answer
    assert answer["message"].startswith("parameter 'run_id': the query string gives run_id=")
    assert _served_bytes(uri, run) == b"good-v1"


def test_a_registered_versions_files_are_immutable_even_to_who_trained_it(served: dict[str, Any]) -> None:
    """Review rev40e A2: training (EDIT on its experiment) rewrote an approved version's files through the
    artifact proxy; the approval and the record name the old digest. Every artifact write route is refused
    on a run a version was registered from (the proxy's PUT, served natively by MLflow's FastAPI app through
    the guard's bridge; its DELETE, and a DELETE of the experiment's whole folder; the UI's upload), naming
    the version; a run with no version is written as before."""
    uri, run = served["uri"], served["run"]
    base = artifact_path(run["artifact_uri"])
    expected = (
        f"user {BOB} may not write or delete artifacts under {artifact_unit(base)[0]!r}: registered model"
        f" {SERVED!r} version {served['champion']} was registered from it"
    )
    target = f"{ARTIFACTS}/{base}/model/model.onnx"
    for method, path, body in (
        ("PUT", target, b"bob-REPLACED"),
        ("DELETE", target, None),
        ("DELETE", f"{ARTIFACTS}/{base}/model", None),
    ):
        status, answer = _send(uri, BOB, method, path, body, "application/octet-stream" if body else None)
        assert status == 403, (method, path, answer)
        assert answer["message"].startswith(expected), answer
    experiment = base.split("/")[0]
    status, answer = _send(uri, BOB, "DELETE", f"{ARTIFACTS}/{experiment}", None, None)
    assert status == 403 and f"under {experiment!r}: registered model {SERVED!r}" in answer["message"]
    query = urllib.parse.urlencode({"run_uuid": run["run_id"], "path": "model/model.onnx"})
    status, answer = _send(uri, BOB, "POST", f"{AJAX}/upload-artifact?{query}", b"bob-REPLACED", "text/plain")
    assert status == 403 and f"{SERVED!r} version {served['champion']}" in answer["message"]
    assert _served_bytes(uri, run) == b"good-v1"
    # A run with no registered version: training uploads to it as before (and may register it).
    bob = _client(uri, BOB)
    fresh = bob.create_run(bob.experiment_id(EXPERIMENT), "fresh", {})["info"]
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "model.onnx").write_text("fresh")
        bob.upload(f"{fresh['artifact_uri']}/model", Path(folder))
    assert bob.read_artifact(f"{fresh['artifact_uri']}/model/model.onnx") == b"fresh"


def test_only_the_admin_renames_a_model_break_glass(served: dict[str, Any]) -> None:
    """Review rev40e A3: whoever held EDIT renamed the served model away (its aliases and grants went with
    it), or swapped two models' names, with no alias request. Refused to all but the admin naming why."""
    uri = served["uri"]
    for user, name in ((BOB, SERVED), (EVE, OWN)):
        status, answer = _send(
            uri, user, "POST", f"{API}/registered-models/rename", {"name": name, "new_name": f"{name}-x"}
        )
        assert status == 403
        assert answer["message"].startswith(f"user {user} may not rename registered model {name!r}: a rename")
    status, answer = _send(
        uri, "admin", "POST", f"{API}/registered-models/rename", {"name": OWN, "new_name": f"{OWN}-x"}
    )
    assert status == 403 and f"header {BREAK_GLASS_HEADER}" in answer["message"]
    for name, new_name in ((OWN, f"{OWN}-x"), (f"{OWN}-x", OWN)):
        renamed = {"name": name, "new_name": new_name}
        status, answer = _send(
            uri, "admin", "POST", f"{API}/registered-models/rename", renamed, reason="test"
        )
        assert status == 200, answer
    assert _champion(uri) == served["champion"]


def test_the_guards_routes_are_the_named_requests_only() -> None:
    """Review rev40e C1: MLflow's table appends its other endpoints (``/graphql``, gateway, jobs) with their
    own handlers; the guard's routes are the service routes of the requests it names, and nothing else."""
    assert {
        (f"{prefix}/registered-models/alias", method)
        for prefix in (API, AJAX)
        for method in ("POST", "DELETE")
    } == ALIAS_ROUTES
    assert {(f"{prefix}/registered-models/rename", "POST") for prefix in (API, AJAX)} == RENAME_ROUTES


@pytest.mark.parametrize(
    ("places", "method", "declared_json", "named"),
    [
        ({"query string": {"version": "1"}, "JSON body": {"version": 1}}, "DELETE", True, None),
        ({"query string": {"run_id": "a"}, "URL path": {"run_uuid": "b"}}, "POST", True, "run_id"),
        (
            {"URL path": {"artifact_path": "1/r"}, "form": {"artifact_path": "1/s"}},
            "PUT",
            False,
            "artifact_path",
        ),
        ({"JSON body": {"name": "m", "flag": True}, "query string": {"flag": "true"}}, "DELETE", True, None),
        ({"JSON body": {"name": "m"}}, "PATCH", False, "name"),
        ({"JSON body": {"name": "m"}}, "GET", False, "name"),
        ({"JSON body": {"name": "m"}, "query string": {"name": "m"}}, "GET", False, None),
        ({"query string": {"name": "m"}}, "DELETE", False, None),
    ],
)
def test_the_rule_of_one_reading(
    places: dict[str, dict[str, Any]], method: str, declared_json: bool, named: str | None
) -> None:
    """The same value in two places (a number in JSON, its text in the query string) is one reading; two
    values, ``run_id`` against ``run_uuid``, or a body the check does not read (a PATCH or DELETE body not
    declared JSON, a GET's body without a query string) are refused naming the parameter."""
    problem = parameter_problem(places, method, declared_json)
    assert (problem is None) == (named is None), problem
    if named is not None:
        assert problem is not None and problem.startswith(f"parameter {named!r}: ")
