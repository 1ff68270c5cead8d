"""The stack's monthly ceiling (``budget.monthlyCeiling``) as an AWS Budget.

The same figure does two jobs: before ``pulumi up`` the policy pack compares the plan's priced ceiling with
this resource's limit (``budget-ceiling``), and after it AWS Budgets alerts the owner on actual and forecast
spend. The budget counts the costs tagged with the stack's ``cost-center`` (a cost allocation tag, which
must be activated in the billing console before AWS Budgets can filter on it: docs/cost.md).
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from components.config import PlatformConfig


def monthly_budget(
    name: str, config: PlatformConfig, tags: dict[str, str], opts: pulumi.ResourceOptions
) -> aws.budgets.Budget | None:
    if config.budget is None:
        return None
    ceiling = config.budget.monthly_ceiling
    alert = {
        "comparison_operator": "GREATER_THAN",
        "threshold_type": "PERCENTAGE",
        "subscriber_email_addresses": [config.owner],
    }
    return aws.budgets.Budget(
        name,
        budget_type="COST",
        time_unit="MONTHLY",
        limit_amount=f"{ceiling.amount:.2f}",
        limit_unit=ceiling.currency.value,
        # AWS Budgets' tag filter spells a tag as user:<key>$<value>.
        cost_filters=[{"name": "TagKeyValue", "values": [f"user:cost-center${config.cost_center}"]}],
        notifications=[
            {**alert, "threshold": 80, "notification_type": "ACTUAL"},
            {**alert, "threshold": 100, "notification_type": "FORECASTED"},
        ],
        tags={**tags, **config.budget.tags()},
        opts=opts,
    )
