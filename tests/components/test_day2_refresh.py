"""Day 2 on both clouds (issue 38; review azure.md A1, B1): plan, refresh with what a real cloud reports
after months of running (a grown database disk, autoscaled node counts, rotated key versions), plan again
under the mocks, and diff as the engine would: no update at all, so no refused change and no replacement.
Every shipped stack (review 38 B8): on Azure the cloud layer, planned again with the rotated key; on AWS
the whole shared plan, the in-cluster layer included (``_planned_again`` says why).

The refresh is the one ``Pulumi.yaml`` ``options.refresh: always`` runs before every update: the state then
holds the cloud's values, and for an ``ignoreChanges`` path "the engine will use the old value from state"
(Pulumi docs, concepts/options/ignorechanges), which the update below models. A path the provider itself
ignores is modelled the same way (pulumi-aws ``rds.Instance`` ``allocated_storage``: "differences from the
configuration will be ignored automatically when Storage Autoscaling occurs").

What each cloud moves, and how (the refreshed values):
- PostgreSQL flexible server autogrow "increases the disk size to the next premium SSD storage size. This
  increase is always double" and storage "can only be scaled up, not down" (concepts-storage): the size
  doubles, and sending the declared size back is a shrink the service refuses.
- The cluster autoscaler sets AKS pool counts and EKS node-group desired sizes: up to the maximum.
- AKS reports every pool of a cluster in its ``agentPoolProfiles``, those made as ``AgentPool`` resources
  too (pulumi-azure-native #579: a refresh lists the pools the program declares elsewhere), while the
  program declares the System pool alone (review azure.md U3).
- Key Vault's rotation policy makes a new key version: the disk encryption set follows it
  (``rotationToLatestKeyVersionEnabled``); AKS KMS does not, until the rotation runbook
  (docs/operations.md) updates it and rewrites every Secret, as the AKS KMS page asks.
- RDS storage autoscaling grows ``allocatedStorage`` up to ``maxAllocatedStorage``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.config import PLATFORM_KEY
from mlplatform import mocks
from mlplatform.graph import PlannedResource
from mlplatform.plan import Plan, all_stack_targets
from tests.stack_variants import cloud_only, input_diff, plan_config, template

NEW_VERSION = "f" * 32
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(path: str) -> list[str | int]:
    return [int(index) if index else key for key, index in _STEP.findall(path)]


def _get(tree: Any, path: str) -> Any:
    for step in _steps(path):
        try:
            tree = tree[step]
        except (KeyError, IndexError, TypeError):
            return None
    return tree


def _set(tree: Any, path: str, value: Any) -> None:
    *parents, last = _steps(path)
    for step in parents:
        tree = tree[step]
    tree[last] = value


def _versioned(url: str) -> str:
    return re.sub(r"/[0-9a-fA-F]{32}$", f"/{NEW_VERSION}", url)


def _all_pools(profiles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What AKS reports: the System pool at the autoscaler's count, and the cluster's other pools."""
    system = profiles[0]
    scaled = {**system, "count": system["maxCount"]} if system.get("enableAutoScaling") else system
    user = {**system, "name": "gpu", "mode": "User", "count": 2}
    return [scaled, *profiles[1:], user]


Grow = Callable[[Any, dict[str, Any]], Any]
# type → (path, condition on the inputs, the value a refresh reads after the cloud moved it).
MOVES: dict[str, list[tuple[str, Callable[[dict[str, Any]], bool], Grow]]] = {
    "azure-native:dbforpostgresql:Server": [
        ("storage.storageSizeGB", lambda i: _get(i, "storage.autoGrow") == "Enabled", lambda v, i: v * 2)
    ],
    "azure-native:containerservice:AgentPool": [
        ("count", lambda i: i.get("enableAutoScaling") is True, lambda v, i: i["maxCount"])
    ],
    "azure-native:containerservice:ManagedCluster": [
        ("agentPoolProfiles", lambda i: bool(i.get("agentPoolProfiles")), lambda v, i: _all_pools(v))
    ],
    "azure-native:compute:DiskEncryptionSet": [
        (
            "activeKey.keyUrl",
            lambda i: i.get("rotationToLatestKeyVersionEnabled") is True,
            lambda v, i: _versioned(v),
        )
    ],
    "aws:eks/nodeGroup:NodeGroup": [
        (
            "scalingConfig.desiredSize",
            lambda i: _get(i, "scalingConfig.maxSize") > _get(i, "scalingConfig.minSize"),
            lambda v, i: _get(i, "scalingConfig.maxSize"),
        )
    ],
    "aws:rds/instance:Instance": [
        (
            "allocatedStorage",
            lambda i: bool(i.get("maxAllocatedStorage")),
            lambda v, i: i["maxAllocatedStorage"],
        )
    ],
}
# Paths the provider's own diff hides (see the module docstring).
PROVIDER_IGNORED = {"aws:rds/instance:Instance": ("allocatedStorage",)}


def _refreshed(resource: PlannedResource) -> tuple[dict[str, Any], list[str]]:
    """The state's inputs after the refresh, and the paths the cloud moved."""
    state = copy.deepcopy(resource.inputs)
    moved = []
    for path, applies, grow in MOVES.get(resource.type, []):
        if applies(state) and (value := _get(state, path)) is not None:
            _set(state, path, grow(value, state))
            moved.append(path)
    return state, moved


def _update(program: PlannedResource, state: dict[str, Any]) -> list[str]:
    """The paths an update would send: the program's inputs, with every ignored path (by option or by the
    provider) taken from the refreshed state."""
    sent = copy.deepcopy(program.inputs)
    for path in (*program.ignore_changes, *PROVIDER_IGNORED.get(program.type, ())):
        if (kept := _get(state, path)) is not None:
            _set(sent, path, kept)
    return list(input_diff(state, sent))


def updates_from(states: dict[str, dict[str, Any]], second: Plan) -> dict[str, list[str]]:
    """Per resource (URN), what the update would send over the refreshed ``states`` (URN → inputs)."""
    again = {r.urn: r for r in second.resources}
    assert set(states) == set(again), "a resource was added, removed or renamed"
    return {urn: paths for urn, state in states.items() if (paths := _update(again[urn], state))}


def day2_updates(first: Plan, second: Plan) -> tuple[dict[str, list[str]], set[str]]:
    """Per resource, what the update after the refresh would send; and the types the cloud moved."""
    refreshed = {r.urn: (r.type, *_refreshed(r)) for r in first.resources}
    updates = updates_from({urn: state for urn, (_, state, _) in refreshed.items()}, second)
    return updates, {kind for kind, _, paths in refreshed.values() if paths}


def _rotated_key(created: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    def read(inputs: dict[str, Any]) -> dict[str, Any]:
        key = created(inputs)
        return {**key, "keyUriWithVersion": f"{key['keyUri']}/{NEW_VERSION}"}

    return read


def _planned_again(
    stack: str,
    planned: Callable[[str], Plan],
    cloud_plan: Callable[[str], Plan],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Plan, Plan]:
    """The plan before the months of running, and the plan of the next ``pulumi up``.

    On Azure the next plan reads the rotated key (the mocks' Key Vault answers a new version), so it is
    planned again, the cloud layer alone (the in-cluster layer reads no key version) to keep the suite's
    CPU down. On AWS nothing the program reads moves (a KMS key keeps its ARN over rotations): the next
    plan is the same plan, so the whole shared one serves as both, the in-cluster layer included."""
    if not stack.startswith("azure-"):
        return planned(stack), planned(stack)
    first = cloud_plan(stack)
    monkeypatch.setattr(mocks, "_key_vault_key", _rotated_key(mocks._key_vault_key))
    return first, plan_config(cloud_only(template(stack)), tmp_path, stack)


# What the refresh moves on every stack of a cloud; and on the enterprise tier, the registry's database
# server too (SMB keeps the registry on SQLite).
CLOUD_MOVES = {
    "azure": {
        "azure-native:containerservice:AgentPool",
        "azure-native:containerservice:ManagedCluster",
        "azure-native:compute:DiskEncryptionSet",
    },
    "aws": {"aws:eks/nodeGroup:NodeGroup"},
}
DATABASE = {"azure": "azure-native:dbforpostgresql:Server", "aws": "aws:rds/instance:Instance"}


@pytest.mark.parametrize("stack", [target.stack for target in all_stack_targets()])
def test_after_growth_autoscaling_and_rotation_the_next_up_changes_nothing(
    planned: Callable[[str], Plan],
    cloud_plan: Callable[[str], Plan],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stack: str,
) -> None:
    """Every shipped stack (review 38 B8)."""
    platform = template(stack)[PLATFORM_KEY]
    expected = CLOUD_MOVES[platform["cloud"]] | (
        {DATABASE[platform["cloud"]]} if platform["tier"] == "enterprise" else set()
    )
    first, second = _planned_again(stack, planned, cloud_plan, tmp_path, monkeypatch)
    updates, moved = day2_updates(first, second)
    assert moved >= expected, "the refresh moved less than the stack has: revisit MOVES"
    assert updates == {}


def test_the_update_sends_what_is_not_ignored(cloud_plan: Callable[[str], Plan]) -> None:
    """The model itself: the grown database disk of azure-enterprise-prod without its ignoreChanges is
    sent back as the declared 32 GiB (the refused shrink of review azure.md A1)."""
    plan = cloud_plan("azure-enterprise-prod")
    (server,) = plan.by_type("azure-native:dbforpostgresql:Server")
    planted = dataclasses.replace(server, ignore_changes=())
    state, moved = _refreshed(server)
    assert moved == ["storage.storageSizeGB"] and _get(state, "storage.storageSizeGB") == 64
    assert _update(planted, state) == ["storage.storageSizeGB"]
    assert _update(server, state) == []


def test_the_clusters_inline_pools_are_what_aks_reports(cloud_plan: Callable[[str], Plan]) -> None:
    """Review azure.md U3: after the refresh the cluster lists every pool, and a program that ignored only
    the System pool's count would update the cluster on every `pulumi up`, PUT one pool and put all of
    them in Scaling (pulumi-azure-native #4264). ``agentPoolProfiles`` is creation-only (azure-native
    ManagedCluster docs: "The Azure API does not currently allow this property to be updated directly"):
    ignored whole, the update sends the refreshed list, so nothing."""
    (cluster,) = cloud_plan("azure-enterprise-prod").by_type("azure-native:containerservice:ManagedCluster")
    state, moved = _refreshed(cluster)
    assert moved == ["agentPoolProfiles"] and len(state["agentPoolProfiles"]) == 2
    planted = dataclasses.replace(
        cluster,
        ignore_changes=tuple(
            "agentPoolProfiles[0].count" if p == "agentPoolProfiles" else p for p in cluster.ignore_changes
        ),
    )
    assert _update(planted, state) == ["agentPoolProfiles"]
    assert _update(cluster, state) == []


def test_after_the_kms_rotation_runbook_the_next_up_changes_nothing(
    cloud_plan: Callable[[str], Plan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/operations.md "Rotate keys", Azure: the runbook moves AKS KMS to the key's new version with
    ``az aks update`` and rewrites every Secret; the refresh then reads that version, and the next
    ``pulumi up`` (whose mocks read the same new version) sends nothing back."""
    first = cloud_plan("azure-enterprise-prod")
    monkeypatch.setattr(mocks, "_key_vault_key", _rotated_key(mocks._key_vault_key))
    second = plan_config(cloud_only(template("azure-enterprise-prod")), tmp_path, "azure-enterprise-prod")
    kms = "securityProfile.azureKeyVaultKms.keyId"
    monkeypatch.setitem(
        MOVES,
        "azure-native:containerservice:ManagedCluster",
        [
            *MOVES["azure-native:containerservice:ManagedCluster"],
            (kms, lambda i: True, lambda v, i: _versioned(v)),
        ],
    )
    updates, _ = day2_updates(first, second)
    assert updates == {}
    (cluster,) = second.by_type("azure-native:containerservice:ManagedCluster")
    assert _get(cluster.inputs, kms).endswith(NEW_VERSION), "the program reads the rotated version"
