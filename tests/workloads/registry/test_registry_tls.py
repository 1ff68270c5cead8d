"""Issue 35, "Done when": the real registry (MLflow 3.17.2, basic-auth, its launcher) behind its TLS setup
on loopback, one server for the module.

The server is started as the Deployment starts it (workloads/registry/server/launch.py): ``mlflow server``
with the launcher's ``tls_options`` (uvicorn's ``--ssl-certfile``/``--ssl-keyfile`` through
``--uvicorn-opts``), the image's ``sitecustomize`` on the path (``install_tls13_floor`` in every server
process), and the launcher as its parent bootstrapping the callers' users over ``https://localhost``
verified against ``ca.crt``. The certificates are made as the stack makes them
(components/kubernetes/certificates.py): ECDSA P-256 keys, the server's key in SEC1 ``EC PRIVATE KEY`` PEM
as pulumi-tls writes it, a CA for signing, and a server certificate for ``server_auth`` naming
``certificate_names``: the Service's DNS names and ``localhost``.

Then, with verification on (``MLFLOW_TRACKING_SERVER_CERT_PATH``, the variable MLflow's own client reads:
mlflow/environment_variables.py 3.17.2): training's registration (``TrainingRun.open`` / ``register``),
inference's alias resolution and download, and ``mlplatform models list``; and each refused in one line
when the CA is not the registry's or the name is not the certificate's. A TLS 1.2 client is refused (the
architecture's TLS 1.3).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from components.handle import WORKLOAD_IDENTITIES
from components.kubernetes.registry import allowed_hosts, certificate_names
from mlplatform.cli import app
from tests.workloads.inference.serving import free_port
from workloads.artifacts import DatasetInfo, ModelMetadata, load_metadata, write_metadata
from workloads.registry.client import CA_BUNDLE_ENV, ModelRef, RegistryClient, RegistryError
from workloads.registry.lineage import RunSpec, TrainingRun, experiment_name
from workloads.registry.server.launch import (
    CA_FILE,
    CERT_FILE,
    KEY_FILE,
    TLS_DIR_ENV,
    tls_options,
    write_auth_config,
)

from .conftest import ADMIN_PASSWORD, MLFLOW, migrated_database

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
SERVER_DIR = REPO / "workloads" / "registry" / "server"
MODEL = "tls-model"
TRAINING = ("ml-training-t", "training-password-t1")
INFERENCE = ("ml-inference-t", "inference-password-t")
START_TIMEOUT_S = 90

SUPERVISOR = """
import json, os, sys
from workloads.registry.server.launch import User, serve_and_bootstrap
spec = json.loads(sys.argv[1])
users = [User(u, p, tuple(g.items()), tuple(e.items())) for u, p, g, e in spec["users"]]
sys.exit(serve_and_bootstrap(spec["command"], {**os.environ, **spec["env"]}, users, spec["port"]))
"""


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _ca(directory: Path, common: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(_name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CA_FILE).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def _server_cert(directory: Path, ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate]) -> None:
    """What the registry's certificate names and allows: the Service and ``localhost`` (the launcher's own
    calls), server authentication with a digital signature."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names = [x509.DNSName(n) for n in certificate_names(WORKLOAD_IDENTITIES["registry"].namespace)]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("registry"))
        .issuer_name(ca[1].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
        )
        .sign(ca[0], hashes.SHA256())
    )
    (directory / CERT_FILE).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / KEY_FILE).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )


@dataclass(frozen=True)
class TlsRegistry:
    port: int
    ca: Path
    other_ca: Path

    @property
    def uri(self) -> str:
        return f"https://localhost:{self.port}"

    def env(self, user: tuple[str, str], ca: Path | None = None) -> dict[str, str]:
        return {
            "MLFLOW_TRACKING_USERNAME": user[0],
            "MLFLOW_TRACKING_PASSWORD": user[1],
            CA_BUNDLE_ENV: str(ca or self.ca),
        }

    def client(self, user: tuple[str, str], ca: Path | None = None, uri: str | None = None) -> RegistryClient:
        return RegistryClient(uri or self.uri, environ=self.env(user, ca), attempts=1)


def _healthy(uri: str, context: ssl.SSLContext) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2, context=context) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def tls_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRegistry]:
    root = tmp_path_factory.mktemp("mlflow-tls")
    tls = root / "registry-tls"
    _server_cert(tls, _ca(tls, "ml-platform registry CA"))
    _ca(root / "other", "some other CA")
    port = free_port()
    database = migrated_database(root)
    env = {
        TLS_DIR_ENV: str(tls),
        "PYTHONPATH": str(SERVER_DIR),  # the image's /app: sitecustomize.py and launch.py
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_SERVER_ALLOWED_HOSTS": allowed_hosts(WORKLOAD_IDENTITIES["registry"].namespace),
        "MLFLOW_AUTH_CONFIG_PATH": str(write_auth_config(database, root)),
        "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "csrf-key-for-tests",
    }
    command = [MLFLOW, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    command += ["--backend-store-uri", database, "--app-name", "basic-auth"]
    command += ["--artifacts-destination", str(root / "artifacts"), "--serve-artifacts", *tls_options(env)]
    users = [
        (*TRAINING, {MODEL: "EDIT"}, {experiment_name(MODEL): "EDIT"}),
        (*INFERENCE, {MODEL: "READ"}, {}),
    ]
    spec = {"command": command, "env": env, "users": users, "port": port}
    log = root / "launcher.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", SUPERVISOR, json.dumps(spec)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            start_new_session=True,
        )
    registry = TlsRegistry(port, tls / CA_FILE, root / "other" / CA_FILE)
    try:
        context = ssl.create_default_context(cafile=str(registry.ca))
        deadline = time.monotonic() + START_TIMEOUT_S
        # Ready once the launcher has bootstrapped its users: training's user logs in.
        while not (_healthy(registry.uri, context) and "created user ml-inference-t" in log.read_text()):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield registry
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def _metadata() -> ModelMetadata:
    return ModelMetadata(
        name=MODEL,
        version="1",
        created="2026-11-29T00:00:00Z",
        code_version="tls-test",
        dataset=DatasetInfo(name="d", sha256="0" * 64, split_seed=0, split_sizes={"train": 1, "test": 1}),
        hyperparameters={},
        world_size=1,
        metrics={"test_accuracy": 0.9},
        inputs=[],
        outputs=[],
        feature_names=[],
        reference_histograms=[],
    )


@pytest.fixture(scope="module")
def registered(tls_registry: TlsRegistry, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Training's registration, verified: the run, its lineage, the upload, the version, ``@challenger``."""
    version_dir = tmp_path_factory.mktemp("version")
    (version_dir / "model.onnx").write_bytes(b"weights over TLS")
    metadata = write_metadata(version_dir, _metadata())
    spec = RunSpec(MODEL, "1", {"epochs": 1}, {}, "d", "0" * 64, "test:d", {"train": 1, "test": 1})
    run = TrainingRun.open(tls_registry.client(TRAINING), spec)
    return run.register(version_dir, metadata).version


def test_training_registers_and_inference_resolves_and_downloads_with_verification_on(
    tls_registry: TlsRegistry, registered: str, tmp_path: Path
) -> None:
    client = tls_registry.client(INFERENCE)
    version = client.resolve(ModelRef.parse(f"models:/{MODEL}@challenger"))
    assert version.version == registered
    client.download(version.source, tmp_path / "v")
    assert load_metadata(tmp_path / "v", verify=True).metrics["test_accuracy"] == 0.9


def test_mlplatform_models_list_works_through_the_verified_registry(
    tls_registry: TlsRegistry, registered: str
) -> None:
    env = {"MLFLOW_TRACKING_URI": tls_registry.uri, **tls_registry.env(INFERENCE)}
    result = CliRunner().invoke(app, ["models", "list", MODEL, "--json"], env=env)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["version"], r["aliases"]) for r in rows] == [(registered, ["challenger"])]


def test_a_ca_that_is_not_the_registrys_is_refused_in_one_line(tls_registry: TlsRegistry) -> None:
    env = {"MLFLOW_TRACKING_URI": tls_registry.uri, **tls_registry.env(INFERENCE, tls_registry.other_ca)}
    result = CliRunner().invoke(app, ["models", "list", MODEL], env=env)
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"TLS certificate not verified against {CA_BUNDLE_ENV}={tls_registry.other_ca}" in line
    assert "unable to get local issuer certificate" in line


def test_a_name_the_certificate_does_not_carry_is_refused_in_one_line(tls_registry: TlsRegistry) -> None:
    """127.0.0.1 is not among the certificate's names: the hostname check is on."""
    client = tls_registry.client(INFERENCE, uri=f"https://127.0.0.1:{tls_registry.port}")
    with pytest.raises(RegistryError) as caught:
        client.resolve(ModelRef.parse(f"models:/{MODEL}@challenger"))
    message = str(caught.value)
    assert caught.value.code == "TLS_UNVERIFIED" and "\n" not in message
    assert "IP address mismatch, certificate is not valid for '127.0.0.1'" in message


def test_the_registry_refuses_tls_1_2(tls_registry: TlsRegistry) -> None:
    """TLS 1.3 only (the architecture; launch.py ``install_tls13_floor``), though uvicorn's own context
    would accept TLS 1.2."""
    context = ssl.create_default_context(cafile=str(tls_registry.ca))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    # The server ends the handshake: no protocol in common.
    with (
        socket.create_connection(("127.0.0.1", tls_registry.port), timeout=5) as raw,
        pytest.raises(ssl.SSLError),
    ):
        context.wrap_socket(raw, server_hostname="localhost")
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    with (
        socket.create_connection(("127.0.0.1", tls_registry.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() == "TLSv1.3"


def test_a_plain_http_client_gets_no_answer(tls_registry: TlsRegistry) -> None:
    with pytest.raises(RegistryError, match="unreachable"):
        RegistryClient(f"http://localhost:{tls_registry.port}", attempts=1).resolve(
            ModelRef.parse(f"models:/{MODEL}@challenger")
        )
