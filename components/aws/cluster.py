"""The EKS control plane: private by default, every log type on, secrets sealed under our key.

Access is by EKS access entries only (authentication mode ``API``): the ``aws-auth`` ConfigMap is a
single editable object that grants cluster-admin to whoever can write it, access entries are IAM-audited
API calls. The cluster's OIDC provider is what IRSA roles trust.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_aws import cloudwatch, eks, iam, vpc

from components.aws.account import AwsAccount
from components.aws.iam import (
    CLUSTER_ROLE_PURPOSE,
    OidcIssuer,
    managed_policy_arn,
    policy_document,
    role_name_prefix,
    service_trust_policy,
)
from components.aws.network import LOG_RETENTION_DAYS
from components.config import EndpointAccess

# Every control-plane log type EKS offers (EKS user guide, "Send control plane logs to CloudWatch
# Logs"); checkov CKV_AWS_37 wants all of them.
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# The support policy the cluster is created with (EKS API reference, UpgradePolicyRequest.supportType).
UPGRADE_SUPPORT_TYPE = "STANDARD"


def control_plane_log_group(cluster_name: str) -> str:
    """The log group EKS writes the control-plane logs to (a fixed name)."""
    return f"/aws/eks/{cluster_name}/cluster"


def kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that fetches a short-lived token with ``aws eks get-token`` on every use: nothing
    long-lived is written into it, and whoever uses it acts as their own IAM principal."""
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": [
                "eks",
                "get-token",
                "--cluster-name",
                cluster_name,
                "--region",
                region,
                "--output",
                "json",
            ],
            "interactiveMode": "Never",
        }
    }
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}
            ],
            "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
            "current-context": cluster_name,
            "users": [{"name": cluster_name, "user": user}],
        }
    )


@dataclass(frozen=True)
class EksClusterArgs:
    cluster_name: str
    kubernetes_version: str
    endpoint: EndpointAccess
    public_access_cidrs: Sequence[str]
    # Who may reach the private endpoint on 443 (a runner inside the VPC or a peered network).
    private_access_cidrs: Sequence[str]
    private_access_security_groups: Sequence[str]
    subnet_ids: Sequence[pulumi.Input[str]]
    # Kubernetes Secrets' key, and the control-plane log group's.
    key_arn: pulumi.Input[str]
    log_key_arn: pulumi.Input[str]
    account: AwsAccount
    # Production: EKS deletion protection on the cluster, and the cluster and its audit log group
    # protected and retained in Pulumi.
    protect: bool
    tags: Mapping[str, str]


class EksCluster(pulumi.ComponentResource):
    """Control plane, its role and log group, and the IRSA OIDC provider (people's access entries:
    components/aws/access.py)."""

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:aws:EksCluster", name, None, opts)
        self._name, self._args = name, args
        self._child = pulumi.ResourceOptions(parent=self)
        role, role_policies = self._cluster_role()
        # EKS writes control-plane logs to this fixed group name; creating it first lets us encrypt it
        # and bound its retention instead of getting an unencrypted never-expiring group.
        log_group = cloudwatch.LogGroup(
            f"{name}-logs",
            name=control_plane_log_group(args.cluster_name),
            kms_key_id=args.log_key_arn,
            retention_in_days=LOG_RETENTION_DAYS,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect),
        )
        public = args.endpoint is EndpointAccess.PUBLIC
        self.cluster = eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=args.kubernetes_version,
            role_arn=role.arn,
            vpc_config={
                "subnet_ids": list(args.subnet_ids),
                "endpoint_private_access": True,
                "endpoint_public_access": public,
                **({"public_access_cidrs": list(args.public_access_cidrs)} if public else {}),
            },
            encryption_config={"provider": {"key_arn": args.key_arn}, "resources": ["secrets"]},
            enabled_cluster_log_types=list(CONTROL_PLANE_LOG_TYPES),
            # "The cluster cannot be deleted unless deletion protection is first disabled" (pulumi-aws
            # eks.Cluster docstring): a destroy cannot take the production control plane by accident.
            deletion_protection=args.protect,
            # STANDARD: at the end of standard support EKS upgrades the control plane instead of
            # billing the extended-support rate (EKS user guide, "Kubernetes version lifecycle";
            # extended support is the default). Stay in standard support by upgrading kubernetesVersion.
            upgrade_policy={"support_type": UPGRADE_SUPPORT_TYPE},
            access_config={
                "authentication_mode": "API",
                # The identity running `pulumi up` must reach the API to apply the Kubernetes layer.
                "bootstrap_cluster_creator_admin_permissions": True,
            },
            tags=dict(args.tags),
            # The policies must outlive the cluster: EKS uses them to delete the security groups and ENIs
            # it made (pulumi-aws eks.Cluster docstring examples depend on the attachment), and the key
            # policy is what secrets encryption runs on from the first write.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[log_group, *role_policies],
                protect=args.protect,
                retain_on_delete=args.protect,
            ),
        )
        self.name: pulumi.Output[str] = self.cluster.name
        # The cluster role's own ARN, which the Secrets key's policy names (components/aws/keys.py).
        self.role_arn: pulumi.Output[str] = role.arn
        self.endpoint: pulumi.Output[str] = self.cluster.endpoint
        self.security_group_id: pulumi.Output[str] = self.cluster.vpc_config.cluster_security_group_id
        self._private_access()
        self.issuer = self._oidc_provider()
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.endpoint, self.cluster.certificate_authority.data).apply(
                lambda v: kubeconfig(args.cluster_name, v[0], v[1], args.account.region)
            )
        )
        self.register_outputs(
            {
                "name": self.name,
                "endpoint": self.endpoint,
                "securityGroupId": self.security_group_id,
                "oidcProviderArn": self.issuer.provider_arn,
                "kubeconfig": self.kubeconfig,
            }
        )

    def _private_access(self) -> None:
        """The cluster security group admits only itself; a private endpoint is reachable on 443 from
        nothing else until a rule says so (EKS user guide, "Cluster API server endpoint": the cluster
        security group must allow the client's network). One rule per configured CIDR or group."""
        args = self._args
        peers: list[dict[str, str]] = [{"cidr_ipv4": c} for c in args.private_access_cidrs]
        peers += [{"referenced_security_group_id": g} for g in args.private_access_security_groups]
        for index, peer in enumerate(peers):
            vpc.SecurityGroupIngressRule(
                f"{self._name}-api-{index}",
                security_group_id=self.security_group_id,
                description="Kubernetes API on the private endpoint",
                ip_protocol="tcp",
                from_port=443,
                to_port=443,
                tags=dict(args.tags),
                opts=self._child,
                **peer,
            )

    def _cluster_role(self) -> tuple[iam.Role, list[pulumi.Resource]]:
        """The control plane's role. It also needs the key for secrets envelope encryption (as
        terraform-aws-eks grants it: Encrypt, Decrypt, ListGrants, DescribeKey on the one key)."""
        args = self._args
        role = iam.Role(
            f"{self._name}-role",
            name_prefix=role_name_prefix(args.cluster_name, CLUSTER_ROLE_PURPOSE),
            description="EKS control plane",
            assume_role_policy=service_trust_policy("eks.amazonaws.com"),
            tags=dict(args.tags),
            opts=self._child,
        )
        attachment = iam.RolePolicyAttachment(
            f"{self._name}-role",
            role=role.name,
            policy_arn=managed_policy_arn(args.account, "AmazonEKSClusterPolicy"),
            opts=self._child,
        )
        kms = iam.RolePolicy(
            f"{self._name}-role-kms",
            role=role.id,
            policy=pulumi.Output.json_dumps(
                policy_document(
                    [
                        {
                            "Effect": "Allow",
                            "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey"],
                            "Resource": args.key_arn,
                        }
                    ]
                )
            ),
            opts=self._child,
        )
        return role, [attachment, kms]

    def _oidc_provider(self) -> OidcIssuer:
        issuer_url = self.cluster.identities.apply(lambda ids: str(ids[0].oidcs[0].issuer))
        provider = iam.OpenIdConnectProvider(
            f"{self._name}-oidc",
            url=issuer_url,
            client_id_lists=["sts.amazonaws.com"],
            tags=dict(self._args.tags),
            opts=self._child,
        )
        return OidcIssuer(
            provider_arn=provider.arn, host=issuer_url.apply(lambda u: u.removeprefix("https://"))
        )
