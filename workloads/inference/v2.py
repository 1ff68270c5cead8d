"""The Open Inference Protocol (KServe V2) over REST, beside ``/v1``: health, model metadata and readiness,
and inference with V2 tensors, so KServe, Triton and Seldon clients work unchanged.

Source: KServe "Open Inference Protocol (V2 Inference Protocol)", HTTP/REST
(kserve.github.io/website/docs/concepts/architecture/data-plane/v2-protocol): readiness and liveness are
"a 200 status code indicating true and a 4xx status code indicating false"; errors are
``{"error": $string}``; tensor ``data`` is row-major, flat or nested. The model is addressed by the name in
its metadata, optionally with ``/versions/<version>``; any other name or version is a 404.

During a rollout two versions are loaded (the champion and the challenger, docs/delivery.md): the
metadata's ``versions`` lists both, ``/v2/models/<name>/infer`` is routed like ``/v1/predict`` (the split,
sticky by ``x-routing-key``), and ``/versions/<version>/infer`` runs exactly that version (a labelled set
sent to the challenger), or is a 404 naming the versions loaded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import FastAPI, Request, Response
from pydantic import TypeAdapter, ValidationError

from workloads.delivery.contract import ROUTING_KEY_HEADER
from workloads.inference.gate import BodyHandler
from workloads.inference.responses import JSON, answer, json_response, parse, request_body
from workloads.inference.schemas import (
    V2_DATATYPES,
    FiniteFloat,
    V2Error,
    V2InferRequest,
    V2InferResponse,
    V2ModelMetadata,
    V2Tensor,
    V2TensorMetadata,
)
from workloads.inference.service import Prediction, Service

NOT_TRUE = 400  # the spec's "4xx indicating false"
_values = TypeAdapter(list[FiniteFloat])


def _error(status: int, message: str) -> Response:
    return json_response(V2Error(error=message), status)


def _state(flag: str, value: bool) -> Response:
    return Response(
        content=f'{{"{flag}": {str(value).lower()}}}', status_code=200 if value else NOT_TRUE, media_type=JSON
    )


def _metadata(service: Service) -> V2ModelMetadata:
    meta = service.artifact.metadata

    def tensors(specs: list[Any]) -> list[V2TensorMetadata]:
        return [
            V2TensorMetadata(name=t.name, datatype=V2_DATATYPES[t.dtype], shape=[d or -1 for d in t.shape])
            for t in specs
        ]

    served = service.served
    return V2ModelMetadata(
        name=meta.name,
        versions=_loaded(service),
        inputs=tensors(meta.inputs),
        outputs=tensors(meta.outputs),
        properties=served.model.choice.properties() if served is not None else {},
    )


def _loaded(service: Service) -> list[str]:
    """The versions this server answers for: the champion's (also while it loads), then a challenger's."""
    challenger = service.challenger
    return [service.version] + ([challenger.version] if challenger is not None else [])


def _flatten(data: list[Any]) -> list[Any]:
    """Row-major values from flat or nested ``data`` (nested one level per dimension)."""
    while data and isinstance(data[0], list):
        data = [value for row in data for value in (row if isinstance(row, list) else [row])]
    return data


def _rows(service: Service, request: V2InferRequest) -> np.ndarray[Any, Any] | str:
    """The request's one input as a float32 matrix, or a line naming the field that is wrong."""
    spec = service.artifact.metadata.inputs[0]
    tensor = request.inputs[0]
    features = service.artifact.n_features
    limit = service.config.max_instances
    if tensor.name != spec.name:
        return f"inputs[0].name: the model's input is {spec.name!r}, not {tensor.name!r}"
    if tensor.datatype != "FP32":
        return f"inputs[0].datatype: the model takes FP32, not {tensor.datatype!r}"
    if len(tensor.shape) != 2 or tensor.shape[1] != features or not 1 <= tensor.shape[0] <= limit:
        return f"inputs[0].shape: expected [n, {features}] with 1 <= n <= {limit}, got {tensor.shape}"
    flat = _flatten(tensor.data)
    if len(flat) != tensor.shape[0] * features:
        return f"inputs[0].data: {len(flat)} values do not fill shape {tensor.shape}"
    try:
        values = _values.validate_python(flat)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        return f"inputs[0].data[{first['loc'][0]}]: {first['msg']}"
    return np.asarray(values, dtype=np.float32).reshape(tensor.shape)


def add_v2(app: FastAPI, service: Service) -> dict[str, BodyHandler]:
    """The V2 routes; returns the fast-path handler of the model's infer path (see ``gate.ApiGate``)."""
    meta = service.artifact.metadata
    output = meta.outputs[0].name

    def known(name: str, version: str | None) -> bool:
        return name == meta.name and (version is None or version in _loaded(service))

    def unknown(name: str, version: str | None) -> Response:
        which = name if version is None else f"{name} version {version}"
        versions = " and ".join(repr(v) for v in _loaded(service))
        return _error(404, f"unknown model {which!r}; this server serves {meta.name!r} version {versions}")

    @app.get("/v2/health/live")
    async def live() -> Response:
        return _state("live", service.failure is None)

    @app.get("/v2/health/ready")
    async def server_ready() -> Response:
        return _state("ready", service.ready)

    @app.get("/v2/models/{name}", responses={200: {"model": V2ModelMetadata}, 404: {"model": V2Error}})
    @app.get("/v2/models/{name}/versions/{version}", include_in_schema=False)
    async def model_metadata(name: str, version: str | None = None) -> Response:
        return json_response(_metadata(service)) if known(name, version) else unknown(name, version)

    @app.get("/v2/models/{name}/ready")
    @app.get("/v2/models/{name}/versions/{version}/ready", include_in_schema=False)
    async def model_ready(name: str, version: str | None = None) -> Response:
        return _state("ready", service.ready) if known(name, version) else unknown(name, version)

    @app.post(
        "/v2/models/{name}/infer",
        openapi_extra=request_body(V2InferRequest),
        responses={200: {"model": V2InferResponse}, 422: {"model": V2Error}, 503: {"model": V2Error}},
    )
    @app.post("/v2/models/{name}/versions/{version}/infer", include_in_schema=False)
    async def infer(name: str, request: Request, version: str | None = None) -> Response:
        if not known(name, version):
            return unknown(name, version)
        return await infer_body(await request.body(), request.headers.get(ROUTING_KEY_HEADER), version)

    async def infer_body(raw: bytes, key: str | None, version: str | None = None) -> Response:
        body = parse(service, V2InferRequest, raw)
        if isinstance(body, Response):
            return body
        rows = _rows(service, body)
        if isinstance(rows, str):
            service.metrics.error["validation"].inc()
            return _error(422, rows)
        wanted = {o.name for o in body.outputs or []}
        if wanted - {output}:
            service.metrics.error["validation"].inc()
            return _error(422, f"outputs: the model has one output, {output!r}; asked for {sorted(wanted)}")
        track = service.route(key) if version is None else service.track_for(version)
        if track is None:  # unloaded since the route matched it
            return unknown(meta.name, version)

        def response(outcome: Prediction) -> V2InferResponse:
            scores = outcome.scores
            tensor = V2Tensor(
                name=output, shape=list(scores.shape), datatype="FP32", data=scores.ravel().tolist()
            )
            return V2InferResponse(
                model_name=meta.name, model_version=outcome.version, id=body.id, outputs=[tensor]
            )

        return await answer(service, track, rows, "inputs[0] row", response, routed=version is None)

    return {f"/v2/models/{meta.name}/infer": infer_body}
