"""A test's stand-in server on loopback, served from a daemon thread of the test process.

One way for every stub (a Kubernetes API, a Blob service, metrics pages, a Helm repository, wrk's target):
``loopback`` binds a free port on 127.0.0.1 (TLS when given a context), ``InThread`` serves it until
``close`` (or the end of its ``with``), which stops the loop, closes the socket and joins the thread, so
no stub outlives its test.
"""

from __future__ import annotations

import socketserver
import ssl
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Generic, TypeVar

Server = TypeVar("Server", bound=socketserver.BaseServer)


def loopback(
    handler: Callable[..., socketserver.BaseRequestHandler], tls: ssl.SSLContext | None = None
) -> ThreadingHTTPServer:
    """A threading HTTP server for ``handler`` on a free port of 127.0.0.1, wrapped in ``tls`` if given."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    return server


def base_url(server: socketserver.TCPServer, scheme: str = "http") -> str:
    """``scheme://127.0.0.1:PORT``: the address ``server`` listens on."""
    return f"{scheme}://127.0.0.1:{server.server_address[1]}"


class InThread(Generic[Server]):
    """``server`` answering from a daemon thread from construction until ``close``."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def __enter__(self) -> Server:
        return self.server

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
