"""The AWS adapter: turns a ``PlatformConfig`` into an EKS platform in one region and hands back a
``ClusterHandle``.

Order follows the dependencies: the key first (everything is encrypted under it), then the network, the
control plane, node pools, storage, registry, IRSA roles and add-ons. Everything goes to the provider's
region (``config.region``); no resource sets its own.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pulumi

from components.aws.access import AuditedStores, PeopleAccess, PeopleAccessArgs
from components.aws.account import AwsAccount, lookup_account
from components.aws.addons import (
    EBS_CSI_PURPOSE,
    ClusterAddons,
    ClusterAddonsArgs,
    NetworkAddons,
    NetworkAddonsArgs,
)
from components.aws.alerts import EKS, TRAIL, SecurityAlerts, SecurityAlertsArgs
from components.aws.audit import (
    AUDIT_DOMAIN,
    AUDIT_TRAIL_TAG,
    THREAT_DETECTION_TAG,
    AuditTrail,
    AuditTrailArgs,
    check_existing_detection,
    check_organization_trail,
    logging_key_policy,
    threat_detection,
    trail_arn,
    trail_log_group,
)
from components.aws.budget import monthly_budget
from components.aws.cluster import EksCluster, EksClusterArgs, control_plane_log_group
from components.aws.iam import CLUSTER_ROLE_PURPOSE, node_role, role_name_prefix
from components.aws.identities import ROLE_PURPOSES, WorkloadIdentities, WorkloadIdentitiesArgs
from components.aws.keys import (
    CLUSTER_ROLE,
    DATASETS_DOMAIN,
    DATASETS_STORES,
    DEPLOYER,
    DOMAIN_STORES,
    DOMAIN_USERS,
    EBS_CSI_ROLE,
    MODELS_BUCKET_STORES,
    DomainUsers,
    EncryptionKey,
    EncryptionKeyArgs,
    KeyUsers,
    UsersOf,
    datasets_key_policy,
    deployer_arn,
    key_administrators,
    key_policy,
    made_before_datasets_bucket,
    refuse_silent_key_moves,
    stack_roles_using,
)
from components.aws.network import Network, NetworkArgs, flow_log_group
from components.aws.node_pools import NodePool, NodePoolArgs, pool_zone_indexes, refuse_unreachable_sizes
from components.aws.preflight import (
    check_standard_support,
    ensure_autoscaling_role,
    ensure_offered,
    ensure_vcpu_quotas,
)
from components.aws.registry import Registry, RegistryArgs, repositories
from components.aws.registry_database import (
    RegistryDatabaseArgs,
    RegistryDatabaseInstance,
    record_store,
    registry_backend,
    registry_database_identity,
)
from components.aws.reservations import refuse_unusable_reservations
from components.aws.shared_fs import SharedFileSystem, SharedFileSystemArgs
from components.aws.storage import RECORD_PREFIX, AuditStoreArgs, ObjectStore, ObjectStoreArgs
from components.config import (
    DATA_DOMAIN_TAG,
    DetectionSource,
    KeyDomain,
    PlatformConfig,
    Tier,
    managed_registry_database,
    shared_stores,
)
from components.handle import (
    API_SERVER_PEER,
    API_SERVER_PORT,
    Cloud,
    ClusterHandle,
    Fabric,
    Peer,
    PoolKind,
    SharedStorageKind,
    StorageHandle,
)
from components.images import workload_images
from components.key_users import people_using

# The name-prefix purpose of each of the stack's roles that use a data key (``DOMAIN_USERS``).
KEY_USER_PURPOSES = {CLUSTER_ROLE: CLUSTER_ROLE_PURPOSE, EBS_CSI_ROLE: EBS_CSI_PURPOSE, **ROLE_PURPOSES}


def today() -> datetime.date:
    """The date a preview judges the cluster's Kubernetes version on (UTC)."""
    return datetime.datetime.now(datetime.UTC).date()


def shared_zone(config: PlatformConfig) -> int:
    """The zone a single-zone file system (Lustre) lives in: the first fabric pool's, so training
    traffic to it stays in-zone."""
    for pool in config.node_pools:
        if pool.fabric is not Fabric.NONE:
            return pool.availability_zone or 0
    return 0


class AwsPlatform(pulumi.ComponentResource):
    """Network, EKS, node pools, storage, registry and identities for one stack."""

    def __init__(self, name: str, config: PlatformConfig, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:aws:Platform", name, None, opts)
        self._name, self._config = name, config
        self._child = pulumi.ResourceOptions(parent=self)
        self.cluster_name = name
        tags = config.base_tags()
        account = lookup_account(config.region, config.network.availability_zones, parent=self)
        ensure_autoscaling_role(parent=self)
        check_standard_support(config.cluster.kubernetes_version, today(), parent=self)
        # Before anything is registered: the lookups may refuse the update (node group bounds EKS would
        # refuse, reservations that cannot carry their pools, registry_database_identity).
        refuse_unreachable_sizes(config, self.cluster_name, parent=self)
        refuse_unusable_reservations(config, account.zones, datetime.datetime.now(datetime.UTC), parent=self)
        self._database_identity = (
            registry_database_identity(
                f"{name}-registry", config.workloads.registry.adopt_database, parent=self
            )
            if self._manages_registry_database()
            else None
        )
        self.budget = monthly_budget(f"{name}-budget", config, tags, self._child)
        # A stack made with one bucket for datasets and models keeps it (KMS aliases tell which).
        self._own_datasets_bucket = not made_before_datasets_bucket(
            f"{name}-key", f"{name}-{DATASETS_DOMAIN}", parent=self
        )
        self._deployer = deployer_arn(parent=self)
        self._key_administrators = key_administrators(config.access.key_custodians, self._deployer)
        # The ARN of each of the stack's roles that uses a data key (``DOMAIN_USERS``), known once the role
        # is declared below: the key policies name them, their IAM policies name the keys
        # (``_name_key_users``). Each key waits for its own users' roles only: the workloads' roles wait
        # for the cluster, which waits for the Secrets key.
        self._key_user_arns: dict[str, tuple[pulumi.Output[str | None], Callable[..., None]]] = {
            role: pulumi.deferred_output() for role in stack_roles_using(DOMAIN_USERS)
        }
        self._declared_key_users: dict[str, pulumi.Output[str]] = {}
        # Whatever refuses the stack below, every key policy is released (``_name_key_users``): a key
        # waiting for a role that is never declared would hold the run open instead of failing it.
        try:
            self._declare(name, config, account, tags)
        finally:
            self._name_key_users()

    def _declare(self, name: str, config: PlatformConfig, account: AwsAccount, tags: dict[str, str]) -> None:
        """The keys and every resource after them."""
        self.keys = self._domain_keys(account, tags)
        key = {domain: each.arn for domain, each in self.keys.items()}
        self.datasets_key = self._datasets_key(account, tags)
        self.logging_key = self._logging_key(account, tags)
        self.network = Network(
            f"{name}-network",
            NetworkArgs(
                cidr=config.network.cidr,
                account=account,
                cluster_name=self.cluster_name,
                nat_per_zone=config.environment == "prod",
                interface_endpoints=config.tier is Tier.ENTERPRISE,
                key_arn=key[KeyDomain.LOGS],
                protect=config.is_protected,
                tags=tags,
            ),
            self._child,
        )
        self.cluster = EksCluster(
            f"{name}-cluster",
            EksClusterArgs(
                cluster_name=self.cluster_name,
                kubernetes_version=config.cluster.kubernetes_version,
                endpoint=config.cluster.endpoint,
                public_access_cidrs=config.cluster.public_access_cidrs,
                private_access_cidrs=config.cluster.private_access_cidrs,
                private_access_security_groups=config.cluster.private_access_security_groups,
                subnet_ids=self.network.private_subnet_ids,
                key_arn=key[KeyDomain.SECRETS],
                log_key_arn=key[KeyDomain.LOGS],
                account=account,
                protect=config.is_protected,
                tags=self._cluster_tags(tags),
            ),
            self._child,
        )
        self._declared_key_users[CLUSTER_ROLE] = self.cluster.role_arn
        self.network_addons = NetworkAddons(
            f"{name}-network-addons",
            NetworkAddonsArgs(
                account=account,
                cluster_name=self.cluster_name,
                cluster=self.cluster.name,
                kubernetes_version=config.cluster.kubernetes_version,
                issuer=self.cluster.issuer,
                tags=tags,
            ),
            self._child,
        )
        self.pools = self._node_pools(account, tags)
        self.storage = ObjectStore(
            f"{name}-storage",
            ObjectStoreArgs(
                account=account,
                key_arn=key[KeyDomain.OBJECTS],
                noncurrent_version_days=config.storage.noncurrent_version_days,
                protect=config.is_protected,
                tags=tags,
                audit=self._audit_store(account),
                # The lifecycle record in every audited stack (docs/lifecycle.md, "The record").
                record_retention_days=config.audit.retention_days if config.audited else None,
                datasets_key_arn=self.datasets_key.arn if self.datasets_key is not None else None,
            ),
            self._child,
        )
        self.alerts: SecurityAlerts | None = None
        self.audit = self._audit_trail(account, tags)
        self.people = PeopleAccess(
            f"{name}-access",
            PeopleAccessArgs(
                account=account,
                cluster_name=self.cluster_name,
                cluster=self.cluster.name,
                access=config.access,
                audited=self._audited_stores(),
                tags=tags,
                cluster_component=self.cluster,
            ),
            self._child,
        )
        endpoint_policy = config.network.s3_endpoint_policy
        if endpoint_policy.enabled:
            self.network.restrict_s3_endpoint(self.storage.buckets, endpoint_policy.extra_buckets)
        self.shared_fs = self._shared_file_system(account, tags)
        self.registry = Registry(
            f"{name}-registry",
            RegistryArgs(
                account,
                self.cluster_name,
                repositories(self._images()),
                key[KeyDomain.IMAGES],
                tags,
                protect=config.is_protected,
                administrators=self._key_administrators,
            ),
            self._child,
        )
        self.registry_database = self._registry_database(tags)
        self.identities = WorkloadIdentities(
            f"{name}-identities",
            WorkloadIdentitiesArgs(
                account=account,
                cluster_name=self.cluster_name,
                issuer=self.cluster.issuer,
                bucket_arn=self.storage.bucket_arn,
                key_arn=key[KeyDomain.OBJECTS],
                tags=tags,
                registry_database=(
                    (self.registry_database.secret_arn, key[KeyDomain.REGISTRY_DATABASE])
                    if self.registry_database
                    else None
                ),
                record_bucket_arn=self.storage.record_bucket.arn if self.storage.record_bucket else None,
                signing_key_arn=self.registry.signing_key_arn if self.registry.login is not None else None,
                datasets=(
                    (self.storage.datasets_bucket.arn, self.datasets_key.arn)
                    if self.storage.datasets_bucket is not None and self.datasets_key is not None
                    else None
                ),
                approvers=config.access.model_approvers,
                engineers=config.access.ml_engineers,
            ),
            self._child,
        )
        self._declared_key_users.update(self.identities.key_user_arns)
        addons = ClusterAddons(
            f"{name}-addons",
            ClusterAddonsArgs(
                account=account,
                cluster_name=self.cluster_name,
                cluster=self.cluster.name,
                kubernetes_version=config.cluster.kubernetes_version,
                issuer=self.cluster.issuer,
                shared_storage=config.shared_storage,
                key_arn=key[KeyDomain.VOLUMES],
                node_groups=[p.node_group for p in self.pools if p.handle.kind is PoolKind.CPU],
                tags=tags,
            ),
            self._child,
        )
        self._declared_key_users[EBS_CSI_ROLE] = addons.ebs_csi_role_arn
        self.handle = ClusterHandle(
            cloud=Cloud.AWS,
            name=self.cluster_name,
            kubeconfig=self.cluster.kubeconfig,
            kubernetes_version=config.cluster.kubernetes_version,
            pools=tuple(p.handle for p in self.pools),
            storage=StorageHandle(
                bucket_uri=self.storage.uri,
                shared=self.shared_fs.shared if self.shared_fs else None,
                volume_key=key[KeyDomain.VOLUMES],
            ),
            registry=self.registry.host,
            registry_login=self.registry.login,
            identities=self.identities.annotations,
            node_pools=tuple(p.node_group for p in self.pools if p.handle.kind is PoolKind.CPU),
            registry_backend=registry_backend(
                self.storage.uri,
                config.region,
                config.network.cidr,
                self.registry_database.database if self.registry_database else None,
            ),
            # The cluster's private endpoint is always on: from inside the VPC the API server's name
            # resolves to the EKS-managed network interfaces in its subnets (EKS user guide, "Cluster API
            # server endpoint").
            api_server=Peer(API_SERVER_PEER, config.network.cidr, API_SERVER_PORT),
            lifecycle_record=(
                record_store(self.storage.record_uri, config.region, config.network.cidr)
                if self.storage.record_uri is not None
                else None
            ),
        )
        self.exports: dict[str, pulumi.Input[Any]] = self._exports()
        self.register_outputs(self.exports)

    def _domain_keys(self, account: AwsAccount, tags: dict[str, str]) -> dict[KeyDomain, EncryptionKey]:
        """A key per data domain the stack has. The stack's first key (``<stack>-key``, its name and URN
        unchanged since it was the only key) keeps Kubernetes Secrets, whose EKS key cannot change, and the
        domains ``storage.onStackKey`` keeps on it until their stores migrate (docs/operations.md)."""
        config = self._config
        absent = {
            KeyDomain.TRAINING_DATA: config.shared_storage is SharedStorageKind.NONE,
            KeyDomain.REGISTRY_DATABASE: not self._manages_registry_database(),
            # Made with the datasets bucket, where the stack has one (``_datasets_key``).
            KeyDomain.DATASETS: True,
        }
        domains = [d for d in KeyDomain if not absent.get(d, False)]
        kept = [d for d in domains if d is KeyDomain.SECRETS or d in config.storage.on_stack_key]
        own = {d: f"{self._name}-{d.value}" for d in domains if d not in kept}
        refuse_silent_key_moves(config.stack_name, f"{self._name}-key", own, self)
        first = self._key(f"{self._name}-key", kept, account, tags)
        return {d: self._key(own[d], [d], account, tags) if d in own else first for d in domains}

    def _key(
        self, name: str, domains: list[KeyDomain], account: AwsAccount, tags: dict[str, str]
    ) -> EncryptionKey:
        return EncryptionKey(
            name,
            EncryptionKeyArgs(
                account,
                tags,
                protect=self._config.is_protected,
                description="; ".join(self._stores_of(d) for d in domains),
                policy=self._policy(
                    account,
                    [d.value for d in domains],
                    lambda users: key_policy(account, domains, users, self._key_administrators),
                ),
                domains=tuple(d.value for d in domains),
            ),
            self._child,
        )

    def _name_key_users(self) -> None:
        """Give the key policies the exact ARNs of the stack's roles that use keys (``DOMAIN_USERS``): the
        cluster role, the EBS CSI driver's and the workloads' roles, as declared; a role this stack does
        not have (no lifecycle record, no rollout) is named nowhere."""
        for role, (_arn, resolve) in self._key_user_arns.items():
            resolve(pulumi.Output.from_input(self._declared_key_users.get(role)))

    def _policy(
        self, account: AwsAccount, domains: Sequence[str], build: Callable[[UsersOf], dict[str, Any]]
    ) -> pulumi.Output[dict[str, Any]]:
        """The policy ``build`` makes of the key users of ``domains``: their users among the stack's roles
        (``DOMAIN_USERS``) and the deployer by exact ARN, and the named people the role-to-key table gives
        them (policies/key_users.yaml; review 35 A1).

        The cluster needs the Secrets key before it exists, and the workloads' roles need the cluster (their
        trust names its OIDC issuer), so a Secrets key that still holds other domains (``storage.onStackKey``,
        a stack migrating to the keys per data domain: docs/operations.md) names those roles by their name
        prefix (``ArnLike``), the one key user not named by exact ARN, until their domains move to keys of
        their own."""
        needed = stack_roles_using({d: DOMAIN_USERS[d] for d in domains if d in DOMAIN_USERS})
        access = self._config.access
        prefixed = needed - {CLUSTER_ROLE} if KeyDomain.SECRETS.value in domains else set()
        patterns = {
            role: account.arn(
                "iam", f"role/{role_name_prefix(self.cluster_name, KEY_USER_PURPOSES[role])}*", regional=False
            )
            for role in prefixed
        }
        needed -= prefixed

        def users_of(roles: Mapping[str, str | None]) -> UsersOf:
            arns = {**{r: a for r, a in roles.items() if a}, **patterns, DEPLOYER: self._deployer}

            def users(domain: str) -> KeyUsers:
                own = DOMAIN_USERS.get(domain, DomainUsers()).roles
                stack = KeyUsers(
                    tuple(arns[r] for r in own.writers if r in arns),
                    tuple(arns[r] for r in own.readers if r in arns),
                )
                return stack | KeyUsers(*people_using(access, domain))

            return users

        if not needed:
            return pulumi.Output.from_input(build(users_of({})))
        roles = pulumi.Output.all(**{r: self._key_user_arns[r][0] for r in sorted(needed)})
        return roles.apply(lambda found: build(users_of(found)))

    def _stores_of(self, domain: KeyDomain) -> str:
        """What the domain's key encrypts, as its description says: the object-data key no longer holds the
        datasets where they have a bucket of their own."""
        if domain is KeyDomain.OBJECTS and self._own_datasets_bucket:
            return MODELS_BUCKET_STORES
        return DOMAIN_STORES[domain]

    def _datasets_key(self, account: AwsAccount, tags: dict[str, str]) -> EncryptionKey | None:
        """The datasets bucket's key (review B5: one data domain per bucket), where the stack has that
        bucket: every stack but one made when the data bucket held datasets and models, which keeps that
        layout with nothing added or replaced (docs/operations.md, "One data domain per bucket")."""
        if not self._own_datasets_bucket:
            return None
        return EncryptionKey(
            f"{self._name}-{DATASETS_DOMAIN}",
            EncryptionKeyArgs(
                account,
                tags,
                protect=self._config.is_protected,
                description=DATASETS_STORES,
                policy=self._policy(
                    account,
                    [DATASETS_DOMAIN],
                    lambda users: datasets_key_policy(
                        account, users(DATASETS_DOMAIN), self._key_administrators
                    ),
                ),
                domains=(DATASETS_DOMAIN,),
            ),
            self._child,
        )

    def _creates_trail(self) -> bool:
        config = self._config
        return config.audited and config.audit.organization_trail is None

    def _logging_key(self, account: AwsAccount, tags: dict[str, str]) -> EncryptionKey | None:
        """The trail's own key (docs/compliance.md): whoever administers the data key does not thereby
        read or silence the trail, and the trail's readers get no data access."""
        if not self._creates_trail():
            return None
        return EncryptionKey(
            f"{self._name}-audit",
            EncryptionKeyArgs(
                account,
                tags,
                protect=self._config.is_protected,
                description="the CloudTrail trail, its bucket and log group",
                policy=self._policy(
                    account,
                    [AUDIT_DOMAIN],
                    lambda users: logging_key_policy(
                        account,
                        trail_arn(account, self._config.stack_name),
                        users(AUDIT_DOMAIN),
                        self._key_administrators,
                    ),
                ),
                domains=(AUDIT_DOMAIN,),
            ),
            self._child,
        )

    def _audit_store(self, account: AwsAccount) -> AuditStoreArgs | None:
        if self.logging_key is None:
            return None
        trail = trail_arn(account, self._config.stack_name)
        return AuditStoreArgs(self.logging_key.arn, trail, self._config.audit.retention_days, AUDIT_DOMAIN)

    def _audited_stores(self) -> AuditedStores:
        """What the auditors read (components/aws/access.py): the stack's trail, its bucket and log group
        where it has its own, the lifecycle record, the control-plane and flow logs, every key's
        configuration."""
        stack, storage = self._config.stack_name, self.storage
        groups = [control_plane_log_group(self.cluster_name), flow_log_group(f"{self._name}-network")]
        buckets: list[tuple[pulumi.Input[str], str, pulumi.Input[str]]] = []
        if self.logging_key is not None and storage.audit_bucket is not None:
            groups.append(trail_log_group(stack))
            buckets.append((storage.audit_bucket.arn, "", self.logging_key.arn))
        if storage.record_bucket is not None:
            buckets.append((storage.record_bucket.arn, RECORD_PREFIX, self.keys[KeyDomain.OBJECTS].arn))
        keys = [each.arn for each in dict.fromkeys(self.keys.values())]
        keys += [each.arn for each in (self.datasets_key, self.logging_key) if each is not None]
        return AuditedStores(self.cluster.cluster.arn, groups, keys, buckets)

    def _cluster_tags(self, tags: dict[str, str]) -> dict[str, str]:
        """The cluster names what the stack relies on and does not create, for the policy pack: the
        organisation trail, detection that already runs."""
        audit = self._config.audit
        if not self._config.audited:
            return tags
        declared = {AUDIT_TRAIL_TAG: audit.organization_trail} if audit.organization_trail else {}
        if audit.detection is DetectionSource.EXISTING:
            declared[THREAT_DETECTION_TAG] = DetectionSource.EXISTING.value
        return {**tags, **declared}

    def _audit_trail(self, account: AwsAccount, tags: dict[str, str]) -> AuditTrail | None:
        """The stack's trail and detection, or, on an organisation trail, that trail checked and detection."""
        config = self._config
        if not config.audited:
            return None
        runtime = config.audit.runtime_monitoring
        runtime = runtime if runtime is not None else config.audit_extras
        if config.audit.detection is DetectionSource.EXISTING:
            check_existing_detection(runtime, config.region, parent=self)
        else:
            threat_detection(f"{self._name}-audit", runtime, tags, self)
        if self.logging_key is None or self.storage.audit_bucket is None:
            assert config.audit.organization_trail is not None, "no trail of its own: an organisation's"
            check_organization_trail(config.audit.organization_trail, config.region, parent=self)
            return None
        data_events = config.audit.data_events
        audit_tags = {**tags, DATA_DOMAIN_TAG: AUDIT_DOMAIN}
        trail = AuditTrail(
            f"{self._name}-audit",
            AuditTrailArgs(
                account=account,
                stack=config.stack_name,
                key_arn=self.logging_key.arn,
                bucket_name=self.storage.audit_bucket.bucket,
                data_bucket_arns=(
                    [b.arn for b in (self.storage.bucket, self.storage.datasets_bucket) if b is not None]
                    if (data_events if data_events is not None else config.audit_extras)
                    else []
                ),
                protect=config.is_protected,
                tags=audit_tags,
                delivery_ready=self.storage,
            ),
            self._child,
        )
        self.alerts = SecurityAlerts(
            f"{self._name}-alerts",
            SecurityAlertsArgs(
                stack=config.stack_name,
                key_arn=self.logging_key.arn,
                log_groups={
                    TRAIL: trail_log_group(config.stack_name),
                    EKS: f"/aws/eks/{self.cluster_name}/cluster",
                },
                ready=(trail, self.cluster),
                tags=audit_tags,
            ),
            self._child,
        )
        return trail

    def _manages_registry_database(self) -> bool:
        config = self._config
        return config.workloads.registry.enabled and managed_registry_database(config.tier, config.cloud)

    def _registry_database(self, tags: dict[str, str]) -> RegistryDatabaseInstance | None:
        config, identity = self._config, self._database_identity
        if identity is None:
            return None
        return RegistryDatabaseInstance(
            f"{self._name}-registry",
            RegistryDatabaseArgs(
                environment=config.environment,
                vpc_id=self.network.vpc_id,
                subnet_ids=self.network.private_subnet_ids,
                cluster_security_group_id=self.cluster.security_group_id,
                key_arn=self.keys[KeyDomain.REGISTRY_DATABASE].arn,
                identity=identity,
                log_key_arn=self.keys[KeyDomain.LOGS].arn,
                protect=config.is_protected,
                tags=tags,
                audited=config.audited,
            ),
            self._child,
        )

    def _images(self) -> list[str]:
        return workload_images(self._config)

    def _node_pools(self, account: AwsAccount, tags: dict[str, str]) -> list[NodePool]:
        """One managed node group per config pool, each after its type passed the offering check."""
        config = self._config
        role = node_role(
            f"{self._name}-node",
            name_prefix=role_name_prefix(self.cluster_name, "node"),
            account=account,
            tags=tags,
            parent=self,
        )
        ensure_vcpu_quotas(
            [(pool, config.instance_type(pool)) for pool in config.node_pools], account.region, parent=self
        )
        pools = []
        for pool in config.node_pools:
            zones = pool_zone_indexes(pool, len(account.zones))
            ensure_offered(
                pool.instance_type,
                [account.zones[z] for z in zones],
                account.region,
                pool=pool.name,
                parent=self,
            )
            pools.append(
                NodePool(
                    f"{self._name}-{pool.name}",
                    NodePoolArgs(
                        pool=pool,
                        instance_type=config.instance_type(pool),
                        cluster_name=self.cluster_name,
                        cluster=self.cluster.name,
                        kubernetes_version=config.cluster.kubernetes_version,
                        node_role_arn=role.role.arn,
                        subnet_ids=[self.network.private_subnet_ids[z] for z in zones],
                        vpc_id=self.network.vpc_id,
                        cluster_security_group_id=self.cluster.security_group_id,
                        key_arn=self.keys[KeyDomain.VOLUMES].arn,
                        tags=tags,
                        duty_cycle=config.duty_cycle(pool),
                        depends_on=[*role.attachments, *self.network_addons.addons],
                    ),
                    self._child,
                )
            )
        return pools

    def _shared_file_system(self, account: AwsAccount, tags: dict[str, str]) -> SharedFileSystem | None:
        config = self._config
        if config.shared_storage is SharedStorageKind.NONE:
            return None
        return SharedFileSystem(
            f"{self._name}-shared",
            SharedFileSystemArgs(
                kind=config.shared_storage,
                capacity_gib=config.storage.shared_capacity_gib,
                account=account,
                vpc_id=self.network.vpc_id,
                subnet_ids=self.network.private_subnet_ids,
                zone=shared_zone(config),
                node_security_group_id=self.cluster.security_group_id,
                key_arn=self.keys[KeyDomain.TRAINING_DATA].arn,
                bucket_key_arn=self.keys[KeyDomain.OBJECTS].arn,
                bucket_name=self.storage.bucket_name,
                bucket_arn=self.storage.bucket_arn,
                protect=config.is_protected,
                tags=tags,
                stores=shared_stores(config),
            ),
            self._child,
        )

    def _exports(self) -> dict[str, pulumi.Input[Any]]:
        exports: dict[str, pulumi.Input[Any]] = {
            "clusterName": self.cluster_name,
            "kubeconfig": self.cluster.kubeconfig,
            "bucket": self.storage.uri,
            # Where training reads datasets: the datasets bucket's prefix (the data bucket's, on a stack
            # made before the datasets bucket).
            "datasets": self.storage.datasets_uri,
            "registry": self.registry.host,
            # What operators verify the stack's images with: `cosign verify --key <this>` (docs/images.md).
            "imageSigningKey": self.registry.login.signing.key
            if self.registry.login is not None and self.registry.login.signing is not None
            else None,
            "kmsKeyArn": self.keys[KeyDomain.SECRETS].arn,
            "kmsKeys": {
                **{domain.value: each.arn for domain, each in self.keys.items()},
                **({DATASETS_DOMAIN: self.datasets_key.arn} if self.datasets_key is not None else {}),
            },
            "vpcId": self.network.vpc_id,
            # The auditors' read-only policy (attached to access.auditors' roles), for a permission set too.
            "auditorPolicy": self.people.auditor_policy_arn,
            "nodePools": [
                {
                    "name": p.handle.name,
                    "instanceType": p.handle.instance_type,
                    "kind": p.handle.kind.value,
                    "fabric": p.handle.fabric.value,
                    "gpusPerNode": p.handle.gpus_per_node,
                    "minSize": p.config.min_size,
                    "maxSize": p.config.max_size,
                    "spot": p.config.spot,
                }
                for p in self.pools
            ],
            "identities": self.identities.role_arns,
        }
        if self.storage.record_uri is not None:
            exports["lifecycleRecord"] = self.storage.record_uri
        if self.identities.record_reader_policy_arn is not None:
            exports["lifecycleRecordReaderPolicy"] = self.identities.record_reader_policy_arn
        if self.shared_fs is not None:
            exports["sharedFileSystemId"] = self.shared_fs.file_system_id
        if self.alerts is not None:
            exports["securityAlertsTopic"] = self.alerts.topic_arn
        return exports
