"""The budget the pack enforces (issue 39), judged both ways on the real aws-smb-dev template with a
budget: a pool planted at ten times its maximum fails the stack naming the pool; the template as shipped
passes; pools run flat out (duty cycle 1) near the budget are advised. Pools: cpu 1-4 spot c7i.2xlarge
and gpu 0-2 spot g6.xlarge, priced at the top of their spot range: a ceiling near $1,430 a month."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from components.config import PLATFORM_KEY
from mlplatform.analyzer import PolicyPackSession, Violation
from mlplatform.analyzer_config import PolicySettings, reconcile
from mlplatform.cli import app
from mlplatform.costing import estimate
from mlplatform.graph import Plan
from mlplatform.pricing import load_snapshot
from tests.stack_variants import cloud_only, plan_config, template

Variant = Callable[[str, Callable[[dict[str, Any]], None]], Plan]
BUDGET = {"monthlyCeiling": {"currency": "USD", "amount": 2000}}


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    """The cloud layer of aws-smb-dev with ``BUDGET``, as ``variant`` plans it: one plan for the tests that
    judge the template as shipped under that budget."""
    config = cloud_only(template("aws-smb-dev"))
    config[PLATFORM_KEY]["budget"] = BUDGET
    return plan_config(config, tmp_path_factory.mktemp("budgeted"), "aws-smb-dev", shared=True)


def _budget_findings(
    pack: PolicyPackSession, defaults: dict[str, PolicySettings], plan: Plan
) -> list[Violation]:
    return [v for v in pack.judge(plan.to_dict(), defaults) if v.policy.startswith("budget-")]


def test_a_pool_planted_at_ten_times_its_max_fails_the_stack_naming_it(
    variant: Variant, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    def plant(platform: dict[str, Any]) -> None:
        platform["budget"] = BUDGET
        gpu = platform["nodePools"][1]
        gpu["maxSize"] = gpu["maxSize"] * 10

    plan = variant("aws-smb-dev", plant)
    [finding] = [v for v in _budget_findings(pack, defaults, plan) if v.enforcement == "mandatory"]
    assert finding.policy == "budget-ceiling" and finding.name == "aws-smb-dev-aws-budget"
    assert "exceeds the budget $2,000" in finding.message
    # The pack prices the pool as `mlplatform cost` does: the same ceiling, from the same snapshot row.
    [pool] = [
        item for item in estimate(plan, load_snapshot()).items if item.what.startswith("pool gpu: 0-20")
    ]
    assert pool.ceiling is not None
    assert f"largest: pool gpu (0-20 x g6.xlarge spot) ${pool.ceiling.high:,.0f}" in finding.message


def test_a_snapshot_the_pack_cannot_read_fails_the_budget_rather_than_pass_it(
    budgeted: Plan, pack: PolicyPackSession, tmp_path: Path
) -> None:
    missing = {"budget-ceiling": {"priceSnapshot": str(tmp_path / "none.csv")}}
    settings = reconcile(pack.info.schemas(), missing)
    [finding] = [v for v in pack.judge(budgeted.to_dict(), settings) if v.policy == "budget-ceiling"]
    assert finding.enforcement == "mandatory" and "cannot judge the budget" in finding.message


def _unpriced_gpu(allow: bool) -> Callable[[dict[str, Any]], None]:
    """g5.xlarge is sold in me-central-1 (components/catalog/aws.py) but the snapshot has no row for it."""

    def edit(platform: dict[str, Any]) -> None:
        platform["budget"] = {**BUDGET, **({"allowUnpriced": True} if allow else {})}
        platform["nodePools"][1]["instanceType"] = "g5.xlarge"

    return edit


def test_a_pool_the_snapshot_cannot_price_fails_the_budget_rather_than_count_as_zero(
    variant: Variant, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    findings = _budget_findings(pack, defaults, variant("aws-smb-dev", _unpriced_gpu(allow=False)))
    assert [(v.policy, v.enforcement) for v in findings] == [("budget-ceiling", "mandatory")]
    assert findings[0].message.startswith(
        "cannot judge: pool gpu (g5.xlarge) has no price in me-central-1's snapshot"
    )


def test_allow_unpriced_makes_an_unpriced_pool_advisory_naming_it(
    variant: Variant, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    findings = _budget_findings(pack, defaults, variant("aws-smb-dev", _unpriced_gpu(allow=True)))
    assert [(v.policy, v.enforcement) for v in findings] == [("budget-expected", "advisory")]
    assert findings[0].message.startswith("pool gpu (g5.xlarge) is not priced")


def test_the_shipped_pools_fit_the_budget(
    budgeted: Plan, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    assert _budget_findings(pack, defaults, budgeted) == []


def test_expected_spend_within_ten_percent_of_the_budget_is_advised(
    variant: Variant, pack: PolicyPackSession, defaults: dict[str, PolicySettings]
) -> None:
    def flat_out(platform: dict[str, Any]) -> None:
        platform["budget"] = {"monthlyCeiling": {"currency": "USD", "amount": 1500}}
        for pool in platform["nodePools"]:
            pool["dutyCycle"] = 1

    findings = _budget_findings(pack, defaults, variant("aws-smb-dev", flat_out))
    assert [(v.policy, v.enforcement) for v in findings] == [("budget-expected", "advisory")]
    assert "within 10% of the budget $1,500" in findings[0].message


@pytest.mark.parametrize("amount", [1000, 1450])
def test_cost_prints_the_figure_and_verdict_the_pack_judges(
    variant: Variant,
    pack: PolicyPackSession,
    defaults: dict[str, PolicySettings],
    tmp_path: Path,
    amount: int,
) -> None:
    """$1,450 lies between the pools' ceiling (~$1,427, judged) and the whole priced ceiling (~$1,505, with
    the EKS control plane, NAT, addresses and keys): `cost` must not call over what the pack passes."""
    plan = variant(
        "aws-smb-dev", lambda p: p.update(budget={"monthlyCeiling": {"currency": "USD", "amount": amount}})
    )
    plan_file, out = tmp_path / "plan.json", tmp_path / "cost.json"
    plan_file.write_text(json.dumps(plan.to_dict()))
    result = CliRunner().invoke(app, ["cost", "--plan", str(plan_file), "--json", str(out)])
    assert result.exit_code == 0, result.output
    [document] = json.loads(out.read_text())
    judged = document["budgetJudged"]
    mandatory = [v for v in _budget_findings(pack, defaults, plan) if v.enforcement == "mandatory"]
    assert judged["verdict"] == ("over" if mandatory else "within")
    assert judged["verdict"] == ("over" if amount == 1000 else "within")
    assert document["totals"]["ceiling"]["high"] > 1450  # the fixed items are priced, not judged
    if mandatory:
        assert f"priced compute ceiling ${judged['poolsCeiling']:,.0f} a month" in mandatory[0].message
    assert (
        f"judges the node pools' ceiling ${judged['poolsCeiling']:,.0f}: {judged['verdict']}" in result.output
    )
