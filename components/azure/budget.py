"""The stack's monthly ceiling (``budget.monthlyCeiling``) as an Azure consumption budget on its
resource group.

The same figure does two jobs: before ``pulumi up`` the policy pack compares the plan's priced ceiling with
this resource's amount (``budget-ceiling``), and after it Cost Management alerts the owner on actual and
forecast spend in the resource group.
"""

from __future__ import annotations

import datetime

import pulumi
import pulumi_azure_native as azure_native

from components.azure.scope import AzureScope


def first_of_month() -> str:
    """A monthly budget starts on the first of a month, and a past start only within the current one."""
    today = datetime.datetime.now(datetime.UTC).date()
    return f"{today:%Y-%m}-01T00:00:00Z"


def monthly_budget(
    name: str, scope: AzureScope, opts: pulumi.ResourceOptions
) -> azure_native.consumption.Budget | None:
    config = scope.config
    if config.budget is None:
        return None
    alert = {"enabled": True, "operator": "GreaterThan", "contact_emails": [config.owner]}
    group = pulumi.Output.concat(
        "/subscriptions/", scope.deployer.subscription_id, "/resourceGroups/", scope.resource_group_name
    )
    return azure_native.consumption.Budget(
        name,
        scope=group,
        amount=config.budget.monthly_ceiling.amount,
        category="Cost",
        time_grain="Monthly",
        time_period={"start_date": first_of_month()},
        notifications={
            "actual-80": {**alert, "threshold": 80, "threshold_type": "Actual"},
            "forecast-100": {**alert, "threshold": 100, "threshold_type": "Forecasted"},
        },
        # The start date is fixed at creation; next month's run must not move it.
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=["timePeriod"])),
    )
