"""What the V1 and V2 handlers share: one prediction path with its refusals, JSON responses, and the
OpenAPI description of bodies the handlers parse themselves."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
from fastapi import FastAPI, Response
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ValidationError

from workloads.inference.batcher import BatcherStoppedError, QueueFullError
from workloads.inference.model import Rows
from workloads.inference.schemas import ErrorResponse, validation_error
from workloads.inference.service import Prediction, Service

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
        return json_response(validation_error(exc), 422)


def refused(service: Service, status: int, reason: str, message: str) -> Response:
    service.metrics.error[reason].inc()
    headers = {"retry-after": RETRY_AFTER_S} if status == 503 else None
    return json_response(ErrorResponse(error=message), status, headers)


async def predict_rows(service: Service, rows: Rows, field: str) -> Prediction | Response:
    """Scores for validated rows, or the response that refuses them.

    Overload is a 503 with ``Retry-After``. A row whose scores are not finite (finite float32 input can
    still overflow inside a model) is a 422 naming the row: a 200 would carry ``NaN``, which is not JSON,
    or nulls a client would misread as scores.
    """
    try:
        prediction = await service.predict(rows)
    except (QueueFullError, BatcherStoppedError) as exc:
        return refused(service, 503, "overloaded", f"overloaded: {exc}")
    finite = np.isfinite(prediction.scores).all(axis=1)
    if not finite.all():
        bad = ", ".join(f"{field}[{i}]" for i in np.flatnonzero(~finite)[:5])
        return refused(
            service, 422, "non_finite_output", f"{bad}: the model's output for this row is not finite"
        )
    return prediction


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
