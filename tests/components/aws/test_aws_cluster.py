"""The EKS control plane as planned from the shipped templates: endpoint access per tier, secrets
encryption under the stack's key, every log type, access entries, OIDC for IRSA, the kubeconfig."""

from __future__ import annotations

import json
from collections.abc import Callable

from components.aws.cluster import CONTROL_PLANE_LOG_TYPES, kubeconfig
from mlplatform.plan import Plan
from tests.components.aws.aws_plan_support import SECRET_KEYS
from tests.stack_variants import one

CLUSTER = "aws:eks/cluster:Cluster"
KEY = "aws:kms/key:Key"


def test_smb_endpoint_is_public_only_to_the_allow_list(cloud_plan: Callable[[str], Plan]) -> None:
    vpc = one(cloud_plan("aws-smb-dev"), CLUSTER, "-cluster-eks").inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is True
    assert vpc["endpointPrivateAccess"] is True
    assert vpc["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_enterprise_endpoint_is_private(cloud_plan: Callable[[str], Plan]) -> None:
    vpc = one(cloud_plan("aws-enterprise-prod"), CLUSTER, "-cluster-eks").inputs["vpcConfig"]
    assert vpc["endpointPublicAccess"] is False
    assert vpc["endpointPrivateAccess"] is True
    assert "publicAccessCidrs" not in vpc


def test_control_plane_sits_in_the_private_subnets(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    subnets = one(plan, CLUSTER, "-cluster-eks").inputs["vpcConfig"]["subnetIds"]
    assert len(subnets) == 3
    assert all("-network-private-" in s for s in subnets)


def test_secrets_are_enveloped_under_the_stacks_key(cloud_plan: Callable[[str], Plan]) -> None:
    for stack in ("aws-smb-dev", "aws-enterprise-prod"):
        plan = cloud_plan(stack)
        encryption = one(plan, CLUSTER, "-cluster-eks").inputs["encryptionConfig"]
        assert encryption["resources"] == ["secrets"]
        assert encryption["provider"]["keyArn"] == plan.outputs["kmsKeyArn"]
        assert one(plan, KEY, "-key-key").inputs["enableKeyRotation"] is True


def test_every_control_plane_log_type_goes_to_an_encrypted_group(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-enterprise-prod")
    cluster = one(plan, CLUSTER, "-cluster-eks")
    assert sorted(cluster.inputs["enabledClusterLogTypes"]) == sorted(
        ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    )
    assert tuple(cluster.inputs["enabledClusterLogTypes"]) == CONTROL_PLANE_LOG_TYPES
    group = one(plan, "aws:cloudwatch/logGroup:LogGroup", "-cluster-logs")
    assert group.inputs["name"] == f"/aws/eks/{cluster.inputs['name']}/cluster"
    assert group.inputs["kmsKeyId"].startswith("arn:aws:kms:me-central-1:")
    assert group.inputs["retentionInDays"] == 365
    assert group.urn in cluster.dependencies


def test_access_is_by_access_entries_and_version_from_config(cloud_plan: Callable[[str], Plan]) -> None:
    cluster = one(cloud_plan("aws-smb-dev"), CLUSTER, "-cluster-eks")
    assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"
    assert cluster.inputs["version"] == "1.35"
    assert cluster.inputs["name"] == "aws-smb-dev-aws"


def test_oidc_provider_trusts_sts_audience_at_the_cluster_issuer(cloud_plan: Callable[[str], Plan]) -> None:
    plan = cloud_plan("aws-smb-dev")
    provider = one(plan, "aws:iam/openIdConnectProvider:OpenIdConnectProvider", "-cluster-oidc")
    assert provider.inputs["clientIdLists"] == ["sts.amazonaws.com"]
    assert provider.inputs["url"].startswith("https://oidc.eks.me-central-1.amazonaws.com/id/")


def test_kubeconfig_is_a_secret_exec_kubeconfig(cloud_plan: Callable[[str], Plan]) -> None:
    output = cloud_plan("aws-enterprise-prod").outputs["kubeconfig"]
    assert set(output) == SECRET_KEYS
    document = json.loads(output["value"])
    user = document["users"][0]["user"]["exec"]
    assert user["command"] == "aws"
    assert user["args"][:4] == ["eks", "get-token", "--cluster-name", "aws-enterprise-prod-aws"]
    assert "--region" in user["args"] and "me-central-1" in user["args"]
    cluster = document["clusters"][0]["cluster"]
    assert cluster["server"].startswith("https://") and cluster["certificate-authority-data"]
    assert "token" not in document["users"][0]["user"]


def test_kubeconfig_builder_names_one_context() -> None:
    document = json.loads(kubeconfig("c", "https://e", "Y2E=", "me-central-1"))
    assert document["current-context"] == "c"
    assert document["contexts"] == [{"name": "c", "context": {"cluster": "c", "user": "c"}}]
