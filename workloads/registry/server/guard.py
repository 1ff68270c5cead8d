"""Only the promotion identities move ``@champion``: the registry's authorization function.

MLflow's basic-auth app grants per registered model, not per alias. In 3.17.2 moving any alias
(``SetRegisteredModelAlias``) needs ``can_update`` on the model (``validate_can_set_model_or_prompt_
version_alias``, mlflow/server/auth/__init__.py), and so does registering a version (``CreateModelVersion``:
``_authorize_create_version`` requires ``update``); removing one (``DeleteRegisteredModelAlias``) needs
``can_delete``. So training, which must hold EDIT to register its versions and move ``@challenger``,
could move ``@champion`` too (the control review, ``compliance.md`` S1). No grant separates them.

Two ways out were weighed. A separate candidates model (training EDIT there, READ on the served model,
the promotion identity copying a version across: ``CreateModelVersion`` with a ``models:/`` source needs
only READ on the source) changes every caller's model name (the trainer, the servers' challenger, the
rollout, the CLI) and leaves the copy's own alias moves as open as before to whoever holds EDIT on the
served model. MLflow's documented hook does it in one place instead: the basic-auth app calls the
configured ``authorization_function`` (basic_auth.ini; ``authenticate_request``) on every request before
its own permission checks (``_before_request``, and the FastAPI bridge ``_authenticate_custom_for_
fastapi``), and a Flask ``Response`` it returns is the answer. This one authenticates as MLflow's own
``authenticate_request_basic_auth`` does, then refuses (403, ``PERMISSION_DENIED``, naming the user, the
alias and who may) a set or delete of a protected alias by anyone but the promotion identities:

- the protected aliases: ``champion`` (what the servers serve) and ``previous-champion`` (what a rollback
  restores), compared case-insensitively;
- the promotion identities: ``REGISTRY_PROMOTERS`` (a JSON list the stack sets: the rollout's user, the
  gates' pre-approved path, and the approver role, components/kubernetes/workloads.py ``promoters``),
  and MLflow's admin, which the basic-auth app exempts from every check anyway (``sender_is_admin``) and
  which can reset any user's password;
- the restorers: ``REGISTRY_RESTORERS`` (the drift monitor's user, which rolls back on labelled accuracy,
  workloads/delivery/monitor.py) may set ``champion`` only onto the version ``previous-champion`` holds,
  read from the registry's own store at the request, and nothing else of the protected aliases: a
  rollback, never a promotion, so a retrain it launched reaches ``@champion`` only through the gates and
  the approval (docs/lifecycle.md);
- a promotion identity's move is decided on the record (review rev40d A4: an approver moved ``@champion``
  alone through MLflow's REST API, nothing on the record): ``move_decision``, with the rule ``mlplatform
  models promote`` applies (approval.py, the same code), from ``REGISTRY_APPROVERS``,
  ``REGISTRY_PROMOTION_APPROVAL`` and ``REGISTRY_ROLLOUT_USER``; and every move of a protected alias let
  through, the admin's and the restorer's included, is appended to the record by the registry once
  MLflow has made it (``_append_move``), one event per move, so no caller appends one (``EVENT_AUTHORS``);
- every other alias (``@challenger``) and every other request goes on to MLflow's own checks;
- the admin's own move of a protected alias is break-glass (docs/security.md, "Break-glass: the
  registry's admin moves the champion"): refused unless the request names its reason in the header
  ``X-ML-Platform-Break-Glass-Reason`` (``BREAK_GLASS_HEADER``; the registry client sends
  ``$MLPLATFORM_BREAK_GLASS_REASON`` there), and logged with that reason.
- so is the admin's change of another user (review 35 A5): of its password, admin flag or existence, or of
  what it may do (grants, roles; ``USER_CHANGES``, from MLflow's own route table). Otherwise the admin
  could reset the rollout user's password and move ``@champion`` as that user, with no reason and no
  line in the log. The launcher's reconciliation of the stack's declared users names its own reason
  (launch.py ``LAUNCHER_REASON``); the admin changing its own password is no such change.

- who trained a version (review rev40b B1): the approval's "not who trained it" (workloads/registry/
  approval.py ``review_refusal``) reads the version tag ``mlplatform.trained_by``, and MLflow records no
  creator it authenticates: a version's ``user_id`` is never set by ``_create_model_version`` (3.17.2
  mlflow/server/handlers.py: ``create_model_version`` takes none), and a run's is the client's own claim
  (``_create_run``: ``user_id=request_message.user_id``). So the guard makes the tag the registry's:
  a ``CreateModelVersion`` may name only its own authenticated user there (``trainer_refusal``), and no
  one but the admin sets or deletes it afterwards (``SetModelVersionTag``/``DeleteModelVersionTag``,
  which any EDIT holder may otherwise send).

- the lifecycle record (review rev40c A1): the registry is its only writer. ``RECORD_ROUTE`` (``POST``) is
  served here, not by MLflow: the authenticated caller sends an event's kind and body, and the registry
  appends it to its own record (``REGISTRY_RECORD``, with its own workload identity) with ``by`` the user
  it authenticated, ``authenticated: true`` and its own time (workloads/registry/record.py
  ``authenticated_event``); a malformed event is a 400 naming the field. ``GET`` answers the record's URI
  once the registry has checked that it can append there (``ensure_ready``). Who may append which kind
  (review rev40d A1, A2, C2): ``EVENT_AUTHORS``, from the roles above (the drift monitor's decisions only by
  the restorers; approvals only by the approvers, rollout steps only by the rollout user; a request or an
  operator's pause only by a user with EDIT on the model in MLflow's own permission store; no move of a
  protected alias, which only the registry appends; the admin only with a break-glass reason), else a
  403 naming the kind and the user; the event's ``model`` must be a
  registered model that exists under MLflow's name rules (rev40d A3: it is a folder of the record), its
  ``action`` one of those kinds and its ``versions`` not empty, else a 400 naming the field.

- around the alias requests (review rev40e): one reading of every request's parameters, refused where
  MLflow's permission check and its handler would read different objects (``parameter_problem``: a DELETE
  naming the caller's own model in its query string and the served one in a body not declared JSON; the
  UI upload's ``run_id`` against ``run_uuid``); a registered version's files immutable (``artifact_refusal``:
  no artifact write or delete under a run a version was registered from, nor under a version's source);
  and no rename of a registered model but the admin's break-glass (``rename_refusal``).

The routes come from MLflow's own table (``get_endpoints``: ``/api/2.0`` and ``/ajax-api/2.0``
``registered-models/alias``), so a path MLflow adds for them is covered too. Loaded by the server's
processes from the image's /app (``authorization_function = guard:authenticate``, launch.py
``write_auth_config``); standard library, Flask and MLflow, the record's writer and the promotion rules
(the image copies workloads/registry/record.py, client.py, approval.py, lock.py and rollout.py under /app).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Response, after_this_request, g, jsonify, request
from mlflow.exceptions import MlflowException
from mlflow.protos.mlflow_artifacts_pb2 import (
    AbortMultipartUpload,
    CompleteMultipartUpload,
    CreateMultipartUpload,
    DeleteArtifact,
    UploadArtifact,
)
from mlflow.protos.model_registry_pb2 import (
    CreateModelVersion,
    DeleteModelVersionTag,
    DeleteRegisteredModelAlias,
    RenameRegisteredModel,
    SetModelVersionTag,
    SetRegisteredModelAlias,
)
from mlflow.protos.service_pb2 import CreatePresignedUploadUrl
from mlflow.server.auth import (
    _get_role_permission_or_default,
    _role_permission_for,
    authenticate_request_basic_auth,
)
from mlflow.server.auth import routes as auth_routes
from mlflow.server.handlers import (
    _get_artifact_repo_mlflow_artifacts,
    _get_model_registry_store,
    get_endpoints,
)
from mlflow.utils.uri import validate_path_is_safe
from mlflow.utils.validation import _validate_model_name
from werkzeug.datastructures import Authorization

from workloads.registry import approval
from workloads.registry.client import MOVE_HEADER, RegistryError, artifact_path
from workloads.registry.lock import PASSED
from workloads.registry.record import (
    ALIAS_MOVES,
    RECORD_ROUTE,
    REGISTRY_RECORD_ENV,
    Event,
    EventError,
    Identity,
    Kind,
    Record,
    RecordError,
    authenticated_event,
    open_record,
)

PROMOTERS_ENV = "REGISTRY_PROMOTERS"
RESTORERS_ENV = "REGISTRY_RESTORERS"
# The approver role (``workloads.registry.approvers``, a JSON list), whether a promotion needs its approval
# (``promotionApproval``: "true" or "false") and the stack's rollout user (components/kubernetes/registry.py).
APPROVERS_ENV = "REGISTRY_APPROVERS"
APPROVAL_ENV = "REGISTRY_PROMOTION_APPROVAL"
ROLLOUT_USER_ENV = "REGISTRY_ROLLOUT_USER"
PROTECTED_ALIASES = ("champion", "previous-champion")
CHAMPION, PREVIOUS_CHAMPION = PROTECTED_ALIASES
ADMIN_USERNAME = "admin"
# Where an admin's move of a protected alias names why (a request header: MLflow's alias request has no
# field for it, and an unknown JSON field would be refused by its request parser).
BREAK_GLASS_HEADER = "X-ML-Platform-Break-Glass-Reason"


# Who trained a version (workloads/registry/lineage.py TRAINED_BY_TAG; this file imports nothing of ours).
TRAINED_BY_TAG = "mlplatform.trained_by"


def _routes(*classes: type) -> frozenset[tuple[str, str]]:
    """(path, method) of every route serving one of the request ``classes``, from MLflow's own table. Only
    the service endpoints carry what ``get_handler`` answers; the table's other endpoints (``/graphql``,
    gateway, jobs: handlers.py ``get_endpoints``) carry their own handlers, so a marked handler tells them
    apart (review rev40e C1)."""
    marked = {c: ("mlplatform-route", c) for c in classes}
    endpoints = get_endpoints(marked.get)  # type: ignore[no-untyped-call]
    return frozenset(
        (path, m) for path, handler, methods in endpoints if handler in marked.values() for m in methods
    )


ALIAS_ROUTES = _routes(SetRegisteredModelAlias, DeleteRegisteredModelAlias)
CREATE_VERSION_ROUTES = _routes(CreateModelVersion)
VERSION_TAG_ROUTES = _routes(SetModelVersionTag, DeleteModelVersionTag)
RENAME_ROUTES = _routes(RenameRegisteredModel)
# Every route that writes or deletes a proxied artifact (mlflow/protos/mlflow_artifacts.proto: upload,
# delete, multipart upload; handlers.py ``_upload_artifact``, ``_delete_artifact_mlflow_artifacts``,
# ``_create_multipart_upload_artifact``...), each naming its path in the URL (``<path:artifact_path>``); a
# run's direct-storage upload URL (``CreatePresignedUploadUrl``: ``run_id`` in the body); and the UI's
# upload (auth/routes.py ``UPLOAD_ARTIFACT``: ``run_uuid`` and ``path`` in the query string,
# handlers.py ``upload_artifact_handler``).
ARTIFACT_PATH_ROUTES = _routes(
    UploadArtifact, DeleteArtifact, CreateMultipartUpload, CompleteMultipartUpload, AbortMultipartUpload
)
PRESIGNED_UPLOAD_ROUTES = _routes(CreatePresignedUploadUrl)
UI_UPLOAD_ROUTES = frozenset({(str(auth_routes.UPLOAD_ARTIFACT), "POST")})
# The routes whose body is a file's bytes, not parameters (``_upload_artifact`` streams it, the UI's
# upload reads ``request.data``): a JSON file uploaded there is no request message.
DATA_BODY_ROUTES = _routes(UploadArtifact) | UI_UPLOAD_ROUTES


# What each of the basic-auth app's user-changing routes changes (mlflow/server/auth/routes.py 3.17.2: the
# constant's name; each is served under /api and /ajax-api).
_USER_CHANGE_ROUTES = {
    "create-user": "CREATE_USER",
    "update-password": "UPDATE_USER_PASSWORD",
    "update-admin": "UPDATE_USER_ADMIN",
    "delete-user": "DELETE_USER",
    "grant-permission": "GRANT_USER_PERMISSION",
    "revoke-permission": "REVOKE_USER_PERMISSION",
    "create-role": "CREATE_ROLE",
    "update-role": "UPDATE_ROLE",
    "delete-role": "DELETE_ROLE",
    "add-role-permission": "ADD_ROLE_PERMISSION",
    "remove-role-permission": "REMOVE_ROLE_PERMISSION",
    "update-role-permission": "UPDATE_ROLE_PERMISSION",
    "assign-role": "ASSIGN_ROLE",
    "unassign-role": "UNASSIGN_ROLE",
}
USER_CHANGES: dict[str, str] = {
    str(getattr(auth_routes, f"{prefix}{constant}")): action
    for action, constant in _USER_CHANGE_ROUTES.items()
    for prefix in ("", "AJAX_")
}


def promoters(env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The users the stack lets move the protected aliases (``REGISTRY_PROMOTERS``), plus the admin."""
    declared = json.loads(env.get(PROMOTERS_ENV) or "[]")
    return tuple(sorted({ADMIN_USERNAME, *declared}))


def restorers(env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The users the stack lets only roll ``champion`` back (``REGISTRY_RESTORERS``)."""
    return tuple(sorted(set(json.loads(env.get(RESTORERS_ENV) or "[]"))))


def approvers(env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The approver role (``REGISTRY_APPROVERS``)."""
    return tuple(sorted(set(json.loads(env.get(APPROVERS_ENV) or "[]"))))


def rollout_users(env: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The stack's rollout user (``REGISTRY_ROLLOUT_USER``), or none."""
    user = env.get(ROLLOUT_USER_ENV, "").strip()
    return (user,) if user else ()


def promotion_policy(env: Mapping[str, str] = os.environ) -> approval.Policy:
    """The stack's promotion rules as ``mlplatform models promote --stack`` applies them (models_cmd.py
    ``_policy``), from the registry's variables: one rule, decided by the same code (approval.py)."""
    rollout = rollout_users(env)
    return approval.Policy(
        required=env.get(APPROVAL_ENV, "").strip().lower() == "true",
        approvers=approvers(env),
        rollout_user=rollout[0] if rollout else None,
    )


def restore_refusal(
    user: str, model: str, alias: str, version: str | None, previous: str | None
) -> str | None:
    """Why the restorer ``user`` may not set ``alias`` of ``model`` onto ``version`` (a delete: None),
    ``previous`` being the version ``previous-champion`` holds, or None."""
    if alias.casefold() == CHAMPION and version is not None and version == previous:
        return None
    held = f"version {previous}" if previous is not None else "no version"
    return (
        f"user {user} may only roll {CHAMPION!r} of registered model {model!r} back to {PREVIOUS_CHAMPION!r}"
        f" ({held}), not move {alias!r}"
        + (f" to version {version}" if version is not None else "")
        + ": a new version reaches champion through the rollout's gates and an approval (mlplatform models"
        " request-promotion, docs/lifecycle.md)"
    )


def refusal(
    user: str, model: str, alias: str, allowed: tuple[str, ...], restoring: tuple[str, ...] = ()
) -> str | None:
    """Why ``user`` may not move ``alias`` of ``model``, or None (a restorer's move: ``restore_refusal``)."""
    if alias.casefold() not in PROTECTED_ALIASES or user in allowed or user in restoring:
        return None
    return (
        f"user {user} may not move alias {alias!r} of registered model {model!r}: only the promotion"
        f" identities move {' and '.join(PROTECTED_ALIASES)} ({', '.join(allowed)}; the stack's rollout"
        " user and workloads.registry.approvers); ask for a promotion with mlplatform models"
        " request-promotion (docs/lifecycle.md)"
    )


def lookalike_refusal(alias: str) -> str | None:
    """Why ``alias`` is refused for everyone as another spelling of a protected alias, or None. MLflow 3.17.2
    compares alias names exactly (``_validate_model_alias_name`` admits any ``[\\w-]`` name;
    ``SqlAlchemyStore.set_registered_model_alias`` stores it as sent), so ``Champion`` is an alias the
    servers never follow, while the protected rule and the record fold case: an approver's ``Champion``
    then ``CHAMPION`` went on the record as two promotions that never happened (review rev40f A2). The
    protected names are taken only as spelled; one that folds to them (Unicode NFKC, then case) is not."""
    folded = unicodedata.normalize("NFKC", alias).casefold()
    if folded not in PROTECTED_ALIASES or alias == folded:
        return None
    return (
        f"alias {alias!r} is another spelling of the protected alias {folded!r}: MLflow would treat it as"
        f" a different alias, which no server follows; name {folded!r} exactly"
    )


def trainer_refusal(user: str, claimed: str | None, *, creating: bool) -> str | None:
    """Why ``user`` may not write ``claimed`` as a version's ``TRAINED_BY_TAG``: at its registration
    (``creating``) only its own name; afterwards not at all (a set or delete). The admin is exempt, as from
    every check of MLflow's. None where it may, or where the request writes no such tag."""
    if user == ADMIN_USERNAME or (creating and claimed in (None, user)):
        return None
    told = (
        f"may not name {claimed!r} as who trained a version"
        if creating
        else f"may not rewrite {TRAINED_BY_TAG}"
    )
    return (
        f"user {user} {told}: {TRAINED_BY_TAG} is set once, at registration, to the registering user, so an"
        " approval can tell who trained the version from who approves it (docs/lifecycle.md)"
    )


def _trainer_claim() -> tuple[str | None, bool] | None:
    """(the ``TRAINED_BY_TAG`` value the request writes, whether it registers a version) of a request that
    registers a version or sets or deletes that tag of one, else None (``request_parameters``)."""
    route = _route()
    if route not in CREATE_VERSION_ROUTES and route not in VERSION_TAG_ROUTES:
        return None
    params = request_parameters()
    if route in CREATE_VERSION_ROUTES:
        tags = params.get("tags")
        named = [
            t.get("value")
            for t in (tags if isinstance(tags, list) else ())
            if isinstance(t, dict) and t.get("key") == TRAINED_BY_TAG
        ]
        return (str(named[-1]) if named else None), True
    if params.get("key") != TRAINED_BY_TAG:
        return None
    value = params.get("value")
    return (None if value is None else str(value)), False


# One reading of a request's parameters (review rev40e A1, A2, A4; the class of mlflow-oidc-auth issue #285).
# MLflow 3.17.2's permission checks and its handlers read them from different places:
# - the checks (mlflow/server/auth/__init__.py ``_get_request_param``): a GET's query string; a POST's or
#   PATCH's JSON body; a DELETE's JSON body if it is declared JSON, else its query string; and the URL's
#   path parameters over either; ``run_id`` falls back to ``run_uuid``; the UI's upload and the artifact
#   reads check ``request.args`` ``run_id`` or else ``run_uuid`` (``_run_id_or_uuid_param``);
# - the handlers (handlers.py ``_get_request_message``): a GET's query string if it has one, else the body;
#   any other method's body, parsed as JSON whatever its Content-Type (``_get_request_json``:
#   ``get_json(force=True)``; the Content-Type is checked for POST and PUT only, server/validation.py
#   ``_validate_content_type``), a JSON string in it decoded again (``_get_normalized_request_json``); the
#   UI's upload writes to ``run_uuid`` (``upload_artifact_handler``).
# So a request naming one object to the check and another to the handler passes the check. One rule for
# every route, MLflow's own checks included: a parameter given in more than one place (query string, JSON
# body, form, URL path), or as both ``run_id`` and ``run_uuid``, must say the same everywhere; and a request
# whose handler reads its body where the check reads the query string (a body not declared JSON on any
# method but GET, a GET with a body and no query string) is refused. What is left is one reading, which the
# guard's own rules use (``request_parameters``).
SAME_PARAMETER = {"run_uuid": "run_id"}


def _route() -> tuple[str, str]:
    """(the route MLflow matched, else the path; the method) of the request."""
    rule = request.url_rule
    return (rule.rule if rule is not None else request.path), request.method


def _body() -> dict[str, Any] | None:
    """The request's body as MLflow's handlers read it (``_get_normalized_request_json``), if an object;
    None for none, a file's bytes (``DATA_BODY_ROUTES``) or anything else."""
    if _route() in DATA_BODY_ROUTES or not request.get_data(cache=True):
        return None
    body = request.get_json(force=True, silent=True)
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return None
    return body if isinstance(body, dict) else None


def _places() -> dict[str, Mapping[str, Any]]:
    """Each place the request names parameters in, with them. The body is read (and kept for MLflow's
    handler) before the form is parsed from it, which would otherwise consume it."""
    body = _body() or {}
    places: dict[str, Mapping[str, Any]] = {
        "query string": request.args.to_dict(flat=True),
        "URL path": dict(request.view_args or {}),
        "form": request.form.to_dict(flat=True) if _route() not in DATA_BODY_ROUTES else {},
        "JSON body": body,
    }
    return {place: params for place, params in places.items() if params}


def _said(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value)


def parameter_problem(
    places: Mapping[str, Mapping[str, Any]], method: str, declared_json: bool
) -> str | None:
    """Why the request's parameters (``places``: each place's parameters) may name one object to MLflow's
    permission check and another to its handler, one line naming the parameter; None where they cannot."""
    seen: dict[str, tuple[str, str, Any]] = {}
    for place, params in places.items():
        for key, value in params.items():
            name = SAME_PARAMETER.get(key, key)
            if name in seen and _said(seen[name][2]) != _said(value):
                first_place, first_key, first = seen[name]
                return (
                    f"parameter {name!r}: the {first_place} gives {first_key}={_said(first)!r} and the"
                    f" {place} {key}={_said(value)!r}; MLflow's permission check and its handler read"
                    " different places, so a request names each parameter once (docs/lifecycle.md)"
                )
            seen.setdefault(name, (place, key, value))
    body = places.get("JSON body")
    if body and method != "GET" and not declared_json:
        return (
            f"parameter {sorted(body)[0]!r}: a {method} body not declared Content-Type application/json is"
            " read by MLflow's handler but not by its permission check (it reads the query string); send"
            " the body as application/json"
        )
    if body and method == "GET" and "query string" not in places:
        return (
            f"parameter {sorted(body)[0]!r}: a GET names its parameters in the query string; MLflow's"
            " handler reads a body its permission check does not"
        )
    return None


def request_parameters() -> dict[str, Any]:
    """The request's parameters once ``parameter_problem`` admits it: every place agrees, so their union."""
    merged: dict[str, Any] = {}
    for params in _places().values():
        merged.update(params)
    return merged


def break_glass(
    user: str, model: str, alias: str, version: str | None, reason: str = ""
) -> dict[str, str | None] | None:
    """The break-glass event an admin's move of a protected alias is (a promotion, rollback or removal
    with no approval: docs/security.md, "Break-glass: the registry's admin moves the champion"), with its
    ``reason``, or None for any other move. The admin is exempt from the rule (MLflow's basic-auth app
    exempts it from every check and it can reset any user's password); its password is the Secret
    ``registry-admin``, which the cluster's admins can read."""
    if user != ADMIN_USERNAME or alias.casefold() not in PROTECTED_ALIASES:
        return None
    return {
        "event": "registry-break-glass",
        "user": user,
        "model": model,
        "alias": alias,
        "action": "delete" if version is None else "set",
        "version": version,
        "reason": reason,
    }


def break_glass_refusal(model: str, alias: str, reason: str) -> str | None:
    """Why the admin's move of protected ``alias`` is refused: it names no reason. None where it does."""
    if reason.strip():
        return None
    return (
        f"user {ADMIN_USERNAME} moves alias {alias!r} of registered model {model!r} with no reason: a"
        f" break-glass move names why in the request header {BREAK_GLASS_HEADER} (mlplatform models: set"
        " MLPLATFORM_BREAK_GLASS_REASON; docs/security.md, 'Break-glass: the registry's admin moves the"
        " champion'), or goes through an approval (mlplatform models request-promotion)"
    )


def user_change(user: str, action: str, target: str, reason: str = "") -> dict[str, str] | None:
    """The break-glass event the admin's ``action`` on user (or role) ``target`` is, with its ``reason``, or
    None: another identity's change, or the admin's change of its own password."""
    if user != ADMIN_USERNAME or (action == "update-password" and target == ADMIN_USERNAME):
        return None
    return {
        "event": "registry-break-glass",
        "user": user,
        "action": action,
        "target": target,
        "reason": reason,
    }


def user_change_refusal(action: str, target: str, reason: str) -> str | None:
    """Why the admin's ``action`` on ``target`` is refused: it names no reason. None where it does."""
    if reason.strip():
        return None
    return (
        f"user {ADMIN_USERNAME} changes {target!r} ({action}) with no reason: a change of another user's"
        " password or permissions lets the admin act as that user (move champion as the rollout user), so it"
        f" names why in the request header {BREAK_GLASS_HEADER} (docs/security.md, 'Break-glass: the"
        " registry's admin moves the champion')"
    )


def _user_change_target() -> tuple[str, str] | None:
    """(action, the user or role changed) of a request that changes a user, else None."""
    action = USER_CHANGES.get(request.path)
    if action is None or request.method == "GET":
        return None
    params = request_parameters()
    target = params.get("username") or params.get("role_id") or params.get("name") or ""
    return action, str(target)


def _alias_target() -> tuple[str, str, str | None] | None:
    """(model, alias, version: None for a delete) of a request that sets or deletes an alias, else None
    (``request_parameters``)."""
    if _route() not in ALIAS_ROUTES:
        return None
    params = request_parameters()
    version = params.get("version") if request.method == "POST" else None
    return (
        str(params.get("name", "")),
        str(params.get("alias", "")),
        None if version is None else str(version),
    )


def _holder(model: str, alias: str) -> str | None:
    """The version ``alias`` of ``model`` holds in the registry's store now, or None."""
    try:
        found = _get_model_registry_store().get_model_version_by_alias(model, alias)  # type: ignore[no-untyped-call]
        return str(found.version)
    except MlflowException:
        return None


def _previous_champion(model: str) -> str | None:
    return _holder(model, PREVIOUS_CHAMPION)


@dataclass(frozen=True)
class Move:
    """A move of a protected alias the registry lets through, as its record event names it: the kind, what
    it rests on (``basis``), the version the alias held before (``replaced``)."""

    kind: Kind
    basis: str
    replaced: str | None = None


@dataclass(frozen=True)
class Standing:
    """What the registry knows at a move of ``model``'s protected aliases: the versions ``champion`` and
    ``previous-champion`` hold, the model's record, and the moved version's digest (record.py
    ``version_digest``, computed here from the version's own files) and ``mlplatform.trained_by``."""

    champion: str | None
    previous: str | None
    events: Sequence[Event] = field(default_factory=tuple)
    digest: str = ""
    trained_by: str | None = None


def _swapped_back(standing: Standing, version: str) -> bool:
    """Whether setting ``champion`` onto ``version`` ends a rollback's swap: the record's latest move of a
    protected alias is the registry's own ``set-previous-champion`` onto the champion now, from ``version``
    (operations.py ``rollback``: ``previous-champion`` onto the champion first, then ``champion`` onto what
    ``previous-champion`` held)."""
    moves = [e for e in standing.events if e.action in ALIAS_MOVES and e.authenticated]
    last = moves[-1] if moves else None
    return (
        last is not None
        and last.action == Kind.SET_PREVIOUS_CHAMPION
        and last.versions.get(PREVIOUS_CHAMPION) == standing.champion
        and last.versions.get(REPLACED) == version
    )


# The role the registry's event of a move names the version the alias held before in.
REPLACED = "replaced"


def move_decision(
    user: str,
    model: str,
    alias: str,
    version: str | None,
    standing: Standing,
    policy: approval.Policy,
    *,
    force: bool = False,
) -> Move | str:
    """What the promotion identity ``user``'s move of protected ``alias`` rests on, or why it is refused
    (one line naming the user, the alias, the model, the version and what is missing; review rev40d A4):

    - ``previous-champion`` only onto the version ``champion`` holds (the first move of ``promote`` and of
      a swapping ``rollback``, operations.py), so no version reaches ``champion`` by a rollback onto it;
    - ``champion`` onto the version ``previous-champion`` holds, or onto the one it held before the last
      swap's first move: a rollback;
    - else ``champion`` as ``mlplatform models promote`` admits it (approval.py ``promotion_refusal``):
      an approver under an approval on the record by another approver who neither requested nor trained
      it and no later rejection where the stack requires approval (``force``: the approver's own
      ``--force``, recorded as such); the rollout user where its gates are the declared pre-approved path
      (it is a promotion identity only then) under its own ``rollout-passed`` against the champion now;
    - no removal: only the admin's break-glass removes a protected alias."""
    moved = f"user {user} may not move {alias!r} of registered model {model!r}"
    if version is None:
        return f"{moved}: a protected alias is removed only by the admin, break-glass (docs/security.md)"
    moved += f" to version {version}"
    if alias.casefold() == PREVIOUS_CHAMPION:
        if version == standing.champion:
            return Move(Kind.SET_PREVIOUS_CHAMPION, f"onto {CHAMPION} (version {version})", standing.previous)
        held = f"version {standing.champion}" if standing.champion else "no version"
        return f"{moved}: {PREVIOUS_CHAMPION} is set only onto the version {CHAMPION} holds ({held})"
    if version == standing.previous:
        return Move(
            Kind.ROLLBACK, f"rollback onto {PREVIOUS_CHAMPION} (version {version})", standing.champion
        )
    if _swapped_back(standing, version):
        return Move(
            Kind.ROLLBACK,
            f"rollback onto the former {PREVIOUS_CHAMPION} (version {version})",
            standing.champion,
        )
    if not standing.digest.startswith("sha256:"):
        return (
            f"{moved}: the registry cannot read the version's metadata.json, so no event on the record can"
            f" be told to be of it ({standing.digest}); register it with mlplatform train"
        )
    missing: list[str] = []
    who = Identity(user, True)
    if user in policy.approvers:
        refused = approval.promotion_refusal(
            standing.events, version, standing.digest, who, policy, force, standing.trained_by
        )
        if refused is None:
            return Move(
                Kind.PROMOTE, _approved_basis(user, version, standing, policy, force), standing.champion
            )
        missing.append(refused)
    if user == policy.rollout_user:
        verdict = approval.rollout_verdict(standing.events, version, standing.digest, policy.rollout_user)
        if verdict is not None and verdict.outcome == PASSED and verdict.against == standing.champion:
            return Move(
                Kind.PROMOTE,
                f"{Kind.ROLLOUT_PASSED} by {user} against {CHAMPION} version"
                f" {standing.champion}: {verdict.reason}",
                standing.champion,
            )
        missing.append(
            f"no {Kind.ROLLOUT_PASSED} of version {version} (digest {standing.digest}) by {user} against the"
            f" {CHAMPION} now (version {standing.champion}) on the record"
        )
    if not missing:
        missing.append(
            f"{user} is neither an approver ({', '.join(policy.approvers) or 'none'}) nor the rollout user"
            f" ({policy.rollout_user or 'none'}): only a rollback onto {PREVIOUS_CHAMPION}"
        )
    return f"{moved}: {'; '.join(missing)}"


def _approved_basis(user: str, version: str, standing: Standing, policy: approval.Policy, force: bool) -> str:
    if force:
        return f"promote --force by approver {user}"
    if not policy.required:
        return f"promote by approver {user} (promotionApproval off: no approval required)"
    found = approval.approving(standing.events, version, standing.digest, policy, standing.trained_by)
    assert found is not None, "promotion_refusal admits no required promotion without an approval"
    return f"approved by {found.by} at {found.at}"


# A registered version's files are what its approval and its record events name (their digest), so they
# are immutable once registered (review rev40e A2): no write or delete of an artifact of a run any version
# was registered from (searched by ``run_id`` in the registry's store) or under any version's source,
# whoever asks; the admin only break-glass. A proxied path is ``[workspaces/<w>/]<experiment>/<run>/
# artifacts/...`` or ``.../models|traces/<id>/...`` (auth/__init__.py ``_EXPERIMENT_ID_PATTERN``,
# ``_artifact_proxy_child_types``); a delete removes the whole subtree, so a shallower path reaches every
# run under it.
_PROXY_PATH = re.compile(r"^(?P<root>(?:workspaces/[^/]+/)?\d+)(?:/(?P<rest>.*))?$")
_TIERS = ("models", "traces")


def artifact_unit(path: str) -> tuple[str, str | None]:
    """(the subtree of a proxied artifact ``path`` a version could be registered from: the run's or the
    logged model's folder, or the path itself where shallower; the run it names, or None)."""
    parts = [part for part in path.strip("/").split("/") if part]
    match = _PROXY_PATH.match("/".join(parts))
    if match is None:
        return "/".join(parts), None
    root = match["root"]
    rest = [part for part in (match["rest"] or "").split("/") if part]
    if not rest:
        return root, None
    if rest[0] in _TIERS:
        return "/".join([root, *rest[:2]]), None
    return f"{root}/{rest[0]}", rest[0]


def _versions_where(filter_string: str) -> list[Any]:
    return list(
        _get_model_registry_store().search_model_versions(filter_string=filter_string, max_results=1)  # type: ignore[no-untyped-call]
    )


def registered_from(unit: str, run: str | None) -> str | None:
    """A registered version (``NAME version N``) whose files lie under artifact subtree ``unit`` or that was
    registered from ``run``, from the registry's own store; None where none."""
    if "'" in unit or (run is not None and "'" in run):
        return f"no version can be told apart for {unit!r} (a quote in it)"
    filters = [f"run_id = '{run}'"] if run else []
    filters += [
        f"source_path LIKE 'mlflow-artifacts:%/{unit}/%'",
        f"source_path LIKE 'mlflow-artifacts:%/{unit}'",
    ]
    for filter_string in filters:
        found = _versions_where(filter_string)
        if found:
            return f"registered model {found[0].name!r} version {found[0].version}"
    return None


def _artifact_target() -> tuple[str, str | None] | None:
    """(the artifact subtree, the run) a request writes or deletes, else None; read as MLflow's handler
    reads it (``validate_path_is_safe`` on the URL's path, the UI upload's ``run_uuid``, the presigned
    upload's ``run_id``)."""
    route = _route()
    if route in ARTIFACT_PATH_ROUTES:
        path = str((request.view_args or {}).get("artifact_path") or "")
        try:
            return artifact_unit(validate_path_is_safe(path))  # type: ignore[no-untyped-call]
        except MlflowException:
            return None  # MLflow's own check refuses a path it cannot canonicalize
    if route in UI_UPLOAD_ROUTES or route in PRESIGNED_UPLOAD_ROUTES:
        run = str(request_parameters().get("run_id") or request_parameters().get("run_uuid") or "")
        return (run, run) if run else None
    return None


def artifact_refusal(user: str, unit: str, holder: str | None, reason: str) -> str | None:
    """Why ``user`` may not write or delete artifacts under ``unit``, ``holder`` being the registered version
    there (``registered_from``); None where none is, or for the admin naming its break-glass ``reason``."""
    if holder is None or (user == ADMIN_USERNAME and reason.strip()):
        return None
    return (
        f"user {user} may not write or delete artifacts under {unit!r}: {holder} was registered from it,"
        " and a registered version's files are immutable (its approval and the record name their digest);"
        " register a new version (docs/lifecycle.md)"
    )


def rename_refusal(user: str, model: str, reason: str) -> str | None:
    """Why ``user`` may not rename registered model ``model`` (review rev40e A3): a rename takes its aliases,
    versions and grants to the new name, so ``models:/NAME@champion`` stops resolving or resolves to another
    model, with no alias request. Only the admin, break-glass; None then."""
    if user == ADMIN_USERNAME and reason.strip():
        return None
    return (
        f"user {user} may not rename registered model {model!r}: a rename moves its aliases ({CHAMPION}"
        f" included) and grants to another name; only {ADMIN_USERNAME} renames, break-glass, naming why in"
        f" the request header {BREAK_GLASS_HEADER} (docs/lifecycle.md)"
    )


def _error_400(why: str) -> Response:
    return _error(400, "INVALID_PARAMETER_VALUE", why)


def _guard_rename(authorization: Authorization, user: str) -> Authorization | Response:
    model = str(request_parameters().get("name", ""))
    reason = request.headers.get(BREAK_GLASS_HEADER, "")
    event: dict[str, str | None] = {
        "event": "registry-break-glass",
        "user": user,
        "action": "rename",
        "model": model,
        "reason": reason,
    }
    return _answer(
        authorization, rename_refusal(user, model, reason), event if user == ADMIN_USERNAME else None
    )


def _guard_artifacts(
    authorization: Authorization, user: str, unit: str, run: str | None
) -> Authorization | Response:
    # MLflow's own check authenticates through this function again: one search a request.
    if "mlplatform_artifact_holder" not in g:
        g.mlplatform_artifact_holder = registered_from(unit, run)
    holder: str | None = g.mlplatform_artifact_holder
    reason = request.headers.get(BREAK_GLASS_HEADER, "")
    event: dict[str, str | None] = {
        "event": "registry-break-glass",
        "user": user,
        "action": "artifact-write",
        "artifacts": unit,
        "version": holder,
        "reason": reason,
    }
    logged = event if user == ADMIN_USERNAME and holder is not None else None
    return _answer(authorization, artifact_refusal(user, unit, holder, reason), logged)


def authenticate() -> Authorization | Response:
    """MLflow's basic authentication, then one reading of the request's parameters, then the admin's changes
    of users, then renames, then registered versions' files, then who trained a version, then the protected
    aliases' rule."""
    authorization = authenticate_request_basic_auth()
    if not isinstance(authorization, Authorization):
        return authorization
    user = str(authorization.username)
    problem = parameter_problem(_places(), request.method, request.is_json)
    if problem is not None:
        return _error_400(problem)
    if request.path == RECORD_ROUTE:
        return record_events(user)
    changed = _user_change_target()
    if changed is not None:
        return _guard_user_change(authorization, user, *changed)
    if _route() in RENAME_ROUTES:
        return _guard_rename(authorization, user)
    written = _artifact_target()
    if written is not None:
        return _guard_artifacts(authorization, user, *written)
    claim = _trainer_claim()
    if claim is not None:
        return _answer(authorization, trainer_refusal(user, claim[0], creating=claim[1]), None)
    target = _alias_target()
    if target is None:
        return authorization
    # MLflow's own check of the request authenticates through this function again: one decision a request.
    decided: Authorization | Response | None = g.get("mlplatform_alias_answer")
    if decided is None:
        decided = g.mlplatform_alias_answer = _guard_alias(authorization, user, *target)
    return decided


def _guard_alias(
    authorization: Authorization, user: str, model: str, alias: str, version: str | None
) -> Authorization | Response:
    """The protected aliases' rule for ``user``'s move; a move it lets through goes on the record once
    MLflow has made it (``_append_move``)."""
    lookalike = lookalike_refusal(alias)
    if lookalike is not None:
        return _error(400, "INVALID_PARAMETER_VALUE", lookalike)
    restoring = restorers()
    why = refusal(user, model, alias, promoters(), restoring)
    if why is not None or alias.casefold() not in PROTECTED_ALIASES:
        return _answer(authorization, why, None)
    reason = request.headers.get(BREAK_GLASS_HEADER, "")
    event = break_glass(user, model, alias, version, reason)
    claim = _move_claim()
    if isinstance(claim, str):
        return _error(400, "INVALID_PARAMETER_VALUE", claim)
    record = _record()
    standing = _standing(model, version, record if user != ADMIN_USERNAME else None)
    move: Move | str
    if event is not None:
        why = break_glass_refusal(model, alias, reason)
        move = Move(
            Kind.PROMOTE if alias.casefold() == CHAMPION and version is not None else _kind(alias, version),
            f"break-glass by {ADMIN_USERNAME}: {reason.strip()}",
            _holder(model, alias),
        )
    elif user in restoring and user not in promoters():
        why = restore_refusal(user, model, alias, version, standing.previous)
        move = Move(
            Kind.ROLLBACK,
            f"restorer {user}: rollback onto {PREVIOUS_CHAMPION} (version {version})",
            standing.champion,
        )
    else:
        move = move_decision(
            user, model, alias, version, standing, promotion_policy(), force=bool(claim.get("force"))
        )
        why = move if isinstance(move, str) else None
    if why is None and isinstance(move, Move) and record is not None:
        try:
            record.ensure_ready()
        except RecordError as exc:
            return _error(503, "TEMPORARILY_UNAVAILABLE", f"{exc}; nothing moved")
        after_this_request(_append_move(record, user, model, alias, version, move, standing, claim))
    return _answer(authorization, why, event)


def _kind(alias: str, version: str | None) -> Kind:
    if version is None:
        return Kind.REMOVE_ALIAS
    return Kind.SET_PREVIOUS_CHAMPION if alias.casefold() == PREVIOUS_CHAMPION else Kind.PROMOTE


def _move_claim() -> dict[str, Any] | str:
    """The caller's ``MOVE_HEADER`` (its reason, numbers and ``force``), or why it is malformed."""
    raw = request.headers.get(MOVE_HEADER, "")
    if not raw:
        return {}
    try:
        claim = json.loads(raw)
    except ValueError:
        claim = None
    if not isinstance(claim, dict) or not set(claim) <= {"reason", "numbers", "force"}:
        return f"header {MOVE_HEADER}: a JSON object of reason, numbers and force"
    if not isinstance(claim.get("numbers", {}), dict) or not isinstance(claim.get("force", False), bool):
        return f"header {MOVE_HEADER}: numbers must be an object and force a boolean"
    return claim


def _record(env: Mapping[str, str] = os.environ) -> Record | None:
    """The registry's own record (``REGISTRY_RECORD``), opened once per process; None where it keeps none."""
    uri = env.get(REGISTRY_RECORD_ENV, "")
    if not uri:
        return None
    return _records.get(uri) or _records.setdefault(uri, open_record(uri))


def version_digest(model: str, version: str) -> str:
    """record.py ``version_digest``, from the registry's own store: the sha256 of the version's
    ``metadata.json`` (an ``mlflow-artifacts:`` source, read from the artifacts it serves), ``unknown
    (why)`` where unreadable, which no event carries."""
    try:
        source = _get_model_registry_store().get_model_version(model, version).source  # type: ignore[no-untyped-call]
        path = f"{artifact_path(source)}/metadata.json"
        with tempfile.TemporaryDirectory() as scratch:
            local = _get_artifact_repo_mlflow_artifacts().download_artifacts(path, scratch)  # type: ignore[no-untyped-call]
            return "sha256:" + hashlib.sha256(Path(local).read_bytes()).hexdigest()
    except (MlflowException, RegistryError, OSError) as exc:
        return f"unknown ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"


def _standing(model: str, version: str | None, record: Record | None) -> Standing:
    """``Standing`` of ``model`` at a move onto ``version``; the record read where one is given."""
    champion, previous = _holder(model, CHAMPION), _holder(model, PREVIOUS_CHAMPION)
    if version is None:
        return Standing(champion, previous)
    try:
        tags = _get_model_registry_store().get_model_version(model, version).tags  # type: ignore[no-untyped-call]
        trained_by = tags.get(TRAINED_BY_TAG)
    except MlflowException:
        trained_by = None
    try:
        events = record.read(model) if record is not None else []
    except RecordError:
        events = []
    return Standing(champion, previous, tuple(events), version_digest(model, version), trained_by)


def _append_move(
    record: Record,
    user: str,
    model: str,
    alias: str,
    version: str | None,
    move: Move,
    standing: Standing,
    claim: Mapping[str, Any],
) -> Any:
    """After MLflow made the move (a 200), its one event on the record: who the registry authenticated, the
    versions with their digests (the registry's), what it rests on; the caller's reason and numbers as its
    claims. A record that then refuses it turns the answer into a 503 saying the move is not on it."""

    def append(response: Response) -> Response:
        if response.status_code != 200:
            return response
        versions = {alias.casefold(): version or "none"}
        if move.replaced is not None and move.replaced != version:
            versions[REPLACED] = move.replaced
        digests = {
            v: standing.digest if v == version and standing.digest else version_digest(model, v)
            for v in sorted(set(versions.values()))
            if v != "none"
        }
        said = str(claim.get("reason", "")).strip()
        event = Event(
            at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            model=model,
            action=move.kind,
            by=user,
            authenticated=True,
            versions=versions,
            digests=digests,
            numbers=json.loads(json.dumps(claim.get("numbers", {}), default=str)),
            reason=move.basis + (f"; {user} says: {said}" if said else ""),
        )
        try:
            record.append(event)
        except RecordError as exc:
            print(
                json.dumps({"event": "record-append-failed", **event.model_dump()}),
                file=sys.stderr,
                flush=True,
            )
            return _error(
                503,
                "TEMPORARILY_UNAVAILABLE",
                f"{alias!r} of registered model {model!r} moved to version {version}, but it is NOT on the"
                f" lifecycle record: {exc}",
            )
        return response

    return append


def _guard_user_change(
    authorization: Authorization, user: str, action: str, target: str
) -> Authorization | Response:
    reason = request.headers.get(BREAK_GLASS_HEADER, "")
    event = user_change(user, action, target, reason)
    why = None if event is None else user_change_refusal(action, target, reason)
    return _answer(authorization, why, event)


def _answer(
    authorization: Authorization, why: str | None, event: Mapping[str, str | None] | None
) -> Authorization | Response:
    """Let the request through, logging its break-glass ``event``, or refuse it (403) for ``why``."""
    if why is None:
        if event is not None:
            # One JSON line in the registry's log for every break-glass request let through.
            print(json.dumps(event, sort_keys=True), file=sys.stderr, flush=True)
        return authorization
    response = jsonify({"error_code": "PERMISSION_DENIED", "message": why})
    response.status_code = 403
    return response


# Who may append each kind of event to the record through the route (reviews rev40d A2, A4): every kind
# of record.py ``Kind`` (tests/workloads/registry/test_record_route.py checks none is missing). The roles are
# the guard's: ``RESTORERS`` the drift monitor's user (``restorers``), ``APPROVERS`` the approver role
# (``approvers``), ``ROLLOUT`` the stack's rollout user (``rollout_users``), ``EDITORS`` any user with EDIT
# (``can_update``) on the event's registered model. The moves of the protected aliases (``ALIAS_MOVES``)
# nobody appends: the registry appends each as it lets it through (``_append_move``). The admin appends any
# other kind, only with a break-glass reason.
RESTORERS, APPROVERS, ROLLOUT, EDITORS = (
    "the drift monitor's user",
    "the approver role",
    "the rollout user",
    "EDIT on the model",
)
EVENT_AUTHORS: dict[Kind, tuple[str, ...]] = {
    Kind.DRIFT_WINDOW: (RESTORERS,),
    Kind.RETRAIN: (RESTORERS,),
    Kind.APPROVE: (APPROVERS,),
    Kind.REJECT: (APPROVERS,),
    **{
        kind: (ROLLOUT,)
        for kind in (
            Kind.ROLLOUT_STEP,
            Kind.ROLLOUT_PASSED,
            Kind.ROLLOUT_STOPPED,
            Kind.ROLLOUT_PROMOTED,
            Kind.ROLLOUT_ROLLED_BACK,
        )
    },
    Kind.REQUEST: (EDITORS,),
    Kind.SET_CHALLENGER: (EDITORS,),
    **{kind: (EDITORS,) for kind in (Kind.ROLLOUT_PAUSE, Kind.ROLLOUT_RESUME, Kind.ROLLOUT_ABORT)},
    **{kind: () for kind in ALIAS_MOVES},
}


def event_refusal(
    event: Event,
    roles: Mapping[str, tuple[str, ...]],
    can_edit: bool,
    reason: str = "",
) -> str | None:
    """Why ``event.by`` may not append ``event``: it holds none of the roles ``EVENT_AUTHORS`` names for its
    kind (``roles``: each role's users; ``can_edit``: EDIT on the model). The admin may, naming ``reason``.
    None where it may."""
    user, kind = event.by, str(event.action)
    allowed = EVENT_AUTHORS[Kind(kind)]
    if not allowed:
        return (
            f"user {user} may not append {kind!r} for registered model {event.model!r}: a move of"
            f" {' or '.join(PROTECTED_ALIASES)} goes on the record only as the registry lets it through"
            " (docs/lifecycle.md, 'Who appends what')"
        )
    if user == ADMIN_USERNAME:
        if reason.strip():
            return None
        return (
            f"user {ADMIN_USERNAME} appends {kind!r} with no reason: a break-glass append names why in the"
            f" request header {BREAK_GLASS_HEADER} (docs/security.md)"
        )
    if any(user in roles.get(role, ()) for role in allowed) or (EDITORS in allowed and can_edit):
        return None
    return (
        f"user {user} may not append {kind!r} for registered model {event.model!r}: only"
        f" {' or '.join(allowed)} (docs/lifecycle.md, 'Who appends what')"
    )


def event_problem(event: Event) -> str | None:
    """What is wrong with ``event``'s kind, model name or versions (one line naming the field), or None."""
    if event.action not in EVENT_AUTHORS:
        return f"field 'action': {event.action!r} is no lifecycle event kind ({', '.join(EVENT_AUTHORS)})"
    model = event.model
    if ".." in model or "\\" in model or any(ord(c) < 32 or ord(c) == 127 for c in model):
        return f"field 'model': {model!r} is no registered model name (no '..', '\\' or control characters)"
    try:
        _validate_model_name(model)
    except MlflowException as exc:
        return f"field 'model': {exc.message}"
    if not event.versions:
        return f"field 'versions': {event.action!r} names no version"
    return None


def _can_edit(user: str, model: str) -> bool:
    """Whether ``user`` holds ``can_update`` on registered model ``model``, read as MLflow 3.17.2 reads it
    for its own routes (``_get_registered_model_permission``, which authenticates through this function
    again, so its parts are called with the user already authenticated)."""
    permission = _get_role_permission_or_default(
        _role_permission_for(
            username=user,
            resource_type="registered_model",
            resource_key=model,
            workspace_lookup_id=model,
            workspace_fetcher=_get_model_registry_store().get_registered_model,
            workspace_label="registered model",
        )
    )
    return bool(permission.can_update)


def _model_exists(model: str) -> bool:
    try:
        _get_model_registry_store().get_registered_model(model)  # type: ignore[no-untyped-call]
    except MlflowException:
        return False
    return True


# The registry's record, opened once per process (an S3 or Blob record checks its lock once).
_records: dict[str, Record] = {}


def _error(status: int, code: str, message: str) -> Response:
    response = jsonify({"error_code": code, "message": message})
    response.status_code = status
    return response


def record_events(user: str, env: Mapping[str, str] = os.environ) -> Response:
    """``RECORD_ROUTE``: append the request's event for ``user`` (POST), or answer which record the registry
    appends to once it can (GET); 404 on a registry that keeps none, 400 for a malformed event naming the
    field, 503 where the record refuses the write."""
    uri = env.get(REGISTRY_RECORD_ENV, "")
    if not uri:
        return _error(
            404,
            "RESOURCE_DOES_NOT_EXIST",
            f"this registry keeps no lifecycle record ({REGISTRY_RECORD_ENV} unset)",
        )
    if request.method not in ("GET", "POST"):
        return _error(405, "INVALID_PARAMETER_VALUE", f"{request.method} {RECORD_ROUTE}: only GET or POST")
    try:
        record = _record(env)
        assert record is not None, "REGISTRY_RECORD is set"
        if request.method == "GET":
            record.ensure_ready()
            return jsonify({"record": uri})
        event = authenticated_event(user, request.get_json(silent=True))
        problem = event_problem(event)
        if problem is None and not _model_exists(event.model):
            problem = f"field 'model': registered model {event.model!r} does not exist"
        if problem is not None:
            raise EventError(problem)
        roles = {RESTORERS: restorers(env), APPROVERS: approvers(env), ROLLOUT: rollout_users(env)}
        can_edit = EDITORS in EVENT_AUTHORS[Kind(event.action)] and _can_edit(user, event.model)
        why = event_refusal(event, roles, can_edit, request.headers.get(BREAK_GLASS_HEADER, ""))
        if why is not None:
            return _error(403, "PERMISSION_DENIED", f"lifecycle record event refused: {why}")
        record.append(event)
    except EventError as exc:
        return _error(400, "INVALID_PARAMETER_VALUE", f"lifecycle record event refused: {exc}")
    except RecordError as exc:
        return _error(503, "TEMPORARILY_UNAVAILABLE", str(exc))
    return jsonify({"event": event.model_dump(), "record": uri})
