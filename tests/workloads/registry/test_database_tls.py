"""The registry's database connection verifies the server's certificate and name (issue 35; AWS review
N7, Azure review D4): a real PostgreSQL on loopback, with a certificate for ``localhost`` signed by a test
CA, reached with the URL ``backend_uri`` builds (``sslmode=verify-full``, ``sslrootcert``) through libpq
(psql; the image's psycopg2-binary bundles libpq as well). Right name and CA: connected over TLS; a wrong
name or a wrong CA: refused, in one line."""

from __future__ import annotations

import ctypes
import datetime
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from workloads.registry.server import launch

BIN = shutil.which("postgres")
PSQL = shutil.which("psql")
pytestmark = pytest.mark.skipif(
    BIN is None or PSQL is None, reason="needs PostgreSQL's postgres, initdb and psql (Debian: postgresql)"
)
NOBODY = 65534  # postgres refuses to run as root


def _ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _server_files(directory: Path) -> None:
    """server.crt for ``localhost`` (no IP address) signed by ca.pem; other-ca.pem signs nothing here."""
    ca, ca_key = _ca("registry test database CA")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "ca.pem").write_bytes(_pem(ca))
    (directory / "other-ca.pem").write_bytes(_pem(_ca("another CA")[0]))
    (directory / "server.crt").write_bytes(_pem(cert))
    (directory / "server.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _as_server_user() -> None:
    """In the child: die with the test process (PR_SET_PDEATHSIG), and drop root."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getuid() == 0:
        os.setgid(NOBODY)
        os.setuid(NOBODY)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def database() -> Iterator[tuple[Path, int]]:
    # Under /tmp itself: pytest's own temporary directories are the test user's alone (0700), which the
    # server's user could not enter.
    with tempfile.TemporaryDirectory(prefix="registry-db-") as name:
        yield from _serve(Path(name))


def _serve(directory: Path) -> Iterator[tuple[Path, int]]:
    data = directory / "data"
    _server_files(directory)
    for path in [directory, *directory.iterdir()]:
        if os.getuid() == 0:
            os.chown(path, NOBODY, NOBODY)
    (directory / "server.key").chmod(0o600)
    initdb = Path(str(BIN)).with_name("initdb")
    made = subprocess.run(
        [str(initdb), "-D", str(data), "-U", "mlflow", "--auth=trust", "-E", "UTF8"],
        check=False,
        capture_output=True,
        text=True,
        preexec_fn=_as_server_user,
    )
    assert made.returncode == 0, made.stderr
    port = _free_port()
    server = subprocess.Popen(
        [
            str(BIN),
            "-D",
            str(data),
            "-k",
            str(directory),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "ssl=on",
            "-c",
            f"ssl_cert_file={directory / 'server.crt'}",
            "-c",
            f"ssl_key_file={directory / 'server.key'}",
            "-c",
            "ssl_min_protocol_version=TLSv1.3",
            "-c",
            "fsync=off",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_as_server_user,  # noqa: PLW1509 (the prctl and setuid need it; no threads here)
    )
    try:
        deadline = time.monotonic() + 30
        while not (data / "postmaster.pid").exists() or "ready" not in (data / "postmaster.pid").read_text():
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"postgres did not start: {server.stderr.read().decode() if server.stderr else ''}"
                )
            time.sleep(0.05)
        yield directory, port
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _connect(
    database: tuple[Path, int], host: str, ca: str, monkeypatch: pytest.MonkeyPatch
) -> subprocess.CompletedProcess[str]:
    """psql with the URL the launcher builds on AWS (its CA file swapped for the test's), less SQLAlchemy's
    ``+psycopg2`` driver suffix."""
    directory, port = database
    monkeypatch.setattr(launch, "RDS_CA", directory / ca)
    env = {
        "REGISTRY_DB_HOST": host,
        "REGISTRY_DB_PORT": str(port),
        "REGISTRY_DB_NAME": "postgres",
        "REGISTRY_DB_USER": "mlflow",
        "REGISTRY_DB_SECRET_ARN": "arn:aws:secretsmanager:me-central-1:111122223333:secret:rds-db",
    }
    uri = launch.backend_uri(env, lambda _arn: "unused (trust)").replace(
        "postgresql+psycopg2://", "postgresql://"
    )
    assert "sslmode=verify-full" in uri
    query = "select version from pg_stat_ssl where pid = pg_backend_pid()"
    return subprocess.run(
        [str(PSQL), uri, "-tAc", query],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_the_right_name_and_ca_connect_over_tls_13(
    database: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    done = _connect(database, "localhost", "ca.pem", monkeypatch)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "TLSv1.3"


def test_a_wrong_name_is_refused_in_one_line(
    database: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    done = _connect(database, "127.0.0.1", "ca.pem", monkeypatch)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and 'does not match host name "127.0.0.1"' in lines[0], done.stderr


def test_a_wrong_ca_is_refused_in_one_line(
    database: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    done = _connect(database, "localhost", "other-ca.pem", monkeypatch)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "certificate verify failed" in lines[0], done.stderr
