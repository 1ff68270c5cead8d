"""The POSIX file system training pods share for checkpoints and artifacts: EFS (SMB) or FSx for Lustre
(enterprise). Checkpoints are written atomically by rename, which object-storage mounts cannot do
(REFERENCE.md, "Workloads").

Both are encrypted under the stack's key and reachable only from the cluster's nodes: the nodes carry
the EKS cluster security group, and the file system's security group admits that group alone. Kubernetes
mounts them through a statically provisioned PersistentVolume; ``SharedStorage.csi`` is its CSI source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
from pulumi_aws import ec2, efs, fsx, kms, vpc

from components.aws.account import AwsAccount
from components.handle import (
    SHARED_DIRECTORY,
    WORKLOAD_UID,
    PosixOwner,
    SharedStorage,
    SharedStorageKind,
    Store,
)

NFS_PORT = 2049
# Lustre clients and file servers talk on TCP 988 and 1018-1023, servers to each other and to clients
# too (FSx for Lustre user guide, "File system access control with Amazon VPC": rules for the file
# system's security group and for the clients').
LUSTRE_PORTS = ((988, 988), (1018, 1023))
# PERSISTENT_2 offers 125, 250, 500 or 1000 MB/s per TiB (FSx for Lustre user guide, "Performance").
# 250 is chosen: at 125 the minimum 1.2 TiB file system gives about 150 MB/s, no faster than one gp3
# volume's 125 MiB/s baseline (EBS user guide, "gp3"), which would make shared checkpoints the slow path;
# datasets stream from S3 through the data repository, so the higher tiers buy little here.
LUSTRE_THROUGHPUT_PER_TIB = 250
# The newer of the two Lustre versions PERSISTENT_2 runs (2.12, 2.15; FSx for Lustre user guide, "Lustre
# file system versions"); data repository associations need 2.12 or later.
LUSTRE_VERSION = "2.15"
# The static-provisioning example of kubernetes-sigs/aws-fsx-csi-driver mounts with flock, so
# applications' file locks work across nodes.
LUSTRE_MOUNT_OPTIONS = ("flock",)
# The directory the workloads mount, below the root only root may write (EFS user guide, "Working with
# users, groups, and permissions at the NFS level"): owned by the workload user, no access for others.
SHARED_OWNER = PosixOwner(WORKLOAD_UID, WORKLOAD_UID, 0o750)
# Key operations S3 performs on the FSx S3 service-linked role's behalf for an SSE-KMS bucket (FSx for
# Lustre user guide, "Working with server-side encrypted Amazon S3 buckets").
_S3_KEY_OPERATIONS = [
    "Encrypt",
    "Decrypt",
    "ReEncryptFrom",
    "ReEncryptTo",
    "GenerateDataKey",
    "GenerateDataKeyWithoutPlaintext",
]


@dataclass(frozen=True)
class SharedFileSystemArgs:
    kind: SharedStorageKind
    capacity_gib: int
    account: AwsAccount
    vpc_id: pulumi.Input[str]
    # One private subnet per zone; EFS mounts in each, Lustre (single-zone) in ``zone``.
    subnet_ids: Sequence[pulumi.Input[str]]
    zone: int
    node_security_group_id: pulumi.Input[str]
    # The training-data key (the file system's) and the object-data key (the bucket's, for Lustre's
    # data repository association).
    key_arn: pulumi.Input[str]
    bucket_key_arn: pulumi.Input[str]
    bucket_name: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    protect: bool
    tags: Mapping[str, str]
    # Workloads that own a store alone, namespace -> directory below the root (SharedStorage.stores).
    stores: Mapping[str, str] = field(default_factory=dict)


class SharedFileSystem(pulumi.ComponentResource):
    """EFS or FSx for Lustre, its security group and, for Lustre, the link to the data bucket."""

    def __init__(
        self, name: str, args: SharedFileSystemArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("ml-platform:aws:SharedFileSystem", name, None, opts)
        self._name, self._args = name, args
        self._child = pulumi.ResourceOptions(parent=self)
        self._data = pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect)
        self.security_group = ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description=f"{args.kind.value}: file system traffic from the cluster nodes only",
            tags=dict(args.tags),
            opts=self._child,
        )
        self.file_system: efs.FileSystem | fsx.LustreFileSystem
        if args.kind is SharedStorageKind.EFS:
            self.file_system, self.shared = self._efs()
        elif args.kind is SharedStorageKind.FSX_LUSTRE:
            self.file_system, self.shared = self._lustre()
        else:
            raise ValueError(f"no AWS shared file system for {args.kind}")
        self.file_system_id: pulumi.Output[str] = self.file_system.id
        self.register_outputs({"fileSystemId": self.file_system_id})

    def _allow(
        self,
        label: str,
        ports: tuple[int, int],
        peer: pulumi.Input[str],
        *,
        group: pulumi.Input[str] | None = None,
        egress: bool = False,
    ) -> pulumi.Resource:
        """One TCP rule on ``group`` (the file system's own by default) to or from ``peer``."""
        rule = vpc.SecurityGroupEgressRule if egress else vpc.SecurityGroupIngressRule
        created: pulumi.Resource = rule(
            f"{self._name}-{label}",
            security_group_id=group if group is not None else self.security_group.id,
            referenced_security_group_id=peer,
            ip_protocol="tcp",
            from_port=ports[0],
            to_port=ports[1],
            tags=dict(self._args.tags),
            opts=self._child,
        )
        return created

    def _efs(self) -> tuple[efs.FileSystem, SharedStorage]:
        """Elastic throughput: training checkpoints are bursty and idle in between, so paying per
        transfer beats provisioning; the CSI driver mounts with TLS (efs-utils) by default."""
        args = self._args
        self._allow("nfs", (NFS_PORT, NFS_PORT), args.node_security_group_id)
        file_system = efs.FileSystem(
            f"{self._name}-efs",
            encrypted=True,
            kms_key_id=args.key_arn,
            performance_mode="generalPurpose",
            throughput_mode="elastic",
            tags={**args.tags, "Name": self._name},
            opts=self._data,
        )
        for index, subnet_id in enumerate(args.subnet_ids):
            efs.MountTarget(
                f"{self._name}-mt-{index}",
                file_system_id=file_system.id,
                subnet_id=subnet_id,
                security_groups=[self.security_group.id],
                opts=self._child,
            )
        self._efs_policies(file_system)

        def csi(label: str, directory: str) -> dict[str, object]:
            # Static provisioning through an access point: ``<fs-id>::<fsap-id>`` (aws-efs-csi-driver,
            # examples/kubernetes/access_points).
            access_point = self._access_point(file_system, label, directory)
            return {
                "driver": "efs.csi.aws.com",
                "volumeHandle": pulumi.Output.concat(file_system.id, "::", access_point.id),
            }

        stores = {
            namespace: Store(directory, csi(directory, directory))
            for namespace, directory in sorted(args.stores.items())
        }
        return file_system, SharedStorage(
            SharedStorageKind.EFS,
            csi("workloads", SHARED_DIRECTORY),
            args.capacity_gib,
            owner=SHARED_OWNER,
            stores=stores,
        )

    def _access_point(self, file_system: efs.FileSystem, label: str, directory: str) -> efs.AccessPoint:
        """One directory below the root, created by EFS on first mount with ``SHARED_OWNER``'s owner and
        mode, every request through it made as the workload user (EFS user guide, "Working with Amazon
        EFS access points": the root directory is created only when creation info is given; the POSIX
        user replaces the client's user and group ids; a client of the access point sees its root
        directory as the file system's root, so it reaches nothing outside it). The file system's root
        stays root's."""
        return efs.AccessPoint(
            f"{self._name}-{label}",
            file_system_id=file_system.id,
            posix_user={"uid": SHARED_OWNER.uid, "gid": SHARED_OWNER.gid},
            root_directory={
                "path": f"/{directory}",
                "creation_info": {
                    "owner_uid": SHARED_OWNER.uid,
                    "owner_gid": SHARED_OWNER.gid,
                    "permissions": f"{SHARED_OWNER.mode:04o}",
                },
            },
            tags={**self._args.tags, "Name": f"{self._name}-{label}"},
            opts=self._child,
        )

    def _efs_policies(self, file_system: efs.FileSystem) -> None:
        """TLS only: a file system policy that still lets clients mount through a mount target and
        denies every request without TLS (EFS user guide, "Creating file system policies": the console's
        "Enforce in-transit encryption for all clients" preset, which replaces the default allow-all).
        Protected stacks also turn on automatic AWS Backup (Security Hub EFS.2; EFS user guide,
        "Automatic backups"); the CSI driver mounts with TLS already."""
        efs.FileSystemPolicy(
            f"{self._name}-tls-only",
            file_system_id=file_system.id,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "MountThroughMountTargets",
                            "Effect": "Allow",
                            "Principal": {"AWS": "*"},
                            "Action": [
                                "elasticfilesystem:ClientRootAccess",
                                "elasticfilesystem:ClientWrite",
                                "elasticfilesystem:ClientMount",
                            ],
                            "Resource": file_system.arn,
                            "Condition": {"Bool": {"elasticfilesystem:AccessedViaMountTarget": "true"}},
                        },
                        {
                            "Sid": "DenyWithoutTls",
                            "Effect": "Deny",
                            "Principal": {"AWS": "*"},
                            "Action": "*",
                            "Resource": file_system.arn,
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        },
                    ],
                }
            ),
            opts=self._child,
        )
        if self._args.protect:
            efs.BackupPolicy(
                f"{self._name}-backup",
                file_system_id=file_system.id,
                backup_policy={"status": "ENABLED"},
                opts=self._child,
            )

    def _lustre(self) -> tuple[fsx.LustreFileSystem, SharedStorage]:
        """PERSISTENT_2 in the training pool's zone, linked both ways to the data bucket so datasets
        appear as files and exported models land in S3 where inference reads them.

        Its copy is that bucket, not FSx backups: FSx backs up only persistent file systems "that are not
        linked to an Amazon S3 durable data repository" (FSx for Lustre user guide, "Working with
        backups"; FSx API reference, CreateBackup: "Are not linked to a data repository"), and this one
        is. The association exports every new, changed and deleted file of the whole file system, and
        the bucket is versioned with noncurrent versions kept ``storage.noncurrentVersionDays`` (storage.py),
        so a file overwritten or deleted on Lustre is still recoverable from S3 (review aws.md D2; the pack's
        ``aws-prod-lustre-has-a-copy``). ``automatic_backup_retention_days`` is set to 0, the
        backups-off value of its 0-90 range (FSx API reference, LustreFileSystemConfiguration), rather than
        left to an API default the reference has given as 0 and as 30."""
        args = self._args
        # CreateFileSystem checks the group's rules at once and fails with InvalidNetworkSettings
        # ("security groups do not permit Lustre LNET network traffic on port 988") when they are not
        # there yet (aws/aws-parallelcluster #6181; its fix, #1198, makes the file system depend on the
        # rule): the file system waits for every rule on its own group.
        rules: list[pulumi.Resource] = []
        for index, ports in enumerate(LUSTRE_PORTS):
            rules.append(self._allow(f"lustre-self-in-{index}", ports, self.security_group.id))
            rules.append(self._allow(f"lustre-self-out-{index}", ports, self.security_group.id, egress=True))
            rules.append(self._allow(f"lustre-nodes-in-{index}", ports, args.node_security_group_id))
            rules.append(
                self._allow(f"lustre-nodes-out-{index}", ports, args.node_security_group_id, egress=True)
            )
            # Lustre servers also connect back to clients: the nodes' group admits the file servers.
            self._allow(
                f"lustre-clients-in-{index}", ports, self.security_group.id, group=args.node_security_group_id
            )
        file_system = fsx.LustreFileSystem(
            f"{self._name}-lustre",
            deployment_type="PERSISTENT_2",
            storage_type="SSD",
            storage_capacity=args.capacity_gib,
            per_unit_storage_throughput=LUSTRE_THROUGHPUT_PER_TIB,
            file_system_type_version=LUSTRE_VERSION,
            automatic_backup_retention_days=0,
            kms_key_id=args.key_arn,
            subnet_ids=args.subnet_ids[args.zone],  # a single string in pulumi-aws v7: one subnet only.
            security_group_ids=[self.security_group.id],
            tags={**args.tags, "Name": self._name},
            opts=pulumi.ResourceOptions.merge(self._data, pulumi.ResourceOptions(depends_on=rules)),
        )
        association = fsx.DataRepositoryAssociation(
            f"{self._name}-dra",
            file_system_id=file_system.id,
            file_system_path="/",
            data_repository_path=pulumi.Output.concat("s3://", args.bucket_name, "/"),
            batch_import_meta_data_on_create=True,
            delete_data_in_filesystem=False,
            s3={
                "auto_import_policy": {"events": ["NEW", "CHANGED", "DELETED"]},
                "auto_export_policy": {"events": ["NEW", "CHANGED", "DELETED"]},
            },
            tags=dict(args.tags),
            opts=self._child,
        )
        self._grant_bucket_key(file_system.id, association)
        # Lustre has no access points: consumers mount the fileset ``mountname/<directory>`` (FSx for
        # Lustre user guide, "Mounting specific filesets"; aws-fsx-csi-driver mounts
        # ``<dnsname>@tcp:/<mountname>``, pkg/driver/node.go), which the Kubernetes layer's preparation
        # Job creates, owned by the workload user, through a volume on the root.
        root = {
            "driver": "fsx.csi.aws.com",
            "volumeHandle": file_system.id,
            "volumeAttributes": {"dnsname": file_system.dns_name, "mountname": file_system.mount_name},
        }

        def fileset(directory: str) -> dict[str, object]:
            mountname = pulumi.Output.concat(file_system.mount_name, "/", directory)
            return {**root, "volumeAttributes": {"dnsname": file_system.dns_name, "mountname": mountname}}

        return file_system, SharedStorage(
            SharedStorageKind.FSX_LUSTRE,
            fileset(SHARED_DIRECTORY),
            args.capacity_gib,
            LUSTRE_MOUNT_OPTIONS,
            owner=SHARED_OWNER,
            prepare=root,
            stores={ns: Store(d, fileset(d)) for ns, d in sorted(args.stores.items())},
        )

    def _grant_bucket_key(self, file_system_id: pulumi.Output[str], association: pulumi.Resource) -> None:
        """The file system reads and writes the SSE-KMS bucket as its own service-linked role, whose name
        carries the file system id; FSx docs add it to the key policy, which would make the key depend
        on the file system. A grant does the same after the fact, limited to this bucket's encryption
        context (with a bucket key, S3's context is the bucket ARN)."""
        args = self._args
        role = pulumi.Output.concat(
            args.account.arn(
                "iam", "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/", regional=False
            ),
            "AWSServiceRoleForFSxS3Access_",
            file_system_id,
        )
        kms.Grant(
            f"{self._name}-s3-key",
            key_id=args.bucket_key_arn,
            grantee_principal=role,
            operations=_S3_KEY_OPERATIONS,
            constraints=[{"encryption_context_subset": {"aws:s3:arn": args.bucket_arn}}],
            # The service-linked role exists once the association does.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[association]),
        )
