"""Ordering through values: an output that resolves only once other resources exist.

``depends_on`` orders one resource after others; a value handed on (a role's ARN in a service account's
annotation, an identity's client ID) carries its dependencies to every resource that uses it, however
far down it goes, including to the Kubernetes layer, which knows nothing of the cloud resources behind
a ``ClusterHandle``. So a right (an IAM policy, a federated credential, a role assignment) is attached
to the value that is useless without it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi


def after(value: pulumi.Output[str], resources: Sequence[pulumi.Resource]) -> pulumi.Output[str]:
    """``value``, resolving only once ``resources`` exist: a dependency every user of it inherits."""
    if not resources:
        return value
    return pulumi.Output.all(value, *(r.urn for r in resources)).apply(lambda v: str(v[0]))
