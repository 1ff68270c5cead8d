"""`mlplatform cost`: a shipped stack's plan priced per item and per stack (issue 39), every planned
resource priced with its source or listed with why, spot as a range, the expected figure following the
pool's duty cycle, and the same figures as JSON for CI and as one line in `mlplatform plan`."""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from components.config import DEFAULT_DUTY_CYCLE, PLATFORM_KEY, ConfigError, Tier, parse_stack_config
from components.handle import PoolKind
from mlplatform.cli import app
from mlplatform.costing import Money, estimate
from mlplatform.graph import Plan
from mlplatform.plan_cmd import cost_line
from mlplatform.pricing import HOURS_PER_MONTH, load_snapshot

Planned = Callable[[str], Plan]


def test_every_planned_resource_is_priced_or_listed_with_why(planned: Planned) -> None:
    plan = planned("aws-smb-dev")
    result = estimate(plan, load_snapshot())
    accounted = {item.resource for item in result.items} | {free.resource for free in result.free}
    assert {r.name for r in plan.resources if r.custom} <= accounted
    assert all(item.unpriced for item in result.unpriced)
    assert all(item.rows and item.rows[0].source for item in result.priced)


def test_a_spot_pool_is_a_range_and_expected_follows_its_tier_duty_cycle(planned: Planned) -> None:
    """aws-smb-dev's cpu pool: 1-4 spot c7i.2xlarge, SMB's CPU duty cycle (docs/cost.md)."""
    result = estimate(planned("aws-smb-dev"), load_snapshot())
    [pool] = [item for item in result.items if item.what.startswith("pool cpu: 1-4 x c7i.2xlarge, spot")]
    row = load_snapshot().find("aws", "me-central-1", "ec2-instance", "c7i.2xlarge")
    assert row is not None and row.spot_low is not None and row.spot_high is not None
    node = Money(row.spot_low * HOURS_PER_MONTH, row.spot_high * HOURS_PER_MONTH)
    duty = DEFAULT_DUTY_CYCLE[(Tier.SMB, PoolKind.CPU)]
    assert pool.floor == node and pool.ceiling == node.times(4)
    assert pool.expected is not None and pool.expected.high == pytest.approx(node.high * (1 + duty * 3))
    assert pool.floor.low < pool.floor.high  # a range, not a point


def test_cost_reads_a_plan_file_and_writes_json_with_sources_and_the_snapshots_age(
    planned: Planned, tmp_path: Path
) -> None:
    plan = planned("aws-smb-dev")
    plan_file, out = tmp_path / "plan.json", tmp_path / "cost.json"
    plan_file.write_text(json.dumps(plan.to_dict()))
    result = CliRunner().invoke(app, ["cost", "--plan", str(plan_file), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "prices as of 2026-11-29" in result.output and "not priced" in result.output
    [document] = json.loads(out.read_text())
    expected = estimate(plan, load_snapshot()).total("ceiling")
    assert expected is not None
    assert document["totals"]["ceiling"] == {"low": round(expected.low, 2), "high": round(expected.high, 2)}
    assert document["prices"]["asOf"] == "2026-11-29"
    priced = [item for item in document["items"] if item["ceiling"] is not None]
    assert priced and all(item["sources"] for item in priced)
    assert all(free["reason"] for free in document["free"])


def test_a_file_that_is_not_a_plan_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text("{}")
    result = CliRunner().invoke(app, ["cost", "--plan", str(bad)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: --plan {bad}: not a plan written by `mlplatform plan --json` ('project')"
    ]


def test_the_plan_summary_has_a_cost_line(planned: Planned) -> None:
    line = cost_line(planned("aws-smb-dev"))
    assert line.startswith("cost: floor $") and "ceiling $" in line and "prices as of 2026-11-29" in line


def test_budget_and_duty_cycle_are_checked_at_the_config_edge() -> None:
    raw = yaml.safe_load(Path("stacks/Pulumi.aws-smb-dev.yaml").read_text())["config"]
    bad = copy.deepcopy(raw)
    bad[PLATFORM_KEY]["budget"] = {"monthlyCeiling": {"currency": "EUR", "amount": 0}, "allowUnpriced": "yes"}
    bad[PLATFORM_KEY]["nodePools"][0]["dutyCycle"] = 1.5
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(bad, "Pulumi.x.yaml")
    keys = [problem.split(": ")[1] for problem in raised.value.problems]
    assert sorted(keys) == [
        "ml-platform:platform.budget.allowUnpriced",
        "ml-platform:platform.budget.monthlyCeiling.amount",
        "ml-platform:platform.budget.monthlyCeiling.currency",
        "ml-platform:platform.nodePools[0].dutyCycle",
    ]
    good = copy.deepcopy(raw)
    good[PLATFORM_KEY]["nodePools"][0]["dutyCycle"] = 1
    config = parse_stack_config(good, "Pulumi.x.yaml")
    assert config.duty_cycle(config.node_pools[0]) == 1.0
    assert config.duty_cycle(config.node_pools[1]) == DEFAULT_DUTY_CYCLE[(Tier.SMB, PoolKind.GPU)]


SHIPPED = [
    f"{cloud}-{tier}-{env}"
    for cloud in ("aws", "azure")
    for tier in ("smb", "enterprise")
    for env in ("dev", "prod")
]


def _cell(total: dict[str, float] | None) -> str:
    return "no priced items" if total is None else Money(total["low"], total["high"]).text().lstrip("$")


def test_the_docs_table_is_what_cost_prints_for_every_shipped_stack(planned: Planned, tmp_path: Path) -> None:
    """docs/cost.md's table of the shipped templates is `cost --json`'s totals, and a stack with nothing
    priced says so (JSON null), never $0 (review of issue 39, B4 and B5)."""
    arguments = ["cost", "--json", str(tmp_path / "cost.json")]
    for stack in SHIPPED:
        (tmp_path / f"{stack}.json").write_text(json.dumps(planned(stack).to_dict()))
        arguments += ["--plan", str(tmp_path / f"{stack}.json")]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    table = []
    for document in json.loads((tmp_path / "cost.json").read_text()):
        totals = document["totals"]
        left = sum(1 for item in document["items"] if item["ceiling"] is None)
        cells = [_cell(totals[figure]) for figure in ("floor", "expected", "ceiling")]
        table.append(f"| {document['stack']} | {' | '.join(cells)} | {left} |")
        if totals["ceiling"] is None:
            assert f"total: no priced items ({left} unpriced)" in result.output
    documented = [
        line
        for line in Path("docs/cost.md").read_text().splitlines()
        if line.split(" ")[1:2] in ([s] for s in SHIPPED)
    ]
    assert documented == table, "\n".join(table)
    assert cost_line(planned("azure-smb-dev")).startswith("cost: no priced items (")


def test_no_shipped_resource_falls_outside_the_cost_model(planned: Planned) -> None:
    """Certificates and keys Pulumi computes are free; audit and alerting services (GuardDuty, CloudTrail,
    SNS, alarms, Defender) are listed with how they bill, never the generic "not in the cost model"."""
    for stack in SHIPPED:
        result = estimate(planned(stack), load_snapshot())
        assert not [item.type for item in result.unpriced if "not in the cost model" in (item.unpriced or "")]
        assert not [item.type for item in result.items if item.type.startswith("tls:")]
        # Every billed-by-use item has a snapshot row whose note says why it has no price.
        assert not [
            item.type
            for item in result.unpriced
            if item.unpriced == "billed by use: no unit price in the snapshot"
        ]
    free = {f.type for f in estimate(planned("aws-enterprise-prod"), load_snapshot()).free}
    assert "tls:index/privateKey:PrivateKey" in free


def test_an_aks_outbound_load_balancer_is_listed_with_its_public_ip(planned: Planned) -> None:
    """outboundType loadBalancer (azure-smb-dev) has AKS create a Standard load balancer and an outbound
    public IP; a NAT gateway outbound (azure-enterprise-prod) creates neither."""
    items = estimate(planned("azure-smb-dev"), load_snapshot()).items
    [balancer] = [item for item in items if item.what == "AKS-managed outbound Standard load balancer"]
    assert balancer.unpriced and "no load-balancer row" in balancer.unpriced
    [address] = [item for item in items if item.what == "its 1 managed outbound public IP(s)"]
    assert address.unpriced and "public-ip Standard in uaenorth" in address.unpriced
    nat = estimate(planned("azure-enterprise-prod"), load_snapshot()).items
    assert not [item for item in nat if "load balancer" in item.what]


@pytest.mark.parametrize(
    ("version", "support", "row"),
    [
        ("1.32", "EXTENDED", "extended-support"),  # standard support ended 2026-03-23
        ("1.32", "STANDARD", "standard-support"),  # EKS upgrades it instead of billing extended support
        ("1.35", "EXTENDED", "standard-support"),  # standard support to 2027-03-27
    ],
)
def test_the_eks_control_plane_is_priced_by_its_versions_support_window(
    planned: Planned, version: str, support: str, row: str
) -> None:
    """components/catalog/aws.py EKS_STANDARD_SUPPORT_END; $0.10 vs $0.60 a cluster-hour (snapshot)."""
    document = planned("aws-smb-dev").to_dict()
    [cluster] = [r for r in document["resources"] if r["type"] == "aws:eks/cluster:Cluster"]
    cluster["inputs"] = {**cluster["inputs"], "version": version, "upgradePolicy": {"supportType": support}}
    items = estimate(Plan.from_dict(document), load_snapshot(), datetime.date(2026, 11, 29)).items
    [control] = [item for item in items if item.type == "aws:eks/cluster:Cluster"]
    price = load_snapshot().find("aws", "me-central-1", "eks", row)
    assert price is not None and price.price is not None and control.ceiling is not None
    assert control.ceiling.high == pytest.approx(price.price * HOURS_PER_MONTH)


def test_cost_prices_a_stack_file(planned: Planned, tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    arguments = ["cost", "--stack-file", "stacks/Pulumi.aws-smb-dev.yaml", "--json", str(out)]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.output
    [document] = json.loads(out.read_text())
    expected = estimate(planned("aws-smb-dev"), load_snapshot()).total("ceiling")
    assert expected is not None and document["totals"]["ceiling"]["high"] == round(expected.high, 2)
    missing = CliRunner().invoke(app, ["cost", "--stack-file", str(tmp_path / "Pulumi.x.yaml")])
    assert missing.exit_code == 2
    assert missing.output.strip() == f"error: {tmp_path / 'Pulumi.x.yaml'}: no such stack file"
