"""The pack starts and answers the way the Pulumi CLI expects, and its pieces stay pinned and in sync."""

from __future__ import annotations

import importlib.metadata
import shutil
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import empty_pb2  # type: ignore[import-untyped, unused-ignore]
from pulumi.runtime.proto import analyzer_pb2 as proto
from pulumi.runtime.proto.analyzer_pb2_grpc import AnalyzerStub

from mlplatform.analyzer import PolicyPackSession
from mlplatform.errors import InputError

from .conftest import PACK_DIR

pytestmark = pytest.mark.slow

POLICIES = {
    "uae-residency": ("mandatory", "resource"),
    "uae-no-replication-out": ("mandatory", "resource"),
    "encryption-at-rest-cmk": ("mandatory", "resource"),
    "encryption-in-transit": ("mandatory", "resource"),
    "no-public-endpoints": ("mandatory", "resource"),
    "no-public-storage": ("mandatory", "resource"),
    "registry-database-protected": ("mandatory", "resource"),
    "registry-no-anonymous-access": ("mandatory", "resource"),
    "no-node-public-ip": ("mandatory", "resource"),
    "no-open-ingress": ("mandatory", "resource"),
    "imdsv2-required": ("mandatory", "resource"),
    "mandatory-tags": ("mandatory", "resource"),
    "gpu-nodes-tainted": ("mandatory", "resource"),
    "k8s-workload-hardening": ("mandatory", "resource"),
    "k8s-workload-baseline": ("advisory", "resource"),
    "k8s-unrendered-content": ("advisory", "stack"),
    "aws-ec2-description-charset": ("mandatory", "resource"),
    "aws-fsx-lustre-capacity": ("mandatory", "resource"),
    "aws-iam-role-name-length": ("mandatory", "resource"),
    "aws-instance-type-sold-in-region": ("mandatory", "resource"),
    "aws-efa-scale-from-zero": ("mandatory", "stack"),
    "aws-fsx-after-security-group-rules": ("mandatory", "stack"),
    "aws-nat-after-internet-gateway": ("mandatory", "stack"),
    "aws-vpc-default-security-group-closed": ("mandatory", "stack"),
    "aws-prod-deletion-protection": ("mandatory", "stack"),
    "aws-eks-standard-support": ("mandatory", "resource"),
    "aws-ecr-image-in-region": ("mandatory", "stack"),
    "aws-name-length": ("mandatory", "resource"),
    "aws-eks-api-reachable": ("mandatory", "stack"),
    "aws-eks-public-access-documentation-range": ("advisory", "resource"),
    "aws-capacity-reservation-launch": ("mandatory", "stack"),
    "aws-irsa-trust-pins-sub-and-aud": ("mandatory", "resource"),
    "aws-kube-proxy-matches-cluster": ("mandatory", "stack"),
    "s3-public-access-block": ("mandatory", "stack"),
    "s3-default-encryption-kms": ("mandatory", "stack"),
    "s3-tls-only": ("mandatory", "stack"),
    "azure-files-nfs-tls-required": ("mandatory", "stack"),
    "uae-replication-destinations": ("mandatory", "stack"),
    "k8s-privileged-exceptions": ("mandatory", "stack"),
    "k8s-namespace-network-policy": ("mandatory", "stack"),
    "k8s-jobs-queued": ("mandatory", "stack"),
    "azure-tag-name-charset": ("mandatory", "resource"),
    "aks-managed-nat-byo-subnet": ("mandatory", "resource"),
    "azure-des-versioned-key": ("mandatory", "resource"),
    "azure-key-vault-name-reuse": ("mandatory", "stack"),
    "azure-workload-identity-label": ("mandatory", "stack"),
    "aks-version-supported": ("mandatory", "resource"),
    "azure-keyvault-deployer-data-role": ("mandatory", "stack"),
    "aks-extended-resource-scale-from-zero": ("mandatory", "stack"),
    "azure-resource-names": ("mandatory", "resource"),
    "azure-diagnostics-coverage": ("mandatory", "stack"),
    "aks-secrets-kms": ("mandatory", "resource"),
    "azure-keyvault-command-after-vault": ("mandatory", "stack"),
    "azure-registry-push-after-private-dns": ("mandatory", "stack"),
    "budget-ceiling": ("mandatory", "stack"),
    "budget-expected": ("advisory", "stack"),
    "day2-cloud-moved-properties-ignored": ("mandatory", "stack"),
    "audit-trail": ("mandatory", "stack"),
    "audit-archive-locked": ("advisory", "stack"),
    "threat-detection": ("mandatory", "stack"),
    "data-store-audit-logs": ("mandatory", "stack"),
    "aws-ecr-lifecycle": ("mandatory", "stack"),
    "aws-rds-log-groups-made-first": ("mandatory", "stack"),
    "aws-prod-lustre-has-a-copy": ("mandatory", "stack"),
    "azure-keyvault-private-endpoint": ("mandatory", "stack"),
    "azure-postgres-human-admin": ("advisory", "stack"),
    "azure-postgres-private-dns-zone": ("mandatory", "stack"),
    "aks-kms-key-notifies": ("mandatory", "stack"),
    "aks-kms-public-vault-open": ("mandatory", "stack"),
    "aks-api-server-subnet": ("mandatory", "stack"),
    "aks-user-nat-subnets": ("mandatory", "stack"),
    "identity-per-role": ("mandatory", "stack"),
    "key-duties-separated": ("mandatory", "stack"),
    "key-use-within-domain": ("mandatory", "stack"),
    "key-use-by-role": ("mandatory", "stack"),
    "key-users-named": ("mandatory", "stack"),
    "image-verifier-reads-registry": ("mandatory", "stack"),
    "duties-separated": ("mandatory", "stack"),
    "keys-per-domain": ("mandatory", "stack"),
    "lifecycle-record-locked": ("mandatory", "stack"),
    "drift-retrains-can-pass": ("mandatory", "stack"),
}


def test_analyzer_info_lists_every_policy_with_level_and_config_schema(pack: PolicyPackSession) -> None:
    info = pack.info
    assert info.name == "ml-platform-uae"
    assert {p.name: (p.enforcement, p.kind) for p in info.policies} == POLICIES
    for policy in info.policies:
        assert policy.description and policy.severity in {"low", "medium", "high", "critical"}
        assert all("default" in schema and "type" in schema for schema in policy.schema.properties.values())
    residency = info.schemas()["uae-residency"].properties
    assert residency["allowedAwsRegions"]["default"] == ["me-central-1"]
    assert residency["allowedAzureLocations"]["default"] == ["uaenorth", "uaecentral"]


def test_version_is_the_one_in_pulumi_policy_yaml(pack: PolicyPackSession) -> None:
    project = yaml.safe_load((PACK_DIR / "PulumiPolicy.yaml").read_text())
    assert project["runtime"] == {"name": "python", "options": {"virtualenv": ".venv"}}
    assert pack.info.version == project["version"]


def test_pack_speaks_the_raw_protocol_as_the_engine_drives_it(pack: PolicyPackSession) -> None:
    """The engine tolerates UNIMPLEMENTED for Handshake; Python packs answer exactly that."""
    assert pack.info and pack.address  # started and connected
    with grpc.insecure_channel(pack.address) as channel:
        stub = AnalyzerStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.Handshake(proto.AnalyzerHandshakeRequest(engine_address="127.0.0.1:0"))
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
        info = stub.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.supportsConfig and len(info.policies) == len(POLICIES)


def test_requirements_pin_the_pack_environment() -> None:
    pins = [
        line for line in (PACK_DIR / "requirements.txt").read_text().splitlines() if line and line[0] != "#"
    ]
    # PyYAML: key_users.py reads the role-to-key table (key_users.yaml); pulumi requires it (pyyaml~=6.0),
    # pinned so the pack's venv is the one tested.
    assert pins == ["pulumi==3.272.0", "pulumi-policy==1.21.0", "protobuf==5.29.6", "pyyaml==6.0.4"]


def test_taggable_types_were_generated_from_the_installed_providers() -> None:
    header = (PACK_DIR / "mlplatform_policies" / "taggable_types.txt").read_text().splitlines()[0]
    for dist in ("pulumi-aws", "pulumi-azure-native"):
        assert f"{dist} {importlib.metadata.version(dist)}" in header, "run policies/tools/taggable_types.py"


def test_a_pack_without_its_virtualenv_or_requirements_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "PulumiPolicy.yaml").write_text(
        "runtime:\n  name: python\n  options:\n    virtualenv: venv\n"
    )
    missing = r"virtualenv is missing and .*requirements\.txt does not exist"
    with pytest.raises(InputError, match=missing), PolicyPackSession(tmp_path):
        pass


def _pack_copy(destination: Path) -> Path:
    """The pack's sources without its virtualenv: what a fresh clone has."""
    shutil.copytree(PACK_DIR, destination, ignore=shutil.ignore_patterns(".venv", "__pycache__"))
    return destination


def test_a_fresh_clone_installs_the_packs_virtualenv_as_the_cli_does(tmp_path: Path) -> None:
    """``pulumi preview --policy-pack`` installs a local pack's dependencies (pulumi
    ``installPolicyPackDependencies``); ``mlplatform check`` after ``pip install -r requirements.txt``
    in a fresh clone (issue 14) does the same, once."""
    pack = _pack_copy(tmp_path / "policies")
    with PolicyPackSession(pack) as session:
        assert {p.name for p in session.info.policies} == set(POLICIES)
    assert (pack / ".venv" / "bin" / "python").exists()


def test_a_failed_pack_install_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    pack = _pack_copy(tmp_path / "policies")
    (pack / "requirements.txt").write_text("no-such-distribution-mlplatform==1.0\n")
    with pytest.raises(InputError) as raised, PolicyPackSession(pack):
        pass
    (problem,) = raised.value.problems
    assert "installing requirements.txt failed" in problem and "\n" not in problem
    assert not (pack / ".venv").exists(), "the next run installs again instead of using half a virtualenv"
