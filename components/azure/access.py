"""People's roles on Azure (config ``access``; docs/security.md, "Who can do what"): each named Entra group
gets Azure role assignments, the cluster's through Azure RBAC for Kubernetes authorization (the cluster
has no local accounts; learn.microsoft.com/azure/aks/manage-azure-rbac: a role assigned at the cluster,
or at ``<cluster id>/namespaces/<namespace>`` for one namespace):

- platform admins: Azure Kubernetes Service RBAC Cluster Admin on the cluster;
- a team's ML engineers: Azure Kubernetes Service RBAC Writer on the team's namespace only;
- auditors: Azure Kubernetes Service RBAC Reader on the cluster (no Secrets), Log Analytics Reader on the
  stack's workspace, Storage Blob Data Reader on the immutable audit archive and on the lifecycle record's
  container;
- a team's ML engineers, where the stack has its datasets container: the stack's team datasets writer
  role (read, list, write and create blobs; no delete) on the datasets container, limited by a role
  assignment condition to blobs under ``<team>/`` (``team_datasets_condition``), the AWS team datasets
  policy's equivalent (review 35 B3);
- model approvers (``access.modelApprovers``): Storage Blob Data Reader on the lifecycle record's account;
  they append approvals through the registry, the record's only writer (review rev40c A1), and the ML
  engineers read it the same way, for their promotion requests and rollout controls;
- key custodians: the stack's key administration role (components/azure/keys.py
  ``key_administration_role``, the deployer's too) on the keys' vault: Key Vault Crypto Officer's key
  management without its cryptographic operations. Crypto Officer's data actions are every key action
  (``Microsoft.KeyVault/vaults/keys/*``: "Perform any action on the keys of a key vault",
  learn.microsoft.com/azure/key-vault/general/rbac-guide), encrypt, decrypt, wrap and unwrap included, so
  a custodian holding it could also use every key: the custom role takes those out (``notDataActions``).

Each assignment's description names the role (``ACCESS_DESCRIPTION``), which the pack's
``duties-separated`` reads to tell a merge of duties.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.azure.roles import BuiltInRole, assign_role, custom_role
from components.azure.scope import AzureScope
from components.config import PROJECT, team_namespace

# "<prefix><role>": the description of a people's role assignment, read by the pack.
ACCESS_DESCRIPTION = "ml-platform access: "
_BLOBS = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
# What a team's engineers do with their datasets: read and list, write and create; no delete, no move.
TEAM_DATASETS_ACTIONS = ("Microsoft.Storage/storageAccounts/blobServices/containers/read",)
TEAM_DATASETS_DATA_ACTIONS = (f"{_BLOBS}/read", f"{_BLOBS}/write", f"{_BLOBS}/add/action")


def team_datasets_condition(container: str, team: str) -> str:
    """Reads, writes and creates only blobs under ``<team>/`` of ``container``, and lists only with that
    prefix: the form of "Example: Read or list blobs in named containers with a path" and "Example: Write
    blobs in named containers with a path" (learn.microsoft.com/azure/storage/blobs/
    storage-auth-abac-examples; a listing is ``blobs/read`` with the suboperation ``Blob.List``, whose
    attribute is the request's ``blobs:prefix``)."""
    containers = "Microsoft.Storage/storageAccounts/blobServices/containers"
    named = f"@Resource[{containers}:name] StringEquals '{container}'"
    path = f"@Resource[{_BLOBS}:path] StringStartsWith '{team}/'"
    prefix = f"@Request[{_BLOBS}:prefix] StringStartsWith '{team}/'"
    objects = (
        f"!(ActionMatches{{'{_BLOBS}/read'}} AND NOT SubOperationMatches{{'Blob.List'}}) AND "
        f"!(ActionMatches{{'{_BLOBS}/write'}}) AND !(ActionMatches{{'{_BLOBS}/add/action'}})"
    )
    listing = f"!(ActionMatches{{'{_BLOBS}/read'}} AND SubOperationMatches{{'Blob.List'}})"
    return f"(({objects}) OR ({named} AND {path})) AND (({listing}) OR ({named} AND {prefix}))"


@dataclass(frozen=True)
class PeopleAccessArgs:
    scope: AzureScope
    cluster_id: pulumi.Input[str]
    vault_id: pulumi.Input[str]
    workspace_id: pulumi.Input[str]
    # The immutable audit archive's account, where the stack is audited.
    archive_account_id: pulumi.Input[str] | None
    # The lifecycle record's container, where the stack has the record: the auditors read it.
    record_container_id: pulumi.Input[str] | None
    # The stack's key administration role (keys.py ``key_administration_role``): the key custodians'.
    key_administration: pulumi.Output[str]
    # The lifecycle record's account (components/azure/record.py), where the stack has the record: the
    # model approvers and the ML engineers read it (they append through the registry).
    record_account_id: pulumi.Input[str] | None = None
    # The datasets container (its id and name), where the stack has one: each team's engineers write their
    # team's part of it.
    datasets_container: tuple[pulumi.Input[str], str] | None = None


class PeopleAccess(pulumi.ComponentResource):
    """A role assignment per named group and what its role reads or changes."""

    def __init__(self, name: str, args: PeopleAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ml-platform:azure:PeopleAccess", name, None, opts)
        self._name, self._scope = name, args.scope
        access = args.scope.config.access
        for group in access.platform_admins:
            self._assign(
                "platform-admin", "platform-admin", group, BuiltInRole.AKS_RBAC_CLUSTER_ADMIN, args.cluster_id
            )
        for team, groups in access.ml_engineers.items():
            namespace = pulumi.Output.concat(args.cluster_id, "/namespaces/", team_namespace(team))
            for group in groups:
                self._assign(
                    "ml-engineer", f"ml-engineer-{team}", group, BuiltInRole.AKS_RBAC_WRITER, namespace
                )
        if args.datasets_container is not None and access.ml_engineers:
            self._team_datasets(args.datasets_container)
        readable = {"cluster": args.cluster_id, "logs": args.workspace_id}
        if args.archive_account_id is not None:
            readable["archive"] = args.archive_account_id
        if args.record_container_id is not None:
            readable["record"] = args.record_container_id
        readers = {
            "cluster": BuiltInRole.AKS_RBAC_READER,
            "logs": BuiltInRole.LOG_ANALYTICS_READER,
            "archive": BuiltInRole.STORAGE_BLOB_DATA_READER,
            "record": BuiltInRole.STORAGE_BLOB_DATA_READER,
        }
        for group in access.auditors:
            for what, target in readable.items():
                self._assign("auditor", f"auditor-{what}", group, readers[what], target)
        if args.record_account_id is not None:
            # Who reads the record with their own identity (docs/lifecycle.md): the approvers (approve,
            # reject, promote) and every team's engineers (promotion requests; pause, resume, abort). They
            # append through the registry, its only writer (review rev40c A1), so none holds a write.
            reader = BuiltInRole.STORAGE_BLOB_DATA_READER
            for group in access.model_approvers:
                self._assign("model-approver", "model-approver", group, reader, args.record_account_id)
            for group in sorted({g for groups in access.ml_engineers.values() for g in groups}):
                self._assign("ml-engineer", "ml-engineer-record", group, reader, args.record_account_id)
        for group in access.key_custodians:
            self._assign("key-custodian", "key-custodian", group, args.key_administration, args.vault_id)
        self.register_outputs({})

    def _team_datasets(self, container: tuple[pulumi.Input[str], str]) -> None:
        """One role for every team's engineers, each assignment limited to its team's part."""
        scope = self._scope
        writer = custom_role(
            f"{self._name}-team-datasets-writer",
            scope,
            role_name=f"{PROJECT}-{scope.config.stack_name}-team-datasets-writer",
            description="Read, list, write and create a team's datasets blobs; no delete",
            permissions={
                "actions": list(TEAM_DATASETS_ACTIONS),
                "data_actions": list(TEAM_DATASETS_DATA_ACTIONS),
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        container_id, container_name = container
        for team, groups in scope.config.access.ml_engineers.items():
            for group in groups:
                self._assign(
                    "ml-engineer",
                    f"ml-engineer-{team}-datasets",
                    group,
                    writer,
                    container_id,
                    condition=team_datasets_condition(container_name, team),
                )

    def _assign(
        self,
        role: str,
        what: str,
        group: str,
        definition: BuiltInRole | pulumi.Output[str],
        target: pulumi.Input[str],
        condition: str | None = None,
    ) -> None:
        """Grant ``group`` (in people's role ``role``) ``definition`` on ``target`` (``what`` names it)."""
        assign_role(
            f"{self._name}-{what}-{group}",
            self._scope,
            role=definition,
            principal_id=group,
            target_id=target,
            opts=self._scope.opts(self),
            principal_type="Group",
            description=f"{ACCESS_DESCRIPTION}{role}",
            condition=condition,
        )
