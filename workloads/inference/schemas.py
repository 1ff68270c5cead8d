"""Request and response bodies of ``/v1/predict`` and the Open Inference Protocol (V2), and how
validation errors read to a client.

The row width comes from the model's metadata, so the request model is built per model
(``request_model``); everything else is fixed. Values are strict finite numbers within float32's range:
``"1"``, ``true``, ``NaN``, ``Infinity`` and ``1e39`` (which float32 would turn into infinity) are refused
by name instead of being coerced into a plausible-looking input.

V2 shapes follow the KServe "Open Inference Protocol (V2 Inference Protocol)" REST section
(kserve.github.io/website/docs/concepts/architecture/data-plane/v2-protocol): ``$inference_request``
``{id?, parameters?, inputs: [{name, shape, datatype, parameters?, data}], outputs?: [{name}]}``,
``$inference_response`` ``{model_name, model_version?, id?, outputs: [{name, shape, datatype, data}]}``,
``$metadata_model_response`` ``{name, versions?, platform, inputs, outputs}`` and errors as ``{error}``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

FLOAT32_MAX = float(np.finfo(np.float32).max)
FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-FLOAT32_MAX, le=FLOAT32_MAX)]


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


def flat_instances(raw: bytes, n_features: int) -> ErrorResponse | None:
    """A 422 for one row sent flat (``{"instances": [0, 1, ...]}``), which pydantic would answer with the
    row count or "a valid array" for each number; None for any other body. Read on the failure path only."""
    try:
        instances = json.loads(raw).get("instances")
    except (ValueError, AttributeError):
        return None
    numbers = (
        isinstance(instances, list)
        and instances
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in instances)
    )
    if not numbers:
        return None
    message = (
        f"each instance must be a list of {n_features} numbers (one row); got one flat list of "
        f"{len(instances)} numbers: send [[...]] for one row"
    )
    return ErrorResponse(
        error=f"instances: {message}",
        fields=[{"field": "instances", "message": message, "type": "list_type"}],
    )


def validation_error(exc: ValidationError) -> ErrorResponse:
    """A 422 body naming each offending field; the input values are left out (they may be large)."""
    fields = [
        {"field": field_path(e["loc"]), "message": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False, include_input=False)
    ]
    lines = [f"{f['field']}: {f['message']}" for f in fields[:5]]
    more = f" (+{len(fields) - 5} more)" if len(fields) > 5 else ""
    return ErrorResponse(error="; ".join(lines) + more, fields=fields)


class V2Tensor(BaseModel):
    """A tensor as V2 carries it in JSON: ``data`` in row-major order, flat (nested is accepted too)."""

    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any]


class V2RequestedOutput(BaseModel):
    name: str
    parameters: dict[str, Any] | None = None


class V2InferRequest(BaseModel):
    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: list[V2Tensor] = Field(min_length=1, max_length=1)
    outputs: list[V2RequestedOutput] | None = None


class V2InferResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    outputs: list[V2Tensor]


class V2TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class V2ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: Literal["onnxruntime_onnx"] = "onnxruntime_onnx"
    inputs: list[V2TensorMetadata]
    outputs: list[V2TensorMetadata]
    # Optional model properties, string to string (kserve/open-inference-protocol,
    # open_inference_rest.yaml metadata_model_response.properties; grpc ModelMetadataResponse field 6):
    # the engine, precision, threads and spinning the version runs with (engines.EngineChoice).
    properties: dict[str, str] = Field(default_factory=dict)


class V2Error(BaseModel):
    error: str


# V2 datatype names for the dtypes a model's metadata records.
V2_DATATYPES = {"float32": "FP32", "float16": "FP16", "int64": "INT64"}
