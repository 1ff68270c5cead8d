"""Encryption at rest under customer-managed keys, and in transit, read from each resource's inputs.

That a bucket has a default-encryption configuration and a TLS-only policy at all is a fact about the
graph (they are separate resources) and lives in ``stack.py``; what a configuration says is judged here.
"""

from __future__ import annotations

from collections.abc import Iterator

from pulumi_policy import ResourceValidationPolicy, Severity

from . import tokens
from .factory import Rule, by_type, on_props, resource_policy
from .subject import Subject
from .values import all_of, describe, each, is_false, is_true, known, one_of, present, require

CMK = "use a customer-managed KMS key"
_KMS_ALGORITHMS = ("aws:kms", "aws:kms:dsse")
# Key specs AWS can rotate automatically; asymmetric and HMAC keys cannot be rotated.
_ROTATABLE_SPECS = (None, "SYMMETRIC_DEFAULT")

S3_DEFAULT_ENCRYPTION = all_of(
    require("applyServerSideEncryptionByDefault.sseAlgorithm", one_of(*_KMS_ALGORITHMS), "use SSE-KMS"),
    present("applyServerSideEncryptionByDefault.kmsMasterKeyId", CMK),
)
_EBS = all_of(require("encrypted", is_true, "encrypt the volume"), present("kmsKeyId", CMK))
_EBS_MAPPING = all_of(require("ebs.encrypted", is_true, "encrypt the volume"), present("ebs.kmsKeyId", CMK))


def _launch_template(subject: Subject) -> Iterator[str]:
    """Every EBS mapping encrypted under a customer key; a template must declare its root volume."""
    if not subject.get("blockDeviceMappings"):
        yield "blockDeviceMappings is not set; declare the root volume with ebs.encrypted and ebs.kmsKeyId"
    yield from each("blockDeviceMappings", _EBS_MAPPING, where="ebs")(subject.props)


def _kms_key(subject: Subject) -> Iterator[str]:
    if (
        subject.get("customerMasterKeySpec") in _ROTATABLE_SPECS
        and subject.get("keySpec") in _ROTATABLE_SPECS
    ):
        yield from require("enableKeyRotation", is_true, "turn on automatic key rotation")(subject.props)


# S3 default-encryption configurations are judged with their bucket in view (stack.py,
# s3-default-encryption-kms): an access-log target bucket may use SSE-S3 by its role.
AT_REST = {
    "aws:ebs/volume:Volume": on_props(_EBS),
    tokens.LAUNCH_TEMPLATE: _launch_template,
    tokens.EC2_INSTANCE: on_props(
        all_of(
            require("rootBlockDevice.encrypted", is_true, "encrypt the root volume"),
            present("rootBlockDevice.kmsKeyId", CMK),
            each("ebsBlockDevices", _EBS),
        )
    ),
    "aws:fsx/lustreFileSystem:LustreFileSystem": on_props(
        present("kmsKeyId", f"{CMK} (a PERSISTENT deployment type; scratch file systems cannot take one)")
    ),
    "aws:efs/fileSystem:FileSystem": on_props(_EBS),
    "aws:eks/cluster:Cluster": on_props(
        all_of(
            require(
                "encryptionConfig.resources",
                lambda resources: isinstance(resources, list) and "secrets" in resources,
                "envelope-encrypt Kubernetes secrets",
            ),
            present("encryptionConfig.provider.keyArn", CMK),
        )
    ),
    "aws:kms/key:Key": _kms_key,
    tokens.STORAGE_ACCOUNT: on_props(
        all_of(
            require(
                "encryption.keySource", one_of("Microsoft.Keyvault"), "encrypt with a customer-managed key"
            ),
            present("encryption.keyVaultProperties.keyName", "name the Key Vault key"),
        )
    ),
    "azure-native:compute:DiskEncryptionSet": on_props(
        all_of(
            present("activeKey.keyUrl", "point at a Key Vault key"),
            require(
                "encryptionType",
                one_of(
                    None,
                    "EncryptionAtRestWithCustomerKey",
                    "EncryptionAtRestWithPlatformAndCustomerKeys",
                    "ConfidentialVmEncryptedWithCustomerKey",
                ),
                "encrypt with the customer key",
            ),
        )
    ),
    tokens.AKS_CLUSTER: on_props(
        present("diskEncryptionSetID", "encrypt node disks through a disk encryption set with a customer key")
    ),
    "azure-native:compute:Disk": on_props(
        present("encryption.diskEncryptionSetId", "encrypt through a disk encryption set with a customer key")
    ),
    "azure-native:keyvault:Vault": on_props(
        all_of(
            require("properties.enablePurgeProtection", is_true, "turn on purge protection"),
            require("properties.enableSoftDelete", lambda value: not is_false(value), "keep soft delete on"),
        )
    ),
}


def _private_nfs_account(subject: Subject) -> bool:
    """A FileStorage account reachable only through private endpoints: NFS 4.1 shares require secure
    transfer off (Microsoft Learn, "NFS file shares in Azure Files"), so their traffic must never
    leave the virtual network instead."""
    return bool(
        subject.get("kind") == "FileStorage"
        and subject.get("publicNetworkAccess") == "Disabled"
        and subject.get("networkRuleSet.defaultAction") == "Deny"
    )


def _storage_in_transit(subject: Subject) -> Iterator[str]:
    if not _private_nfs_account(subject):
        yield from require("enableHttpsTrafficOnly", lambda value: not is_false(value), "accept HTTPS only")(
            subject.props
        )
    yield from require("minimumTlsVersion", one_of("TLS1_2", "TLS1_3"), "require TLS 1.2 or later")(
        subject.props
    )


# The Azure Files CSI driver mounts an NFS share in clear unless the volume (or the StorageClass that
# provisions it) sets ``encryptInTransit: "true"``, which mounts it through AZNFS's TLS tunnel (stunnel)
# instead; from driver v1.33.0 (kubernetes-sigs/azurefile-csi-driver docs/driver-parameters.md, keys read
# case-insensitively). NFS 4.1 has no encryption of its own.
_AZURE_FILES = "file.csi.azure.com"


def _azure_nfs_in_transit(driver_path: str, attributes_path: str) -> Rule:
    def rule(subject: Subject) -> Iterator[str]:
        driver = known(subject.get(driver_path), driver_path)
        attributes = known(subject.get(attributes_path), attributes_path) or {}
        lowered = {str(k).lower(): v for k, v in attributes.items()}
        protocol = str(lowered.get("protocol", lowered.get("fstype", ""))).lower()
        if driver != _AZURE_FILES or protocol != "nfs":
            return
        value = known(lowered.get("encryptintransit"), f"{attributes_path}.encryptInTransit")
        if str(value).lower() != "true":
            yield (
                f"{attributes_path}.encryptInTransit is {describe(value)}: an Azure Files NFS mount without "
                'it is clear text; set encryptInTransit: "true" (azurefile-csi-driver v1.33.0 or later)'
            )

    return rule


IN_TRANSIT = {
    tokens.STORAGE_ACCOUNT: _storage_in_transit,
    "kubernetes:core/v1:PersistentVolume": _azure_nfs_in_transit(
        "spec.csi.driver", "spec.csi.volumeAttributes"
    ),
    "kubernetes:storage.k8s.io/v1:StorageClass": _azure_nfs_in_transit("provisioner", "parameters"),
}

POLICIES: list[ResourceValidationPolicy] = [
    resource_policy(
        "encryption-at-rest-cmk",
        "Data at rest is encrypted under customer-managed keys (EBS and launch-template volumes, FSx "
        "Lustre, EFS, EKS secrets, Azure storage, disks and AKS), KMS keys rotate, Key Vaults keep purge "
        "protection and soft delete.",
        by_type(AT_REST),
        severity=Severity.HIGH,
    ),
    resource_policy(
        "encryption-in-transit",
        "Azure storage accounts accept HTTPS only with TLS 1.2 or later, and Azure Files NFS volumes and "
        "StorageClasses mount through the CSI driver's TLS tunnel (encryptInTransit) (S3's TLS-only bucket "
        "policy is judged by s3-tls-only).",
        by_type(IN_TRANSIT),
        severity=Severity.HIGH,
    ),
]
