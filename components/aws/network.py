"""The VPC: private subnets for nodes, public subnets only for NAT and internet-facing load balancers.

Nodes never get public addresses; they leave through NAT. Production runs one NAT gateway per zone, so
losing a zone does not cut the others off; dev shares one NAT gateway to save the per-gateway hourly
charge, accepting that the stack loses egress if that zone fails. S3 traffic takes a gateway endpoint:
it stays on the AWS network, in-region, and skips the NAT data-processing charge for dataset reads.
Enterprise stacks also get interface endpoints with private DNS for the AWS APIs nodes and controllers
call (image pulls, credentials, EC2, logs, EKS, autoscaling, load balancers): those calls stay inside
the VPC instead of depending on the NAT path (EKS user guide, "Deploy private clusters with limited
internet access", the endpoints it lists).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_aws import cloudwatch, ec2, iam, s3, vpc

from components.aws.account import AwsAccount
from components.aws.iam import policy_document, role_name_prefix

# Interface endpoints a private EKS cluster's nodes and controllers use (EKS user guide, private
# clusters): ECR (API and image layers; layers themselves come from S3, the gateway endpoint), STS for
# IRSA, EC2 for the VPC CNI, CloudWatch Logs, EKS, Auto Scaling for the cluster autoscaler, Elastic Load
# Balancing for load balancers; Secrets Manager for the registry database's RDS-managed password, read by
# the registry at every new connection (Secrets Manager user guide, "Using an AWS Secrets Manager VPC
# endpoint"; registry review D2).
INTERFACE_ENDPOINTS = (
    "ecr.api",
    "ecr.dkr",
    "sts",
    "ec2",
    "logs",
    "eks",
    "autoscaling",
    "elasticloadbalancing",
    "secretsmanager",
)

# CIS-aligned scanners (checkov CKV_AWS_338) want log groups kept for at least a year.
LOG_RETENTION_DAYS = 365


def aws_owned_buckets(account: AwsAccount) -> list[dict[str, object]]:
    """Endpoint policy statements for the AWS-owned buckets in the region that nodes use.

    - ECR image layers (every image pull, the EKS add-on images included): ECR user guide, "Amazon ECR
      interface VPC endpoints (AWS PrivateLink)", "Minimum Amazon S3 bucket permissions for Amazon ECR":
      its example allows s3:GetObject and s3:PutObject on ``prod-<region>-starport-layer-bucket/*``.
    - Amazon Linux 2023 package repositories (dnf on the nodes), read-only: aws-samples/data-perimeter-
      policy-examples ``vpc_endpoint_policies/s3_endpoint_policy.json``, "AllowRequestsToAWSOwnedResources".
      The bucket's exact name, not a wildcard: any account may name a bucket ``al2023-repos-<region>-…``.
    """
    partition, region = account.partition, account.region
    return [
        {
            "Sid": "EcrImageLayers",
            "Effect": "Allow",
            "Principal": "*",
            "Action": ["s3:GetObject", "s3:PutObject"],
            "Resource": f"arn:{partition}:s3:::prod-{region}-starport-layer-bucket/*",
        },
        {
            "Sid": "AmazonLinuxRepositories",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:GetObject",
            "Resource": f"arn:{partition}:s3:::al2023-repos-{region}-de612dc2/*",
        },
    ]


def s3_endpoint_policy(
    account: AwsAccount, bucket_arns: Sequence[pulumi.Input[str]], extra_buckets: Sequence[str]
) -> pulumi.Output[str]:
    """What the S3 gateway endpoint lets through: anything IAM allows on the stack's buckets and the
    ``extra_buckets`` config names, the AWS-owned buckets nodes need, and nothing else, so a
    node or pod cannot copy data to a bucket of another account through it (review D7). An endpoint
    policy only narrows: callers still need IAM permission (AWS PrivateLink guide, "Control access to
    VPC endpoints using endpoint policies")."""
    buckets: list[pulumi.Input[str]] = [
        *bucket_arns,
        *(f"arn:{account.partition}:s3:::{name}" for name in extra_buckets),
    ]
    stack: dict[str, object] = {
        "Sid": "StackBuckets",
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [*buckets, *(pulumi.Output.concat(arn, "/*") for arn in buckets)],
    }
    return pulumi.Output.json_dumps(policy_document([stack, *aws_owned_buckets(account)]))


def flow_log_group(network_name: str) -> str:
    """The VPC flow logs' log group, named from the network component's name."""
    return f"/aws/vpc/{network_name}/flow-logs"


@dataclass(frozen=True)
class SubnetLayout:
    private: tuple[str, ...]
    public: tuple[str, ...]


def subnet_layout(cidr: str, zones: int) -> SubnetLayout:
    """Carve the VPC: each zone's private subnet is a quarter of the range (the VPC CNI gives every pod
    a VPC address, so node subnets need the room); the fourth quarter holds the small public subnets.

    A /16 gives /18 private and /20 public subnets; the /20 minimum config allows gives /22 and /24.
    """
    network = ipaddress.IPv4Network(cidr)  # config accepts private IPv4 ranges only
    quarters = list(network.subnets(prefixlen_diff=2))
    public = list(quarters[3].subnets(prefixlen_diff=2))
    return SubnetLayout(
        private=tuple(str(s) for s in quarters[:zones]),
        public=tuple(str(s) for s in public[:zones]),
    )


@dataclass(frozen=True)
class NetworkArgs:
    cidr: str
    account: AwsAccount
    # The EKS cluster's name, for the subnet tags its load balancer controller discovers.
    cluster_name: str
    nat_per_zone: bool
    # Interface VPC endpoints for the AWS APIs (enterprise).
    interface_endpoints: bool
    key_arn: pulumi.Input[str]
    # Production keeps its flow-log audit trail: the log group is protected and retained on delete.
    protect: bool
    tags: Mapping[str, str]


class Network(pulumi.ComponentResource):
    """VPC, subnets per zone, NAT, routes, the S3 gateway endpoint and flow logs."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:aws:Network", name, None, opts)
        self._name, self._args = name, args
        self._child = pulumi.ResourceOptions(parent=self)
        layout = subnet_layout(args.cidr, len(args.account.zones))
        self.vpc = ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr,
            enable_dns_hostnames=True,  # EKS private endpoints and EFS/FSx mount names resolve via DNS.
            enable_dns_support=True,
            tags=self._tags(name),
            opts=self._child,
        )
        self.vpc_id: pulumi.Output[str] = self.vpc.id
        self._close_default_security_group()
        public = self._public_subnets(layout.public)
        private = self._private_subnets(layout.private)
        self._routes(public, private)
        if args.interface_endpoints:
            self._interface_endpoints(private)
        self._flow_logs()
        self.private_subnet_ids: list[pulumi.Output[str]] = [s.id for s in private]
        self.public_subnet_ids: list[pulumi.Output[str]] = [s.id for s in public]
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "privateSubnetIds": self.private_subnet_ids,
                "publicSubnetIds": self.public_subnet_ids,
            }
        )

    def _tags(self, name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**self._args.tags, "Name": name, **(extra or {})}

    def _close_default_security_group(self) -> None:
        """Adopt the VPC's default security group with no rules: the provider removes the "all traffic
        from itself, all egress" rules AWS creates (pulumi-aws ``ec2.DefaultSecurityGroup`` docstring),
        as AWS Security Hub [EC2.2] / CIS AWS Foundations ask ("the default security group of every VPC
        restricts all traffic"). Nothing of the platform uses the default group."""
        ec2.DefaultSecurityGroup(
            f"{self._name}-default",
            vpc_id=self.vpc.id,
            tags=self._tags(f"{self._name}-default"),
            opts=self._child,
        )

    def _subnets(self, kind: str, cidrs: Sequence[str], role_tag: str) -> list[ec2.Subnet]:
        cluster_tag = {f"kubernetes.io/cluster/{self._args.cluster_name}": "shared", role_tag: "1"}
        return [
            ec2.Subnet(
                f"{self._name}-{kind}-{index}",
                vpc_id=self.vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                map_public_ip_on_launch=False,  # even public subnets: only NAT and LBs live there.
                tags=self._tags(f"{self._name}-{kind}-{zone}", cluster_tag),
                opts=self._child,
            )
            for index, (cidr, zone) in enumerate(zip(cidrs, self._args.account.zones, strict=True))
        ]

    def _public_subnets(self, cidrs: Sequence[str]) -> list[ec2.Subnet]:
        # kubernetes.io/role/elb: where the AWS load balancer controller puts internet-facing LBs.
        return self._subnets("public", cidrs, "kubernetes.io/role/elb")

    def _private_subnets(self, cidrs: Sequence[str]) -> list[ec2.Subnet]:
        # kubernetes.io/role/internal-elb: where internal LBs go; nodes and pods live here too.
        return self._subnets("private", cidrs, "kubernetes.io/role/internal-elb")

    def _routes(self, public: Sequence[ec2.Subnet], private: Sequence[ec2.Subnet]) -> None:
        gateway = ec2.InternetGateway(
            f"{self._name}-igw", vpc_id=self.vpc.id, tags=self._tags(self._name), opts=self._child
        )
        public_table = ec2.RouteTable(
            f"{self._name}-public",
            vpc_id=self.vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": gateway.id}],
            tags=self._tags(f"{self._name}-public"),
            opts=self._child,
        )
        for index, subnet in enumerate(public):
            ec2.RouteTableAssociation(
                f"{self._name}-public-{index}",
                subnet_id=subnet.id,
                route_table_id=public_table.id,
                opts=self._child,
            )
        nat_subnets = public if self._args.nat_per_zone else public[:1]
        nats = [self._nat(index, subnet, gateway) for index, subnet in enumerate(nat_subnets)]
        private_tables = []
        for index, subnet in enumerate(private):
            table = ec2.RouteTable(
                f"{self._name}-private-{index}",
                vpc_id=self.vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nats[index % len(nats)].id}],
                tags=self._tags(f"{self._name}-private-{index}"),
                opts=self._child,
            )
            ec2.RouteTableAssociation(
                f"{self._name}-private-{index}",
                subnet_id=subnet.id,
                route_table_id=table.id,
                opts=self._child,
            )
            private_tables.append(table)
        self._s3_endpoint = ec2.VpcEndpoint(
            f"{self._name}-s3",
            vpc_id=self.vpc.id,
            service_name=f"com.amazonaws.{self._args.account.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[t.id for t in private_tables],
            tags=self._tags(f"{self._name}-s3"),
            opts=self._child,
        )

    def restrict_s3_endpoint(
        self, buckets: Sequence[s3.Bucket], extra_buckets: Sequence[str]
    ) -> ec2.VpcEndpointPolicy:
        """The S3 endpoint's policy (``s3_endpoint_policy``), a resource of its own so that it names
        buckets created after the network, and created after them."""
        return ec2.VpcEndpointPolicy(
            f"{self._name}-s3",
            vpc_endpoint_id=self._s3_endpoint.id,
            policy=s3_endpoint_policy(self._args.account, [b.arn for b in buckets], extra_buckets),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(buckets)),
        )

    def _interface_endpoints(self, private: Sequence[ec2.Subnet]) -> None:
        """One endpoint per API in every private subnet, with private DNS so the SDKs' default hostnames
        resolve to it; its security group admits HTTPS from the VPC and nothing else."""
        group = ec2.SecurityGroup(
            f"{self._name}-endpoints",
            vpc_id=self.vpc.id,
            description="AWS API interface endpoints: HTTPS from the VPC",
            tags=self._tags(f"{self._name}-endpoints"),
            opts=self._child,
        )
        vpc.SecurityGroupIngressRule(
            f"{self._name}-endpoints-https",
            security_group_id=group.id,
            description="HTTPS from the VPC",
            cidr_ipv4=self._args.cidr,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            tags=dict(self._args.tags),
            opts=self._child,
        )
        for service in INTERFACE_ENDPOINTS:
            ec2.VpcEndpoint(
                f"{self._name}-{service.replace('.', '-')}",
                vpc_id=self.vpc.id,
                service_name=f"com.amazonaws.{self._args.account.region}.{service}",
                vpc_endpoint_type="Interface",
                private_dns_enabled=True,
                subnet_ids=[s.id for s in private],
                security_group_ids=[group.id],
                tags=self._tags(f"{self._name}-{service}"),
                opts=self._child,
            )

    def _nat(self, index: int, subnet: ec2.Subnet, gateway: ec2.InternetGateway) -> ec2.NatGateway:
        """A public NAT gateway in a VPC without an attached internet gateway fails with
        ``Gateway.NotAttached`` (EC2 API reference, ``NatGateway.failureCode``); nothing else orders the
        two, so it waits for the gateway explicitly, as the pulumi-aws ``ec2.NatGateway`` docstring's
        public NAT example does."""
        eip = ec2.Eip(
            f"{self._name}-nat-{index}",
            domain="vpc",
            tags=self._tags(f"{self._name}-nat-{index}"),
            opts=self._child,
        )
        return ec2.NatGateway(
            f"{self._name}-nat-{index}",
            allocation_id=eip.id,
            subnet_id=subnet.id,
            tags=self._tags(f"{self._name}-nat-{index}"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]),
        )

    def _flow_logs(self) -> None:
        """All VPC traffic to a KMS-encrypted log group: the audit record of who talked to what."""
        args = self._args
        group = cloudwatch.LogGroup(
            f"{self._name}-flow-logs",
            name=flow_log_group(self._name),
            kms_key_id=args.key_arn,
            retention_in_days=LOG_RETENTION_DAYS,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect),
        )
        # The flow-logs service assumes this role; SourceAccount stops another account's flow logs
        # from using it (confused deputy, VPC user guide "IAM role for publishing flow logs").
        role = iam.Role(
            f"{self._name}-flow-logs",
            name_prefix=role_name_prefix(args.cluster_name, "flow"),
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "vpc-flow-logs.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                            "Condition": {"StringEquals": {"aws:SourceAccount": args.account.account_id}},
                        }
                    ],
                }
            ),
            tags=dict(args.tags),
            opts=self._child,
        )
        iam.RolePolicy(
            f"{self._name}-flow-logs",
            role=role.id,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": [
                                "logs:CreateLogStream",
                                "logs:PutLogEvents",
                                "logs:DescribeLogGroups",
                                "logs:DescribeLogStreams",
                            ],
                            "Resource": [group.arn, pulumi.Output.concat(group.arn, ":*")],
                        }
                    ],
                }
            ),
            opts=self._child,
        )
        ec2.FlowLog(
            f"{self._name}-flow-logs",
            vpc_id=self.vpc.id,
            traffic_type="ALL",
            log_destination_type="cloud-watch-logs",
            log_destination=group.arn,
            iam_role_arn=role.arn,
            tags=dict(args.tags),
            opts=self._child,
        )
