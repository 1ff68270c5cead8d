"""The registry's certificate, issued and renewed by the stack (issue 35): a small CA the stack owns and
the servers' certificate it signs, all in the stack's state (pulumi-tls, the Terraform TLS provider
bridged), so ``pulumi up`` makes them and no operator step comes before it.

Keys: ECDSA P-256 for both. It gives the same 128-bit security strength as RSA 3072 (NIST SP 800-57
Part 1 Rev. 5, Table 2), every TLS 1.3 stack implements it (RFC 8446 section 9.1: ``ecdsa_secp256r1_sha256``
is mandatory to implement), and its keys and handshakes are smaller and cheaper than RSA 3072's.

Lifetimes (stack keys ``workloads.registry.tlsCaValidityDays``, ``tlsCertificateValidityDays``): the
servers' certificate is re-issued by a ``pulumi up`` in its last third (the 90-day default renews after
60 days, as Let's Encrypt advises for its 90-day certificates); the CA is re-issued by a ``pulumi up``
within one certificate lifetime of its end, so a certificate never outlives the CA that signed it, and a
new CA re-signs the servers' certificate (its ``ca_cert_pem`` changes). pulumi-tls re-issues only when
``pulumi up`` runs in that window (pulumi_tls ``early_renewal_hours``; pulumi/pulumi-tls#39 reports it
not doing so on a plain ``pulumi up``: docs/registry.md, "TLS", gives the forced renewal).
"""

from __future__ import annotations

import hashlib

import pulumi
import pulumi_tls as tls

from components.config import RegistryWorkloadConfig
from components.kubernetes.registry import RegistryCertificate, certificate_names

ALGORITHM = "ECDSA"
CURVE = "P256"
HOURS_PER_DAY = 24
ORGANIZATION = "ml-platform"


def _hours(days: int) -> int:
    return days * HOURS_PER_DAY


def registry_certificate(
    name: str, namespace: str, registry: RegistryWorkloadConfig, parent: pulumi.Resource
) -> RegistryCertificate:
    """The CA and the servers' certificate for the registry Service in ``namespace``; every PEM a
    Pulumi secret (the Secrets' values), their SHA-256s not (pod annotations)."""
    opts = pulumi.ResourceOptions(parent=parent)
    ca_key = tls.PrivateKey(f"{name}-registry-ca", algorithm=ALGORITHM, ecdsa_curve=CURVE, opts=opts)
    ca_hours, cert_hours = (
        _hours(registry.tls_ca_validity_days),
        _hours(registry.tls_certificate_validity_days),
    )
    ca = tls.SelfSignedCert(
        f"{name}-registry-ca",
        private_key_pem=ca_key.private_key_pem,
        is_ca_certificate=True,
        allowed_uses=["cert_signing", "crl_signing", "digital_signature"],
        subject=tls.SelfSignedCertSubjectArgs(
            common_name=f"{ORGANIZATION} registry CA", organization=ORGANIZATION
        ),
        validity_period_hours=ca_hours,
        early_renewal_hours=cert_hours,
        set_subject_key_id=True,
        opts=opts,
    )
    key = tls.PrivateKey(f"{name}-registry-tls", algorithm=ALGORITHM, ecdsa_curve=CURVE, opts=opts)
    names = certificate_names(namespace)
    request = tls.CertRequest(
        f"{name}-registry-tls",
        private_key_pem=key.private_key_pem,
        dns_names=list(names),
        subject=tls.CertRequestSubjectArgs(common_name=names[0], organization=ORGANIZATION),
        opts=opts,
    )
    cert = tls.LocallySignedCert(
        f"{name}-registry-tls",
        cert_request_pem=request.cert_request_pem,
        ca_private_key_pem=ca_key.private_key_pem,
        ca_cert_pem=ca.cert_pem,
        allowed_uses=["digital_signature", "server_auth"],
        validity_period_hours=cert_hours,
        early_renewal_hours=cert_hours // 3,
        opts=opts,
    )

    def sha256(pem: str) -> str:
        return hashlib.sha256(pem.encode()).hexdigest()

    return RegistryCertificate(
        ca_pem=ca.cert_pem.apply(pulumi.Output.secret),
        cert_pem=cert.cert_pem.apply(pulumi.Output.secret),
        key_pem=key.private_key_pem.apply(pulumi.Output.secret),
        sha256=cert.cert_pem.apply(sha256),
        ca_sha256=ca.cert_pem.apply(sha256),
    )
