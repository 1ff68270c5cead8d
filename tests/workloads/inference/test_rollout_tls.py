"""The rollout Job's settings, as the CronJob renders them, against a real TLS inference server (issue 29).

On a TLS stack the servers' certificate names the ``inference`` Service (``<name>.<namespace>.svc``, the
name the ServiceMonitor checks it against: components/kubernetes/monitoring.py ``serverName``), while the
rollout connects to each pod's own address (its headless Service resolves to them) and sends the labelled
set to the Service's cluster-local name. Whatever it connects to, the certificate must be checked against
the Service's name: here a real server holds a certificate for exactly that name and is reached by address.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from tests.certificates import self_signed
from tests.workloads.inference.serving import Launch
from tests.workloads.inference.test_k8s import FOLLOWING, by_kind
from workloads.delivery.launch import from_env, scraper, service
from workloads.delivery.runner import LabelledSet, RolloutError
from workloads.inference.k8s import inference_objects
from workloads.training.tasks import Split

SERVICE_NAME = f"{FOLLOWING.name}.{FOLLOWING.namespace}.svc"


@pytest.fixture(scope="module")
def service_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for the Service's name only (no address), as cert-manager issues it."""
    return self_signed(tmp_path_factory.mktemp("service-tls"), f"/CN={SERVICE_NAME}", f"DNS:{SERVICE_NAME}")


def job_env() -> dict[str, str]:
    """The rollout container's environment, from the pure function that renders the CronJob."""
    [cron] = by_kind(inference_objects(FOLLOWING), "CronJob")
    [container] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    env: dict[str, Any] = {e["name"]: e["value"] for e in container["env"]}
    return {k: str(v) for k, v in env.items()}


@pytest.fixture(scope="module")
def job_settings(
    launch: Launch, model_dir: Path, service_cert: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """The rendered env pointed at a real server: the files where the Job mounts Secrets are here, and the
    headless Service's name is the address it resolves to (this server's)."""
    cert, key = service_cert
    token = tmp_path_factory.mktemp("token") / "token"
    token.write_text("rollout-token\n")
    address_only = ssl.create_default_context(cafile=cert)
    address_only.check_hostname = False  # the fixture's readiness probe connects by address
    server = launch(
        model_dir,
        scheme="https",
        verify=address_only,
        auth_token_file=token,
        tls_cert_file=cert,
        tls_key_file=key,
    )
    port = server.url.rsplit(":", 1)[1]
    rendered = job_env()
    assert rendered["ROLLOUT_TLS_SERVER_NAME"] == SERVICE_NAME
    return rendered | {
        "ROLLOUT_METRICS_DNS": "127.0.0.1",
        "ROLLOUT_METRICS_PORT": port,
        "ROLLOUT_CA_FILE": str(cert),
        "ROLLOUT_TOKEN_FILE": str(token),
        "ROLLOUT_SERVICE_URL": f"https://127.0.0.1:{port}",
    }


def test_the_job_reads_every_servers_metrics_over_tls_checked_against_the_service_name(
    job_settings: dict[str, str],
) -> None:
    settings = from_env(job_settings)
    reader = scraper(settings)
    snapshot = reader.snapshot()
    assert reader.unreachable == []
    [(url, series)] = snapshot.items()
    assert url == f"https://127.0.0.1:{job_settings['ROLLOUT_METRICS_PORT']}/metrics"
    assert any(name.startswith("inference_") for name, _ in series)


def test_the_labelled_set_goes_through_the_same_verified_tls(
    job_settings: dict[str, str], held_out: Split
) -> None:
    client = service(from_env(job_settings))
    assert client is not None
    rows = LabelledSet(held_out.x_test[:64], held_out.y_test[:64])
    assert client.accuracy("digits", "1", rows) > 0.8


def test_without_the_server_name_the_address_fails_verification(job_settings: dict[str, str]) -> None:
    """The certificate names the Service, not the address nor the headless name: checked against what was
    connected to, it is refused, and the rollout reads nothing rather than trusting it."""
    unnamed = {k: v for k, v in job_settings.items() if k != "ROLLOUT_TLS_SERVER_NAME"}
    settings = from_env(unnamed)
    reader = scraper(settings)
    assert reader.snapshot() == {}
    [why] = reader.unreachable
    assert "CERTIFICATE_VERIFY_FAILED" in why
    client = service(settings)
    assert client is not None
    with pytest.raises(RolloutError, match="CERTIFICATE_VERIFY_FAILED"):
        client.accuracy("digits", "1", LabelledSet([[0.0]], [0]))
