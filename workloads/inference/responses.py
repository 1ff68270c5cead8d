"""What the V1 and V2 handlers share: one prediction path with its refusals, JSON responses, and the
OpenAPI description of bodies the handlers parse themselves.

``answer`` is the prediction path after routing: the track that runs the rows (the champion, or the
challenger for its share), the response carrying the version that answered (body and
``contract.VERSION_HEADER``), that version's response, error and latency series, and the shadow copy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from fastapi import FastAPI, Response
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ValidationError

from workloads.delivery.contract import VERSION_HEADER
from workloads.inference.batcher import BatcherStoppedError, QueueFullError
from workloads.inference.metrics import VersionMetrics
from workloads.inference.model import Rows
from workloads.inference.schemas import ErrorResponse, flat_instances, validation_error
from workloads.inference.service import Prediction, Service, Track

Body = TypeVar("Body", bound=BaseModel)
JSON = "application/json"
REF = "#/components/schemas/{model}"
# Seconds a shed client should wait; one batch deadline is far shorter, so this is the floor HTTP allows.
RETRY_AFTER_S = "1"


def json_response(body: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(content=body.model_dump_json(), status_code=status, media_type=JSON, headers=headers)


def parse(service: Service, model: type[Body], raw: bytes) -> Body | Response:
    """The body validated in one pass by pydantic's JSON parser, or a 422 naming each offending field."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        service.metrics.error["validation"].inc()
        flat = flat_instances(raw, service.artifact.n_features) if "instances" in model.model_fields else None
        return json_response(flat or validation_error(exc), 422)


def refused(
    service: Service,
    status: int,
    reason: str,
    message: str,
    track: tuple[VersionMetrics, str] | None = None,
) -> Response:
    """A refusal, counted; after routing (``track``: the version's series and version) it is that
    version's too, and says which version refused."""
    service.metrics.error[reason].inc()
    headers = {"retry-after": RETRY_AFTER_S} if status == 503 else {}
    if track is not None:
        metrics, version = track
        metrics.errors[reason].inc()
        headers[VERSION_HEADER] = version
    return json_response(ErrorResponse(error=message), status, headers or None)


async def answer(
    service: Service,
    track: Track,
    rows: Rows,
    field: str,
    body: Callable[[Prediction], BaseModel],
    *,
    routed: bool,
) -> Response:
    """The response to validated rows on ``track``: ``body`` of its prediction, or the refusal.

    Overload is a 503 with ``Retry-After``. A row whose scores are not finite (finite float32 input can
    still overflow inside a model) is a 422 naming the row: a 200 would carry ``NaN``, which is not JSON,
    or nulls a client would misread as scores. Either counts against the version that refused; so does
    an unexpected failure (``internal``), which propagates to the gate. A ``routed`` request (not one
    naming its version) answered by the champion may be copied to the challenger, once answered.
    """
    metrics, version = track.metrics, track.version
    answered: Prediction | None = None
    started = time.perf_counter()
    try:
        prediction = await track.predict(rows)
    except (QueueFullError, BatcherStoppedError) as exc:
        response = refused(service, 503, "overloaded", f"overloaded: {exc}", (metrics, version))
    except Exception:
        metrics.errors["internal"].inc()
        metrics.answered(500, time.perf_counter() - started)
        raise
    else:
        finite = np.isfinite(prediction.scores).all(axis=1)
        if finite.all():
            response = json_response(body(prediction), headers={VERSION_HEADER: prediction.version})
            answered = prediction
        else:
            bad = ", ".join(f"{field}[{i}]" for i in np.flatnonzero(~finite)[:5])
            message = f"{bad}: the model's output for this row is not finite"
            response = refused(service, 422, "non_finite_output", message, (metrics, prediction.version))
    metrics.answered(response.status_code, time.perf_counter() - started)
    if answered is not None and routed and service.challenger is not None and track is service.champion:
        service.copy_to_shadow(rows, answered)
    return response


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a handler that reads its body itself: the body's schema, by reference."""
    schema = {"$ref": REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {JSON: {"schema": schema}}}}


def describe_bodies(app: FastAPI, models: tuple[type[BaseModel], ...]) -> None:
    """Serve ``/openapi.json`` with the request models (and the models they nest) in its components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                schema = model.model_json_schema(ref_template=REF)
                schemas.update(schema.pop("$defs", {}))
                schemas[model.__name__] = schema
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the document
