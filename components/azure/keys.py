"""Customer-managed keys: one Key Vault, one rotating RSA key per data domain, and the disk encryption set.

A key per data domain (``components.config.KeyDomain``: node disks, object data, images, Kubernetes
Secrets, training data, the registry's database, logs, datasets; docs/security.md, "Keys per data
domain") keeps revocation and audit per domain: disabling the images key does not take the cluster's
disks down with it, and each key's role assignments name only its domain's encryption identity.

The vault authorises with Azure RBAC (no access policies), keeps deleted keys recoverable (soft delete +
purge protection, both required for customer-managed keys on Disks and Storage) and disables public
access on every tier: no client reads its data plane from outside (the deployer creates keys through
ARM), services reach their keys through the trusted-services bypass (Key Vault ``publicNetworkAccess``
docs) and the AKS KMS plugin through the private link AKS makes to a private vault. A vault in "selected
networks" mode is not one AKS KMS can use at all ("allow public access from specific virtual networks and
IP addresses ... isn't supported", learn.microsoft.com/azure/aks/use-kms-etcd-encryption, Limitations).
One exception: a registry being created, whose key needs a vault outside the firewall for minutes
(``RegistryCreationKey``).

Purge protection keeps a deleted vault's name taken for the retention period (90 days here): a
destroyed dev stack could not be created again under the same name. Unprotected stacks therefore add a
random part to the vault name (kept in state, so it is stable across updates); protected stacks, never
destroyed in the normal course, keep the deterministic name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pulumi
import pulumi_random
from pulumi_azure_native import compute, keyvault

from components.azure import naming
from components.azure.private_endpoint import PrivateEndpoint, PrivateEndpointArgs
from components.azure.propagation import propagated
from components.azure.roles import BuiltInRole, assign_role, custom_role, grant_key_use
from components.azure.scope import AzureScope
from components.config import AZURE_ROLE_TAG, PROJECT, DataClassification, KeyDomain
from components.handle import ImageSigning


class KeyPurpose(StrEnum):
    DISKS = "disks"
    STORAGE = "storage"
    REGISTRY = "registry"
    # Kubernetes Secrets in etcd, through AKS KMS (cluster.py).
    SECRETS = "secrets"
    # Made with the keys per data domain (issue 35); the stores they encrypt were on ``storage-cmk``.
    TRAINING_DATA = "training-data"
    REGISTRY_DATABASE = "registry-database"
    LOGS = "logs"
    # The datasets container's encryption scope (storage.py; review rev35f A6).
    DATASETS = "datasets"


# Each data domain's key. The first four keep the names (and URNs) they had as per-consumer keys; a
# domain listed in ``storage.onStackKey`` stays on the storage key (``storage-cmk``), where its stores were
# made, until it migrates (docs/operations.md, "Keys per data domain").
DOMAIN_KEYS: dict[KeyDomain, KeyPurpose] = {
    KeyDomain.SECRETS: KeyPurpose.SECRETS,
    KeyDomain.VOLUMES: KeyPurpose.DISKS,
    KeyDomain.IMAGES: KeyPurpose.REGISTRY,
    KeyDomain.OBJECTS: KeyPurpose.STORAGE,
    KeyDomain.TRAINING_DATA: KeyPurpose.TRAINING_DATA,
    KeyDomain.REGISTRY_DATABASE: KeyPurpose.REGISTRY_DATABASE,
    KeyDomain.LOGS: KeyPurpose.LOGS,
    KeyDomain.DATASETS: KeyPurpose.DATASETS,
}


def vault_key_name(purpose: KeyPurpose) -> str:
    """The name of a purpose's key in the stack's vault (``storage-cmk``, ``secrets-cmk``, ...)."""
    return f"{purpose.value}-cmk"


# Restricted data gets HSM-protected keys, which need the premium vault SKU (Key Vault keys overview).
_PROTECTION: dict[bool, tuple[str, str]] = {True: ("premium", "RSA-HSM"), False: ("standard", "RSA")}
# RSA 3072 is accepted by every consumer here (Disks, Storage and ACR take RSA 2048/3072/4096).
_KEY_SIZE = 3072
# Our rotation policy, every key's: a new version every 90 days, each version expiring a year after it is
# made, and a Notify action 30 days before (Key Vault's "near expiry" event). learn.microsoft.com, Azure
# Key Vault keys SDK ``KeyRotationPolicy.ExpiresIn``: "the ISO 8601 duration when a new KeyVaultKey
# version created from this policy will expire. It should be at least 28 days";
# ``KeyRotationLifetimeAction.TimeBeforeExpiry``: "duration before expiry to attempt to Rotate or Notify"
# (``TimeAfterCreate`` "only applies to Rotate"). Consumers that follow the versionless key (Storage, ACR,
# the disk encryption set, PostgreSQL) need nothing. AKS KMS holds a versioned key id and moves only when
# the rotation runbook updates it and rewrites every Secret (docs/operations.md, "Rotate keys"; cluster.py
# ignores the key id otherwise); it stops with "KeyExpired: Operation encrypt isn't allowed on an expired
# key" when its version expires ("it is your responsibility to manage the key lifecycle",
# learn.microsoft.com/azure/aks/use-kms-etcd-encryption). So the Secrets key expires too (review of issue
# 38, B7): the near-expiry event of the version the cluster holds is the runbook's trigger, 30 days before
# the cluster would stop, and every rotated version's event a reminder until the runbook runs; a plan
# against a refreshed stack says when the cluster lags (``kms_version_lag``).
_ROTATE: dict[str, Any] = {"trigger": {"time_after_create": "P90D"}, "action": {"type": "rotate"}}
_NOTICE = "P30D"
_ROTATION_POLICY: dict[str, Any] = {
    "attributes": {"expiry_time": "P1Y"},
    "lifetime_actions": [_ROTATE, {"trigger": {"time_before_expiry": _NOTICE}, "action": {"type": "notify"}}],
}
# The key the stack's images are signed with (cosign ``azurekms://<vault>/<key>``), in its own vault.
SIGNING_KEY_NAME = "image-signing"
SIGNING_VAULT_KIND = "sig"
# The Key Vault default and maximum: a deleted vault or key stays recoverable for 90 days.
_SOFT_DELETE_DAYS = 90


@dataclass(frozen=True)
class KeyRef:
    """What a consumer needs of its key: the vault URI plus name (Storage), the versionless key URI
    (ACR), the versioned key URI (the disk encryption set) and the ARM id (the scope of its role
    assignment)."""

    vault_uri: pulumi.Output[str]
    name: str
    key_uri: pulumi.Output[str]
    key_uri_with_version: pulumi.Output[str]
    key_id: pulumi.Output[str]


@dataclass(frozen=True)
class KeysArgs:
    scope: AzureScope
    # The vault's private endpoint: in the endpoints' subnet, its record in the vault Private Link zone.
    endpoint_subnet_id: pulumi.Input[str]
    vault_dns_zone_id: pulumi.Input[str]


def _vault_properties(scope: AzureScope, sku: str, network: dict[str, Any]) -> dict[str, Any]:
    """RBAC, soft delete and purge protection, as every vault here has them; ``network`` decides reach."""
    return {
        "tenant_id": scope.deployer.tenant_id,
        "sku": {"family": "A", "name": sku},
        "enable_rbac_authorization": True,
        "enable_soft_delete": True,
        "soft_delete_retention_in_days": _SOFT_DELETE_DAYS,
        "enable_purge_protection": True,
        **network,
    }


def _fresh_vault_name(
    name: str, scope: AzureScope, parent: pulumi.Resource, kind: str = "kv"
) -> pulumi.Output[str]:
    """A vault name with random characters kept in state: stable across updates, new for a stack created
    again (so a purge-protected predecessor's name is never needed)."""
    unique = pulumi_random.RandomString(
        f"{name}-unique",
        length=naming.KEY_VAULT_UNIQUE_LENGTH,
        special=False,
        upper=False,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    vault_name: pulumi.Output[str] = unique.result.apply(
        lambda part: naming.key_vault_name(scope.name_suffix, part, kind=kind)
    )
    return vault_name


def _stack_vault_name(
    name: str, scope: AzureScope, parent: pulumi.Resource, kind: str = "kv"
) -> pulumi.Input[str]:
    """A protected stack's vault keeps its name (its keys outlive a mistake); others get a fresh one."""
    if scope.config.is_protected:
        return naming.key_vault_name(scope.name_suffix, kind=kind)
    return _fresh_vault_name(f"{name}-vault", scope, parent, kind)


_KEYS = "Microsoft.KeyVault/vaults/keys"
# Key administration without use: what Key Vault Crypto Officer holds (its DataActions, "Perform any action on
# the keys of a key vault", learn.microsoft.com/azure/key-vault/general/rbac-guide) less the operations that
# use a key on data or copy it to another vault (backup, restore). The deployer holds it on the stack's
# vaults, the key custodians on the keys' vault (components/azure/access.py).
KEY_ADMINISTRATION_ACTIONS = ("Microsoft.KeyVault/vaults/read", f"{_KEYS}/read")
KEY_ADMINISTRATION_DATA_ACTIONS = (f"{_KEYS}/*", "Microsoft.KeyVault/vaults/keyrotationpolicies/*")
KEY_USE_DATA_ACTIONS = tuple(
    f"{_KEYS}/{op}/action" for op in ("encrypt", "decrypt", "wrap", "unwrap", "sign", "verify", "release")
)
# Copying a key to another vault: a backup "exports a key from Azure Key Vault in a protected form ... to
# allow a client to GENERATE a key in one Azure Key Vault instance, BACKUP the key, and then RESTORE it
# into another Azure Key Vault instance" (Key Vault REST API, Keys - Backup Key), any vault of the same
# subscription and geography (learn.microsoft.com/azure/key-vault/general/backup). A key administrator
# holding both could restore a data key into a vault where it holds a key-using role (the deployer's
# Crypto Officer on the signing vault) and use it there (review 35 B2), or bring the signing key into the
# keys' vault. Creating, rotating and recovering a key need neither; a restore from backup is break-glass
# (docs/security.md, "The deployer's standing rights").
KEY_COPY_DATA_ACTIONS = (f"{_KEYS}/backup/action", f"{_KEYS}/restore/action")
# The description of the deployer's own key assignment, read by the pack (duties.py: the deployer
# administers the keys, so it holds the key custodian's duty).
DEPLOYER_KEYS_DESCRIPTION = "ml-platform deployer: key administration"


def key_administration_role(name: str, scope: AzureScope, parent: pulumi.Resource) -> pulumi.Output[str]:
    """The stack's custom role that creates, rotates, disables and deletes keys and never uses one, nor
    backs one up or restores one (``KEY_COPY_DATA_ACTIONS``)."""
    return custom_role(
        name,
        scope,
        role_name=f"{PROJECT}-{scope.config.stack_name}-key-administration",
        description="Administer the stack's keys (create, rotate, disable, delete); never use or copy one",
        permissions={
            "actions": list(KEY_ADMINISTRATION_ACTIONS),
            "data_actions": list(KEY_ADMINISTRATION_DATA_ACTIONS),
            "not_data_actions": [*KEY_USE_DATA_ACTIONS, *KEY_COPY_DATA_ACTIONS],
        },
        opts=pulumi.ResourceOptions(parent=parent),
    )


def deployer_key_access(
    name: str,
    scope: AzureScope,
    parent: pulumi.Resource,
    vault: keyvault.Vault,
    administration: pulumi.Output[str] | None = None,
) -> pulumi.Resource:
    """The deployer's data-plane role on an RBAC vault, waited on: what creating its keys needs.

    ARM's ``vaults/keys`` PUT (and azure-native's existence GET before it) is authorised against the
    vault's data-plane model for the caller, ``ForbiddenByRbac`` without a Key Vault role
    (pulumi/pulumi-azure-native#890; the provider's own keyvault example grants the deployer key
    create/get first). Scoped to this vault only. On a vault whose keys only services use, the role is
    ``administration`` (``key_administration_role``: Crypto Officer less the cryptographic operations;
    review 35 A5), so the deployer keeps no standing use of a data key: creating, reading and rotating a
    key are key actions, not cryptographic ones, and each store wraps with its own identity. Unset (the
    image-signing vault, whose key the deployer signs with), Key Vault Crypto Officer.
    """
    what, role = (
        ("crypto-officer", BuiltInRole.KEY_VAULT_CRYPTO_OFFICER)
        if administration is None
        else ("key-administration", administration)
    )
    grant = assign_role(
        f"{name}-deployer-{what}",
        scope,
        role=role,
        principal_id=scope.deployer.object_id,
        target_id=vault.id,
        opts=scope.opts(parent),
        principal_type=scope.deployer.principal_type,
        description=DEPLOYER_KEYS_DESCRIPTION if administration is not None else None,
    )
    return propagated(f"{name}-deployer-keys", scope, [grant], parent)


def _field(value: Any, name: str) -> Any:
    """``name`` (snake case) of an SDK output type, or of the plain mapping a mock reads back."""
    if isinstance(value, Mapping):
        return value.get(name, value.get(_camel(name)))
    return getattr(value, name, None)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _policy_shape(policy: Any) -> tuple[Any, list[tuple[Any, ...]]] | None:
    """What a rotation policy decides (expiry, and each action with its trigger), from the program's
    input or from the key as ARM reads it back; None where the key reports no policy."""
    if policy is None:
        return None
    actions = [
        (
            str(_field(_field(a, "action"), "type") or "").lower(),
            _field(_field(a, "trigger"), "time_after_create"),
            _field(_field(a, "trigger"), "time_before_expiry"),
        )
        for a in _field(policy, "lifetime_actions") or []
    ]
    return _field(_field(policy, "attributes"), "expiry_time"), sorted(actions, key=str)


def unapplied_key_settings(
    key_name: str,
    tags: Mapping[str, str],
    policy: Mapping[str, Any] | None,
    live_tags: Any,
    live_properties: Any,
) -> list[str]:
    """What the program asks of an existing key that the key does not have (and ARM will never give it).

    ARM's ``vaults/keys`` PUT "Creates the first version of a new key if it does not exist. If it already
    exists, then the existing key is returned without any write operations being performed. This API does
    not create subsequent versions, and does not update existing keys" (Keys - Create If Not Exist,
    azure-mgmt-keyvault ``KeysOperations.create_if_not_exist``). Tags and the rotation policy are set on
    the key's data plane, which the firewalled vault does not open to the deployer (review wt-azure3 D1).
    """
    changed: list[str] = []
    if live_tags is not None and dict(live_tags) != dict(tags):
        changed.append("tags")
    live_policy = _policy_shape(_field(live_properties, "rotation_policy")) if live_properties else None
    if live_policy is not None and live_policy != _policy_shape(policy):
        changed.append("rotation policy")
    if not changed:
        return []
    what = " and ".join(changed)
    return [
        f"Key Vault key {key_name!r} keeps its {what} from creation: ARM never updates an existing key "
        "(Keys - Create If Not Exist), so this change is not applied; set it on the key's data plane from a "
        f"network that reaches the vault (az keyvault key set-attributes --tags / az keyvault key "
        f"rotation-policy update --vault-name <vault> --name {key_name})"
    ]


def kms_version_lag(security_profile: Any, newest: str | None) -> str | None:
    """The plan's line when AKS KMS (the cluster's ``securityProfile`` as refreshed) encrypts Secrets with
    another version of its key than the vault's newest (``newest``: the key's ``keyUriWithVersion`` as
    refreshed): the rotation runbook is due before the cluster's version expires. None when they agree
    or either is unknown (a new stack)."""
    pinned = _field(_field(security_profile, "azure_key_vault_kms"), "key_id")
    if not pinned or not newest or str(pinned) == newest:
        return None
    key, latest = newest.rsplit("/", 2)[-2:]
    return (
        f"AKS KMS encrypts Kubernetes Secrets with {key} version {str(pinned).rsplit('/', 1)[-1]}; the "
        f"vault's newest is {latest}: run the KMS rotation runbook (docs/operations.md, 'Rotate "
        f"keys') before the cluster's version expires, a year after it was made (the vault's near-expiry "
        f"event for it fires {_NOTICE[1:-1]} days before); until then `pulumi up` keeps the cluster on it"
    )


def _warn(resource: pulumi.Resource, messages: list[str]) -> None:
    for message in messages:
        pulumi.log.warn(message, resource=resource)


def _vault_key(
    name: str,
    scope: AzureScope,
    parent: pulumi.Resource,
    vault: keyvault.Vault,
    key_name: str,
    properties: dict[str, Any],
    access: Sequence[pulumi.Resource],
    rotation_policy: dict[str, Any] | None,
) -> keyvault.Key:
    key = keyvault.Key(
        name,
        resource_group_name=scope.resource_group_name,
        vault_name=vault.name,
        key_name=key_name,
        properties=properties,
        tags=scope.tags,
        # Never sent again after creation: ARM would answer with the existing key and change nothing
        # (unapplied_key_settings). The key as read back (refreshed before every update) is compared with
        # what the program asks, and a difference is a preview warning instead of an update that does not
        # happen.
        opts=scope.opts(
            parent, data=True, depends_on=access, ignore_changes=["tags", "properties.rotationPolicy"]
        ),
    )
    pulumi.Output.all(key.tags, key.properties).apply(
        lambda live: _warn(key, unapplied_key_settings(key_name, scope.tags, rotation_policy, *live))
    )
    return key


def _rsa_key(
    name: str,
    scope: AzureScope,
    parent: pulumi.Resource,
    vault: keyvault.Vault,
    key_name: str,
    kty: str,
    access: Sequence[pulumi.Resource],
) -> KeyRef:
    properties = {"kty": kty, "key_size": _KEY_SIZE, "rotation_policy": _ROTATION_POLICY}
    key = _vault_key(name, scope, parent, vault, key_name, properties, access, _ROTATION_POLICY)
    return KeyRef(
        vault_uri=vault.properties.apply(lambda p: p.vault_uri),
        name=key_name,
        key_uri=key.key_uri,
        key_uri_with_version=key.key_uri_with_version,
        key_id=key.id,
    )


def _protection(scope: AzureScope) -> tuple[str, str]:
    return _PROTECTION[scope.config.data_classification is DataClassification.RESTRICTED]


class AzureKeys(pulumi.ComponentResource):
    def __init__(self, name: str, args: KeysArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:Keys", name, None, opts)
        self._scope = scope = args.scope
        sku, kty = _protection(scope)
        self.vault_name = self._vault_name(name)
        self.vault = keyvault.Vault(
            f"{name}-vault",
            vault_name=self.vault_name,
            properties=_vault_properties(scope, sku, self._firewall()),
            **scope.placed,
            opts=scope.opts(self, data=True),
        )
        # "Creating or updating keys in a private key vault that doesn't have a private endpoint isn't
        # supported" (learn.microsoft.com/azure/aks/use-kms-etcd-encryption, private key vault). Whether
        # ARM's key writes pass the vault firewall without one is unsourced either way (Azure review U1);
        # with the endpoint in place the keys are written as that page supports, so they wait for it.
        endpoint = PrivateEndpoint(
            f"{name}-vault-endpoint",
            PrivateEndpointArgs(
                scope, args.endpoint_subnet_id, self.vault.id, "vault", args.vault_dns_zone_id
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # One role for whoever administers keys without using them: the deployer here, the key custodians.
        self.administration_role = key_administration_role(f"{name}-key-administration", scope, self)
        deployer = deployer_key_access(f"{name}-vault", scope, self, self.vault, self.administration_role)
        self._access = [deployer, endpoint.zone_group]
        self._name, self._kty = name, kty
        self.keys: dict[KeyPurpose, KeyRef] = {}
        # The domains a consumer asked for, and the key each got: the plan's ``keyVaultKeys``.
        self.domains: dict[KeyDomain, KeyRef] = {}
        for domain in (KeyDomain.SECRETS, KeyDomain.VOLUMES, KeyDomain.IMAGES, KeyDomain.OBJECTS):
            self.for_domain(domain)
        self.vault_id: pulumi.Output[str] = self.vault.id
        self.disk_encryption_set_id, self.disk_grant = self._disk_encryption_set(
            name, self.keys[KeyPurpose.DISKS]
        )
        self.register_outputs({"vaultId": self.vault.id, "diskEncryptionSetId": self.disk_encryption_set_id})

    def for_domain(self, domain: KeyDomain) -> KeyRef:
        """The key of ``domain``'s stores, made on first use (a stack without the domain's stores has no
        key for it): its own, or the storage key where ``storage.onStackKey`` keeps the domain there."""
        kept = domain in self._scope.config.storage.on_stack_key
        purpose = KeyPurpose.STORAGE if kept else DOMAIN_KEYS[domain]
        if purpose not in self.keys:
            self.keys[purpose] = _rsa_key(
                f"{self._name}-{purpose.value}",
                self._scope,
                self,
                vault=self.vault,
                key_name=vault_key_name(purpose),
                kty=self._kty,
                access=self._access,
            )
        self.domains[domain] = self.keys[purpose]
        return self.keys[purpose]

    def _vault_name(self, name: str) -> pulumi.Input[str]:
        return _stack_vault_name(name, self._scope, self)

    @staticmethod
    def _firewall() -> dict[str, Any]:
        """Private on every tier (module docstring): AKS KMS takes a private vault through its private link
        and API Server VNet Integration, or a fully public one; never an allow-list."""
        return {
            "public_network_access": "Disabled",
            "network_acls": {"default_action": "Deny", "bypass": "AzureServices", "ip_rules": []},
        }

    def _disk_encryption_set(self, name: str, key: KeyRef) -> tuple[pulumi.Output[str], pulumi.Resource]:
        """The set AKS encrypts node OS disks (and disk-backed volumes) with.

        ``activeKey.keyUrl`` must be a versioned key URL ("Version segment of the Url is required
        regardless of rotationToLatestKeyVersionEnabled", compute SDK KeyForDiskEncryptionSet). With
        ``rotation_to_latest_key_version_enabled`` Azure moves the set to each new version the rotation
        policy makes, so the key URL is ignored after creation: rotation is not drift. Its identity is
        system-assigned (the only kind Disks allows at creation) and granted use of the disks key only;
        the cluster waits for that grant to propagate or the first node's disk cannot be created.
        """
        scope = self._scope
        encryption_set = compute.DiskEncryptionSet(
            f"{name}-des",
            identity={"type": "SystemAssigned"},
            encryption_type="EncryptionAtRestWithCustomerKey",
            active_key={"key_url": key.key_uri_with_version, "source_vault": {"id": self.vault.id}},
            rotation_to_latest_key_version_enabled=True,
            **scope.placed,
            opts=scope.opts(self, data=True, ignore_changes=["activeKey.keyUrl"]),
        )
        principal_id = encryption_set.identity.apply(lambda i: i.principal_id)
        grant = grant_key_use(f"{name}-des-key-user", scope, principal_id, key.key_id, self)
        encryption_set_id: pulumi.Output[str] = encryption_set.id
        return encryption_set_id, grant


# The role a vault that exists only for a registry's creation carries (``ml-platform.io-role`` tag): the
# policy pack lets such a vault, and no other, stay reachable in an enterprise stack (exposure.py).
REGISTRY_CREATION_ROLE = "registry-creation-key"


@dataclass(frozen=True)
class SigningKeyArgs:
    scope: AzureScope
    # Where the vault's private endpoint goes, and the privatelink.vaultcore.azure.net zone it registers in.
    endpoint_subnet_id: pulumi.Input[str]
    dns_zone_id: pulumi.Input[str]


class ImageSigningKey(pulumi.ComponentResource):
    """The EC P-256 key the stack signs its images with (cosign signs with ECDSA P-256), sign and verify
    only, HSM-backed where the stack's other keys are, in a vault of its own.

    Its own vault because Key Vault RBAC roles that can sign are vault-wide here: the stack's key vault
    grants the AKS KMS identity Key Vault Crypto User (sign included), so a key there could be signed with
    by the cluster. This vault grants a data-plane role to the deployer alone. cosign signs through the
    vault's data plane (``azurekms://``), which a closed vault serves only through its private endpoint
    ("Integrate Key Vault with Azure Private Link"; group ``vault``), the way the registry's push goes.
    No rotation policy: a new version would sign with a key the operators' recorded public key does not
    match.
    """

    def __init__(self, name: str, args: SigningKeyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:ImageSigningKey", name, None, opts)
        scope = args.scope
        sku, kty = _protection(scope)
        vault = keyvault.Vault(
            f"{name}-vault",
            vault_name=_stack_vault_name(name, scope, self, SIGNING_VAULT_KIND),
            properties=_vault_properties(scope, sku, AzureKeys._firewall()),
            **scope.placed,
            opts=scope.opts(self, data=True),
        )
        endpoint = PrivateEndpoint(
            f"{name}-vault",
            PrivateEndpointArgs(scope, args.endpoint_subnet_id, vault.id, "vault", args.dns_zone_id),
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Written once the endpoint is in place, as the stack's own keys are (AzureKeys).
        access = [deployer_key_access(f"{name}-vault", scope, self, vault), endpoint.zone_group]
        kty = "EC-HSM" if kty.endswith("-HSM") else "EC"
        properties = {"kty": kty, "curve_name": "P-256", "key_ops": ["sign", "verify"]}
        key = _vault_key(f"{name}-key", scope, self, vault, SIGNING_KEY_NAME, properties, access, None)
        # The vault's host in Azure's public cloud (the UAE regions are in it): <name>.vault.azure.net.
        uri = pulumi.Output.concat("azurekms://", vault.name, ".vault.azure.net/", SIGNING_KEY_NAME)
        self.signing = ImageSigning(key=uri, ready=(key, endpoint.zone_group))
        self.vault_id: pulumi.Output[str] = vault.id
        self.key_id: pulumi.Output[str] = key.id
        self.register_outputs({"vaultName": vault.name})


class RegistryCreationKey(pulumi.ComponentResource):
    """A key in a vault outside the firewall, for the one moment ACR needs it: its own creation.

    ACR takes a customer-managed key only at creation, and then only through a user-assigned identity,
    which the Key Vault firewall refuses: only a registry's system-assigned identity passes the
    trusted-services bypass, and that identity exists only once the registry does. Microsoft's documented
    path for a firewalled vault ("Encrypt registry using a customer-managed key", Advanced scenario: Key
    Vault firewall; MicrosoftDocs/azure-docs#61064) is this vault: create the registry with a key in a
    vault it can reach, then rotate to the firewalled vault's key through the system-assigned identity
    (registry.py). The vault authorises with RBAC only, holds this one key, and is closed to every network
    by that rotation, after which the registry no longer uses its key.
    """

    def __init__(
        self,
        name: str,
        scope: AzureScope,
        administration: pulumi.Output[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("ml-platform:azure:RegistryCreationKey", name, None, opts)
        sku, kty = _protection(scope)
        vault_name = _fresh_vault_name(f"{name}-vault", scope, self, naming.CREATION_VAULT_KIND)
        reachable = {"public_network_access": "Enabled", "network_acls": {"default_action": "Allow"}}
        vault = keyvault.Vault(
            f"{name}-vault",
            vault_name=vault_name,
            properties=_vault_properties(scope, sku, reachable),
            resource_group_name=scope.resource_group_name,
            location=scope.location,
            tags={**scope.tags, AZURE_ROLE_TAG: REGISTRY_CREATION_ROLE},
            # The rotation closes the vault to every network once the registry is off its key (registry.py);
            # an update must not open it again.
            opts=scope.opts(
                self, data=True, ignore_changes=["properties.publicNetworkAccess", "properties.networkAcls"]
            ),
        )
        self.vault_id: pulumi.Output[str] = vault.id
        # The vault's own name output, not the name it was given: a command that runs against the vault
        # (registry.py) then depends on the vault and cannot start before it exists (review A1).
        self.vault_name = vault.name
        access = deployer_key_access(f"{name}-vault", scope, self, vault, administration)
        self.key = _rsa_key(f"{name}-key", scope, self, vault, "registry-creation", kty, [access])
        self.register_outputs({"vaultName": self.vault_name})
