"""Day 2: properties the cloud moves by itself after creation are ``ignoreChanges``.

The project refreshes before every update (Pulumi.yaml ``options.refresh: always``), so the state holds
what the cloud reports: a grown disk, the autoscaler's node count, the newest key version. A program that
still declares the creation-time value then sends it back on the next update: a shrink the service
refuses, or a node count that fights the autoscaler. ``ignoreChanges`` keeps the refreshed value ("the
engine will use the old value from state for the ignored property", Pulumi docs, concepts/options/
ignorechanges). Each row names the property, when the cloud moves it, and the source; review azure.md A1
(PostgreSQL storage autogrow) is the finding behind the class. ``tests/components/test_day2_refresh.py``
refreshes every shipped stack with the moved values and plans again.

Not in the table because the provider ignores the move itself: an RDS instance's ``allocatedStorage``
under storage autoscaling ("differences from the configuration will be ignored automatically when Storage
Autoscaling occurs", pulumi-aws ``rds.Instance`` ``allocated_storage``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pulumi_policy import Policy, Severity

from .factory import per_node, stack_policy
from .subject import Graph, Subject
from .values import at

Paths = Callable[[Mapping[str, Any]], Iterator[str]]


@dataclass(frozen=True)
class Moved:
    """A property the cloud moves: ``paths`` gives the ignoreChanges paths a resource's inputs need."""

    type: str
    paths: Paths
    how: str


def _when(
    condition: Callable[[Mapping[str, Any]], bool], path: str
) -> Callable[[Mapping[str, Any]], Iterator[str]]:
    def paths(props: Mapping[str, Any]) -> Iterator[str]:
        if condition(props):
            yield path

    return paths


_KMS_KEY_ID = "securityProfile.azureKeyVaultKms.keyId"


def _scaling(props: Mapping[str, Any]) -> bool:
    return bool((at(props, "scalingConfig.maxSize") or 0) > (at(props, "scalingConfig.minSize") or 0))


MOVED: tuple[Moved, ...] = (
    Moved(
        "azure-native:dbforpostgresql:Server",
        _when(lambda p: at(p, "storage.autoGrow") == "Enabled", "storage.storageSizeGB"),
        "storage autogrow doubles the disk, and storage can only be scaled up (Azure Database for "
        "PostgreSQL, concepts-storage, Storage autogrow): the declared size is a refused shrink",
    ),
    Moved(
        "azure-native:containerservice:AgentPool",
        _when(lambda p: p.get("enableAutoScaling") is True, "count"),
        "the cluster autoscaler sets the pool's node count (AKS, cluster-autoscaler)",
    ),
    Moved(
        "azure-native:containerservice:ManagedCluster",
        _when(lambda p: bool(p.get("agentPoolProfiles")), "agentPoolProfiles"),
        "AKS reports every pool of the cluster there (AgentPool resources' included, autoscaled counts "
        "too) and takes no update of it through the cluster (azure-native ManagedCluster docs: create "
        "only; pulumi-azure-native #579, #4264; review azure.md U3)",
    ),
    Moved(
        "azure-native:containerservice:ManagedCluster",
        _when(lambda p: at(p, "securityProfile.azureKeyVaultKms.enabled") is True, _KMS_KEY_ID),
        "the key rotation runbook moves AKS KMS to a new key version and then rewrites every Secret (AKS, "
        "use-kms-etcd-encryption, Rotate existing keys); an update that followed the vault's rotation would "
        "switch the cluster unannounced and rewrite nothing (review azure.md B1)",
    ),
    Moved(
        "azure-native:compute:DiskEncryptionSet",
        _when(lambda p: p.get("rotationToLatestKeyVersionEnabled") is True, "activeKey.keyUrl"),
        "automatic key rotation moves the set to the key's newest version (Azure managed disks, "
        "server-side encryption, automatic key rotation)",
    ),
    Moved(
        "aws:eks/nodeGroup:NodeGroup",
        _when(_scaling, "scalingConfig.desiredSize"),
        "the cluster autoscaler sets the desired size (pulumi-aws eks.NodeGroup: ignoreChanges on "
        "scalingConfig.desiredSize for changes caused externally)",
    ),
)
_TYPES = tuple(sorted({moved.type for moved in MOVED}))


def _covered(path: str, ignored: tuple[str, ...]) -> bool:
    """The path, or a parent of it, is ignored."""
    return any(path == i or path.startswith((f"{i}.", f"{i}[")) for i in ignored)


def _moved_properties_ignored(subject: Subject, graph: Graph) -> Iterator[str]:
    for moved in MOVED:
        if moved.type != subject.type:
            continue
        for path in moved.paths(subject.props):
            if not _covered(path, subject.ignore_changes):
                yield (
                    f"{path} is not in ignoreChanges, but {moved.how}; after the refresh every update sends"
                    " the declared value back"
                )


POLICIES: list[Policy] = [
    stack_policy(
        "day2-cloud-moved-properties-ignored",
        "A property the cloud grows, rotates or scales by itself (storage autogrow, autoscaled node "
        "counts, key versions, the AKS KMS key a runbook rotates) is in ignoreChanges, so an update "
        "after a refresh never sends it back (review azure.md A1, B1; Pulumi ignoreChanges docs).",
        per_node(_TYPES, _moved_properties_ignored),
        severity=Severity.HIGH,
    ),
]
