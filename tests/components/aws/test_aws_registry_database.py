"""The registry's cloud side on AWS (issue 28), as the real program plans it: RDS for PostgreSQL on
enterprise stacks, the registry's IRSA role, nothing on SMB. Each rule cites the pulumi-aws 7.51
docstring or guide it comes from; the pack's ``registry-database-protected`` judges the same instance
(tests/policies/test_registry.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest

from components.config import PLATFORM_KEY, ConfigError, parse_stack_config
from mlplatform.graph import PlannedResource
from mlplatform.mocks import ExistingAccount, PlanMocks
from mlplatform.plan import Plan
from mlplatform.report import as_applied, kubernetes_objects
from tests.components.aws.aws_plan_support import build_platform, parse
from tests.components.test_day2_refresh import day2_updates
from tests.stack_variants import cloud_only, one, plan_config, template

RDS = "aws:rds/instance:Instance"


def _inputs(plan: Plan, token: str, suffix: str) -> dict[str, Any]:
    inputs: dict[str, Any] = as_applied(one(plan, token, suffix).inputs)
    return inputs


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "aws-enterprise-dev"])
def test_enterprise_registry_database_is_private_encrypted_and_tls_only(
    stack: str, planned: Callable[[str], Plan]
) -> None:
    plan = planned(stack)
    db = _inputs(plan, RDS, "-registry-db")
    key = one(plan, "aws:kms/key:Key", "-registry-database-key")
    # storage_encrypted + kms_key_id: encrypted under the registry database's own key (keys per data
    # domain, docs/security.md), not the AWS managed one.
    assert db["storageEncrypted"] is True and f":{key.name}-" in db["kmsKeyId"]
    # manage_master_user_password with master_user_secret_kms_key_id: no password in Pulumi's state.
    assert db["manageMasterUserPassword"] is True and "password" not in db
    assert db["masterUserSecretKmsKeyId"] == db["kmsKeyId"]
    assert db["publiclyAccessible"] is False
    params = _inputs(plan, "aws:rds/parameterGroup:ParameterGroup", "-registry-params")
    assert {"name": "rds.force_ssl", "value": "1"}.items() <= params["parameters"][0].items()
    # Enterprise stacks are audited: pgAudit preloaded (static: applied at creation or the next reboot)
    # and logging writes, DDL and role changes (RDS user guide, "Setting up the pgAudit extension").
    by_name = {p["name"]: p for p in params["parameters"]}
    assert by_name["shared_preload_libraries"]["value"].split(",") == ["pg_stat_statements", "pgaudit"]
    assert by_name["shared_preload_libraries"]["applyMethod"] == "pending-reboot"
    assert by_name["pgaudit.log"]["value"] == "ddl,role,write"
    # The instance names the group the plan creates (its physical name: the logical name + suffix).
    group = one(plan, "aws:rds/parameterGroup:ParameterGroup", "-registry-params").name
    assert db["parameterGroupName"].startswith(f"{group}-")
    subnets = _inputs(plan, "aws:rds/subnetGroup:SubnetGroup", "-registry-subnets")["subnetIds"]
    assert subnets and all("-private-" in s for s in subnets)
    rule = _inputs(
        plan, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "-registry-from-cluster"
    )
    assert rule["referencedSecurityGroupId"].startswith("sg-") and "cidrIpv4" not in rule
    assert (rule["fromPort"], rule["toPort"], rule["ipProtocol"]) == (5432, 5432, "tcp")
    assert db["backupTarget"] == "region" and db["backupRetentionPeriod"] >= 7
    prod = stack.endswith("prod")
    assert db["deletionProtection"] is prod and db["multiAz"] is prod
    assert db["skipFinalSnapshot"] is (not prod) and ("finalSnapshotIdentifier" in db) is prod
    if prod:
        # Unique per database (a re-created one's destroy would otherwise meet DBSnapshotAlreadyExists),
        # and within the RDS identifier rules: letters, digits and hyphens, 1-255, starting with a letter,
        # no double or trailing hyphen (RDS API reference, CreateDBSnapshot DBSnapshotIdentifier).
        name = db["finalSnapshotIdentifier"]
        assert re.fullmatch(r"[a-zA-Z][a-zA-Z0-9-]{0,254}", name) and "--" not in name and name[-1] != "-"
        assert re.search(r"-final-[0-9a-f]{8}$", name)


def test_smb_has_no_database(planned: Callable[[str], Plan]) -> None:
    assert planned("aws-smb-dev").by_type(RDS) == []


def test_registry_role_reaches_its_prefix_and_its_database_secret_only(
    planned: Callable[[str], Plan],
) -> None:
    plan = planned("aws-enterprise-prod")
    policy = json.loads(_inputs(plan, "aws:iam/rolePolicy:RolePolicy", "-identities-registry")["policy"])
    statements = {s["Sid"]: s for s in policy["Statement"]}
    assert statements["ListOwnPrefixes"]["Condition"]["StringLike"]["s3:prefix"] == ["registry/*"]
    assert all(r.endswith("/registry/*") for r in statements["WriteObjects"]["Resource"])
    secret = statements["ReadDatabasePassword"]
    assert (
        secret["Action"] == "secretsmanager:GetSecretValue"
        and ":secretsmanager:me-central-1:" in secret["Resource"]
    )
    via = statements["UseKeyThroughSecretsManager"]["Condition"]["StringEquals"]["kms:ViaService"]
    assert via == "secretsmanager.me-central-1.amazonaws.com"
    # Training and inference hold no right on the registry's prefix: the server proxies every transfer.
    for workload in ("training", "inference"):
        other = _inputs(plan, "aws:iam/rolePolicy:RolePolicy", f"-identities-{workload}")["policy"]
        assert "registry/" not in other


@pytest.mark.parametrize("stack", ["aws-enterprise-prod", "aws-smb-dev"])
def test_the_server_knows_its_region(stack: str, planned: Callable[[str], Plan]) -> None:
    """boto3's S3 and STS clients are given the stack's region rather than left to find one (me-central-1
    is an opt-in region, REFERENCE.md "UAE data residency"; whether the IRSA webhook also injects it is
    not relied on)."""
    [deployment] = [
        o
        for o in kubernetes_objects(planned(stack))
        if o["kind"] == "Deployment" and o["metadata"]["namespace"] == "ml-registry"
    ]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "me-central-1"
    assert env["REGISTRY_ARTIFACTS_DESTINATION"].endswith("/registry/")


LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"


def _rds_log_groups(plan: Plan) -> dict[str, PlannedResource]:
    return {
        r.inputs["name"]: r
        for r in plan.by_type(LOG_GROUP)
        if str(r.inputs.get("name", "")).startswith("/aws/rds/instance/")
    }


def test_the_stack_makes_the_databases_log_groups_before_it(cloud_plan: Callable[[str], Plan]) -> None:
    """Review aws.md N4: RDS writes each exported log to ``/aws/rds/instance/<identifier>/<log>`` and
    creates a missing group itself, with no key and no expiry (RDS user guide, "Publishing database logs
    to Amazon CloudWatch Logs"). The stack names the instance, makes both groups under its logs key with
    the 365 days of its other groups, and the instance waits for them."""
    plan = cloud_plan("aws-enterprise-prod")
    db = one(plan, RDS, "-registry-db")
    assert db.inputs["identifier"] == "aws-enterprise-prod-aws-registry"
    groups = _rds_log_groups(plan)
    assert set(groups) == {
        f"/aws/rds/instance/aws-enterprise-prod-aws-registry/{log}"
        for log in db.inputs["enabledCloudwatchLogsExports"]
    }
    logs_key = one(plan, "aws:kms/key:Key", "-logs-key").name
    for group in groups.values():
        assert f":{logs_key}-" in group.inputs["kmsKeyId"] and group.inputs["retentionInDays"] == 365
        assert group.urn in db.dependencies and group.protect and group.import_id is None


STACK = "aws-enterprise-prod"
ADOPTED = f"{STACK}-aws-registry-db-1a2b3c4"
PREFIX = f"/aws/rds/instance/{ADOPTED}"
OTHER_STACKS = f"{STACK}-dev-aws-registry-db-9f8e7d6"
# An account where the stack made its instance before it named it (Pulumi autonamed it: the logical name,
# a hyphen, 7 random characters) and RDS made the group of the one log it published; beside it, what the
# lookup must pass over: another stack's autonamed instance (its name starts with this stack's) and its
# group, and a MySQL instance whose identifier looks like this stack's.
MADE_BEFORE = ExistingAccount(
    databases={ADOPTED: "postgres", OTHER_STACKS: "postgres", f"{STACK}-aws-registry-db-0d1e2f3": "mysql"},
    log_groups=frozenset({f"{PREFIX}/postgresql", f"/aws/rds/instance/{OTHER_STACKS}/postgresql"}),
)


def _registry_config(**registry: Any) -> dict[str, Any]:
    config = cloud_only(template(STACK))
    config[PLATFORM_KEY]["workloads"]["registry"] = {
        **config[PLATFORM_KEY]["workloads"].get("registry", {}),
        **registry,
    }
    return config


@pytest.fixture(scope="module")
def adopted_by_hand(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    """The database named in ``adoptDatabase``, in a fresh account (nothing is looked up)."""
    config = _registry_config(adoptDatabase={"identifier": ADOPTED, "importLogGroups": ["postgresql"]})
    return plan_config(config, tmp_path_factory.mktemp("by-hand"), STACK)


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    """The same stack upgraded with no hand edit, in the account it was made in."""
    return plan_config(_registry_config(), tmp_path_factory.mktemp("found"), STACK, existing=MADE_BEFORE)


def test_a_database_made_before_adopts_the_groups_rds_made(
    adopted_by_hand: Plan, cloud_plan: Callable[[str], Plan]
) -> None:
    """docs/operations.md, "Adopt the RDS log groups": a stack whose instance was autonamed names it in
    ``workloads.registry.adoptDatabase``; the identifier stays (no rename, no replacement), and the first
    `pulumi up` imports the groups RDS made (the import option, id = the group's name: pulumi-aws
    cloudwatch.LogGroup "Import") with the key and retention the engine then applies, and creates the
    others."""
    plan = adopted_by_hand
    db = one(plan, RDS, "-registry-db")
    # Nothing else of the instance moves: the update after the import is the two groups' key and
    # retention alone.
    new = one(cloud_plan(STACK), RDS, "-registry-db")
    assert db.inputs == {**new.inputs, "identifier": ADOPTED}
    groups = _rds_log_groups(plan)
    assert {name: g.import_id for name, g in groups.items()} == {
        f"{PREFIX}/postgresql": f"{PREFIX}/postgresql",
        f"{PREFIX}/upgrade": None,
    }
    for group in groups.values():
        assert group.inputs["retentionInDays"] == 365
        assert "kmsKeyId" in group.inputs and group.urn in db.dependencies
    # The plan's JSON carries the option (``importId``), as the pack and the judges read it.
    assert _rds_log_groups(Plan.from_dict(plan.to_dict())) == groups


def test_an_existing_stacks_database_is_found_without_a_hand_edit(found: Plan, adopted_by_hand: Plan) -> None:
    """Issue 38 (day 2): the upgrade of a stack whose instance was autonamed needs no stack key. The program
    lists the account's PostgreSQL instances (pulumi-aws ``rds.get_instances``, filter ``engine``), keeps
    the one Pulumi autonamed from this stack's logical name, and imports the groups RDS made for it
    (``cloudwatch.get_log_groups`` by the instance's prefix): every resource as ``adoptDatabase`` would
    have it, so the instance is neither renamed nor replaced (prod: a refused replace of a protected
    resource; dev: the registry's metadata lost)."""
    by_hand = {r.urn: (r.inputs, r.import_id) for r in adopted_by_hand.resources}
    assert {r.urn: (r.inputs, r.import_id) for r in found.resources} == by_hand
    assert one(found, RDS, "-registry-db").inputs["identifier"] == ADOPTED


def test_the_update_after_the_adoption_changes_nothing(tmp_path: Path, found: Plan) -> None:
    """After that `pulumi up` the account also has the upgrade group the stack made; the next plan, after
    the refresh (tests/components/test_day2_refresh.py), sends no update. Both groups now carry the
    import option with the id the state holds for them (a log group's id is its name), which the engine
    treats "like any other resource" (pulumi/pulumi developer-docs/architecture/import.md)."""
    after = ExistingAccount(
        databases=MADE_BEFORE.databases, log_groups=MADE_BEFORE.log_groups | {f"{PREFIX}/upgrade"}
    )
    second = plan_config(_registry_config(), tmp_path, STACK, existing=after)
    updates, _ = day2_updates(found, second)
    assert updates == {}
    assert {name: g.import_id for name, g in _rds_log_groups(second).items()} == {
        f"{PREFIX}/{log}": f"{PREFIX}/{log}" for log in ("postgresql", "upgrade")
    }


class _Recording(PlanMocks):
    """An account holding ``existing``, recording what the program registers."""

    def __init__(self, existing: ExistingAccount) -> None:
        super().__init__(aws_region="me-central-1", azure_location="", existing=existing)
        self.created: list[tuple[str, dict[str, Any]]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.created.append((args.typ, dict(args.inputs)))
        return super().new_resource(args)

    def identifiers(self) -> list[str]:
        return [inputs["identifier"] for kind, inputs in self.created if kind == RDS]


def _build(existing: ExistingAccount, **registry: Any) -> _Recording:
    mocks = _Recording(existing)
    build_platform(parse(_registry_config(**registry), STACK), mocks)
    return mocks


def test_two_databases_the_stack_may_have_made_are_refused_before_anything_is_made() -> None:
    """Where the lookup cannot choose (a second autonamed instance: one restored beside the first, one a
    failed update left), one line names the stack key and both, and nothing is registered."""
    second = f"{STACK}-aws-registry-db-5e6f7a8"
    account = ExistingAccount(databases={**MADE_BEFORE.databases, second: "postgres"})
    mocks = _Recording(account)
    with pytest.raises(pulumi.RunError) as refused:
        build_platform(parse(_registry_config(), STACK), mocks)
    assert [kind for kind, _ in mocks.created if not kind.startswith("ml-platform:")] == []
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{PLATFORM_KEY}.workloads.registry.adoptDatabase: ")
    assert f"({ADOPTED}, {second})" in message
    # What the hand edit then chooses is planned.
    assert _build(account, adoptDatabase={"identifier": second}).identifiers() == [second]


def test_a_named_database_is_kept_beside_an_autonamed_one() -> None:
    """A stack already on ``<stack>-aws-registry`` keeps it, whatever autonamed instance a retained
    replace left behind; the lookup does not move it back."""
    account = ExistingAccount(databases={**MADE_BEFORE.databases, f"{STACK}-aws-registry": "postgres"})
    assert _build(account).identifiers() == [f"{STACK}-aws-registry"]


@pytest.mark.parametrize(
    ("stack", "value", "expected"),
    [
        ("aws-enterprise-prod", {"identifier": "Registry_DB"}, "must be 1 to 63 lowercase letters"),
        ("aws-enterprise-prod", {"identifier": "registry--db"}, "must be 1 to 63 lowercase letters"),
        ("aws-enterprise-prod", {"identifier": "db", "importLogGroups": ["error"]}, "importLogGroups"),
        ("aws-smb-prod", {"identifier": "db"}, "only enterprise AWS stacks have: remove the key"),
        ("azure-enterprise-prod", {"identifier": "db"}, "only enterprise AWS stacks have: remove the key"),
    ],
)
def test_adopt_database_refuses_what_rds_or_the_stack_cannot_use(
    stack: str, value: dict[str, Any], expected: str
) -> None:
    """RDS API reference, CreateDBInstance ``DBInstanceIdentifier``: letters, digits and single hyphens,
    a letter first; and only an enterprise AWS stack has an RDS instance to adopt."""
    config = template(stack)
    registry = config[PLATFORM_KEY].setdefault("workloads", {}).setdefault("registry", {})
    registry.update(enabled=True, adoptDatabase=value)
    with pytest.raises(ConfigError) as refused:
        parse_stack_config(config, stack)
    assert any(
        expected in line and "workloads.registry.adoptDatabase" in line for line in refused.value.problems
    )


def test_a_stack_name_rds_cannot_take_is_refused() -> None:
    """RDS refuses '--' in an identifier, which the stack name rule allows: said at plan, not at `up`."""
    with pytest.raises(ConfigError) as refused:
        parse_stack_config(template("aws-enterprise-prod"), "ml--prod")
    assert any("workloads.registry" in p and "refuses '--'" in p for p in refused.value.problems)
