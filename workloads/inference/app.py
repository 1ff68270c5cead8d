"""The HTTP API: ``/v1/predict``, ``/v1/drift``, ``/healthz``, ``/readyz``, ``/metrics``, the Open
Inference Protocol (V2) beside them, and ``/openapi.json``.

The fast JSON path: handlers read the body themselves and validate it with pydantic's JSON parser in one
pass (faster than FastAPI's ``json.loads`` then validate, and one code path for malformed JSON and bad
fields); bodies are built with ``model_dump_json`` for the same reason. The OpenAPI document is assembled
from the same pydantic models. Interactive docs are off: nothing to serve that a client needs, and no
third-party assets to fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
from collections.abc import AsyncIterator, Callable

import numpy as np
from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from workloads.delivery.contract import ROUTING_KEY_HEADER
from workloads.inference.gate import ApiGate, BodyHandler
from workloads.inference.responses import (
    JSON,
    answer,
    describe_bodies,
    json_response,
    parse,
    request_body,
)
from workloads.inference.schemas import (
    ErrorResponse,
    PredictRequest,
    PredictResponse,
    V2InferRequest,
    request_model,
)
from workloads.inference.service import Prediction, Service
from workloads.inference.v2 import add_v2


def create_app(
    service: Service,
    on_load_failure: Callable[[], None] | None = None,
    *,
    on_loaded: Callable[[], None] | None = None,
    load_first: bool = False,
) -> ApiGate:
    """The ASGI app around ``service``: the admission gate, then FastAPI; the model loads in the background
    once the app starts.

    The gate wraps FastAPI rather than being added as its middleware so that the fast path skips all of
    FastAPI's per-request layers (its error middleware and request telemetry included).

    ``on_load_failure`` lets the process runner exit when the model cannot load, instead of serving an
    unready endpoint forever; ``on_loaded`` runs once the model is loaded and warmed (the process runner
    freezes start-up's objects then). ``load_first``: start serving only once the model is loaded (or
    failed).
    """

    def loaded(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        if task.exception() is not None:  # (retrieves it: logged in load)
            if on_load_failure is not None:
                on_load_failure()
        elif on_loaded is not None:
            on_loaded()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.champion.batcher.start()
        loading = asyncio.create_task(service.load())
        loading.add_done_callback(loaded)
        # A registry alias: checked every poll interval, each new version swapped in, and a challenger
        # loaded beside it while the registry asks for a split or a shadow sample (follow.py).
        background = (
            [
                asyncio.create_task(service.follower.run(service.config.poll_interval_s)),
                asyncio.create_task(service.run_shadow()),
            ]
            if service.follower is not None
            else []
        )
        if load_first:
            await asyncio.wait([loading])
        try:
            yield
        finally:
            loading.cancel()
            for task in background:
                task.cancel()
            await service.stop()

    app = FastAPI(
        title="ml-platform inference",
        version=service.artifact.metadata.version,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    _add_probes(app, service)
    fast = {**_add_api(app, service), **add_v2(app, service)}
    describe_bodies(app, (PredictRequest, V2InferRequest))
    _add_route_errors(app)
    return ApiGate(app, service, fast)


def _add_route_errors(app: FastAPI) -> None:
    """404 and 405 in the API's own error schema (``{"error", "fields"}``), saying what would work: the
    method the route takes, or the closest route, instead of Starlette's ``{"detail": "Not Found"}``."""
    paths = sorted({route.path for route in app.routes if isinstance(route, APIRoute)})

    @app.exception_handler(StarletteHTTPException)
    async def route_error(request: Request, exc: StarletteHTTPException) -> Response:
        path = request.url.path
        if exc.status_code == 405:
            allowed = next((v for k, v in (exc.headers or {}).items() if k.lower() == "allow"), "")
            message = f"{request.method} {path}: method not allowed; use {allowed or 'another method'}"
        elif exc.status_code == 404:
            close = difflib.get_close_matches(path, paths, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"routes: {', '.join(paths)}"
            message = f"{path}: no such route; {hint}"
        else:
            message = str(exc.detail)
        return json_response(ErrorResponse(error=message), exc.status_code, dict(exc.headers or {}) or None)


def _add_probes(app: FastAPI, service: Service) -> None:
    meta = service.artifact.metadata

    @app.get("/healthz")
    async def healthz() -> Response:
        """Liveness: the process serves HTTP. Only a model that failed to load makes it unhealthy."""
        healthy = service.failure is None
        body = {"status": "ok" if healthy else "failed", "model": meta.name, "model_version": service.version}
        return Response(content=json.dumps(body), status_code=200 if healthy else 503, media_type=JSON)

    @app.get("/readyz")
    async def readyz() -> Response:
        """Readiness: loaded, warmed and not draining."""
        if service.ready:
            return Response(
                content=json.dumps({"ready": True, "model_version": service.version}), media_type=JSON
            )
        return json_response(ErrorResponse(error=service.not_ready_reason()), 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(content=generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _add_api(app: FastAPI, service: Service) -> dict[str, BodyHandler]:
    """The V1 routes; returns the fast-path handler of ``/v1/predict`` (see ``gate.ApiGate``)."""
    meta = service.artifact.metadata
    body_model = request_model(service.artifact.n_features, service.config.max_instances)
    labels = meta.class_names

    @app.post(
        "/v1/predict",
        openapi_extra=request_body(PredictRequest),
        responses={
            200: {"model": PredictResponse},
            422: {"model": ErrorResponse},
            503: {"model": ErrorResponse},
        },
    )
    async def predict(request: Request) -> Response:
        """Class and scores for each row of raw features; rows may share a model run with other requests.
        Answered by the champion, or the challenger for its share during a rollout (sticky by the
        ``x-routing-key`` header); the ``x-model-version`` header names the version that answered."""
        return await predict_body(await request.body(), request.headers.get(ROUTING_KEY_HEADER))

    def body(outcome: Prediction) -> PredictResponse:
        classes = outcome.scores.argmax(axis=1).tolist()
        return PredictResponse(
            model=meta.name,
            model_version=outcome.version,
            batch_size=outcome.batch_size,
            predictions=classes,
            labels=[labels[c] for c in classes] if labels else [],
            scores=outcome.scores.tolist(),
        )

    async def predict_body(raw: bytes, key: str | None) -> Response:
        payload = parse(service, body_model, raw)
        if isinstance(payload, Response):
            return payload
        rows = np.asarray(payload.instances, dtype=np.float32)
        return await answer(service, service.route(key), rows, "instances", body, routed=True)

    @app.get("/v1/drift")
    async def drift() -> Response:
        """The champion's input drift (``/metrics`` has every loaded version's)."""
        return json_response(service.champion.drift.report(meta.name, service.version))

    return {"/v1/predict": predict_body}
