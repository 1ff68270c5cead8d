"""The registry's certificates, made and renewed by the stack (issue 35 item 1: "certificates made and
rotated by the stack ..., CA bundles mounted where callers need them"; review cluster.md B-N1: a Secret
an operator must make before its namespace exists fails the first ``pulumi up``).

The plan shows the CA and the servers' certificate as pulumi-tls resources, and the Secrets built from them
in the namespaces whose pods mount them, with the keys those pods read, applied after their namespaces;
the servers carry the certificate's SHA-256 (a new certificate rolls them) and a second plan with the same
inputs registers the same inputs (a second ``pulumi up`` is a no-op).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.config import PLATFORM_KEY, ConfigError, parse_stack_config
from components.kubernetes.registry import (
    CA_SECRET,
    CERTIFICATE_ANNOTATION,
    TLS_SECRET,
    RegistryCertificate,
    certificate_names,
    tls_secrets,
    tracking_uri,
)
from mlplatform.graph import is_secret
from mlplatform.plan import Plan, PlannedResource, resolve_target, run_plan
from mlplatform.report import kubernetes_objects
from tests.components.azure.test_azure_day2 import _changes
from tests.stack_variants import plan_config, template
from workloads.inference.k8s import REGISTRY_CA_ANNOTATION

from .test_registry import _spec

STACK = "aws-enterprise-prod"
KEY = "tls:index/privateKey:PrivateKey"
CA = "tls:index/selfSignedCert:SelfSignedCert"
REQUEST = "tls:index/certRequest:CertRequest"
SIGNED = "tls:index/locallySignedCert:LocallySignedCert"
SECRET = "kubernetes:core/v1:Secret"


def _one(plan: Plan, token: str, suffix: str = "") -> PlannedResource:
    [found] = [r for r in plan.by_type(token) if r.name.endswith(suffix)]
    return found


def _secrets(plan: Plan, name: str) -> dict[str, PlannedResource]:
    return {
        r.inputs["metadata"]["namespace"]: r
        for r in plan.by_type(SECRET)
        if r.inputs["metadata"]["name"] == name
    }


def test_the_plan_issues_a_ca_and_a_server_certificate_for_the_services_names(
    planned: Callable[[str], Plan],
) -> None:
    plan = planned(STACK)
    for suffix in ("registry-ca", "registry-tls"):
        key = _one(plan, KEY, suffix).inputs
        assert (key["algorithm"], key["ecdsaCurve"]) == ("ECDSA", "P256")
    ca = _one(plan, CA).inputs
    assert ca["isCaCertificate"] is True
    assert {"cert_signing", "crl_signing"} <= set(ca["allowedUses"])
    # Defaults: a 5-year CA re-issued within one certificate lifetime of its end, a 90-day certificate
    # re-issued in its last third.
    assert (ca["validityPeriodHours"], ca["earlyRenewalHours"]) == (1825 * 24, 90 * 24)
    request = _one(plan, REQUEST).inputs
    assert request["dnsNames"] == list(certificate_names("ml-registry"))
    # The name every caller dials is one the certificate carries.
    assert tracking_uri(tls=True).split("//")[1].split(":")[0] in request["dnsNames"]
    signed = _one(plan, SIGNED).inputs
    assert signed["allowedUses"] == ["digital_signature", "server_auth"]
    assert (signed["validityPeriodHours"], signed["earlyRenewalHours"]) == (90 * 24, 30 * 24)
    assert signed["caCertPem"].startswith("-----BEGIN CERTIFICATE-----\n")


def _mounted(objects: list[dict[str, Any]], secret: str) -> set[str]:
    """The namespaces whose pods (Deployments, Jobs, CronJobs) mount ``secret``."""
    found = set()
    for obj in objects:
        spec = obj.get("spec", {})
        pod = spec.get("jobTemplate", {}).get("spec", spec).get("template", {}).get("spec", {})
        if any(v.get("secret", {}).get("secretName") == secret for v in pod.get("volumes", [])):
            found.add(obj["metadata"]["namespace"])
    return found


def test_the_secrets_are_in_the_namespaces_that_mount_them_with_the_keys_they_read_as_pulumi_secrets(
    planned: Callable[[str], Plan],
) -> None:
    plan = planned(STACK)
    objects = kubernetes_objects(plan)
    served, cas = _secrets(plan, TLS_SECRET), _secrets(plan, CA_SECRET)
    assert set(served) == _mounted(objects, TLS_SECRET) == {"ml-registry"}
    assert set(cas) == _mounted(objects, CA_SECRET) == {"ml-training", "ml-inference"}
    tls = served["ml-registry"].inputs
    assert tls["type"] == "kubernetes.io/tls"
    assert set(tls["stringData"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert all(set(s.inputs["stringData"]) == {"ca.crt"} for s in cas.values())
    for secret in [*served.values(), *cas.values()]:
        assert all(is_secret(v) for v in secret.inputs["stringData"].values()), secret.urn
        # After its namespace: a Secret the first `pulumi up` can create (cluster.md B-N1).
        namespace = f"kubernetes:core/v1:Namespace::namespace-{secret.inputs['metadata']['namespace']}"
        assert any(d.endswith(namespace) for d in secret.dependencies), secret.urn
    pem = tls["stringData"]["tls.key"]["value"]
    assert pem.startswith("-----BEGIN EC PRIVATE KEY-----\n")
    assert cas["ml-training"].inputs["stringData"]["ca.crt"] == tls["stringData"]["ca.crt"]


def test_the_servers_roll_on_a_new_certificate_and_inference_on_a_new_ca(
    planned: Callable[[str], Plan],
) -> None:
    """uvicorn loads the certificate once, and the inference servers verify the registry with a context
    made once at start: each carries the SHA-256 of what it loaded, so a new one rolls it. (The rollout's
    and training's pods are new for each run, and read the mounted CA then.)"""
    plan = planned(STACK)
    pods = {
        o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"]
        for o in kubernetes_objects(plan)
        if o["kind"] == "Deployment" and o["metadata"]["name"] in ("registry", "inference")
    }
    served = _secrets(plan, TLS_SECRET)["ml-registry"].inputs["stringData"]
    digest = {k: hashlib.sha256(served[k]["value"].encode()).hexdigest() for k in ("tls.crt", "ca.crt")}
    assert pods["registry"][CERTIFICATE_ANNOTATION] == digest["tls.crt"]
    assert pods["inference"][REGISTRY_CA_ANNOTATION] == digest["ca.crt"]


def test_a_second_plan_with_the_same_inputs_registers_the_same_certificates_and_secrets(
    planned: Callable[[str], Plan],
) -> None:
    """Day 2: nothing in the program's certificate inputs varies between runs (no clock, no randomness),
    so pulumi-tls keeps what its state holds and the Secrets and servers stay as they are."""
    first, second = planned(STACK), run_plan(resolve_target(STACK))
    assert {r.urn: r.inputs for r in first.resources} == {r.urn: r.inputs for r in second.resources}


def test_without_tls_there_are_no_certificates_and_no_ca_secrets(planned: Callable[[str], Plan]) -> None:
    plan = planned("azure-smb-dev")
    assert not [r for r in plan.resources if r.type.startswith("tls:")]
    assert not _secrets(plan, CA_SECRET) and not _secrets(plan, TLS_SECRET)


def test_every_client_namespace_gets_the_ca_and_a_spec_without_a_certificate_is_refused() -> None:
    """Teams' namespaces too: every client namespace's callers mount ``registry-ca``."""
    certificate = RegistryCertificate("ca-pem", "cert-pem", "key-pem", "digest", "ca-digest")
    clients = ("ml-training", "ml-inference", "team-vision")
    secrets = tls_secrets(_spec(tls=True, certificate=certificate, client_namespaces=clients))
    cas = {s["metadata"]["namespace"]: s["stringData"] for s in secrets if s["metadata"]["name"] == CA_SECRET}
    assert cas == {ns: {"ca.crt": "ca-pem"} for ns in clients}
    with pytest.raises(ValueError, match="a certificate exactly when tls is on"):
        _spec(tls=True)


def test_a_ca_that_would_not_outlive_two_certificates_is_one_line_naming_the_key() -> None:
    raw = template(STACK)
    raw[PLATFORM_KEY]["workloads"]["registry"] = {"tlsCaValidityDays": 180}
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(raw, f"Pulumi.{STACK}.yaml")
    [problem] = raised.value.problems
    assert problem == (
        f"Pulumi.{STACK}.yaml: ml-platform:platform.workloads.registry.tlsCaValidityDays: the CA is "
        "re-issued one certificate lifetime before its end: it must outlive two certificates (more than "
        "180 days)"
    )


def test_a_shorter_certificate_lifetime_reissues_the_certificate_and_rolls_only_the_registry(
    planned: Callable[[str], Plan], tmp_path: Path
) -> None:
    """Day 2, minimal: a new certificate changes its resource, the Secret holding it and the servers' pod
    annotation; the CA only updates its renewal window in place (no new CA: hashicorp/terraform-provider-tls
    #34), so the callers' ``registry-ca`` and the callers' pods stay as they are."""
    raw = template(STACK)
    raw[PLATFORM_KEY].setdefault("workloads", {}).setdefault("registry", {})["tlsCertificateValidityDays"] = (
        60
    )
    changed = _changes(planned(STACK), plan_config(raw, tmp_path, STACK))
    assert {urn.rsplit("::", 1)[1] for urn in changed} == {
        f"{STACK}-k8s-registry-ca",
        f"{STACK}-k8s-registry-tls",
        "secret-ml-registry-registry-tls",
        "deployment-ml-registry-registry",
    }
    [deployment] = [
        paths for urn, paths in changed.items() if urn.endswith("deployment-ml-registry-registry")
    ]
    assert deployment == [f"spec.template.metadata.annotations.{CERTIFICATE_ANNOTATION}"]
    [ca] = [
        paths for urn, paths in changed.items() if urn.endswith(f"SelfSignedCert::{STACK}-k8s-registry-ca")
    ]
    assert ca == ["earlyRenewalHours"]
