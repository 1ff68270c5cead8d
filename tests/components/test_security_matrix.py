"""docs/security.md's "Who may do what" table is what the enterprise plans grant, so it cannot drift: each
workload role's storage rights (the AWS IRSA role's inline policy, the Azure identity's Blob data role
assignments), its database password, and its registry user's permissions (the MLflow launcher's
``REGISTRY_USERS``), rendered as the table's rows and compared line for line (issue 35, item 4).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlplatform.plan import Plan

AWS = "aws-enterprise-prod"
AZURE = "azure-enterprise-prod"
# Column -> (service-account subject of its cloud identity, registry user); None where it has none.
ROLES: dict[str, tuple[str | None, str | None]] = {
    "training": ("system:serviceaccount:ml-training:trainer", "ml-training"),
    "inference": ("system:serviceaccount:ml-inference:inference", "ml-inference"),
    "rollout Job": (None, "ml-inference-rollout"),
    "drift monitor": (None, "ml-inference-drift-monitor"),
    "registry servers": ("system:serviceaccount:ml-registry:registry", None),
}
STORES = ("datasets", "models", "checkpoints", "registry")
# Azure built-in roles reference: Storage Blob Data Reader and Contributor.
BLOB_READ = {"2a2b9908-6ea1-4ae2-8e65-a410df84e7d1": False, "ba92f5b4-2d11-453d-a403-e96b0029c9fe": True}
HEADER = "| action | " + " | ".join(ROLES) + " |"
Rights = dict[str, set[str]]


def _strings(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _aws_rights(plan: dict[str, Any]) -> Rights:
    """Each role's rights from its IRSA role's inline policy: ``read <prefix>``, ``write <prefix>``,
    ``database password``."""
    resources = plan["resources"]
    rights: Rights = {column: set() for column in ROLES}
    for role in (r for r in resources if r["type"] == "aws:iam/role:Role"):
        trust = json.dumps(json.loads(role["inputs"]["assumeRolePolicy"]))
        column = next((c for c, (sub, _) in ROLES.items() if sub and f'"{sub}"' in trust), None)
        if column is None:
            continue
        policies = [
            r
            for r in resources
            if r["type"] == "aws:iam/rolePolicy:RolePolicy"
            and role["urn"] in r["propertyDependencies"]["role"]
        ]
        for statement in (s for p in policies for s in json.loads(p["inputs"]["policy"])["Statement"]):
            actions = _strings(statement["Action"])
            if "secretsmanager:GetSecretValue" in actions:
                rights[column].add("database password")
            for resource in _strings(statement["Resource"]):
                if "/" not in resource or ":s3:" not in resource:
                    continue
                prefix = resource.split("/", 1)[1].rstrip("*").rstrip("/")
                if "s3:GetObject" in actions:
                    rights[column].add(f"read {prefix}")
                if "s3:PutObject" in actions:
                    rights[column].add(f"write {prefix}")
    return rights


def _azure_rights(plan: dict[str, Any]) -> Rights:
    """Each role's rights from its workload identity's Blob data role assignments, by container."""
    by_urn = {r["urn"]: r for r in plan["resources"]}
    rights: Rights = {column: set() for column in ROLES}
    for federation in (r for r in plan["resources"] if r["type"].endswith("FederatedIdentityCredential")):
        column = next((c for c, (sub, _) in ROLES.items() if sub == federation["inputs"]["subject"]), None)
        if column is None:
            continue  # the rollout's and the drift monitor's identities: they only read the lifecycle record
        identity = federation["propertyDependencies"]["resourceName"][0]
        for assignment in plan["resources"]:
            if identity not in assignment.get("propertyDependencies", {}).get("principalId", []):
                continue
            role = assignment["inputs"]["roleDefinitionId"].rsplit("/", 1)[-1]
            if role not in BLOB_READ:
                continue  # not a store right (the admission verifier's key read)
            writes = BLOB_READ[role]
            for container in assignment["propertyDependencies"]["scope"]:
                name = by_urn[container]["inputs"]["containerName"]
                rights[column] |= {f"read {name}", *([f"write {name}"] if writes else [])}
    return rights


def _registry_rights(plan: dict[str, Any]) -> Rights:
    """Each role's registry permissions, from the users the MLflow servers' launcher creates."""
    rights: Rights = {column: set() for column in ROLES}
    for server in (r for r in plan["resources"] if r["name"] == "deployment-ml-registry-registry"):
        for container in server["inputs"]["spec"]["template"]["spec"]["containers"]:
            for variable in (v for v in container.get("env", []) if v["name"] == "REGISTRY_USERS"):
                for user in json.loads(variable["value"]):
                    column = next(c for c, (_, name) in ROLES.items() if name == user["username"])
                    for permission in user["grants"].values():
                        rights[column] |= {
                            "registry READ",
                            *(["registry EDIT"] if permission == "EDIT" else []),
                        }
                    if user["experiments"]:
                        rights[column].add("log runs")
    return rights


# Row label -> the right that marks it.
ROWS = {
    **{f"read `{store}/`": f"read {store}" for store in STORES},
    **{f"write `{store}/`": f"write {store}" for store in STORES},
    # Review rev40c A1: the registry is the lifecycle record's only writer; everyone else appends through it.
    "put events on the lifecycle record (`lifecycle-record/`)": "write lifecycle-record",
    "read the registry database's password": "database password",
    "read its model in the registry (READ)": "registry READ",
    "register versions, move aliases, tag its model (EDIT)": "registry EDIT",
    "log runs in its model's experiment (EDIT)": "log runs",
}


def _table(rights: Rights) -> list[str]:
    rows = [HEADER, "|" + "---|" * (len(ROLES) + 1)]
    for label, right in ROWS.items():
        cells = ["yes" if right in rights[column] else "no" for column in ROLES]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def _documented() -> list[str]:
    lines = Path("docs/security.md").read_text().splitlines()
    start = lines.index(HEADER)
    return lines[start : start + len(ROWS) + 2]


def test_the_who_may_do_what_table_is_the_plans(
    planned: Callable[[str], Plan], cloud_plan: Callable[[str], Plan]
) -> None:
    aws = planned(AWS).to_dict()
    merged = _aws_rights(aws)
    for column, granted in _registry_rights(aws).items():
        merged[column] |= granted
    assert _documented() == _table(merged), "\n".join(_table(merged))
    # Azure grants the same storage rights on the containers it has (checkpoints live on the shared
    # file system there, not in Blob storage).
    azure = _azure_rights(cloud_plan(AZURE).to_dict())
    containers = {right.split(" ", 1)[1] for granted in azure.values() for right in granted}
    for column in ROLES:
        expected = {
            r
            for r in merged[column]
            if r.startswith(("read ", "write ")) and r.split(" ", 1)[1] in containers
        }
        assert azure[column] == expected, column
