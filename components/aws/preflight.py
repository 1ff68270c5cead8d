"""Fail before anything is created when the account lacks what the stack needs, naming the command that
fixes it: a pool's instance type not offered where it must run, the Auto Scaling service-linked role
the key policy names.

The config already refuses types the region does not sell (AWS pricing data, components/catalog/aws.py);
which zones offer a type is not in that data and changes, so the program asks EC2: a missing type would
otherwise surface an hour into ``pulumi up`` as a node group stuck in CREATE_FAILED. Under ``mlplatform
plan`` the mocks answer from the region's recorded sales.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
from pulumi_aws import ec2, iam

# The role EC2 Auto Scaling launches managed node group instances as; the key policy names it
# (components/aws/keys.py). It exists only once the account's first Auto Scaling group was made.
AUTOSCALING_ROLE = "AWSServiceRoleForAutoScaling"
AUTOSCALING_ROLE_COMMAND = "aws iam create-service-linked-role --aws-service-name autoscaling.amazonaws.com"


def preflight_command(instance_type: str, region: str) -> str:
    """The CLI line a user runs to see where a type is offered (README, "Preflight")."""
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
