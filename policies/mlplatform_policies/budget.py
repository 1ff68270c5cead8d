"""A stack's monthly budget, judged before ``pulumi up``: its priced compute ceiling must fit under it.

The budget is the stack's own resource (``budget.monthlyCeiling`` becomes an AWS Budget or an Azure
consumption budget), so the pack reads it as the engine sees it. Prices are data, not program code: the
pack reads the price snapshot CSV (``priceSnapshot``, by default the repository's
``mlplatform/prices/snapshot.csv``), looking a price up in the resource's own region only.

What it prices is compute, which is what scales: every node pool (EKS managed node groups; AKS pools,
inline and separate) at its maximum all month for the ceiling, and at its minimum plus its duty cycle's
share of the headroom (the ``ml-platform.io/duty-cycle`` tag) for the expected figure; spot at the top of
its range. ``mlplatform cost`` itemises the rest (storage, networking, the control plane).

- ``budget-ceiling`` (mandatory): the ceiling exceeds the budget, or a pool cannot be priced (no row in
  its region, or spot with no spot price): "cannot judge", as with an unreadable snapshot, never $0;
- ``budget-expected`` (advisory): the expected figure is within 10 % of the budget, or, where the stack
  opts out (``budget.allowUnpriced``, the tag ``ml-platform.io-budget-allow-unpriced`` on the AWS Budget
  or on the Azure budget's resource group), a pool cannot be priced.

Each finding names the three largest items.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi_policy import Severity, StackValidationPolicy

from .factory import ADVISORY, Finding, stack_policy
from .subject import Graph, Subject

HOURS_PER_MONTH = 730.0
# Advisory once the expected figure reaches this share of the budget.
NEAR = 0.9
POOL_LABEL = "ml-platform/pool"
DUTY_TAGS = ("ml-platform.io/duty-cycle", "ml-platform.io-duty-cycle")
PACK_DIR = Path(__file__).resolve().parents[1]
BUDGETS = ("aws:budgets/budget:Budget", "azure-native:consumption:Budget")
# Set by the program from budget.allowUnpriced (components/config.py, ALLOW_UNPRICED_TAG).
ALLOW_UNPRICED_TAG = "ml-platform.io-budget-allow-unpriced"


@dataclass(frozen=True)
class Price:
    on_demand: float | None
    spot_high: float | None
    note: str


def load_prices(path: Path) -> dict[tuple[str, str, str, str], Price]:
    with path.open(encoding="utf-8", newline="") as handle:
        return {
            (row["cloud"], row["region"], row["service"], row["sku"]): Price(
                float(row["price"]) if row["price"] else None,
                float(row["spot_high"]) if row["spot_high"] else None,
                row["note"],
            )
            for row in csv.DictReader(handle)
        }


@dataclass(frozen=True)
class Pool:
    urn: str
    name: str
    size: str
    region: str
    minimum: float
    maximum: float
    spot: bool
    duty: float
    hourly: float | None
    why_unpriced: str

    def monthly(self, nodes: float) -> float:
        return nodes * (self.hourly or 0.0) * HOURS_PER_MONTH

    @property
    def ceiling(self) -> float:
        return self.monthly(self.maximum)

    @property
    def expected(self) -> float:
        return self.monthly(self.minimum + self.duty * (self.maximum - self.minimum))

    def describe(self) -> str:
        spot = " spot" if self.spot else ""
        sizes = f"{self.minimum:g}-{self.maximum:g} x {self.size}{spot}"
        return f"pool {self.name} ({sizes}) ${self.ceiling:,.0f}"


def _duty(tags: Any) -> float:
    for key in DUTY_TAGS:
        if isinstance(tags, Mapping) and key in tags:
            try:
                return float(tags[key])
            except (TypeError, ValueError):
                return 0.0
    return 0.0


def _pool(
    subject: Subject, profile: Mapping[str, Any], prices: Mapping[tuple[str, str, str, str], Price]
) -> Pool:
    if subject.type == "aws:eks/nodeGroup:NodeGroup":
        cloud, region, service = "aws", str(subject.aws_region()), "ec2-instance"
        scaling = profile.get("scalingConfig") or {}
        size = str((profile.get("instanceTypes") or ["?"])[0])
        low, high = scaling.get("minSize"), scaling.get("maxSize")
        spot, labels = profile.get("capacityType") == "SPOT", profile.get("labels") or {}
    else:
        cloud, region, service = "azure", str(subject.azure_location()), "vm"
        size = str(profile.get("vmSize"))
        count = profile.get("count")
        low, high = profile.get("minCount", count), profile.get("maxCount", count)
        spot, labels = profile.get("scaleSetPriority") == "Spot", profile.get("nodeLabels") or {}
    price = prices.get((cloud, region, service, size))
    hourly = None if price is None else (price.spot_high if spot else price.on_demand)
    why = (
        f"no {size} row for {region} in the price snapshot"
        if price is None
        else f"{size} in {region}: {price.note or 'no spot price'}"
    )
    return Pool(
        subject.urn,
        str(labels.get(POOL_LABEL, profile.get("name") or subject.name)),
        size,
        region,
        float(low or 0),
        float(high or 0),
        spot,
        _duty(profile.get("tags")),
        hourly,
        "" if hourly is not None else why,
    )


def pools(graph: Graph, prices: Mapping[tuple[str, str, str, str], Price]) -> list[Pool]:
    found = [_pool(s, s.props, prices) for s in graph.of("aws:eks/nodeGroup:NodeGroup")]
    found += [_pool(s, s.props, prices) for s in graph.of("azure-native:containerservice:AgentPool")]
    for cluster in graph.of("azure-native:containerservice:ManagedCluster"):
        found += [_pool(cluster, p, prices) for p in cluster.props.get("agentPoolProfiles") or []]
    return found


def _budget(graph: Graph) -> tuple[Subject, float] | None:
    for subject in graph.of(*BUDGETS):
        if subject.type == BUDGETS[0] and subject.props.get("timeUnit") == "MONTHLY":
            return subject, float(subject.props.get("limitAmount") or 0)
        if subject.type == BUDGETS[1] and subject.props.get("timeGrain") == "Monthly":
            return subject, float(subject.props.get("amount") or 0)
    return None


def _judged(graph: Graph) -> tuple[Subject, float, list[Pool] | str] | None:
    """The budget resource, its amount, and the priced pools (or why the prices cannot be read)."""
    found = _budget(graph)
    if found is None:
        return None
    subject, amount = found
    setting = Path(subject.setting("priceSnapshot"))
    path = setting if setting.is_absolute() else PACK_DIR / setting
    try:
        prices = load_prices(path)
    except (OSError, KeyError, ValueError) as error:
        return subject, amount, f"the price snapshot {path} cannot be read ({error}); set priceSnapshot"
    return subject, amount, pools(graph, prices)


def _allows_unpriced(graph: Graph, budget: Subject) -> bool:
    carriers = [budget, *graph.of("azure-native:resources:ResourceGroup")]
    return any(
        str((carrier.props.get("tags") or {}).get(ALLOW_UNPRICED_TAG)).lower() == "true"
        for carrier in carriers
    )


def _unpriced(found: list[Pool]) -> list[Pool]:
    return [pool for pool in found if pool.hourly is None]


def _largest(found: list[Pool]) -> str:
    top = sorted(found, key=lambda pool: -pool.ceiling)[:3]
    return "; ".join(pool.describe() for pool in top)


def _ceiling(graph: Graph) -> Iterator[Finding]:
    judged = _judged(graph)
    if judged is None:
        return
    subject, amount, found = judged
    if isinstance(found, str):
        yield subject.urn, f"cannot judge the budget: {found}"
        return
    if not _allows_unpriced(graph, subject):
        for pool in _unpriced(found):
            yield (
                pool.urn,
                f"cannot judge: pool {pool.name} ({pool.size}) has no price in {pool.region}'s snapshot "
                f"({pool.why_unpriced}); add its row, or set budget.allowUnpriced to judge without it",
            )
    ceiling = sum(pool.ceiling for pool in found)
    if ceiling > amount:
        yield (
            subject.urn,
            f"priced compute ceiling ${ceiling:,.0f} a month exceeds the budget ${amount:,.0f} "
            f"(budget.monthlyCeiling); largest: {_largest(found)}. "
            "Lower a pool's maxSize or raise the budget",
        )


def _expected(graph: Graph) -> Iterator[Finding]:
    judged = _judged(graph)
    if judged is None:
        return
    subject, amount, found = judged
    if isinstance(found, str):
        return  # budget-ceiling reports it
    expected = sum(pool.expected for pool in found)
    if expected >= NEAR * amount:
        yield (
            subject.urn,
            f"expected compute ${expected:,.0f} a month is within 10% of the budget ${amount:,.0f} "
            f"(duty cycles from each pool's ml-platform.io/duty-cycle tag); largest: {_largest(found)}",
        )
    if _allows_unpriced(graph, subject):
        for pool in _unpriced(found):
            message = (
                f"pool {pool.name} ({pool.size}) is not priced ({pool.why_unpriced}); the budget check "
                "omits it (budget.allowUnpriced)"
            )
            yield (pool.urn, message)


POLICIES: list[StackValidationPolicy] = [
    stack_policy(
        "budget-ceiling",
        "A stack's node pools at their maximum all month, priced from the snapshot in their own region, fit "
        "under its monthly budget (budget.monthlyCeiling), and every pool has a price (unless "
        "budget.allowUnpriced).",
        _ceiling,
        severity=Severity.HIGH,
        settings=("priceSnapshot",),
    ),
    stack_policy(
        "budget-expected",
        "A stack's expected compute (pool minimums plus their duty cycles' share of the headroom) stays "
        "10% under its monthly budget; pools left unpriced under budget.allowUnpriced are named.",
        _expected,
        severity=Severity.MEDIUM,
        enforcement=ADVISORY,
        settings=("priceSnapshot",),
    ),
]
