"""The AKS control plane: Entra ID-only access, workload identity, Cilium, CMK disks, Azure Monitor logs.

Choices and why:
- Entra ID with Azure RBAC and local accounts disabled: no static admin credential exists; every
  kubectl call is a named Entra principal checked against Azure role assignments.
- Private API server when ``cluster.endpoint`` is private (enterprise); otherwise public behind
  ``authorizedIPRanges`` from ``cluster.publicAccessCidrs`` (SMB).
- Azure CNI overlay with the Cilium dataplane: pods take addresses from a private overlay range, not the
  VNet, so a GPU fleet cannot exhaust the subnet; Cilium enforces NetworkPolicy in eBPF with no extra
  add-on, and it is the dataplane AKS develops network policy on (Azure NPM is the legacy path; Calico
  would be a second component to run and upgrade). InfiniBand traffic bypasses the pod network entirely.
- Auto-upgrade ``patch``: patch releases arrive on their own while the minor version stays the one in
  config, so config and cluster never disagree; node images follow ``NodeImage``.
- The disk encryption set encrypts OS disks with the customer-managed key; it can only be set at cluster
  creation, and the cluster identity needs Reader on the set or Azure Disk volumes fail to provision
  (learn.microsoft.com/azure/aks/azure-disk-customer-managed-keys).
- Egress (``azure.outboundType``): SMB keeps AKS's default public load balancer; enterprise leaves through
  the stack's NAT gateway on the node subnet (``userAssignedNATGateway``: static egress IP, no inbound
  path; AKS's managed gateway does not work with a VNet we bring), or with ``userDefinedRouting`` through
  the customer's firewall, which then filters every outbound connection (AKS egress docs, "outbound
  types"; "Control egress traffic using Azure Firewall"). Not ``loadBalancer`` for a private cluster:
  it would give it a public outbound IP with unfiltered egress.
- Planned maintenance (``azure.maintenance``): AKS upgrades the cluster and node images only in the
  weekly window (``aksManagedAutoUpgradeSchedule``, ``aksManagedNodeOSUpgradeSchedule``, AKS "planned
  maintenance" docs), so ND nodes are not drained in the middle of a training run on any weekday.
- The in-cluster layer waits for the deployer's cluster-admin grant to propagate (propagation.py): the
  kubeconfig the Kubernetes provider reads only resolves after the wait.
- Kubernetes Secrets are encrypted in etcd under the stack's own key (AKS KMS etcd encryption,
  learn.microsoft.com/azure/aks/use-kms-etcd-encryption), from the first Secret on: KMS is set at
  creation with a versioned key id, ``keyVaultNetworkAccess: Private`` and the vault's id, because the
  vault is private (keys.py). A private vault is supported only through API Server VNet Integration
  (same page: "KMS only supports API Server VNet Integration for private key vault"), so the API server
  sits in the stack's delegated subnet (network.py). KMS does not work with a system-assigned identity
  and AKS cannot check a private vault's permissions, so the control-plane identity holds Key Vault
  Crypto User (encrypt/decrypt) and Key Vault Contributor (the private link AKS creates) on the vault
  before the cluster exists. A new key version reaches the cluster as an update of ``keyId`` (the
  documented rotation, ``az aks update --azure-keyvault-kms-key-id``), never a new cluster.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi_azure_native import containerservice, managedidentity, monitor, operationalinsights

from components.azure.keys import KeyRef, kms_version_lag
from components.azure.kubeconfig import convert_kubeconfig
from components.azure.propagation import propagated
from components.azure.roles import BuiltInRole, assign_role
from components.azure.scope import AzureScope
from components.config import DataClassification, EndpointAccess, OutboundType

# Control-plane resource logs sent to Log Analytics (AKS monitoring reference, "Resource logs"). The
# admin audit stream leaves out get/list/watch, which are most of the volume and cost of kube-audit.
CONTROL_PLANE_LOGS = (
    "kube-apiserver",
    "kube-audit-admin",
    "kube-controller-manager",
    "kube-scheduler",
    "cluster-autoscaler",
    "guard",
)
# Restricted data: every API-server request is audited, reads of Secrets included (kube-audit carries
# get/list/watch, kube-audit-admin leaves them out; AKS monitoring reference, "Resource logs"). kube-audit
# replaces kube-audit-admin there: the admin stream is a subset of it, so both would ingest every write
# twice (Azure Architecture Center, AKS baseline: "If you need get and list events, enable kube-audit
# instead"; Azure review D3).
RESTRICTED_AUDIT_LOG = "kube-audit"
# The audit streams among them (API-server audit, and guard: Entra ID and Azure RBAC decisions), which
# an audited stack also archives immutably (audit.py).
AUDIT_LOGS = frozenset({"kube-audit-admin", "kube-audit", "guard"})
# Our retention choice: a year of audit trail in production, a month elsewhere.
_LOG_RETENTION_DAYS = {True: 365, False: 30}
# "New role assignments can take up to five minutes to propagate and be updated by the authorization
# server" (learn.microsoft.com/azure/aks/manage-azure-rbac, Before you begin): the AKS RBAC grant the
# in-cluster layer deploys with is waited on at least that long, whatever the stack's general wait.
AKS_RBAC_PROPAGATION_SECONDS = 300
# Candidates for the overlay ranges, AKS's defaults first (pods 10.244.0.0/16, services 10.0.0.0/16,
# learn.microsoft.com/azure/aks/azure-cni-overlay); the first one clear of the VNet is taken.
_POD_CIDRS = ("10.244.0.0/16", "192.168.0.0/16")
_SERVICE_CIDRS = ("10.0.0.0/16", "172.16.0.0/16")


@dataclass(frozen=True)
class ClusterCidrs:
    pods: str
    services: str
    dns_service_ip: str


def cluster_cidrs(vnet_cidr: str) -> ClusterCidrs:
    """Overlay ranges that overlap neither the VNet nor each other, so routes to the VNet stay valid."""
    vnet = ipaddress.ip_network(vnet_cidr)

    def clear(candidates: tuple[str, ...]) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return next(n for c in candidates if not (n := ipaddress.ip_network(c)).overlaps(vnet))

    services = clear(_SERVICE_CIDRS)
    # The cluster DNS service conventionally takes .10 of the service range (AKS default 10.0.0.10).
    return ClusterCidrs(str(clear(_POD_CIDRS)), str(services), str(services.network_address + 10))


@dataclass(frozen=True)
class SecretsEncryption:
    """Where KMS finds the Secrets key: the key (its versioned id), its private vault, and the delegated
    subnet API Server VNet Integration puts the API server in."""

    key: KeyRef
    vault_id: pulumi.Input[str]
    api_server_subnet_id: pulumi.Input[str]


@dataclass(frozen=True)
class ClusterArgs:
    scope: AzureScope
    vnet_id: pulumi.Input[str]
    disk_encryption_set_id: pulumi.Input[str]
    # The System-mode pool's agent-pool profile (node_pools.agent_pool_settings); AKS needs one at creation.
    system_pool: dict[str, Any]
    secrets: SecretsEncryption
    # Role assignments Azure must honour before the cluster is created (the disk encryption set's key).
    grants: Sequence[pulumi.Resource] = field(default_factory=tuple)
    # userDefinedRouting: the node subnet's route table; the control-plane identity must manage it.
    route_table_id: pulumi.Input[str] | None = None


class AksCluster(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:Cluster", name, None, opts)
        self._scope = scope = args.scope
        identity, identity_grants = self._control_plane_identity(name, args)
        ready = propagated(f"{name}-create", scope, [*args.grants, *identity_grants], self)
        self.cluster = containerservice.ManagedCluster(
            f"{name}-aks",
            resource_name_=scope.config.stack_name,
            **self._cluster_properties(args, identity.id),
            **scope.placed,
            # agentPoolProfiles is creation-only: "The Azure API does not currently allow this property to
            # be updated directly" (azure-native ManagedCluster docs), and AKS reports every pool in it, the
            # AgentPool resources' too. Under `refresh: always` the state then lists them all while the
            # program declares the System pool alone, so without this every `pulumi up` would update the
            # cluster, PUT one pool and put every pool in Scaling (pulumi-azure-native #579, #4264; review
            # azure.md U3). Ignored, the state's list (the live pools, after the refresh) is what an update
            # sends, and the autoscaler's node counts with it. The System pool is changed as the docs say:
            # in Azure, then refreshed (docs/operations.md, "Grow or shrink a node pool"); a plan warns of an
            # edit not yet made there (node_pools.warn_system_pool_drift).
            # The KMS key version is moved by the operator's rotation runbook only (docs/operations.md,
            # "Rotate keys"): `az aks update` with the new version, then every Secret rewritten, as AKS
            # asks ("Remember to update all secrets after key rotation", use-kms-etcd-encryption, Rotate
            # existing keys). Following Key Vault's rotation on a later `up` would switch the cluster
            # unannounced and never rewrite the Secrets (review azure.md B1).
            opts=scope.opts(
                self,
                depends_on=[ready],
                ignore_changes=["agentPoolProfiles", "securityProfile.azureKeyVaultKms.keyId"],
            ),
        )
        # After the refresh the state holds the cluster's key version and the vault's newest: a cluster
        # behind the vault is the rotation runbook's due date, said in the preview (keys.py).
        cluster = self.cluster
        pulumi.Output.all(cluster.security_profile, args.secrets.key.key_uri_with_version).apply(
            lambda live: _warn_lag(cluster, kms_version_lag(*live))
        )
        self.workspace_id = self._diagnostics(name)
        self._maintenance(name)
        # The deployer administers the cluster through Azure RBAC (no local admin exists); the in-cluster
        # layer of this same program deploys with that grant, once it has propagated.
        admin = assign_role(
            f"{name}-deployer-admin",
            scope,
            role=BuiltInRole.AKS_RBAC_CLUSTER_ADMIN,
            principal_id=scope.deployer.object_id,
            target_id=self.cluster.id,
            opts=scope.opts(self),
            principal_type=scope.deployer.principal_type,
        )
        self.cluster_name: pulumi.Output[str] = self.cluster.name
        self.oidc_issuer_url: pulumi.Output[str] = self.cluster.oidc_issuer_profile.apply(
            lambda p: p.issuer_url
        )
        self.kubelet_object_id: pulumi.Output[str] = self.cluster.identity_profile.apply(
            lambda p: p["kubeletidentity"].object_id
        )
        self.kubeconfig = self._kubeconfig(
            propagated(f"{name}-admin", scope, [admin], self, at_least=AKS_RBAC_PROPAGATION_SECONDS)
        )
        self.register_outputs(
            {
                "clusterName": self.cluster_name,
                "oidcIssuerUrl": self.oidc_issuer_url,
                "kubeconfig": self.kubeconfig,
            }
        )

    def _control_plane_identity(
        self, name: str, args: ClusterArgs
    ) -> tuple[managedidentity.UserAssignedIdentity, list[pulumi.Resource]]:
        """User-assigned so it can be granted its roles before the cluster exists; a system-assigned
        identity would get them after creation, racing the first node. Network Contributor on the
        stack's VNet covers the node subnet (load balancers, NICs) and the link of the private API
        server's DNS zone; on the route table too when egress is user-defined (AKS "bring your own
        route table"); Reader on the disk encryption set (AKS BYOK docs); Key Vault Crypto User (encrypt,
        decrypt: what the KMS plugin does with the key, AKS KMS docs, "Assign permissions to decrypt and
        encrypt a private key vault") on the Secrets key alone, not the vault, which holds the other
        domains' keys (Key Vault RBAC "allows users to have separate permissions on individual keys":
        learn.microsoft.com/azure/key-vault/general/rbac-guide; review B10); Key Vault Contributor on the
        vault, a management-plane role without data access, for the private link (AKS KMS docs, "Assign
        permissions to create a private link")."""
        scope = self._scope
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-identity", **scope.placed, opts=scope.opts(self)
        )
        targets = {
            "vnet-network": (BuiltInRole.NETWORK_CONTRIBUTOR, args.vnet_id),
            "des-reader": (BuiltInRole.READER, args.disk_encryption_set_id),
            "kms-crypto-user": (BuiltInRole.KEY_VAULT_CRYPTO_USER, args.secrets.key.key_id),
            "kms-vault-contributor": (BuiltInRole.KEY_VAULT_CONTRIBUTOR, args.secrets.vault_id),
        }
        if args.route_table_id is not None:
            targets["routes-network"] = (BuiltInRole.NETWORK_CONTRIBUTOR, args.route_table_id)
        grants: list[pulumi.Resource] = [
            assign_role(
                f"{name}-{label}",
                scope,
                role=role,
                principal_id=identity.principal_id,
                target_id=target,
                opts=scope.opts(self),
            )
            for label, (role, target) in targets.items()
        ]
        return identity, grants

    def _cluster_properties(self, args: ClusterArgs, identity_id: pulumi.Input[str]) -> dict[str, Any]:
        scope = self._scope
        config = scope.config
        cidrs = cluster_cidrs(config.network.cidr)
        return {
            "dns_prefix": config.stack_name,
            "kubernetes_version": config.cluster.kubernetes_version,
            "sku": {"name": "Base", "tier": "Standard" if config.is_protected else "Free"},
            "identity": {"type": "UserAssigned", "user_assigned_identities": [identity_id]},
            "aad_profile": {
                "managed": True,
                "enable_azure_rbac": True,
                "tenant_id": scope.deployer.tenant_id,
                # People's roles are Azure role assignments (components/azure/access.py), never this
                # list, which grants Kubernetes cluster-admin outside Azure RBAC's record.
                "admin_group_object_ids": [],
            },
            "disable_local_accounts": True,
            "enable_rbac": True,
            "api_server_access_profile": {
                **self._api_server_access(),
                "enable_vnet_integration": True,
                "subnet_id": args.secrets.api_server_subnet_id,
            },
            "network_profile": {
                "network_plugin": "azure",
                "network_plugin_mode": "overlay",
                "network_dataplane": "cilium",
                "network_policy": "cilium",
                "pod_cidr": cidrs.pods,
                "service_cidr": cidrs.services,
                "dns_service_ip": cidrs.dns_service_ip,
                "load_balancer_sku": "standard",
                "outbound_type": self._outbound_type().value,
            },
            "oidc_issuer_profile": {"enabled": True},
            "security_profile": {
                "workload_identity": {"enabled": True},
                "azure_key_vault_kms": {
                    "enabled": True,
                    "key_id": args.secrets.key.key_uri_with_version,
                    "key_vault_network_access": "Private",
                    "key_vault_resource_id": args.secrets.vault_id,
                },
            },
            "auto_upgrade_profile": {"upgrade_channel": "patch", "node_os_upgrade_channel": "NodeImage"},
            "disk_encryption_set_id": args.disk_encryption_set_id,
            # Shared training storage is an Azure Files NFS volume (shared_storage.py).
            "storage_profile": {"file_csi_driver": {"enabled": True}},
            "agent_pool_profiles": [args.system_pool],
        }

    def _outbound_type(self) -> OutboundType:
        outbound = self._scope.config.azure.outbound_type
        assert outbound is not None, "filled by the tier preset"
        return outbound

    def _maintenance(self, name: str) -> None:
        """The weekly window for both auto-upgrade channels (the config names are fixed by AKS)."""
        scope = self._scope
        window = scope.config.azure.maintenance
        for config_name in ("aksManagedAutoUpgradeSchedule", "aksManagedNodeOSUpgradeSchedule"):
            containerservice.MaintenanceConfiguration(
                f"{name}-{config_name}",
                resource_group_name=scope.resource_group_name,
                resource_name_=self.cluster.name,
                config_name=config_name,
                maintenance_window={
                    "schedule": {"weekly": {"day_of_week": window.day_of_week.value, "interval_weeks": 1}},
                    "duration_hours": window.duration_hours,
                    "start_time": window.start_time,
                    "utc_offset": window.utc_offset,
                },
                opts=scope.opts(self),
            )

    def _api_server_access(self) -> dict[str, Any]:
        cluster = self._scope.config.cluster
        if cluster.endpoint is EndpointAccess.PRIVATE:
            # "system": AKS owns the private zone of the API server's name, linked to the cluster VNet.
            return {
                "enable_private_cluster": True,
                "enable_private_cluster_public_fqdn": False,
                "private_dns_zone": "system",
            }
        return {"enable_private_cluster": False, "authorized_ip_ranges": list(cluster.public_access_cidrs)}

    def _diagnostics(self, name: str) -> pulumi.Output[str]:
        """The stack's Log Analytics workspace (retention by environment) and the control-plane logs;
        the platform sends the other resources' audit logs to the same workspace (diagnostics.py)."""
        scope = self._scope
        workspace = operationalinsights.Workspace(
            f"{name}-logs",
            sku={"name": "PerGB2018"},
            retention_in_days=_LOG_RETENTION_DAYS[scope.config.is_protected],
            # Queries authenticate with Entra ID only, like the cluster.
            features={"disable_local_auth": True},
            **scope.placed,
            opts=scope.opts(self),
        )
        monitor.DiagnosticSetting(
            f"{name}-diagnostics",
            resource_uri=self.cluster.id,
            workspace_id=workspace.id,
            log_analytics_destination_type="Dedicated",
            logs=[{"category": category, "enabled": True} for category in self._control_plane_logs()],
            metrics=[{"category": "AllMetrics", "enabled": True}],
            opts=scope.opts(self),
        )
        workspace_id: pulumi.Output[str] = workspace.id
        return workspace_id

    def audit_log_categories(self) -> tuple[str, ...]:
        return tuple(category for category in self._control_plane_logs() if category in AUDIT_LOGS)

    def _control_plane_logs(self) -> tuple[str, ...]:
        if self._scope.config.data_classification is DataClassification.RESTRICTED:
            return tuple(RESTRICTED_AUDIT_LOG if c == "kube-audit-admin" else c for c in CONTROL_PLANE_LOGS)
        return CONTROL_PLANE_LOGS

    def _kubeconfig(self, admin_ready: pulumi.Resource) -> pulumi.Output[str]:
        """The user kubeconfig in ``exec`` format, converted for the deployer's login (kubeconfig.py):
        it calls kubelogin for an Entra token (there is no admin kubeconfig: local accounts are
        disabled). Read after ``admin_ready``, so whatever uses it (the Kubernetes provider) waits for
        the cluster-admin grant. Secret, although it holds no credential: it names the API server."""
        login = self._scope.config.azure.deployer_login
        credentials = containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=self._scope.resource_group_name,
            resource_name=self.cluster.name,
            format="exec",
            opts=pulumi.InvokeOutputOptions(depends_on=[admin_ready]),
        )
        kubeconfig = credentials.apply(
            lambda c: convert_kubeconfig(base64.b64decode(c.kubeconfigs[0].value).decode(), login)
        )
        return pulumi.Output.secret(kubeconfig)


def _warn_lag(cluster: pulumi.Resource, line: str | None) -> None:
    if line is not None:
        pulumi.log.warn(line, resource=cluster)
