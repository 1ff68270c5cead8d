"""Serve the ml-platform policy pack over Pulumi's Analyzer protocol (the CLI, or `mlplatform check`)."""

from mlplatform_policies import PACK_NAME, all_policies
from mlplatform_policies.decoding import share_decoding
from pulumi_policy import PolicyPack

share_decoding()

PolicyPack(
    name=PACK_NAME,
    policies=all_policies(),
    description="UAE data residency and the ml-platform security baseline for AWS, Azure and Kubernetes.",
)
