"""SIGTERM under load: every request either completes or is refused before the server accepted it.

Sixteen clients send back to back while one more is caught half-way through uploading its body. That
upload keeps the batcher waiting out its whole window (a request is still arriving), so at the moment
SIGTERM lands all sixteen are certain to be in flight. The upload completes after the drain has begun:
a request is accepted (counted in flight, waited for by the drain) only once its body is read, so it
is refused with 503 like any newcomer, and the drain does not wait on a client that uploads slowly.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import ssl
from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from workloads.training.tasks import Split

from .serving import Launch, Server, client_loop

CLIENTS = 16


async def start_upload(
    port: int, row: list[float]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """Send the headers and half the body of a request; returns the connection and the other half."""
    body = json.dumps({"instances": [row]}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body[: len(body) // 2])
    await writer.drain()
    return reader, writer, body[len(body) // 2 :]


async def finish_upload(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rest: bytes) -> int:
    writer.write(rest)
    status = int((await reader.readline()).split()[1])
    writer.close()
    return status


async def in_flight(client: httpx.AsyncClient) -> float:
    metrics = text_string_to_metric_families((await client.get("/metrics")).text)
    return next(f for f in metrics if f.name == "inference_in_flight_requests").samples[0].value


async def window_just_filled(client: httpx.AsyncClient) -> None:
    """Wait for a batch to finish and every client's next request to be in the server's batching window.

    The window lasts far longer than a client's turnaround, so a few milliseconds later, when SIGTERM
    arrives, all those requests are certain to be still in flight: the drain is tested with work in hand.
    """
    while await in_flight(client) >= CLIENTS:
        pass
    while await in_flight(client) < CLIENTS:
        pass


async def load_then_terminate(server: Server, rows: list[list[float]]) -> tuple[Counter[str], int]:
    outcomes: Counter[str] = Counter()
    upload = await start_upload(int(server.url.rsplit(":", 1)[1]), rows[CLIENTS])
    async with server.async_client() as client:
        clients = [asyncio.create_task(client_loop(client, rows[i], outcomes)) for i in range(CLIENTS)]
        await asyncio.sleep(1.0)
        await asyncio.wait_for(window_just_filled(client), timeout=10)
        served_before = outcomes["completed"]
        server.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.1)
        readiness = (await client.get("/readyz")).status_code
        upload_status = await finish_upload(*upload)
        outcomes[f"upload finished during the drain: HTTP {upload_status}"] += 1
        await asyncio.wait_for(asyncio.gather(*clients), timeout=30)
    assert served_before >= CLIENTS, f"the load never got going: {outcomes}"
    return outcomes, readiness


def test_sigterm_during_load_loses_no_accepted_request(
    launch: Launch, model_dir: Path, held_out: Split
) -> None:
    # drain_min_s: long enough that every client, however starved of CPU, is answered 503 before the
    # listener closes (a connection still in the closed listener's backlog would be reset).
    server = launch(model_dir, max_wait_ms=300, max_batch_size=64, drain_min_s=2.0)
    outcomes, readiness = asyncio.run(load_then_terminate(server, held_out.x_test[: CLIENTS + 1].tolist()))
    assert server.exit_status(30) == 0, server.logs()

    assert not [o for o in outcomes if o.startswith("lost")], outcomes
    assert outcomes["upload finished during the drain: HTTP 503"] == 1, outcomes
    assert outcomes["refused: 503 draining"] + outcomes["refused: connection"] == CLIENTS
    assert readiness == 503, "readiness must turn false as the drain starts"
    in_flight = re.search(r"draining: .*, (\d+) in flight", server.logs())
    assert in_flight is not None, server.logs()
    assert int(in_flight.group(1)) == CLIENTS, "SIGTERM should have caught every request in flight"
    assert "drained in" in server.logs()


# Longer than any stop should take: a server waiting for its idle connection to close would still be
# running when the test gives up on it.
SHUTDOWN_TIMEOUT_S = 60


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_idle_keep_alive_connection_does_not_hold_the_stop(
    scheme: str, launch: Launch, model_dir: Path, held_out: Split, request: pytest.FixtureRequest
) -> None:
    """A client that keeps its connection open between requests (every HTTP/1.1 client, a load
    balancer's pool) has nothing in flight: SIGTERM must not wait for it. Over TLS, closing such a
    connection politely (close_notify, then waiting for the client's) waited out the whole shutdown
    timeout at every pod stop, as the idle client is not reading."""
    tls: dict[str, object] = {}
    if scheme == "https":
        cert, key = request.getfixturevalue("tls_files")
        tls = {"verify": ssl.create_default_context(cafile=cert), "tls_cert_file": cert, "tls_key_file": key}
    server = launch(model_dir, scheme=scheme, shutdown_timeout_s=SHUTDOWN_TIMEOUT_S, **tls)
    with server.client() as client:
        assert client.post("/v1/predict", json={"instances": held_out.x_test[:1].tolist()}).status_code == 200
        # The connection stays in the client's pool, open and idle, while the server stops.
        assert server.terminate(timeout=SHUTDOWN_TIMEOUT_S / 2) == 0, server.logs()
    assert "timeout graceful shutdown exceeded" not in server.logs()
    assert "Waiting for connections to close" not in server.logs(), "an idle connection held the stop"
