"""The lifecycle record in Azure Blob storage (workloads/registry/record.py ``BlobRecord``), through the real
azure-storage-blob client over HTTP to a Blob service on loopback that keeps the REST contract the record
relies on (Blob REST API 2025-x): Get Container Properties answers
``x-ms-immutable-storage-with-versioning-enabled``; Put Blob with ``If-None-Match: *`` on an existing blob
answers 409 ``BlobAlreadyExists`` ("Specifying conditional headers for Blob service operations"); List
Blobs and Get Blob. Azurite (3.37.0) keeps no immutability, so it could not show the refusal.

Issue 40, "An append-only record": each event one blob, written create-only, in a container under
version-level immutability, read back in order by ``mlplatform models history``.
"""

from __future__ import annotations

from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

import pytest
from typer.testing import CliRunner

pytest.importorskip("azure.storage.blob", reason="the registry extra (pyproject.toml) installs it")

from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import ContainerClient

from mlplatform.cli import app
from tests.http_stub import InThread
from tests.workloads.registry.events import sample_event
from workloads.registry.record import BLOB_ENDPOINT_ENV, BlobRecord, RecordError, open_record

ACCOUNT = "mlprecord"


class BlobService(ThreadingHTTPServer):
    """Containers by name: immutable or not, and their blobs."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), BlobHandler)
        self.immutable: dict[str, bool] = {}
        self.blobs: dict[tuple[str, str], bytes] = {}
        self.puts: list[dict[str, str]] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{ACCOUNT}"


class BlobHandler(BaseHTTPRequestHandler):
    server: BlobService

    def log_message(self, format: str, *args: object) -> None:
        return

    def _target(self) -> tuple[str, str, dict[str, list[str]]]:
        url = urlsplit(self.path)
        _, _, rest = unquote(url.path).lstrip("/").partition("/")  # path-style: /ACCOUNT/CONTAINER/BLOB
        container, _, blob = rest.partition("/")
        return container, blob, parse_qs(url.query)

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {
            "x-ms-version": self.headers.get("x-ms-version", ""),
            "x-ms-request-id": "0",
            "ETag": '"0x1"',
            "Last-Modified": formatdate(usegmt=True),
            "Content-Length": str(len(body)),
            **(headers or {}),
        }.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str) -> None:
        body = (
            '<?xml version="1.0" encoding="utf-8"?>'
            + f"<Error><Code>{code}</Code><Message>{code}</Message></Error>"
        )
        self._reply(status, body.encode(), {"x-ms-error-code": code, "Content-Type": "application/xml"})

    def do_PUT(self) -> None:
        container, blob, _ = self._target()
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if container not in self.server.immutable:
            return self._error(404, "ContainerNotFound")
        self.server.puts.append(dict(self.headers.items()))
        if self.headers.get("If-None-Match") == "*" and (container, blob) in self.server.blobs:
            return self._error(409, "BlobAlreadyExists")
        self.server.blobs[(container, blob)] = data
        self._reply(201, headers={"Content-MD5": ""})

    def do_GET(self) -> None:
        container, blob, query = self._target()
        if container not in self.server.immutable:
            return self._error(404, "ContainerNotFound")
        if query.get("restype") == ["container"] and query.get("comp") == ["list"]:
            prefix = query.get("prefix", [""])[0]
            items = "".join(
                f"<Blob><Name>{escape(name)}</Name><Properties><Content-Length>{len(data)}</Content-Length>"
                "<BlobType>BlockBlob</BlobType></Properties></Blob>"
                for (c, name), data in sorted(self.server.blobs.items())
                if c == container and name.startswith(prefix)
            )
            body = (
                f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="{container}">'
                f"<Prefix>{escape(prefix)}</Prefix><Blobs>{items}</Blobs><NextMarker /></EnumerationResults>"
            )
            return self._reply(200, body.encode(), {"Content-Type": "application/xml"})
        if query.get("restype") == ["container"]:
            immutable = str(self.server.immutable[container]).lower()
            return self._reply(200, headers={"x-ms-immutable-storage-with-versioning-enabled": immutable})
        data = self.server.blobs.get((container, blob))
        if data is None:
            return self._error(404, "BlobNotFound")
        self._reply(
            206 if self.headers.get("x-ms-range") else 200,
            data,
            {
                "x-ms-blob-type": "BlockBlob",
                "Content-Type": "application/json",
                "Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}",
            },
        )

    def do_HEAD(self) -> None:
        self.do_GET()


@pytest.fixture(scope="module")
def service() -> Iterator[BlobService]:
    with InThread(BlobService()) as server:
        yield server


def _record(service: BlobService, container: str, immutable: bool = True) -> BlobRecord:
    service.immutable[container] = immutable
    return BlobRecord(ContainerClient(service.endpoint, container), ACCOUNT, "lifecycle-record")


def test_history_reads_every_event_back_in_order_each_put_create_only(service: BlobService) -> None:
    record = _record(service, "history")
    events = [
        sample_event("request-promotion", "2026-11-29T08:00:00.000+00:00", "better on the same set"),
        sample_event("approve", "2026-11-29T08:01:00.000+00:00", "checked the numbers"),
        sample_event("promote", "2026-11-29T08:02:00.000+00:00"),
    ]
    service.puts.clear()
    for event in reversed(events):  # written out of order: read back in time order
        record.append(event)

    names = [name for (c, name) in service.blobs if c == "history"]
    assert len(names) == 3 and all(n.startswith("lifecycle-record/digits-mlp/") for n in names)
    # Every put is create-only, as JSON (Blob REST API, Put Blob: If-None-Match: *).
    assert [(p.get("If-None-Match"), p.get("x-ms-blob-content-type")) for p in service.puts] == [
        ("*", "application/json")
    ] * 3
    assert record.read("digits-mlp") == events
    assert record.read("another-model") == []


def test_an_existing_blob_is_never_replaced(service: BlobService) -> None:
    record = _record(service, "replace")
    event = sample_event("promote", "2026-11-29T09:00:00.000+00:00")
    name = record.append(event)
    original = service.blobs[("replace", name)]
    with pytest.raises(ResourceExistsError, match="BlobAlreadyExists"):
        record.container.upload_blob(name, b"{}", overwrite=False)
    assert service.blobs[("replace", name)] == original


def test_a_container_without_immutability_is_refused_and_nothing_written(service: BlobService) -> None:
    record = _record(service, "mutable", immutable=False)
    with pytest.raises(RecordError, match="has no version-level immutability; refusing"):
        record.append(sample_event("promote", "2026-11-29T10:00:00.000+00:00"))
    assert not [name for (c, name) in service.blobs if c == "mutable"]


def test_history_from_an_azblob_uri_and_a_missing_container_is_one_line_exit_2(
    service: BlobService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``open_record`` builds the client from the URI and the endpoint variable; the CLI reads through it
    and a service error is one line naming the record, exit 2."""
    # A SAS on the endpoint (the service on loopback does not check it): no Entra ID token over plain HTTP.
    monkeypatch.setenv(BLOB_ENDPOINT_ENV, f"{service.endpoint}?sv=2025-11-05&sig=test")
    record = _record(service, "cli")
    record.append(sample_event("promote", "2026-11-29T11:00:00.000+00:00", "approved"))

    opened = open_record(f"azblob://{ACCOUNT}/cli/lifecycle-record")
    assert isinstance(opened, BlobRecord) and opened.uri == f"azblob://{ACCOUNT}/cli/lifecycle-record"

    runner = CliRunner()
    shown = runner.invoke(app, ["models", "history", "digits-mlp", "--record", opened.uri])
    assert shown.exit_code == 0, shown.output
    assert "promote" in shown.output and "approved" in shown.output

    missing = runner.invoke(
        app, ["models", "history", "digits-mlp", "--record", f"azblob://{ACCOUNT}/gone/x"]
    )
    assert missing.exit_code == 2
    assert missing.output == (
        f"error: lifecycle record azblob://{ACCOUNT}/gone/x: cannot read x/digits-mlp/ "
        "(404 ContainerNotFound: ContainerNotFound)\n"
    )


def test_an_azblob_uri_without_a_container_is_refused() -> None:
    with pytest.raises(RecordError, match=r"give it as azblob://ACCOUNT/CONTAINER/PREFIX"):
        open_record(f"azblob://{ACCOUNT}")
