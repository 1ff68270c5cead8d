"""The model registry's metadata store on AWS: RDS for PostgreSQL in the stack's private subnets.

Every field below follows the pulumi-aws 7.51 ``rds.Instance`` docstrings:
- private: a DB subnet group of the private subnets (``db_subnet_group_name``: "DB instance will be
  created in the VPC associated with the DB subnet group"), ``publicly_accessible=False``, and a security
  group that admits PostgreSQL from the cluster's security group only (EKS managed node groups put it on
  every node, so pods reach the database through it);
- TLS: a parameter group with ``rds.force_ssl=1`` (RDS user guide, "Using SSL with a PostgreSQL DB
  instance": connections without SSL are refused);
- statement audit on audited stacks (``audit.enabled``): pgAudit loaded through the parameter group's
  ``shared_preload_libraries`` and its session log classes in ``pgaudit.log`` (RDS user guide, "Setting up
  the pgAudit extension"), written to the PostgreSQL log the instance exports to CloudWatch Logs;
- encrypted at rest under the stack's customer key (``storage_encrypted`` + ``kms_key_id``);
- the master password generated and kept by RDS in Secrets Manager under the same key
  (``manage_master_user_password``, ``master_user_secret_kms_key_id``): it never passes through Pulumi's
  state. The registry's IRSA role reads it for every new connection, so the 7-day rotation RDS
  applies by default never locks it out (workloads/registry/server/launch.py);
- automated backups in the region (``backup_target`` "region", the default; no cross-region backup
  replication is created: me-central-1 is the only UAE region, REFERENCE.md), ``backup_retention_period``
  7 days (14 in prod), tags copied to snapshots;
- prod: ``deletion_protection``, Multi-AZ, and a final snapshot on delete (``skip_final_snapshot=False``
  with ``final_snapshot_identifier``); elsewhere a destroy leaves no snapshot behind;
- its exported logs in log groups the stack makes first: RDS writes them to
  ``/aws/rds/instance/<identifier>/<log>`` and creates a missing group itself (RDS user guide, "Publishing
  database logs to Amazon CloudWatch Logs"), with no key and no expiry, outside the stack and past a
  destroy (review aws.md N4). The instance is named (``identifier``) so that the groups' names are known
  before it exists, and waits for them. A database made before that (an autonamed identifier) is adopted
  (``registry_database_identity``): the stack keeps its identifier and imports the groups RDS made (Pulumi
  ``import`` resource option; the engine then updates them to the program's key and retention, Pulumi
  docs, concepts/options/import, since pulumi/pulumi#19339). The program finds such a database itself, by
  listing the account's PostgreSQL instances (pulumi-aws ``rds.get_instances``, RDS DescribeDBInstances
  filter ``engine``) and the groups under its prefix (``cloudwatch.get_log_groups``); config
  ``workloads.registry.adoptDatabase`` names it where the lookup cannot choose.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_random
from pulumi_aws import cloudwatch, ec2, rds, vpc

from components.aws.network import LOG_RETENTION_DAYS
from components.aws.storage import REGISTRY_PREFIX
from components.config import PLATFORM_KEY, AdoptedDatabaseConfig, RdsLog
from components.handle import PUBLIC_NETWORK, Peer, RecordStore, RegistryBackend, RegistryDatabase

PORT = 5432
DATABASE = "mlflow"
USERNAME = "mlflow"
# PostgreSQL 17: a major version RDS supports (RDS's 2026 notice upgrades 17.x minors to 17.7 or
# higher); ``engine_version`` takes the major as a prefix when minor upgrades are automatic (docstring).
ENGINE_VERSION = "17"
PARAMETER_FAMILY = "postgres17"
# Graviton burstable for dev, general purpose for prod. Which classes me-central-1 sells is unverified
# (REFERENCE.md: instance offerings there are to be checked with the preflight).
INSTANCE_CLASS = {"dev": "db.t4g.medium", "prod": "db.m7g.large"}
ALLOCATED_GIB = 20
# pgAudit's session classes (pgaudit README, pgaudit.log): WRITE (INSERT, UPDATE, DELETE, TRUNCATE, COPY
# into a table: a registry alias moved, a version's tags changed), DDL (schema changes) and ROLE (grants
# and roles). READ is left out: every registry page view would be logged.
PGAUDIT_LOG = "ddl,role,write"
# shared_preload_libraries is static (applied at creation or the next reboot: RDS user guide, "Setting up
# the pgAudit extension"); pg_stat_statements stays in the list, where RDS preloads it by default.
PRELOAD = "pg_stat_statements,pgaudit"
MAX_ALLOCATED_GIB = 200


def log_group_name(identifier: str, log: str) -> str:
    """The group RDS writes an exported log to (RDS user guide, "Publishing database logs to Amazon
    CloudWatch Logs": ``/aws/rds/instance/<instance identifier>/<log type>``)."""
    return f"/aws/rds/instance/{identifier}/{log}"


@dataclass(frozen=True)
class DatabaseIdentity:
    """The instance's identifier, and the logs whose groups exist already (RDS made them): imported."""

    identifier: str
    imported_logs: frozenset[RdsLog] = frozenset()


ADOPT_KEY = f"{PLATFORM_KEY}.workloads.registry.adoptDatabase"


def registry_database_identity(
    name: str, adopted: AdoptedDatabaseConfig | None, parent: pulumi.Resource
) -> DatabaseIdentity:
    """Which instance the stack's registry database ``name`` is. ``adoptDatabase`` when set; else the
    account's (region's) instance the stack made before it named it, when there is exactly one: Pulumi
    autonamed it ``<name>-db-`` and 7 characters (the logical name, a hyphen, a random suffix), so that
    a stack upgraded from then keeps it rather than replace it by ``name`` (prod: a refused replace of a
    protected resource; dev: the registry's metadata lost); else ``name``, for a new stack or one already
    named. The groups RDS made for the adopted instance are imported. Called before the stack registers
    anything: two candidates are refused in one line naming ``adoptDatabase`` and both."""
    if adopted is not None:
        return DatabaseIdentity(adopted.identifier, frozenset(adopted.import_log_groups))
    opts = pulumi.InvokeOptions(parent=parent)
    listed = rds.get_instances(filters=[{"name": "engine", "values": ["postgres"]}], opts=opts)
    autonamed = re.compile(rf"{re.escape(name)}-db-[a-z0-9]{{7}}")
    found = sorted(i for i in listed.instance_identifiers if autonamed.fullmatch(i))
    if name in listed.instance_identifiers or not found:
        return DatabaseIdentity(name)
    if len(found) > 1:
        raise pulumi.RunError(
            f"{ADOPT_KEY}: the account has {len(found)} registry databases this stack may have made "
            f"({', '.join(found)}); set adoptDatabase.identifier to the one in the stack's state "
            "(`pulumi stack export`; docs/operations.md, 'Adopt the RDS log groups')"
        )
    [identifier] = found
    prefix = log_group_name(identifier, "")
    groups = cloudwatch.get_log_groups(log_group_name_prefix=prefix, opts=opts).log_group_names
    return DatabaseIdentity(identifier, frozenset(log for log in RdsLog if f"{prefix}{log}" in groups))


@dataclass(frozen=True)
class RegistryDatabaseArgs:
    environment: str
    vpc_id: pulumi.Input[str]
    subnet_ids: Sequence[pulumi.Input[str]]
    # The cluster security group: the one source PostgreSQL is open to.
    cluster_security_group_id: pulumi.Input[str]
    key_arn: pulumi.Input[str]
    # The instance's name and the groups to import (``registry_database_identity``), and the key of its
    # exported logs' groups (the stack's logs key).
    identity: DatabaseIdentity
    log_key_arn: pulumi.Input[str]
    protect: bool
    tags: Mapping[str, str]
    # An audited stack (components.config audit.enabled): statements are audited by pgAudit.
    audited: bool = False


def parameters(audited: bool) -> list[rds.ParameterGroupParameterArgs]:
    """The registry's parameter group: TLS only, and pgAudit's statement log when audited."""
    found = [rds.ParameterGroupParameterArgs(name="rds.force_ssl", value="1")]
    if audited:
        found += [
            rds.ParameterGroupParameterArgs(
                name="shared_preload_libraries", value=PRELOAD, apply_method="pending-reboot"
            ),
            rds.ParameterGroupParameterArgs(name="pgaudit.log", value=PGAUDIT_LOG),
        ]
    return found


class RegistryDatabaseInstance(pulumi.ComponentResource):
    """RDS for PostgreSQL for the model registry, private, TLS-only, encrypted under the stack's key."""

    def __init__(
        self, name: str, args: RegistryDatabaseArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:aws:RegistryDatabase", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        subnets = rds.SubnetGroup(
            f"{name}-subnets",
            subnet_ids=list(args.subnet_ids),
            description="Model registry database: private subnets",
            tags=tags,
            opts=child,
        )
        group = ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description="Model registry database: PostgreSQL from the cluster only",
            tags={**tags, "Name": f"{name}-sg"},
            opts=child,
        )
        vpc.SecurityGroupIngressRule(
            f"{name}-from-cluster",
            security_group_id=group.id,
            referenced_security_group_id=args.cluster_security_group_id,
            ip_protocol="tcp",
            from_port=PORT,
            to_port=PORT,
            description="PostgreSQL from the cluster security group",
            tags=tags,
            opts=child,
        )
        group_parameters = rds.ParameterGroup(
            f"{name}-params",
            family=PARAMETER_FAMILY,
            description="Model registry database: TLS required",
            parameters=parameters(args.audited),
            tags=tags,
            opts=child,
        )
        log_groups = [self._log_group(name, log, args) for log in RdsLog]
        prod = args.environment == "prod"
        suffix = pulumi_random.RandomId(f"{name}-final", byte_length=4, opts=child) if args.protect else None
        instance = rds.Instance(
            f"{name}-db",
            identifier=args.identity.identifier,
            engine="postgres",
            engine_version=ENGINE_VERSION,
            auto_minor_version_upgrade=True,
            instance_class=INSTANCE_CLASS["prod" if prod else "dev"],
            allocated_storage=ALLOCATED_GIB,
            max_allocated_storage=MAX_ALLOCATED_GIB,
            storage_type="gp3",
            storage_encrypted=True,
            kms_key_id=args.key_arn,
            db_name=DATABASE,
            username=USERNAME,
            manage_master_user_password=True,
            master_user_secret_kms_key_id=args.key_arn,
            db_subnet_group_name=subnets.name,
            vpc_security_group_ids=[group.id],
            parameter_group_name=group_parameters.name,
            publicly_accessible=False,
            multi_az=prod,
            backup_retention_period=14 if prod else 7,
            backup_target="region",
            copy_tags_to_snapshot=True,
            deletion_protection=args.protect,
            skip_final_snapshot=not args.protect,
            # A snapshot name is unique in the account and region: a fixed one would refuse the destroy
            # of a re-created database (DBSnapshotAlreadyExists; registry review D3).
            final_snapshot_identifier=(
                pulumi.Output.concat(f"{name}-final-", suffix.hex) if suffix is not None else None
            ),
            enabled_cloudwatch_logs_exports=[log.value for log in RdsLog],
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, depends_on=log_groups),
        )
        secret_arn = instance.master_user_secrets.apply(lambda secrets: secrets[0].secret_arn)
        self.security_group_id: pulumi.Output[str] = group.id
        self.secret_arn: pulumi.Output[str] = secret_arn
        self.database = RegistryDatabase(
            host=instance.address,
            port=PORT,
            database=DATABASE,
            username=USERNAME,
            password_secret_arn=secret_arn,
        )
        self.register_outputs({"address": instance.address, "secretArn": secret_arn})

    def _log_group(self, name: str, log: RdsLog, args: RegistryDatabaseArgs) -> cloudwatch.LogGroup:
        """One exported log's group, under the logs key and the stack's retention; protected and kept on
        destroy where the database is (the EKS control-plane group's rule, cluster.py)."""
        group = log_group_name(args.identity.identifier, log)
        return cloudwatch.LogGroup(
            f"{name}-{log}-logs",
            name=group,
            kms_key_id=args.log_key_arn,
            retention_in_days=LOG_RETENTION_DAYS,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=args.protect,
                retain_on_delete=args.protect,
                # A log group's import id is its name (pulumi-aws cloudwatch.LogGroup, "Import").
                import_=group if log in args.identity.imported_logs else None,
            ),
        )


def registry_backend(
    bucket_uri: pulumi.Input[str], region: str, vpc_cidr: str, database: RegistryDatabase | None
) -> RegistryBackend:
    """The registry's artifact store under the bucket's ``registry/`` prefix, and what it reaches: the
    AWS APIs' interface endpoints in the VPC (STS, Secrets Manager on enterprise stacks), and public
    HTTPS, because S3 through the gateway endpoint and STS without an interface endpoint answer on
    public addresses no NetworkPolicy can name more narrowly (VPC user guide, "Gateway endpoints": the
    service's public IP ranges are routed through the endpoint); PostgreSQL in the VPC. The region is
    set for boto3's S3 and STS clients rather than left to the environment (me-central-1 is an opt-in
    region)."""
    peers = list(aws_api_peers(vpc_cidr))
    if database is not None:
        peers.append(Peer("database", vpc_cidr, database.port))
    return RegistryBackend(
        artifacts_uri=pulumi.Output.concat(bucket_uri, "/", REGISTRY_PREFIX),
        database=database,
        peers=tuple(peers),
        environment=aws_client_environment(region),
    )


def aws_api_peers(vpc_cidr: str) -> tuple[Peer, ...]:
    """What a pod calling S3 and STS reaches (``registry_backend``)."""
    return (Peer("aws-api-endpoints", vpc_cidr, 443), Peer("s3-and-sts", PUBLIC_NETWORK, 443))


def aws_client_environment(region: str) -> dict[str, str]:
    """boto3's region for S3 and STS, set rather than left to the environment (``registry_backend``)."""
    return {"AWS_REGION": region, "AWS_DEFAULT_REGION": region, "AWS_STS_REGIONAL_ENDPOINTS": "regional"}


def record_store(uri: pulumi.Input[str], region: str, vpc_cidr: str) -> RecordStore:
    """The lifecycle record in the stack's record bucket (storage.py), reached as the registry reaches S3."""
    return RecordStore(uri, aws_api_peers(vpc_cidr), aws_client_environment(region))
