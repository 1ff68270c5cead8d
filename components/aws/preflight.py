"""Fail before anything is created when the account lacks what the stack needs, naming the command that
fixes it: a pool's instance type not offered where it must run, the Auto Scaling service-linked role
the key policy names, a vCPU quota below what the pools may scale to.

The config already refuses types the region does not sell (AWS pricing data, components/catalog/aws.py);
which zones offer a type is not in that data and changes, so the program asks EC2: a missing type would
otherwise surface an hour into ``pulumi up`` as a node group stuck in CREATE_FAILED. Under ``mlplatform
plan`` the mocks answer from the region's recorded sales.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_aws import ec2, iam, servicequotas

from components.catalog import InstanceType
from components.catalog.aws import EKS_STANDARD_SUPPORT_END
from components.config import NodePoolConfig

# The role EC2 Auto Scaling launches managed node group instances as; the key policy names it
# (components/aws/keys.py). It exists only once the account's first Auto Scaling group was made.
AUTOSCALING_ROLE = "AWSServiceRoleForAutoScaling"
AUTOSCALING_ROLE_COMMAND = "aws iam create-service-linked-role --aws-service-name autoscaling.amazonaws.com"


def preflight_command(instance_type: str, region: str) -> str:
    """The CLI line a user runs to see where a type is offered (docs/aws.md)."""
    return (
        f"aws ec2 describe-instance-type-offerings --region {region} --location-type availability-zone "
        f"--filters Name=instance-type,Values={instance_type}"
    )


def ensure_offered(
    instance_type: str, zones: Sequence[str], region: str, *, pool: str, parent: pulumi.Resource
) -> None:
    """Raise a ``RunError`` naming the type, the zones and the preflight command unless EC2 offers
    ``instance_type`` in at least one of ``zones`` (a fabric pool passes its single zone)."""
    offerings = ec2.get_instance_type_offerings(
        location_type="availability-zone",
        filters=[
            {"name": "instance-type", "values": [instance_type]},
            {"name": "location", "values": list(zones)},
        ],
        opts=pulumi.InvokeOptions(parent=parent),
    )
    if instance_type not in offerings.instance_types:
        raise pulumi.RunError(
            f"node pool {pool!r}: {instance_type} is not offered in {', '.join(zones)} ({region}); "
            f"check with: {preflight_command(instance_type, region)}"
        )


# How long before the end of a minor's standard support every preview warns: time to pin, test and roll
# out the next minor (its EKS add-ons and charts) before EKS upgrades the control plane itself.
SUPPORT_WARNING_DAYS = 60
# Where the move to the next minor is described.
UPGRADE_PATH = 'docs/upgrade.md, "A Kubernetes minor"'


@dataclass(frozen=True)
class SupportNotice:
    """What a preview says about the cluster's minor on a date: a warning, or a refusal."""

    refuse: bool
    message: str


def standard_support_notice(version: str, today: datetime.date) -> SupportNotice | None:
    """Under the STANDARD upgrade policy (components/aws/cluster.py) EKS upgrades the control plane itself
    at the end of the minor's standard support (EKS user guide, "Understand the Kubernetes version
    lifecycle on EKS"). The next refresh (Pulumi.yaml ``refresh: always``) then reads the new minor while
    the stack still says the old one, and the update asks EKS for a downgrade, which UpdateClusterVersion
    cannot do. Warn ``SUPPORT_WARNING_DAYS`` ahead; from the day after the end, refuse the stack until
    ``kubernetesVersion`` names the next minor, with the path to it."""
    end = EKS_STANDARD_SUPPORT_END.get(version)
    if end is None:
        return None
    # EKS upgrades one minor at a time (UpdateClusterVersion), so the control plane is then on the next.
    upgrade = (
        f"pin Kubernetes {_next(version)}'s EKS add-ons (components/catalog/aws.py "
        "EKS_ADDON_VERSIONS) and charts (components/kubernetes/charts.py), then set "
        f"ml-platform:platform.cluster.kubernetesVersion to it ({UPGRADE_PATH})"
    )
    end_date = datetime.date.fromisoformat(end)
    if today > end_date:
        return SupportNotice(
            True,
            f"Kubernetes {version} left EKS standard support on {end}; with the STANDARD upgrade policy EKS "
            f"upgrades the control plane, and this stack would ask it for a downgrade. To go on: {upgrade}.",
        )
    if (end_date - today).days <= SUPPORT_WARNING_DAYS:
        return SupportNotice(
            False,
            f"Kubernetes {version} leaves EKS standard support on {end} ({(end_date - today).days} days); "
            f"EKS then upgrades the control plane and this stack refuses to run until you {upgrade}.",
        )
    return None


def _next(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def check_standard_support(version: str, today: datetime.date, parent: pulumi.Resource) -> None:
    """Say at preview what ``standard_support_notice`` finds: a warning, or a ``RunError``."""
    notice = standard_support_notice(version, today)
    if notice is not None and notice.refuse:
        raise pulumi.RunError(notice.message)
    if notice is not None:
        pulumi.log.warn(notice.message, resource=parent)


def ensure_autoscaling_role(parent: pulumi.Resource) -> None:
    """KMS refuses a key policy naming a principal that does not exist ("MalformedPolicyDocumentException:
    Policy contains a statement with one or more invalid principals"; terraform-aws-eks #3013, "only
    with New/Fresh AWS Account"), and the key is the stack's first resource: in a fresh account, say
    so at preview with the command that creates the role (IAM GetRole, NoSuchEntity)."""
    try:
        iam.get_role(name=AUTOSCALING_ROLE, opts=pulumi.InvokeOptions(parent=parent))
    except Exception as exc:  # the invoke's error carries the API's NoSuchEntity message
        raise pulumi.RunError(
            f"this account has no {AUTOSCALING_ROLE} yet, which the stack key's policy names; "
            f"create it with: {AUTOSCALING_ROLE_COMMAND}"
        ) from exc


@dataclass(frozen=True)
class VcpuQuota:
    code: str
    name: str


# EC2 counts running vCPUs per instance family group, separately for On-Demand and Spot (EC2 user
# guide, "Amazon EC2 instance type quotas"; Service Quotas codes as `aws service-quotas list-service-quotas
# --service-code ec2` lists them). The catalog's types fall into P, G and Standard (C, M).
_ON_DEMAND = {
    "p": VcpuQuota("L-417A185B", "Running On-Demand P instances"),
    "g": VcpuQuota("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "standard": VcpuQuota("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
}
_SPOT = {
    "p": VcpuQuota("L-7212CCBC", "All P Spot Instance Requests"),
    "g": VcpuQuota("L-3819A6DF", "All G and VT Spot Instance Requests"),
    "standard": VcpuQuota("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
}


def vcpu_demand(pools: Iterable[tuple[NodePoolConfig, InstanceType]]) -> dict[VcpuQuota, int]:
    """vCPUs each quota must allow for every pool at ``maxSize``. Pools with a capacity reservation are
    left out: the reservation already holds the capacity it was granted under."""
    demand: dict[VcpuQuota, int] = {}
    for pool, itype in pools:
        if pool.capacity_reservation is not None:
            continue
        family = itype.name[0] if itype.name[0] in ("p", "g") else "standard"
        quota = (_SPOT if pool.spot else _ON_DEMAND)[family]
        demand[quota] = demand.get(quota, 0) + pool.max_size * itype.vcpus
    return demand


def quota_command(quota: VcpuQuota, vcpus: int, region: str) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {quota.code} "
        f"--desired-value {vcpus} --region {region}"
    )


def ensure_vcpu_quotas(
    pools: Iterable[tuple[NodePoolConfig, InstanceType]], region: str, *, parent: pulumi.Resource
) -> None:
    """A quota below the pools' maximum lets ``pulumi up`` pass and leaves nodes unlaunched later
    (VcpuLimitExceeded); a fresh account's GPU quotas are often 0. Say so at preview, with the request."""
    for quota, vcpus in sorted(vcpu_demand(pools).items(), key=lambda item: item[0].code):
        granted = servicequotas.get_service_quota(
            service_code="ec2", quota_code=quota.code, opts=pulumi.InvokeOptions(parent=parent)
        ).value
        if granted < vcpus:
            raise pulumi.RunError(
                f"{quota.name} ({quota.code}) in {region} is {granted:g} vCPUs; the node pools may use "
                f"{vcpus} at maxSize. Request it with: {quota_command(quota, vcpus, region)}"
            )
