"""Request and response bodies of ``/v1/predict``, and how validation errors read to a client.

The row width comes from the model's metadata, so the request model is built per model
(``request_model``); everything else is fixed. Values are strict finite numbers: ``"1"``, ``true``,
``NaN`` and ``Infinity`` are refused by name instead of being coerced into a plausible-looking input.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class PredictRequest(BaseModel):
    """``{"instances": [[f0, f1, ...], ...]}``: one row of raw features per instance."""

    model_config = ConfigDict(extra="forbid")

    instances: list[list[FiniteFloat]]


class PredictResponse(BaseModel):
    model: str
    model_version: str
    # Rows in the model run that served this request: above the request's own row count, it shared the
    # run with other requests (the evidence that micro-batching happened).
    batch_size: int
    predictions: list[int]
    labels: list[str]
    scores: list[list[float]]


class ErrorResponse(BaseModel):
    """One ``error`` line for humans and logs, ``fields`` for programs."""

    error: str
    fields: list[dict[str, Any]] = Field(default_factory=list)


def request_model(n_features: int, max_instances: int) -> type[PredictRequest]:
    """``PredictRequest`` with its size limits: 1..max_instances rows of exactly n_features values."""
    row = Annotated[list[FiniteFloat], Field(min_length=n_features, max_length=n_features)]
    rows = Annotated[list[row], Field(min_length=1, max_length=max_instances)]
    return create_model("PredictRequest", __base__=PredictRequest, instances=(rows, ...))


def field_path(loc: tuple[int | str, ...]) -> str:
    """``("instances", 0, 3)`` -> ``instances[0][3]``, the way a client would index its own payload."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path or "body"


def validation_error(exc: ValidationError) -> ErrorResponse:
    """A 422 body naming each offending field; the input values are left out (they may be large)."""
    fields = [
        {"field": field_path(e["loc"]), "message": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False, include_input=False)
    ]
    lines = [f"{f['field']}: {f['message']}" for f in fields[:5]]
    more = f" (+{len(fields) - 5} more)" if len(fields) > 5 else ""
    return ErrorResponse(error="; ".join(lines) + more, fields=fields)
