"""Admission for the model API and ``/metrics``, before any request body is read or parsed.

A plain ASGI middleware rather than FastAPI dependencies because the order matters and FastAPI's is
the wrong one for it: FastAPI parses the JSON body before it runs dependencies, so an unauthenticated
client could make the server parse (and answer 422 about) up to a megabyte of JSON. Here, in order:

1. bearer token (constant-time compare) -> 401; ``/metrics`` too, since its drift scores tell what
   ``/v1/drift`` protects
2. draining or not yet loaded -> 503 with ``Retry-After`` (and ``Connection: close`` while draining)
3. body size, from Content-Length and while streaming -> 413; body arrival within ``body_timeout_s``
   -> 408 (a slow client must not hold a slot, nor a drain, for as long as it likes)
4. only then count the request in flight (what a drain waits for, and the batcher's hint that more
   requests are coming): a half-sent body is not work the server has accepted
and, around all of it, time the request and count its status code.

The fast path: an accepted request to a model route that has a ``fast`` handler (``/v1/predict``, the
model's V2 infer path) goes straight to it with the body already read, skipping FastAPI's routing and
dependency solving, which profiled at over 100 µs per request; the FastAPI routes remain for the other
paths and for the OpenAPI document.

V2 metadata and readiness (``/v2/models/{name}``, ``.../ready``) are authenticated but answer while
loading: telling a client "not ready" is their job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workloads.delivery.contract import ROUTING_KEY_HEADER
from workloads.inference.auth import authorized
from workloads.inference.schemas import ErrorResponse
from workloads.inference.service import Service

CLOSE = (b"connection", b"close")
RETRY_AFTER = (b"retry-after", b"1")

log = logging.getLogger("workloads.inference")


def route_of(path: str) -> str | None:
    """The route label a gated path is counted under; None for paths the gate lets straight through."""
    if path in ("/v1/predict", "/v1/drift", "/metrics"):
        return path
    if path.startswith("/v2/models/"):
        return "/v2/infer" if path.endswith("/infer") else "/v2/models"
    if path.startswith("/v1/"):
        return "other"
    return None


# Routes that need the model loaded and a request body read before they run.
MODEL_ROUTES = frozenset({"/v1/predict", "/v1/drift", "/v2/infer", "other"})


# A fast handler: the body read, and the routing key (``contract.ROUTING_KEY_HEADER``) when a challenger
# is loaded (looked up only then: without one there is nothing to route).
BodyHandler = Callable[[bytes, str | None], Awaitable[Response]]


class ApiGate:
    def __init__(self, app: ASGIApp, service: Service, fast: Mapping[str, BodyHandler]) -> None:
        self.app = app
        self.service = service
        self.fast = fast

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = route_of(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        metrics = self.service.metrics
        status = 500
        started = time.perf_counter()

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if self.service.draining:  # keep-alive clients: go elsewhere
                    headers = list(message.get("headers", []))
                    if CLOSE not in headers:
                        message["headers"] = [*headers, CLOSE]
            await send(message)

        try:
            await self._admit(route, scope, receive, send_status)
        except Exception:
            metrics.error["internal"].inc()
            log.exception("unhandled error on %s", route)
            raise
        finally:
            metrics.route_latency[route].observe(time.perf_counter() - started)
            metrics.responded(route, status)

    async def _admit(self, route: str, scope: Scope, receive: Receive, send: Send) -> None:
        service = self.service
        headers = Headers(scope=scope)
        if service.token is not None and not authorized(headers, service.token.current()):
            await _refuse(send, service, 401, "unauthorized", "missing or invalid bearer token")
            return
        if route not in MODEL_ROUTES:
            await self.app(scope, receive, send)
            return
        if not service.ready:
            await _refuse_unready(send, service)
            return
        limit = service.config.max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await _refuse(send, service, 413, "payload_too_large", f"request body exceeds {limit} bytes")
            return
        try:
            async with asyncio.timeout(service.config.body_timeout_s):
                body = await _read_body(receive, limit)
        except TimeoutError:
            timeout = service.config.body_timeout_s
            await _refuse(
                send, service, 408, "body_timeout", f"request body not received within {timeout:g} s"
            )
            return
        if body is None:
            await _refuse(send, service, 413, "payload_too_large", f"request body exceeds {limit} bytes")
            return
        if service.draining:  # the drain began while the body was arriving
            await _refuse_unready(send, service)
            return
        service.enter()  # accepted: from here a drain waits for this request
        try:
            handler = self.fast.get(scope["path"]) if scope["method"] == "POST" else None
            if handler is not None:
                key = headers.get(ROUTING_KEY_HEADER) if service.challenger is not None else None
                await (await handler(body, key))(scope, receive, send)
            else:
                await self.app(scope, _replay(body, receive), send)
        finally:
            service.leave()


async def _refuse_unready(send: Send, service: Service) -> None:
    reason = "draining" if service.draining else "not_ready"
    await _refuse(send, service, 503, reason, service.not_ready_reason())


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None once it grows past ``limit`` (a chunked body declares no length)."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False) and message["type"] == "http.request"
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields the already-read body once, then defers to the real one (disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _refuse(send: Send, service: Service, status: int, reason: str, message: str) -> None:
    """Answer before the request reaches the app; the connection closes, as the body may be unread."""
    service.metrics.error[reason].inc()
    body = ErrorResponse(error=message).model_dump_json().encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), CLOSE]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status == 503:
        headers.append(RETRY_AFTER)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
