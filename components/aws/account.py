"""Facts about the AWS account and region the stack deploys into, read once from the provider.

Every ARN we write by hand (key policy principals, IAM policy resources) needs the account id and the
partition, and the network needs zone names. They come from provider invokes rather than config so a
stack file never carries an account id, and under ``mlplatform plan`` the mocks answer them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_aws import get_availability_zones, get_caller_identity, get_partition


@dataclass(frozen=True)
class AwsAccount:
    account_id: str
    partition: str
    region: str
    # The zones the network spans, in the order subnets are laid out; index N is config's zone N.
    zones: tuple[str, ...]

    def arn(self, service: str, resource: str, *, regional: bool = True) -> str:
        """An ARN in this account; IAM and other global services leave the region empty."""
        region = self.region if regional else ""
        return f"arn:{self.partition}:{service}:{region}:{self.account_id}:{resource}"

    @property
    def root_arn(self) -> str:
        return self.arn("iam", "root", regional=False)

    @property
    def dns_suffix(self) -> str:
        return f"{self.region}.amazonaws.com"


def enable_region_command(region: str) -> str:
    return f"aws account enable-region --region-name {region}"


def lookup_account(region: str, zone_count: int, parent: pulumi.Resource) -> AwsAccount:
    """Read the account, partition and the first ``zone_count`` zones of the provider's region.

    Only zones that need no opt-in are used: Local and Wavelength Zones lack the EKS control plane and
    most instance types.
    """
    opts = pulumi.InvokeOptions(parent=parent)
    identity = get_caller_identity(opts=opts)
    partition = get_partition(opts=opts)
    try:
        zones = get_availability_zones(
            state="available",
            filters=[{"name": "opt-in-status", "values": ["opt-in-not-required"]}],
            opts=opts,
        )
    except Exception as exc:  # the invoke's error carries EC2's message (AuthFailure, OptInRequired…)
        # me-central-1 is an opt-in region: EC2 refuses every call until the account enables it (AWS
        # Account Management reference guide, "Enable or disable AWS Regions in your account").
        raise pulumi.RunError(
            f"cannot list the availability zones of {region}; if the region is not enabled for this "
            f"account (aws account get-region-opt-status --region-name {region}), enable it with: "
            f"{enable_region_command(region)}"
        ) from exc
    names = tuple(zones.names)
    if len(names) < zone_count:
        raise pulumi.RunError(
            f"{region} offers {len(names)} availability zones ({', '.join(names)}); "
            f"network.availabilityZones asks for {zone_count}"
        )
    return AwsAccount(
        account_id=identity.account_id,
        partition=partition.partition,
        region=region,
        zones=names[:zone_count],
    )
