"""Rules ARM, AKS and Key Vault enforce that the mocks accept (issue 12), each on the real templates.

Each test names the rule and its source; each failed on the code before the fix.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.azure.kubeconfig import convert_kubeconfig
from components.azure.registry import reopen_command, rotation_command
from components.azure.roles import BuiltInRole
from components.config import ConfigError, KubeloginMode, parse_stack_config
from components.handle import PRIVATE_NETWORKS
from mlplatform.mocks import AKS_EXEC_KUBECONFIG, SUBSCRIPTION_ID, TENANT_ID
from mlplatform.plan import Plan, PlannedResource
from tests.components.azure.azure_plan_support import role_assignments, target
from tests.stack_variants import one, template

PlanFn = Callable[[str], Plan]
VariantFn = Callable[[str, Callable[[dict[str, Any]], None]], Plan]
WAIT = "pulumi-python:dynamic:Resource"
REGISTRY = "azure-native:containerregistry:Registry"
VAULT = "azure-native:keyvault:Vault"
COMMAND = "command:local:Command"
AKS_SERVER_ID = "6dae42f8-4368-4678-94ff-3960e28e3630"


def by_urn(plan: Plan) -> dict[str, PlannedResource]:
    return {r.urn: r for r in plan.resources}


def depends_on(plan: Plan, resource: PlannedResource) -> set[str]:
    """Logical names of the resources ``resource`` waits for (dependsOn and property dependencies)."""
    urns = set(resource.dependencies) | {u for us in resource.property_dependencies.values() for u in us}
    return {by_urn(plan)[u].name for u in urns if u in by_urn(plan)}


def test_disk_encryption_set_takes_a_versioned_key_url(cloud_plan: PlanFn) -> None:
    """compute DiskEncryptionSet ``activeKey.keyUrl``: "Version segment of the Url is required regardless of
    rotationToLatestKeyVersionEnabled value" (pulumi-azure-native KeyForDiskEncryptionSet)."""
    des = one(cloud_plan("azure-enterprise-prod"), "azure-native:compute:DiskEncryptionSet", "-keys-des")
    assert re.fullmatch(
        r"https://mlp-kv-[0-9a-f]{10}\.vault\.azure\.net/keys/disks-cmk/[0-9a-f]{32}",
        des.inputs["activeKey"]["keyUrl"],
    )


def test_cluster_identity_reads_the_disk_encryption_set(cloud_plan: PlanFn) -> None:
    """AKS BYOK docs (azure-disk-customer-managed-keys): the cluster identity needs Reader on the disk
    encryption set, or Azure Disk volumes fail to provision."""
    plan = cloud_plan("azure-smb-dev")
    (reader,) = role_assignments(plan, BuiltInRole.READER)
    assert target(reader["scope"]) == one(plan, "azure-native:compute:DiskEncryptionSet", "-keys-des").name
    (network,) = role_assignments(plan, BuiltInRole.NETWORK_CONTRIBUTOR)
    assert reader["principalId"] == network["principalId"]  # the cluster's control-plane identity
    cluster = one(plan, "azure-native:containerservice:ManagedCluster", "-cluster-aks")
    (wait,) = [r for r in plan.by_type(WAIT) if r.name in depends_on(plan, cluster)]
    waited = {n.rsplit("-azure-", 1)[1] for n in depends_on(plan, wait)}
    assert waited == {
        "cluster-des-reader",
        "keys-des-key-user",
        "cluster-vnet-network",
        # AKS KMS: the cluster identity's Key Vault grants are in place before the cluster exists (C2).
        "cluster-kms-crypto-user",
        "cluster-kms-vault-contributor",
    }


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_agent_pools_are_created_one_after_another(cloud_plan: PlanFn, stack: str) -> None:
    """AKS allows one agent-pool operation at a time (OperationNotAllowed, REFERENCE.md): every User pool
    after the first waits for the one before it."""
    plan = cloud_plan(stack)
    pools = plan.by_type("azure-native:containerservice:AgentPool")
    assert len(pools) >= 1
    for before, after in itertools.pairwise(pools):
        assert before.name in depends_on(plan, after)


def test_kubernetes_provider_waits_for_the_admin_grant_to_propagate(planned: PlanFn) -> None:
    """Role assignments take minutes to propagate (Azure/bicep #16601): the Kubernetes provider reads a
    kubeconfig that resolves only after a bounded wait on the deployer's cluster-admin grant, five
    minutes for AKS RBAC (learn.microsoft.com/azure/aks/manage-azure-rbac)."""
    plan = planned("azure-enterprise-prod")
    (provider,) = plan.by_type("pulumi:providers:kubernetes")
    (wait,) = [r for r in plan.by_type(WAIT) if r.name in depends_on(plan, provider)]
    assert wait.inputs["seconds"] == 300.0
    assert depends_on(plan, wait) == {"azure-enterprise-prod-azure-cluster-deployer-admin"}


@pytest.mark.parametrize("suffix", ["-objects-account", "-shared-account", "-registry-acr"])
def test_cmk_consumers_wait_for_their_key_grant_to_propagate(cloud_plan: PlanFn, suffix: str) -> None:
    """A customer-managed key is read at creation (Storage, ACR CMK docs); the grant must have propagated
    (Azure/bicep #16601), not just been created."""
    plan = cloud_plan("azure-smb-dev")
    consumer = next(r for r in plan.resources if r.name.endswith(suffix) and r.custom)
    (wait,) = [r for r in plan.by_type(WAIT) if r.name in depends_on(plan, consumer)]
    assert any(n.endswith("-encryption-key-user") for n in depends_on(plan, wait))


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_registry_is_created_outside_the_key_vault_firewall_then_rotated_behind_it(
    cloud_plan: PlanFn, stack: str
) -> None:
    """ACR customer-managed key docs, "Advanced scenario: Key Vault firewall" (MicrosoftDocs/azure-docs
    #61064): a registry takes its key at creation only through a user-assigned identity, which the
    firewall refuses; only its system-assigned identity passes the trusted-services bypass. So it is
    created on a key in a reachable vault, then rotated (``--identity [system]``, the CLI's name for the
    system-assigned identity) to the firewalled key once that identity's grant has propagated."""
    plan = cloud_plan(stack)
    registry = one(plan, REGISTRY, "-registry-acr")
    creation_vault = one(plan, VAULT, "-registry-creation-vault").inputs
    assert creation_vault["properties"]["publicNetworkAccess"] == "Enabled"
    assert creation_vault["properties"]["networkAcls"] == {"defaultAction": "Allow"}
    assert creation_vault["properties"]["enableRbacAuthorization"] is True
    creation_uri = f"https://{creation_vault['vaultName']}.vault.azure.net/keys/registry-creation"
    assert registry.inputs["encryption"]["keyVaultProperties"]["keyIdentifier"] == creation_uri
    firewalled = one(plan, VAULT, "-keys-vault").inputs
    assert firewalled["properties"]["networkAcls"]["defaultAction"] == "Deny"

    rotation = one(plan, COMMAND, "-registry-key-rotation").inputs
    firewalled_uri = f"https://{firewalled['vaultName']}.vault.azure.net/keys/registry-cmk"
    assert rotation["create"] == rotation_command(
        SUBSCRIPTION_ID,
        f"ml-platform-{stack}",
        registry.inputs["registryName"],
        firewalled_uri,
        creation_vault["vaultName"],
    )
    # D3: a registry created again (a replacement) rotates again, and finds its creation vault reopened
    # first: the rotation closed it, and ARM never reopens it (ignoreChanges).
    first, registry_id = rotation["triggers"]
    assert first == firewalled_uri and registry_id.endswith(f"/{registry.inputs['registryName']}")
    reopen = one(plan, COMMAND, "-registry-creation-vault-reopen")
    assert reopen.inputs["update"] == reopen_command(
        SUBSCRIPTION_ID, f"ml-platform-{stack}", creation_vault["vaultName"]
    )
    assert reopen.inputs["environment"] == {
        "REGISTRY_NAME": registry.inputs["registryName"],
        "REGISTRY_GROUP": f"ml-platform-{stack}",
        "REGISTRY_LOCATION": "uaenorth",
    }
    assert reopen.name in depends_on(plan, registry)
    (grant,) = [
        g
        for g in plan.by_type("azure-native:authorization:RoleAssignment")
        if g.name.endswith("-registry-system-key-user")
    ]
    assert grant.inputs["scope"].endswith(f"/vaults/{firewalled['vaultName']}/keys/registry-cmk")
    assert registry.name in depends_on(plan, grant), "the grant names the registry's own identity"
    waits = depends_on(plan, one(plan, COMMAND, "-registry-key-rotation"))
    (wait,) = [r for r in plan.by_type(WAIT) if r.name in waits]
    assert depends_on(plan, wait) == {grant.name}


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_the_creation_vault_is_reopened_only_for_a_new_registry_and_after_the_vault_exists(
    cloud_plan: PlanFn, stack: str
) -> None:
    """Review (wt-azure3) A1. ``az keyvault update`` is a GET of the vault then a PUT (azure-cli keyvault
    generic update): run before the vault exists it answers ResourceNotFound and the registry, which waits
    for it, is never created. The vault is created open, so the first ``up`` has nothing to reopen:
    pulumi-command v1.2.1 runs nothing on create without ``create`` (local/commandController.go
    ``Create``), runs ``update`` when an input such as ``environment`` changes (``Update``), and replaces
    (runs ``create``) on a ``triggers`` change (common/inputs.go, ``replaceOnChanges``). When it does run,
    it runs after the vault: it names the vault by the vault's own name output."""
    plan = cloud_plan(stack)
    reopen = one(plan, COMMAND, "-registry-creation-vault-reopen")
    assert "create" not in reopen.inputs and "triggers" not in reopen.inputs
    assert "az keyvault update" in reopen.inputs["update"]
    assert set(reopen.inputs["environment"]) == {"REGISTRY_NAME", "REGISTRY_GROUP", "REGISTRY_LOCATION"}
    assert one(plan, VAULT, "-registry-creation-vault").name in depends_on(plan, reopen)
    # The closing half (the rotation) names the same vault by the same output.
    assert one(plan, VAULT, "-registry-creation-vault").name in depends_on(
        plan, one(plan, COMMAND, "-registry-key-rotation")
    )


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_the_push_token_and_the_pushes_wait_for_the_registry_private_dns(planned: PlanFn, stack: str) -> None:
    """Review (wt-azure3) A2. ``az acr login --expose-token`` exchanges an Entra token at the registry's
    login server (azure-cli acr/_docker_utils.py ``_get_aad_token``) and the push talks to it too; with the
    public endpoint disabled both go through the registry's private endpoint, which a runner in the VNet
    resolves only once the endpoint's DNS zone group has written the privatelink.azurecr.io record
    (ACR docs, "Connect privately to an Azure container registry using Azure Private Link"). So the token
    (the Image's ``registries`` input) and the Image itself wait for that zone group, on both tiers."""
    plan = planned(stack)
    zone_group = one(plan, "azure-native:network:PrivateDnsZoneGroup", "-registry-registry-dns")
    images = plan.by_type("docker-build:index:Image")
    assert images
    for image in images:
        assert zone_group.urn in image.dependencies, image.name
        assert zone_group.urn in image.property_dependencies["registries"], image.name


def _run_with_fake_az(tmp_path: Path, command: str, failing: str = "") -> tuple[int, list[list[str]]]:
    """Run ``command`` in /bin/sh with an ``az`` on PATH that records its arguments (one call a line) and
    fails when its first argument is ``failing``."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "az"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\0" "$@" >> {calls}\necho >> {calls}\n[ "$1" != "{failing}" ]\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    done = subprocess.run(["/bin/sh", "-c", command], env=env, check=False)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return done.returncode, [line.split("\0")[:-1] for line in lines]


ROTATE_ARGS = (
    "sub-id",
    "ml-platform-azure-smb-dev",
    "mlpacr0123456789",
    "https://v.vault.azure.net/keys/k",
    "kv b",
)


def test_rotation_runs_the_documented_cli_then_closes_the_creation_vault(tmp_path: Path) -> None:
    """``az acr encryption rotate-key`` (Azure CLI reference): ``--identity [system]`` selects the
    system-assigned identity, a versionless ``--key-encryption-key`` turns on automatic rotation."""
    code, calls = _run_with_fake_az(tmp_path, rotation_command(*ROTATE_ARGS))
    common = ["--subscription", "sub-id", "--resource-group", "ml-platform-azure-smb-dev", "--output", "none"]
    assert code == 0
    assert calls == [
        [
            "acr",
            "encryption",
            "rotate-key",
            *common,
            "--name",
            "mlpacr0123456789",
            "--identity",
            "[system]",
            "--key-encryption-key",
            "https://v.vault.azure.net/keys/k",
        ],
        [
            "keyvault",
            "update",
            *common,
            "--name",
            "kv b",
            "--public-network-access",
            "Disabled",
            "--default-action",
            "Deny",
        ],
    ]


def test_creation_vault_stays_open_while_the_rotation_has_not_happened(tmp_path: Path) -> None:
    """Until the rotation succeeds the registry still unwraps with the creation key: a failed rotation
    fails ``pulumi up`` (the command's exit status) and leaves the vault reachable."""
    code, calls = _run_with_fake_az(tmp_path, rotation_command(*ROTATE_ARGS), failing="acr")
    assert code != 0
    assert [call[:2] for call in calls] == [["acr", "encryption"]]


def test_propagation_wait_follows_config(variant: VariantFn) -> None:
    plan = variant("azure-smb-dev", lambda body: body.update(azure={"rbacPropagationSeconds": 300}))
    assert {r.inputs["seconds"] for r in plan.by_type(WAIT)} == {300.0}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (KubeloginMode.AZURECLI, []),
        (KubeloginMode.MSI, []),
        (KubeloginMode.WORKLOAD_IDENTITY, []),
        (
            KubeloginMode.SPN,
            [
                "--client-id",
                "80faf920-1908-4b52-b5ef-a8e7bedfc67a",
                "--tenant-id",
                TENANT_ID,
                "--environment",
                "AzurePublicCloud",
            ],
        ),
    ],
)
def test_kubeconfig_is_converted_like_kubelogin(mode: KubeloginMode, expected: list[str]) -> None:
    """``kubelogin convert-kubeconfig -l <mode>`` (Azure/kubelogin pkg/internal/converter/convert.go):
    ``get-token --login <mode> --server-id <id>``; spn keeps client and tenant ids and the environment.
    No device code: ``pulumi up`` in CI would wait for a human."""
    (user,) = yaml.safe_load(convert_kubeconfig(AKS_EXEC_KUBECONFIG, mode))["users"]
    plugin = user["user"]["exec"]
    assert plugin["command"] == "kubelogin"
    assert plugin["args"] == ["get-token", "--login", mode.value, "--server-id", AKS_SERVER_ID, *expected]
    assert "devicecode" not in plugin["args"]


def test_stack_kubeconfig_logs_in_as_configured(variant: VariantFn) -> None:
    plan = variant("azure-smb-dev", lambda body: body.update(azure={"deployerLogin": "workloadidentity"}))
    (user,) = yaml.safe_load(plan.outputs["kubeconfig"]["value"])["users"]
    assert user["user"]["exec"]["args"][:3] == ["get-token", "--login", "workloadidentity"]


@pytest.mark.parametrize(
    ("azure", "expected"),
    [
        ({}, "User"),
        ({"deployerLogin": "spn"}, "ServicePrincipal"),
        ({"deployerLogin": "msi"}, "ServicePrincipal"),
        ({"deployerPrincipalType": "ServicePrincipal"}, "ServicePrincipal"),
    ],
)
def test_deployer_principal_type_comes_from_config(
    variant: VariantFn, azure: dict[str, str], expected: str
) -> None:
    """ARM refuses a role assignment whose declared principalType does not match the principal; the type
    comes from the stack (``azure.deployerPrincipalType`` or implied by ``azure.deployerLogin``), not
    from the environment of whoever runs the plan."""
    plan = variant("azure-smb-dev", lambda body: body.update(azure=azure))
    (grant,) = role_assignments(plan, BuiltInRole.AKS_RBAC_CLUSTER_ADMIN)
    assert grant["principalType"] == expected


def test_unprotected_stacks_get_a_fresh_vault_name(cloud_plan: PlanFn) -> None:
    """Purge protection keeps a deleted vault's name for the retention period (Key Vault soft-delete
    docs): a destroyed dev stack must not need the same name again. Names stay within 24 characters
    (vaults/create-or-update name pattern). The registry's creation vault is fresh on every stack: it is
    never the protected data's vault."""
    plan = cloud_plan("azure-smb-dev")
    for suffix, pattern in (
        ("-keys-vault", r"mlp-kv-[0-9a-f]{10}-[0-9a-z]{4}"),
        ("-registry-creation-vault", r"mlp-acrk-[0-9a-f]{10}-[0-9a-z]{4}"),
    ):
        vault = one(plan, VAULT, suffix)
        assert re.fullmatch(pattern, vault.inputs["vaultName"])
        assert len(vault.inputs["vaultName"]) <= 24
        assert f"{vault.name}-unique" in depends_on(plan, vault)
    prod = cloud_plan("azure-smb-prod")
    assert re.fullmatch(r"mlp-kv-[0-9a-f]{10}", one(prod, VAULT, "-keys-vault").inputs["vaultName"])
    assert re.fullmatch(
        r"mlp-acrk-[0-9a-f]{10}-[0-9a-z]{4}", one(prod, VAULT, "-creation-vault").inputs["vaultName"]
    )


@pytest.mark.parametrize(
    ("stack", "expected"),
    [("azure-smb-dev", "loadBalancer"), ("azure-enterprise-prod", "userAssignedNATGateway")],
)
def test_enterprise_egress_is_not_the_public_load_balancer(
    cloud_plan: PlanFn, stack: str, expected: str
) -> None:
    """AKS outbound types: ``loadBalancer`` gives a private cluster a public outbound IP with unfiltered
    egress; enterprise leaves through a NAT gateway unless it routes through its firewall."""
    (cluster,) = cloud_plan(stack).by_type("azure-native:containerservice:ManagedCluster")
    assert cluster.inputs["networkProfile"]["outboundType"] == expected


def test_user_defined_routing_sends_egress_to_the_firewall(variant: VariantFn) -> None:
    """AKS userDefinedRouting: the node subnet's route table sends 0.0.0.0/0 to the firewall before the
    cluster exists, and the cluster identity may manage that route table (AKS egress docs)."""
    plan = variant(
        "azure-enterprise-prod",
        lambda body: body.update(
            azure={"outboundType": "userDefinedRouting", "egressFirewallIp": "10.0.0.4"}
        ),
    )
    table = one(plan, "azure-native:network:RouteTable", "-egress-routes")
    assert table.inputs["routes"] == [
        {
            "name": "egress-through-firewall",
            "addressPrefix": "0.0.0.0/0",
            "nextHopType": "VirtualAppliance",
            "nextHopIpAddress": "10.0.0.4",
        }
    ]
    nodes = one(plan, "azure-native:network:Subnet", "-nodes-subnet")
    assert table.name in depends_on(plan, nodes)
    assert table.name in {target(g["scope"]) for g in role_assignments(plan, BuiltInRole.NETWORK_CONTRIBUTOR)}
    (cluster,) = plan.by_type("azure-native:containerservice:ManagedCluster")
    assert cluster.inputs["networkProfile"]["outboundType"] == "userDefinedRouting"


def test_user_defined_routing_needs_the_firewall_ip() -> None:
    raw = template("azure-enterprise-prod")
    raw["ml-platform:platform"]["azure"] = {"outboundType": "userDefinedRouting"}
    with pytest.raises(ConfigError, match=r"ml-platform:platform\.azure\.egressFirewallIp: .*firewall"):
        parse_stack_config(raw, "Pulumi.azure-enterprise-prod.yaml")


def test_auto_upgrades_run_only_in_the_maintenance_window(cloud_plan: PlanFn) -> None:
    """AKS planned maintenance: ``aksManagedAutoUpgradeSchedule`` and ``aksManagedNodeOSUpgradeSchedule``
    confine both auto-upgrade channels to a window (duration 4-24 hours, containerservice SDK)."""
    configs = cloud_plan("azure-enterprise-prod").by_type(
        "azure-native:containerservice:MaintenanceConfiguration"
    )
    assert sorted(c.inputs["configName"] for c in configs) == [
        "aksManagedAutoUpgradeSchedule",
        "aksManagedNodeOSUpgradeSchedule",
    ]
    for config in configs:
        window = config.inputs["maintenanceWindow"]
        assert window["schedule"] == {"weekly": {"dayOfWeek": "Saturday", "intervalWeeks": 1.0}}
        assert (window["durationHours"], window["startTime"], window["utcOffset"]) == (8.0, "00:00", "+04:00")


def system_profile(plan: Plan) -> dict[str, Any]:
    (cluster,) = plan.by_type("azure-native:containerservice:ManagedCluster")
    profile: dict[str, Any] = cluster.inputs["agentPoolProfiles"][0]
    return profile


def test_dedicated_system_pool_is_reserved_for_critical_addons(cloud_plan: PlanFn) -> None:
    """AKS system pools: ``CriticalAddonsOnly=true:NoSchedule`` keeps user pods off the System pool;
    kube-system pods tolerate it, our add-ons land on an untainted User pool."""
    plan = cloud_plan("azure-enterprise-prod")
    assert system_profile(plan)["nodeTaints"] == ["CriticalAddonsOnly=true:NoSchedule"]
    untainted = [
        p for p in plan.by_type("azure-native:containerservice:AgentPool") if not p.inputs["nodeTaints"]
    ]
    assert [p.inputs["agentPoolName"] for p in untainted] == ["inference"]


def test_system_pool_that_runs_workloads_stays_untainted(cloud_plan: PlanFn) -> None:
    assert system_profile(cloud_plan("azure-smb-dev"))["nodeTaints"] == []


@pytest.mark.parametrize("stack", ["azure-smb-dev", "azure-enterprise-prod"])
def test_federated_workload_pods_opt_in_to_workload_identity(planned: PlanFn, stack: str) -> None:
    """AKS workload identity injects the token only into pods labelled ``azure.workload.identity/use:
    "true"`` (AKS workload identity overview): the training Job's and every inference Deployment's pod
    template carry it, so their service accounts' federated identities reach them."""
    plan = planned(stack)
    workloads = [*plan.by_type("kubernetes:batch/v1:Job"), *plan.by_type("kubernetes:apps/v1:Deployment")]
    ours = [w for w in workloads if w.inputs["metadata"]["namespace"] in ("ml-training", "ml-inference")]
    assert len(ours) >= 2
    for workload in ours:
        assert (
            workload.inputs["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"] == "true"
        )


def test_workloads_reach_the_storage_endpoints_and_nothing_on_the_internet(planned: PlanFn) -> None:
    """Training and inference namespaces deny egress by default; a workload reaches the storage private
    endpoint, whose subnet is the VNet's second quarter (network.py), and no public address: neither
    calls an Azure API, and public HTTPS from pods holding restricted data is an exfiltration path
    (cluster review C1; the inference module promises no egress).
    The one exception is the lifecycle record's writers, the rollout and the drift monitor (record.py
    ``record_store``): as workload identities they exchange their federated token at Entra ID
    (login.microsoftonline.com, "Use Microsoft Entra Workload ID with AKS"), a public, non-regional
    service (REFERENCE.md) with no private endpoint for that exchange, and a Kubernetes NetworkPolicy
    names addresses, never FQDNs (kubernetes.io "Network Policies": ipBlock). So their policies, and
    no other, allow public addresses on 443 only, every private range excepted (objects.py
    ``peer_egress``), as the registry's store does (registry_store.py); naming the host is left to an
    egress firewall (``azure.outboundType: userDefinedRouting``, network.py)."""
    plan = planned("azure-enterprise-prod")
    workload_namespaces = {"ml-training", "ml-inference"}
    in_namespaces = [
        p.inputs
        for p in plan.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if p.inputs["metadata"]["namespace"] in workload_namespaces
    ]
    # The workloads' own policies (the shared ones: default deny, DNS, the model registry's Service; the
    # rollout's and the drift monitor's, which read the servers' metrics, the registry and the record,
    # never the data).
    record_writers = ("inference-rollout", "inference-drift-monitor")
    shared = ("default-deny", "allow-dns", "allow-registry", *record_writers)
    own = [p for p in in_namespaces if p["metadata"]["name"] not in shared]
    assert {p["metadata"]["namespace"] for p in own} == workload_namespaces
    https = [{"protocol": "TCP", "port": 443.0}]
    for policy in own:
        assert {"to": [{"ipBlock": {"cidr": "10.71.64.0/18"}}], "ports": https} in policy["spec"]["egress"]
    entra_id = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_NETWORKS)}}], "ports": https}
    # The rollout on this stack; the drift monitor's where a stack runs one (inference.driftMonitor).
    writers = {p["metadata"]["name"] for p in in_namespaces if p["metadata"]["name"] in record_writers}
    assert "inference-rollout" in writers
    public = {p["metadata"]["name"] for p in in_namespaces if entra_id in p["spec"].get("egress", [])}
    assert public == writers
    for policy in in_namespaces:
        egress = [r for r in policy["spec"].get("egress", []) if r != entra_id]
        blocks = [peer["ipBlock"] for rule in egress for peer in rule.get("to", []) if "ipBlock" in peer]
        assert all(ipaddress.ip_network(b["cidr"]).is_private for b in blocks), blocks


def test_azure_settings_on_an_aws_stack_are_refused() -> None:
    raw = template("aws-smb-dev")
    raw["ml-platform:platform"]["azure"] = {"deployerLogin": "spn"}
    with pytest.raises(ConfigError, match=r"ml-platform:platform\.azure: only for azure stacks"):
        parse_stack_config(raw, "Pulumi.aws-smb-dev.yaml")


def test_azure_allow_list_refuses_rfc1918_ranges() -> None:
    """D4: Azure Storage IP network rules do not take private (RFC 1918) ranges (learn.microsoft.com/azure/
    storage/common/storage-network-security, IP network rules); the SMB allow-list feeds the blob
    account's firewall, so a private range fails the account's PUT. Refused at config time instead."""
    raw = template("azure-smb-dev")
    raw["ml-platform:platform"]["cluster"]["publicAccessCidrs"] = ["203.0.113.0/24", "192.168.10.0/24"]
    with pytest.raises(ConfigError, match=r"publicAccessCidrs: 192\.168\.10\.0/24 is a private \(RFC 1918\)"):
        parse_stack_config(raw, "Pulumi.azure-smb-dev.yaml")


def test_a_private_stack_builds_and_pushes_images_only_from_its_vnet() -> None:
    """Enterprise: the registry's public network access is disabled (registry.py), so the images `pulumi up`
    builds (components/images.py) reach it only through its private endpoint (ACR "Connect privately to a
    registry using Azure Private Link"), like the private API server (AKS private clusters). A stack with
    the in-cluster layer must say its runner is in the VNet, or stop at config time with what to set."""
    raw = template("azure-enterprise-prod")
    del raw["ml-platform:platform"]["azure"]["vnetRunner"]
    with pytest.raises(ConfigError) as refused:
        parse_stack_config(raw, "Pulumi.azure-enterprise-prod.yaml")
    (line,) = [p for p in str(refused.value).splitlines() if "vnetRunner" in p]
    assert "set azure.vnetRunner: true, or set kubernetes.enabled: false" in line
    raw["ml-platform:platform"]["kubernetes"] = {"enabled": False}
    parse_stack_config(raw, "Pulumi.azure-enterprise-prod.yaml")
