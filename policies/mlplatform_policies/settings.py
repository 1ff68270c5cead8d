"""Policy settings (the pack's config schema, with UAE defaults) and the exception annotations.

Every setting is declared once here; a policy's config schema lists the settings it reads, each with
its default, so the Pulumi CLI (``--policy-pack-config``) and ``mlplatform check --policy-config``
fill defaults and validate overrides the same way. Rules read settings through ``Subject.setting``,
which falls back to the same defaults when a caller configured nothing.

Exception contract (written by the Kubernetes layer, judged by ``kubernetes.py`` and ``stack.py``):

- ``pod-security.kubernetes.io/enforce: privileged`` on a Namespace is allowed only with a non-blank
  ``policy.ml-platform.io/privileged-reason`` annotation on that Namespace (operator namespaces: GPU
  operator, network operator).
- A workload whose own ``metadata.annotations`` carry a non-blank
  ``policy.ml-platform.io/privileged-reason`` is exempt from the privilege checks (privileged, host
  namespaces, root, privilege escalation, added capabilities), and only inside such a namespace.
- A workload may add the capabilities listed in ``exceptableCapabilities`` (default ``IPC_LOCK``, for
  InfiniBand RDMA; ``CHOWN`` and ``FOWNER``, for the Job that hands FSx for Lustre's shared directory to
  the workload user, both in Pod Security baseline's allowed set) only when its own
  ``metadata.annotations`` carry a non-blank ``policy.ml-platform.io/capabilities-reason``. Annotations
  on the pod template do not count: the reason belongs to the object a reviewer reads.
- An S3 bucket tagged ``ml-platform.io/role: access-logs`` (a server-access-log target) may use SSE-S3
  (``AES256``) instead of SSE-KMS: S3 server access logging to an SSE-KMS default-encrypted target is
  not supported (S3 user guide, "Enabling Amazon S3 server access logging"). The exception follows the
  bucket's declared role, not its name, and allows SSE-S3 only, never no encryption.
- A Key Vault tagged ``ml-platform.io-role: registry-creation-key`` may keep public network access in an
  enterprise stack, provided it authorises with Azure RBAC alone (no access policies): a container
  registry takes its customer-managed key at creation only through a user-assigned identity, which a Key
  Vault firewall refuses, so Microsoft's path for a firewalled vault creates the registry on a key in a
  vault outside the firewall and then rotates to the firewalled one ("Encrypt registry using a
  customer-managed key", Advanced scenario: Key Vault firewall). The rotation closes that vault.
- An EKS cluster tagged ``ml-platform.io/audit-trail`` with a CloudTrail trail ARN declares that an
  organisation trail records its account (``audit.organizationTrail``; the program checks that trail at
  preview): ``audit-trail`` then asks for no trail in the stack (audit.py).
- An EKS cluster tagged ``ml-platform.io/threat-detection: existing``, or on Azure a storage account
  tagged ``ml-platform.io-threat-detection: existing`` (the audit archive), declares that the account's
  GuardDuty detector or the subscription's Defender plans are another stack's or the organisation's
  (``audit.detection: existing``; the program checks them at preview): ``threat-detection`` then asks
  for none in the stack.
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import PolicyConfigSchema

PRIVILEGED_REASON = "policy.ml-platform.io/privileged-reason"
CAPABILITIES_REASON = "policy.ml-platform.io/capabilities-reason"
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
ROLE_TAG = "ml-platform.io/role"
# Azure's spelling: ARM refuses tag names containing ``< > % & \\ ? /`` (tag-resources#limitations).
AZURE_ROLE_TAG = "ml-platform.io-role"
# The data domains a KMS key serves (space-separated) or an encrypted store declares (components/config.py).
DATA_DOMAIN_TAG = "ml-platform.io/data-domain"
ACCESS_LOGS_ROLE = "access-logs"
# The lifecycle record's bucket (components/aws/storage.py LIFECYCLE_RECORD_ROLE).
LIFECYCLE_RECORD_ROLE = "lifecycle-record"
# The record's prefix in that bucket (components/aws/storage.py RECORD_PREFIX), where the registry appends.
LIFECYCLE_RECORD_PREFIX = "lifecycle-record"
REGISTRY_CREATION_ROLE = "registry-creation-key"
AUDIT_TRAIL_TAG = "ml-platform.io/audit-trail"
THREAT_DETECTION_TAG = "ml-platform.io/threat-detection"
AZURE_THREAT_DETECTION_TAG = "ml-platform.io-threat-detection"
EXISTING_DETECTION = "existing"

_STRINGS = {"type": "array", "items": {"type": "string"}}

SETTINGS: dict[str, dict[str, Any]] = {
    "allowedAwsRegions": {
        **_STRINGS,
        "description": "AWS regions data may live in. me-south-1 is Bahrain, not the UAE.",
        "default": ["me-central-1"],
    },
    "allowedAzureLocations": {
        **_STRINGS,
        "description": "Azure locations data may live in (lower case, no spaces).",
        "default": ["uaenorth", "uaecentral"],
    },
    "globalAzureTypes": {
        **_STRINGS,
        "description": "Azure types that must use location 'global' and hold names, not customer data.",
        "default": ["azure-native:privatedns:PrivateZone", "azure-native:privatedns:VirtualNetworkLink"],
    },
    "azureRegionPairs": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "Azure location -> its paired region, where geo-redundant storage copies go.",
        "default": {"uaenorth": "uaecentral", "uaecentral": "uaenorth"},
    },
    "requiredTags": {
        **_STRINGS,
        "description": "Tags every taggable AWS and Azure resource carries.",
        "default": ["project", "environment", "tier", "data-classification", "owner", "cost-center"],
    },
    "exceptableCapabilities": {
        **_STRINGS,
        "description": f"Capabilities a workload may add when annotated with {CAPABILITIES_REASON}.",
        "default": ["IPC_LOCK", "CHOWN", "FOWNER"],
    },
    "priceSnapshot": {
        "type": "string",
        "description": "The price snapshot CSV the budget policies read (relative paths: from the pack).",
        "default": "../mlplatform/prices/snapshot.csv",
    },
    "minimumAuditRetentionDays": {
        "type": "integer",
        "minimum": 1,
        "description": (
            "Days the audit store must keep each log file undeletable (S3 Object Lock, Azure immutability); "
            "default: PCI DSS v4.0.1 Req. 10.5.1, 'Retain audit log history for at least 12 months'."
        ),
        "default": 365,
    },
    "gpuTaintKey": {
        "type": "string",
        "description": "Taint key GPU node pools carry (NoSchedule or NoExecute).",
        "default": "nvidia.com/gpu",
    },
}


def default(key: str) -> Any:
    return SETTINGS[key]["default"]


def schema(*keys: str) -> PolicyConfigSchema | None:
    """The config schema of a policy that reads ``keys`` (``None`` for a policy with no settings)."""
    return PolicyConfigSchema(properties={key: SETTINGS[key] for key in keys}) if keys else None
