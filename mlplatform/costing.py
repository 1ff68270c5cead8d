"""What a planned stack costs a month, from the plan alone: the same resources ``check`` judges, priced
from the snapshot (``mlplatform.pricing``). Never the builders: a figure follows what the program
registers, not what its config meant.

Three figures per resource and per stack:

- floor: every pool at its minimum, nothing running but the platform;
- expected: each pool at its minimum plus its duty cycle's share of the headroom (the tag
  ``ml-platform.io/duty-cycle`` the program puts on each pool; docs/cost.md gives the tier defaults);
- ceiling: every pool at its maximum all month.

Spot pools are a range (the snapshot's spot low and high). Storage with a configured size (file systems,
volumes, database storage) is priced at that size; what is billed by use alone (object storage, log
ingestion, data transfer) is listed with its unit price and left out of the totals. Every planned resource
is either priced, with its source row, or listed with the reason it is not.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from components.catalog.aws import EKS_STANDARD_SUPPORT_END
from mlplatform.graph import Plan, PlannedResource, as_applied
from mlplatform.pricing import DAYS_PER_MONTH, HOURS_PER_MONTH, PriceRow, Snapshot

POOL_LABEL = "ml-platform/pool"
# Where the program writes each pool's duty cycle (components/config.py, DUTY_CYCLE_TAG and its Azure
# spelling: Azure tag names refuse '/').
DUTY_CYCLE_TAGS = ("ml-platform.io/duty-cycle", "ml-platform.io-duty-cycle")


@dataclass(frozen=True)
class Money:
    """A monthly amount in USD, as a range (low == high unless spot prices it)."""

    low: float
    high: float

    def __add__(self, other: Money) -> Money:
        return Money(self.low + other.low, self.high + other.high)

    def times(self, factor: float) -> Money:
        return Money(self.low * factor, self.high * factor)

    def text(self) -> str:
        if round(self.low) == round(self.high):
            return f"${self.high:,.0f}"
        return f"${self.low:,.0f}-{self.high:,.0f}"


ZERO = Money(0.0, 0.0)


@dataclass(frozen=True)
class Item:
    """One priced line: a resource, or a part of one (a pool's nodes, their disks)."""

    resource: str
    type: str
    what: str
    floor: Money | None = None
    expected: Money | None = None
    ceiling: Money | None = None
    # Why there is no figure (no price in the snapshot for this region, or billed by use alone).
    unpriced: str | None = None
    # Billed by use alone: the unit price is shown, the totals leave it out.
    usage: bool = False
    rows: tuple[PriceRow, ...] = ()
    # A pool's nodes: the figure the policy pack's budget-ceiling judges (the sum of these ceilings).
    compute: bool = False

    @property
    def priced(self) -> bool:
        return self.ceiling is not None


@dataclass(frozen=True)
class Free:
    """A planned resource with no charge of its own, and why."""

    resource: str
    type: str
    reason: str


@dataclass
class Estimate:
    stack: str
    cloud: str
    region: str
    items: list[Item] = field(default_factory=list)
    free: list[Free] = field(default_factory=list)
    budget: float | None = None

    @property
    def priced(self) -> list[Item]:
        return [item for item in self.items if item.priced]

    @property
    def unpriced(self) -> list[Item]:
        return [item for item in self.items if not item.priced]

    def total(self, figure: str) -> Money | None:
        """The priced items' sum, or None when nothing is priced (never a $0 that reads as a cost)."""
        if not self.priced:
            return None
        total = ZERO
        for item in self.priced:
            total = total + getattr(item, figure)
        return total

    def rows(self) -> list[PriceRow]:
        return [row for item in self.items for row in item.rows]

    @property
    def compute(self) -> list[Item]:
        """The pools' nodes: what the budget policy judges (policies/mlplatform_policies/budget.py)."""
        return [item for item in self.items if item.compute]

    def budget_verdict(self) -> tuple[float, str] | None:
        """The pools' ceiling the pack judges against the budget, and its verdict: within, over, or
        cannot judge (a pool with no price, unless the stack sets budget.allowUnpriced)."""
        if self.budget is None:
            return None
        ceiling = sum(item.ceiling.high for item in self.compute if item.ceiling is not None)
        if any(not item.priced for item in self.compute):
            return ceiling, "cannot judge: a pool has no price (unless budget.allowUnpriced)"
        return ceiling, "over" if ceiling > self.budget else "within"


class _Pricer:
    """Looks prices up in the stack's own region only."""

    def __init__(self, snapshot: Snapshot, cloud: str, region: str, today: datetime.date) -> None:
        self.snapshot, self.cloud, self.region, self.today = snapshot, cloud, region, today

    def row(self, service: str, sku: str) -> PriceRow | None:
        return self.snapshot.find(self.cloud, self.region, service, sku)

    def monthly(
        self,
        resource: PlannedResource,
        what: str,
        service: str,
        sku: str,
        quantity: tuple[float, float, float],
        *,
        per: float = HOURS_PER_MONTH,
        spot: bool = False,
    ) -> Item:
        """An item of ``quantity`` (floor, expected, ceiling) units of ``service/sku``, each billed ``per``
        unit-month (730 for an hourly price, 1 for a monthly one)."""
        row = self.row(service, sku)
        if row is None:
            return self._unpriced(resource, what, f"no {service} {sku} row for {self.region} in the snapshot")
        if row.price is None:
            return self._unpriced(resource, what, f"{service} {sku} in {self.region}: {row.note}", row)
        if spot:
            if row.spot_low is None or row.spot_high is None:
                reason = f"no spot price for {sku} in {self.region} ({row.note or 'the source has none'})"
                return self._unpriced(resource, what, reason, row)
            unit = Money(row.spot_low * per, row.spot_high * per)
        else:
            unit = Money(row.price * per, row.price * per)
        floor, expected, ceiling = (unit.times(count) for count in quantity)
        return Item(resource.name, resource.type, what, floor, expected, ceiling, rows=(row,))

    def usage(self, resource: PlannedResource, what: str, service: str, sku: str) -> Item:
        row = self.row(service, sku)
        if row is None or row.price is None:
            unit = "no unit price in the snapshot" + (f" ({row.note})" if row is not None else "")
        else:
            unit = f"${row.price:g} per {row.unit}"
        rows = (row,) if row is not None else ()
        return Item(
            resource.name, resource.type, what, unpriced=f"billed by use: {unit}", usage=True, rows=rows
        )

    def _unpriced(
        self, resource: PlannedResource, what: str, reason: str, row: PriceRow | None = None
    ) -> Item:
        return Item(resource.name, resource.type, what, unpriced=reason, rows=(row,) if row else ())


def _fixed(count: float = 1.0) -> tuple[float, float, float]:
    return (count, count, count)


def _duty(tags: Mapping[str, Any]) -> float | None:
    for key in DUTY_CYCLE_TAGS:
        if key in tags:
            try:
                return float(tags[key])
            except (TypeError, ValueError):
                return None
    return None


def _nodes(minimum: float, maximum: float, duty: float | None) -> tuple[float, float, float]:
    expected = minimum + (duty or 0.0) * (maximum - minimum)
    return (minimum, expected, maximum)


@dataclass(frozen=True)
class _Pool:
    name: str
    size: str
    minimum: float
    maximum: float
    spot: bool
    duty: float | None
    disk_gib: float | None

    @property
    def nodes(self) -> tuple[float, float, float]:
        return _nodes(self.minimum, self.maximum, self.duty)

    def describe(self) -> str:
        spot = ", spot" if self.spot else ""
        duty = f", duty {self.duty:g}" if self.duty is not None else ", no duty cycle: expected = floor"
        return f"pool {self.name}: {self.minimum:g}-{self.maximum:g} x {self.size}{spot}{duty}"


def _pool_items(
    pricer: _Pricer, resource: PlannedResource, pool: _Pool, service: str, disk: str
) -> list[Item]:
    nodes = pricer.monthly(resource, pool.describe(), service, pool.size, pool.nodes, spot=pool.spot)
    items = [dataclasses.replace(nodes, compute=True)]
    if pool.disk_gib:
        what = f"pool {pool.name}: {pool.disk_gib:g} GiB disk per node"
        floor, expected, ceiling = (n * pool.disk_gib for n in pool.nodes)
        disk_service, disk_sku = _split(disk)
        items.append(
            pricer.monthly(resource, what, disk_service, disk_sku, (floor, expected, ceiling), per=1.0)
        )
    return items


def _split(key: str) -> tuple[str, str]:
    service, _, sku = key.partition("/")
    return service, sku


# ---- AWS ----


def _eks_node_group(pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan) -> list[Item]:
    scaling = inputs.get("scalingConfig") or {}
    disk = next(
        (
            mapping.get("ebs", {}).get("volumeSize")
            for sibling in plan.resources
            if sibling.type == "aws:ec2/launchTemplate:LaunchTemplate" and sibling.parent == r.parent
            for mapping in as_applied(sibling.inputs).get("blockDeviceMappings") or []
        ),
        None,
    )
    pool = _Pool(
        name=str((inputs.get("labels") or {}).get(POOL_LABEL, r.name)),
        size=str((inputs.get("instanceTypes") or ["?"])[0]),
        minimum=float(scaling.get("minSize") or 0),
        maximum=float(scaling.get("maxSize") or 0),
        spot=inputs.get("capacityType") == "SPOT",
        duty=_duty(inputs.get("tags") or {}),
        disk_gib=float(disk) if disk else None,
    )
    return _pool_items(pricer, r, pool, "ec2-instance", "ebs/gp3")


def _rds(pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan) -> list[Item]:
    copies = 2.0 if inputs.get("multiAz") else 1.0
    klass = str(inputs.get("instanceClass"))
    storage = float(inputs.get("allocatedStorage") or 0)
    standby = " (Multi-AZ: a standby too)" if copies > 1 else ""
    return [
        pricer.monthly(r, f"database {klass}{standby}", "rds", klass, _fixed(copies)),
        pricer.monthly(
            r,
            f"database storage {storage:g} GB",
            "rds-storage",
            str(inputs.get("storageType") or "gp3"),
            _fixed(storage * copies),
            per=1.0,
        ),
    ]


def _fsx(pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan) -> list[Item]:
    capacity = float(inputs.get("storageCapacity") or 0)
    sku = f"{inputs.get('deploymentType')}-{float(inputs.get('perUnitStorageThroughput') or 0):g}"
    return [
        pricer.monthly(r, f"Lustre {sku}, {capacity:g} GiB", "fsx-lustre", sku, _fixed(capacity), per=1.0)
    ]


def _vpc_endpoint(pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan) -> list[Item]:
    if inputs.get("vpcEndpointType") != "Interface":
        return []
    zones = float(len(inputs.get("subnetIds") or []) or 1)
    return [
        pricer.monthly(
            r, f"interface endpoint in {zones:g} zones", "vpc-endpoint", "interface-per-az", _fixed(zones)
        )
    ]


def _eks_cluster(pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan) -> list[Item]:
    """Standard support, or extended once the version is past its end (components/catalog/aws.py) and the
    upgrade policy lets it stay there (supportType STANDARD has EKS upgrade the control plane instead)."""
    version = str(inputs.get("version") or "")
    support = str((inputs.get("upgradePolicy") or {}).get("supportType") or "EXTENDED")
    end = EKS_STANDARD_SUPPORT_END.get(version)
    if end is None:
        what = f"EKS control plane {version} (standard support; its end is not in the catalogue)"
        return [pricer.monthly(r, what, "eks", "standard-support", _fixed())]
    if pricer.today > datetime.date.fromisoformat(end) and support != "STANDARD":
        what = f"EKS control plane {version} (extended support: standard support ended {end})"
        return [pricer.monthly(r, what, "eks", "extended-support", _fixed())]
    return [
        pricer.monthly(
            r, f"EKS control plane {version} (standard support to {end})", "eks", "standard-support", _fixed()
        )
    ]


def _aws_items() -> dict[str, _Handler]:
    return {
        "aws:eks/cluster:Cluster": _eks_cluster,
        "aws:eks/nodeGroup:NodeGroup": _eks_node_group,
        "aws:ec2/natGateway:NatGateway": lambda p, r, i, plan: [
            p.monthly(r, "NAT gateway hours", "nat-gateway", "gateway", _fixed()),
            p.usage(r, "NAT gateway data processed", "nat-gateway", "data-processed"),
        ],
        "aws:ec2/eip:Eip": lambda p, r, i, plan: [
            p.monthly(r, "public IPv4 address", "public-ipv4", "in-use-address", _fixed())
        ],
        "aws:ec2/vpcEndpoint:VpcEndpoint": _vpc_endpoint,
        "aws:kms/key:Key": lambda p, r, i, plan: [
            p.monthly(r, "KMS key", "kms", "customer-managed-key", _fixed(), per=1.0)
        ],
        "aws:rds/instance:Instance": _rds,
        "aws:fsx/lustreFileSystem:LustreFileSystem": _fsx,
        "aws:s3/bucket:Bucket": lambda p, r, i, plan: [p.usage(r, "S3 storage", "s3", "standard")],
        "aws:efs/fileSystem:FileSystem": lambda p, r, i, plan: [
            p.usage(r, "EFS storage", "efs", "standard-elastic")
        ],
        "aws:cloudwatch/logGroup:LogGroup": lambda p, r, i, plan: [
            p.usage(r, "log ingestion", "cloudwatch-logs", "ingestion")
        ],
        "aws:ecr/repository:Repository": lambda p, r, i, plan: [
            p.usage(r, "image storage", "ecr", "storage")
        ],
    }


# ---- Azure ----


def _aks_pool(r: PlannedResource, profile: Mapping[str, Any]) -> _Pool:
    automatic = profile.get("enableAutoScaling", True)
    count = float(profile.get("count") or 0)
    return _Pool(
        name=str((profile.get("nodeLabels") or {}).get(POOL_LABEL, profile.get("name") or r.name)),
        size=str(profile.get("vmSize")),
        minimum=float(profile.get("minCount") or 0) if automatic else count,
        maximum=float(profile.get("maxCount") or 0) if automatic else count,
        spot=profile.get("scaleSetPriority") == "Spot",
        duty=_duty(profile.get("tags") or {}),
        # An ephemeral OS disk lives on the VM's own storage, billed with the VM.
        disk_gib=None
        if profile.get("osDiskType") == "Ephemeral"
        else float(profile.get("osDiskSizeGB") or 128),
    )


def _managed_cluster(
    pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan
) -> list[Item]:
    tier = str((inputs.get("sku") or {}).get("tier") or "Free")
    items = []
    if tier != "Free":
        items.append(pricer.monthly(r, f"AKS {tier} tier", "aks", f"{tier.lower()}-tier", _fixed()))
    for profile in inputs.get("agentPoolProfiles") or []:
        items += _pool_items(pricer, r, _aks_pool(r, profile), "vm", "managed-disk/os-disk")
    return items + _outbound_load_balancer(pricer, r, inputs.get("networkProfile") or {})


def _outbound_load_balancer(pricer: _Pricer, r: PlannedResource, network: Mapping[str, Any]) -> list[Item]:
    """``outboundType: loadBalancer`` (AKS's default): AKS creates a Standard load balancer for egress and
    its managed outbound public IPs (``loadBalancerProfile.managedOutboundIPs.count``, 1 unless set)."""
    if (network.get("outboundType") or "loadBalancer") != "loadBalancer":
        return []
    profile = network.get("loadBalancerProfile") or {}
    addresses = float((profile.get("managedOutboundIPs") or {}).get("count") or 1)
    reason = (
        "Standard Load Balancer bills by rule-hour and data processed; no load-balancer row in the snapshot"
    )
    return [
        Item(r.name, r.type, "AKS-managed outbound Standard load balancer", unpriced=reason),
        pricer.monthly(
            r, f"its {addresses:g} managed outbound public IP(s)", "public-ip", "Standard", _fixed(addresses)
        ),
    ]


def _postgres(pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan) -> list[Item]:
    sku = str((inputs.get("sku") or {}).get("name"))
    mode = (inputs.get("highAvailability") or {}).get("mode") or "Disabled"
    copies = 1.0 if mode == "Disabled" else 2.0
    storage = float((inputs.get("storage") or {}).get("storageSizeGB") or 0)
    standby = f" (high availability {mode}: a standby too)" if copies > 1 else ""
    return [
        pricer.monthly(r, f"database {sku}{standby}", "postgres-flexible", sku, _fixed(copies)),
        pricer.monthly(
            r,
            f"database storage {storage:g} GB",
            "postgres-storage",
            "ssd",
            _fixed(storage * copies),
            per=1.0,
        ),
    ]


def _file_share(pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan) -> list[Item]:
    quota = float(inputs.get("shareQuota") or 0)
    account = _account_sku(plan, inputs.get("accountName"))
    if account is None or not account.startswith("Premium"):
        return [pricer.usage(r, "Azure Files (standard, billed by use)", "files", account or "?")]
    return [
        pricer.monthly(
            r, f"Azure Files {account}, {quota:g} GiB provisioned", "files", account, _fixed(quota), per=1.0
        )
    ]


def _account_sku(plan: Plan, account_name: Any) -> str | None:
    """The SKU of the storage account a share lives in: the one named, else the stack's FileStorage
    account (premium shares, NFS among them, live only there; a name may be unknown at preview)."""
    accounts = [
        as_applied(r.inputs) for r in plan.resources if r.type == "azure-native:storage:StorageAccount"
    ]
    named = [a for a in accounts if a.get("accountName") == account_name] or [
        a for a in accounts if a.get("kind") == "FileStorage"
    ]
    return str((named[0].get("sku") or {}).get("name")) if named else None


def _storage_account(
    pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan
) -> list[Item]:
    if inputs.get("kind") == "FileStorage":
        return []  # its shares are priced at their provisioned size (FileShare)
    sku = str((inputs.get("sku") or {}).get("name"))
    return [pricer.usage(r, f"Blob storage ({sku})", "blob", sku)]


def _hsm_key(pricer: _Pricer, r: PlannedResource, inputs: Mapping[str, Any], plan: Plan) -> list[Item]:
    kind = str((inputs.get("properties") or {}).get("kty") or "")
    if not kind.endswith("-HSM"):
        return [pricer.usage(r, "Key Vault key operations", "key-vault", "operations")]
    return [pricer.monthly(r, f"Key Vault {kind} key", "key-vault", "hsm-key", _fixed(), per=1.0)]


def _azure_items() -> dict[str, _Handler]:
    return {
        "azure-native:containerservice:ManagedCluster": _managed_cluster,
        "azure-native:containerservice:AgentPool": lambda p, r, i, plan: _pool_items(
            p, r, _aks_pool(r, i), "vm", "managed-disk/os-disk"
        ),
        "azure-native:dbforpostgresql:Server": _postgres,
        "azure-native:storage:FileShare": _file_share,
        "azure-native:storage:StorageAccount": _storage_account,
        "azure-native:keyvault:Key": _hsm_key,
        "azure-native:containerregistry:Registry": lambda p, r, i, plan: [
            p.monthly(
                r,
                f"registry {(i.get('sku') or {}).get('name')}",
                "acr",
                str((i.get("sku") or {}).get("name")),
                _fixed(),
                per=DAYS_PER_MONTH,
            )
        ],
        "azure-native:network:NatGateway": lambda p, r, i, plan: [
            p.monthly(r, "NAT gateway hours", "nat-gateway", "gateway", _fixed()),
            p.usage(r, "NAT gateway data processed", "nat-gateway", "data-processed"),
        ],
        "azure-native:network:PublicIPAddress": lambda p, r, i, plan: [
            p.monthly(
                r,
                "public IP address",
                "public-ip",
                str((i.get("sku") or {}).get("name") or "Standard"),
                _fixed(),
            )
        ],
        "azure-native:network:PrivateEndpoint": lambda p, r, i, plan: [
            p.monthly(r, "private endpoint", "private-endpoint", "endpoint", _fixed())
        ],
        "azure-native:operationalinsights:Workspace": lambda p, r, i, plan: [
            p.usage(r, "log ingestion", "log-analytics", "ingestion")
        ],
    }


_Handler = Callable[[_Pricer, PlannedResource, Mapping[str, Any], Plan], list[Item]]
_HANDLERS: dict[str, _Handler] = {**_aws_items(), **_azure_items()}

# Why a priced type can bill nothing (its handler returned no item).
_NOTHING_BILLED: dict[str, str] = {
    "aws:ec2/vpcEndpoint:VpcEndpoint": "a gateway endpoint has no charge",
    "azure-native:storage:StorageAccount": "a FileStorage account: its shares are priced at their size",
    "azure-native:containerservice:ManagedCluster": "Free tier with no inline pool",
}

# Types with no charge of their own, by type token or by prefix (ending in ':' or '/'), with the reason.
_FREE: dict[str, str] = {
    "aws:ec2/vpc:Vpc": "a VPC has no charge of its own",
    "aws:ec2/subnet:Subnet": "subnets have no charge of their own",
    "aws:ec2/routeTable": "routing has no charge of its own",
    "aws:ec2/securityGroup:SecurityGroup": "security groups have no charge",
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup": "security groups have no charge",
    "aws:vpc/securityGroup": "security group rules have no charge",
    "aws:ec2/internetGateway:InternetGateway": "no charge of its own; traffic is billed as data transfer",
    "aws:ec2/launchTemplate:LaunchTemplate": "its volumes are priced with the node group that launches it",
    "aws:ec2/placementGroup:PlacementGroup": "placement groups have no charge",
    "aws:ec2/flowLog:FlowLog": "its records are billed as log ingestion in the log group it writes to",
    "aws:iam/": "IAM has no charge",
    "aws:kms/alias:Alias": "aliases have no charge (the key is priced)",
    "aws:kms/grant:Grant": "grants have no charge (the key is priced)",
    "aws:s3/bucket": "configuration of a bucket (the bucket's storage is listed)",
    "aws:eks/addon:Addon": "EKS add-ons have no charge; their pods run on the node pools priced here",
    "aws:autoscaling/tag:Tag": "a tag has no charge",
    "aws:efs/accessPoint:AccessPoint": "access points have no charge",
    "aws:ecr/lifecyclePolicy:LifecyclePolicy": "a lifecycle policy has no charge (the repository is priced)",
    "aws:efs/mountTarget:MountTarget": "mount targets have no charge",
    "aws:efs/fileSystemPolicy:FileSystemPolicy": "a policy has no charge",
    "aws:efs/backupPolicy:BackupPolicy": "backups are billed by AWS Backup per GB stored (by use)",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "the link has no charge; S3 is listed",
    "aws:rds/parameterGroup:ParameterGroup": "parameter groups have no charge",
    "aws:rds/subnetGroup:SubnetGroup": "subnet groups have no charge",
    "aws:budgets/budget:Budget": "a budget without actions has no charge",
    "azure-native:authorization:": "role assignments have no charge",
    "azure-native:managedidentity:": "managed identities have no charge",
    "azure-native:resources:ResourceGroup": "resource groups have no charge",
    "azure-native:resources:Deployment": "template deployments have no charge (what they set is listed)",
    "azure-native:network:VirtualNetwork": "a virtual network has no charge of its own",
    "azure-native:network:Subnet": "subnets have no charge",
    "azure-native:network:NetworkSecurityGroup": "network security groups have no charge",
    "azure-native:network:PrivateDnsZoneGroup": "the zone group has no charge (the zone is listed)",
    "azure-native:network:RouteTable": "route tables have no charge",
    "azure-native:storage:BlobContainer": "containers are billed through their account's storage",
    "azure-native:storage:BlobServiceProperties": "configuration of the account",
    "azure-native:storage:ManagementPolicy": "configuration of the account",
    "azure-native:compute:DiskEncryptionSet": "no charge; the key it uses is priced",
    "azure-native:containerservice:MaintenanceConfiguration": "configuration of the cluster",
    "azure-native:monitor:DiagnosticSetting": "its logs are billed as ingestion in the workspace they go to",
    "azure-native:dbforpostgresql:Configuration": "configuration of the server",
    "azure-native:dbforpostgresql:Database": "databases are billed through their server",
    "azure-native:dbforpostgresql:AdministratorsMicrosoftEntra": "configuration of the server",
    "azure-native:keyvault:Vault": "a vault has no charge of its own; its keys and operations are",
    "azure-native:consumption:Budget": "budgets have no charge",
    "random:": "computed by Pulumi, not a cloud resource",
    "command:local:Command": "runs on the deploying machine",
    "docker-build:index:Image": "built on the deploying machine; its storage is the registry's",
    "pulumi-python:dynamic:Resource": "a check the program runs at deploy time, not a cloud resource",
    "pulumi:providers:": "a provider, not a cloud resource",
    "tls:": "a key or certificate computed by Pulumi on the deploying machine, not a cloud resource",
}
# Azure Private DNS bills each zone by the month; the snapshot has no such row yet.
# Audit and alerting services bill by what they see or by the month per rule; none has a snapshot row.
_BY_USE = "billed by use, no unit price in the snapshot"
_UNPRICED_TYPES: dict[str, str] = {
    "aws:guardduty/detector:Detector": f"GuardDuty bills by the events and logs it analyses: {_BY_USE}",
    "aws:guardduty/detectorFeature:DetectorFeature": (
        f"a GuardDuty protection plan bills by what it analyses: {_BY_USE}"
    ),
    "aws:cloudtrail/trail:Trail": f"CloudTrail bills by the events it delivers: {_BY_USE}",
    "aws:sns/topic:Topic": f"SNS bills by requests and deliveries: {_BY_USE}",
    "aws:cloudwatch/metricAlarm:MetricAlarm": "CloudWatch bills each alarm by the month; not in the snapshot",
    "azure-native:storage:EncryptionScope": (
        "an encryption scope bills by the hour, a month at least (Microsoft Learn, Create and manage"
        " encryption scopes); not in the snapshot"
    ),
    "aws:cloudwatch/logMetricFilter:LogMetricFilter": (
        "its metric is billed as a CloudWatch custom metric by the month; not in the snapshot"
    ),
    "azure-native:monitor:ScheduledQueryRule": (
        "Azure Monitor bills each log alert rule by the month, by how often it runs; not in the snapshot"
    ),
    "azure-native:security:Pricing": (f"a Defender for Cloud plan bills per protected resource: {_BY_USE}"),
    "azure-native:privatedns:PrivateZone": "Azure Private DNS bills each zone per month; not in the snapshot",
    "azure-native:privatedns:VirtualNetworkLink": (
        "Azure Private DNS bills links beyond the free ones; not in the snapshot"
    ),
}


def _free_reason(resource: PlannedResource, inputs: Mapping[str, Any]) -> str | None:
    if resource.type.startswith("kubernetes:"):
        if (
            resource.type == "kubernetes:core/v1:Service"
            and (inputs.get("spec") or {}).get("type") == "LoadBalancer"
        ):
            return None  # a cloud load balancer: listed as unpriced below
        return "a Kubernetes object: runs on the node pools priced here"
    for token, reason in _FREE.items():
        if resource.type.startswith(token):
            return reason
    return None


def estimate(plan: Plan, snapshot: Snapshot, today: datetime.date | None = None) -> Estimate:
    """Price every resource of ``plan`` as of ``today`` (default: today, UTC; it picks the EKS support
    row): an item per billable part, a note per free resource."""
    cloud = str(plan.outputs.get("cloud") or "")
    region = str(plan.outputs.get("region") or "")
    pricer = _Pricer(snapshot, cloud, region, today or datetime.datetime.now(datetime.UTC).date())
    result = Estimate(plan.stack, cloud, region)
    for resource in plan.resources:
        if not resource.custom:
            continue  # a component groups others; it is not billed
        inputs = as_applied(resource.inputs)
        handler = _HANDLERS.get(resource.type)
        if handler is not None:
            items = handler(pricer, resource, inputs, plan)
            result.items += items
            if not items:
                result.free.append(Free(resource.name, resource.type, _NOTHING_BILLED[resource.type]))
        elif (reason := _free_reason(resource, inputs)) is not None:
            result.free.append(Free(resource.name, resource.type, reason))
        else:
            reason = _UNPRICED_TYPES.get(resource.type) or (
                "a cloud load balancer; not in the snapshot"
                if resource.type == "kubernetes:core/v1:Service"
                else "not in the cost model (mlplatform/costing.py)"
            )
            result.items.append(Item(resource.name, resource.type, resource.type, unpriced=reason))
        result.budget = result.budget if result.budget is not None else _budget(resource, inputs)
    result.items.append(
        pricer.usage(_STACK_EGRESS, "data transfer out to the internet", "data-transfer", "internet-out")
    )
    return result


_STACK_EGRESS = PlannedResource("", "egress", "stack", None, True, None, {})


def _budget(resource: PlannedResource, inputs: Mapping[str, Any]) -> float | None:
    """The monthly ceiling the stack declares (components/aws/budget.py, components/azure/budget.py)."""
    if resource.type == "aws:budgets/budget:Budget" and inputs.get("timeUnit") == "MONTHLY":
        return float(inputs.get("limitAmount") or 0) or None
    if resource.type == "azure-native:consumption:Budget" and inputs.get("timeGrain") == "Monthly":
        return float(inputs.get("amount") or 0) or None
    return None


def summary_line(result: Estimate, today: datetime.date, snapshot: Snapshot) -> str:
    """One line: the three figures, what is left out, and the prices' age."""
    left = len(result.unpriced)
    age = snapshot.age_line(today, result.rows())
    floor, expected, ceiling = (result.total(figure) for figure in ("floor", "expected", "ceiling"))
    if floor is None or expected is None or ceiling is None:
        return f"cost: {no_priced_items(result)} ({age})"
    parts = [f"floor {floor.text()}", f"expected {expected.text()}", f"ceiling {ceiling.text()} a month"]
    return f"cost: {', '.join(parts)} (priced items; {left} unpriced or billed by use; {age})"


def no_priced_items(result: Estimate) -> str:
    return f"no priced items ({len(result.unpriced)} unpriced)"
