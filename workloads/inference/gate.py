"""Admission for the ``/v1/*`` API, before any request body is read or parsed.

A plain ASGI middleware rather than FastAPI dependencies because the order matters and FastAPI's is
the wrong one for it: FastAPI parses the JSON body before it runs dependencies, so an unauthenticated
client could make the server parse (and answer 422 about) up to a megabyte of JSON. Here, in order:

1. bearer token (constant-time compare) -> 401
2. draining or not yet loaded -> 503 (with ``Connection: close`` while draining)
3. count the request in flight (what a drain waits for, and the batcher's hint that more are coming)
4. body size, from Content-Length and while streaming -> 413
and, around all of it, time the request and count its status code.
"""

from __future__ import annotations

import hmac
import logging
import time
from pathlib import Path

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workloads.inference.schemas import ErrorResponse
from workloads.inference.service import Service

API_PREFIX = "/v1/"
API_ROUTES = frozenset({"/v1/predict", "/v1/drift"})
CLOSE = (b"connection", b"close")

log = logging.getLogger("workloads.inference")


def read_token(path: Path) -> bytes:
    """The bearer token from a mounted secret file; an empty file is a misconfiguration, not 'no auth'."""
    token = path.read_bytes().strip()
    if not token:
        raise ValueError(f"{path}: auth token file is empty")
    return token


def authorized(headers: Headers, token: bytes) -> bool:
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    # compare_digest takes the same time wherever the first differing byte is.
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token)


class ApiGate:
    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in API_ROUTES else "other"
        status = 500
        started = time.perf_counter()

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                if self.service.draining and CLOSE not in headers:  # keep-alive clients: go elsewhere
                    message["headers"] = [*headers, CLOSE]
            await send(message)

        try:
            await self._admit(scope, receive, send_status)
        except Exception:
            self.service.metrics.errors.labels("internal").inc()
            log.exception("unhandled error on %s", route)
            raise
        finally:
            self.service.metrics.latency.labels(route).observe(time.perf_counter() - started)
            self.service.metrics.responses.labels(route, str(status)).inc()

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        service = self.service
        headers = Headers(scope=scope)
        if service.token is not None and not authorized(headers, service.token):
            await _refuse(send, service, 401, "unauthorized", "missing or invalid bearer token")
            return
        if not service.ready:
            reason = "draining" if service.draining else "not_ready"
            await _refuse(send, service, 503, reason, service.not_ready_reason())
            return
        service.enter()  # admitted: from here a drain waits for this request, body upload included
        try:
            limit = service.config.max_body_bytes
            declared = headers.get("content-length", "")
            too_long = declared.isdigit() and int(declared) > limit
            body = None if too_long else await _read_body(receive, limit)
            if body is None:
                await _refuse(send, service, 413, "payload_too_large", f"request body exceeds {limit} bytes")
                return
            await self.app(scope, _replay(body, receive), send)
        finally:
            service.leave()


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
    service.metrics.errors.labels(reason).inc()
    body = ErrorResponse(error=message).model_dump_json().encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), CLOSE]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
