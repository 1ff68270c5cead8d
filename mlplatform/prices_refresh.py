"""Rebuild the price snapshot from the clouds' public price APIs, on a machine that can reach them.

- AWS: the Price List bulk API's per-region offer files, no credentials needed
  (``https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/<offer code>/current/<region>/index.json``;
  AWS Billing user guide, "Getting price list files manually"). A file has ``products`` (SKU ->
  ``productFamily`` and ``attributes``) and ``terms.OnDemand`` (SKU -> offer term -> ``priceDimensions``
  with ``unit`` and ``pricePerUnit.USD``).
- Azure: the Retail Prices API (``https://prices.azure.com/api/retail/prices``, OData ``$filter``,
  paged through ``NextPageLink``; learn.microsoft.com, "Azure Retail Prices overview"). Each item has
  ``armRegionName``, ``armSkuName``, ``retailPrice``, ``unitOfMeasure``, ``type``, ``productName``,
  ``skuName`` and ``meterName``.

Each row of the snapshot that has a rule here is asked for in its own region only, and an answer for any
other region is refused: a price is never carried from one region to another. Rows without a rule, or
whose price the API does not return, keep what they had and are reported. The Price List has no spot
prices, so an AWS row keeps its spot range and says where that came from.

The HTTP transport is injected (``Transport``): tests replay recorded responses, the command uses urllib.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mlplatform.errors import InputError
from mlplatform.pricing import PriceRow

Transport = Callable[[str], bytes]

AWS_OFFERS = "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/{offer}/current/{region}/index.json"
AZURE_PRICES = "https://prices.azure.com/api/retail/prices"
AZURE_API_VERSION = "2023-01-01-preview"


def urllib_transport(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "ml-platform prices refresh"})
    with urllib.request.urlopen(request, timeout=120) as response:
        body: bytes = response.read()
        return body


@dataclass(frozen=True)
class AwsRule:
    """Which product of an offer file prices a row: its attributes, and the price dimension's unit."""

    offer: str
    attributes: Mapping[str, str]
    unit: str
    # A usage type ends with this (usage types carry a region prefix, e.g. MEC1-NatGateway-Hours).
    usagetype_suffix: str = ""


def aws_rule(service: str, sku: str) -> AwsRule | None:
    if service == "ec2-instance":
        return AwsRule(
            "AmazonEC2",
            {
                "instanceType": sku,
                "operatingSystem": "Linux",
                "tenancy": "Shared",
                "preInstalledSw": "NA",
                "capacitystatus": "Used",
            },
            "Hrs",
        )
    if service == "rds":
        attributes = {"instanceType": sku, "databaseEngine": "PostgreSQL", "deploymentOption": "Single-AZ"}
        return AwsRule("AmazonRDS", attributes, "Hrs")
    fixed = {
        ("ebs", "gp3"): AwsRule("AmazonEC2", {"volumeApiName": "gp3"}, "GB-Mo", "EBS:VolumeUsage.gp3"),
        ("nat-gateway", "gateway"): AwsRule("AmazonEC2", {}, "Hrs", "NatGateway-Hours"),
        ("nat-gateway", "data-processed"): AwsRule("AmazonEC2", {}, "GB", "NatGateway-Bytes"),
        ("public-ipv4", "in-use-address"): AwsRule("AmazonVPC", {}, "Hrs", "PublicIPv4:InUseAddress"),
        ("vpc-endpoint", "interface-per-az"): AwsRule("AmazonVPC", {}, "Hrs", "VpcEndpoint-Hours"),
        ("s3", "standard"): AwsRule(
            "AmazonS3", {"storageClass": "General Purpose"}, "GB-Mo", "TimedStorage-ByteHrs"
        ),
        ("eks", "standard-support"): AwsRule("AmazonEKS", {}, "Hrs", "AmazonEKS-Hours:perCluster"),
        ("kms", "customer-managed-key"): AwsRule("awskms", {}, "Keys", "KMS-Keys"),
        ("cloudwatch-logs", "ingestion"): AwsRule("AmazonCloudWatch", {}, "GB", "DataProcessing-Bytes"),
        ("ecr", "storage"): AwsRule("AmazonECR", {}, "GB-Mo", "TimedStorage-ByteHrs"),
    }
    return fixed.get((service, sku))


@dataclass(frozen=True)
class AzureRule:
    """An OData filter (besides the region) and which items of the answer count."""

    filter: str
    # The Linux, pay-as-you-go meter: product names with "Windows", and Low Priority meters, excluded.
    linux_only: bool = False


def azure_rule(service: str, sku: str) -> AzureRule | None:
    if service == "vm":
        return AzureRule(f"serviceName eq 'Virtual Machines' and armSkuName eq '{sku}'", linux_only=True)
    if service == "postgres-flexible":
        return AzureRule(f"serviceName eq 'Azure Database for PostgreSQL' and armSkuName eq '{sku}'")
    return None


@dataclass
class Outcome:
    rows: list[PriceRow]
    updated: list[str] = dataclasses.field(default_factory=list)
    kept: list[str] = dataclasses.field(default_factory=list)


def refresh(rows: list[PriceRow], transport: Transport, today: datetime.date) -> Outcome:
    """New rows for ``rows``: each with a rule asked of its cloud's API in its own region."""
    outcome = Outcome(rows=[])
    offers: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        try:
            fresh = _refresh_row(row, transport, today, offers)
        except (OSError, ValueError) as error:
            raise InputError(
                [f"prices refresh: {row.cloud} {row.region} {row.service} {row.sku}: {error}"]
            ) from None
        label = f"{row.cloud} {row.region} {row.service} {row.sku}"
        if fresh is None:
            outcome.rows.append(row)
            outcome.kept.append(label)
        else:
            outcome.rows.append(fresh)
            outcome.updated.append(label)
    return outcome


def _refresh_row(
    row: PriceRow, transport: Transport, today: datetime.date, offers: dict[tuple[str, str], dict[str, Any]]
) -> PriceRow | None:
    if row.cloud == "aws":
        rule = aws_rule(row.service, row.sku)
        if rule is None:
            return None
        key = (rule.offer, row.region)
        url = AWS_OFFERS.format(offer=rule.offer, region=row.region)
        if key not in offers:
            offers[key] = json.loads(transport(url))
        price = _aws_price(offers[key], rule, row.region)
        if price is None:
            return None
        spot_note = f"; spot range from {row.source} ({row.date})" if row.spot_low is not None else ""
        return dataclasses.replace(
            row, price=price, source=url, date=today, note=f"AWS Price List{spot_note}"
        )
    found = azure_rule(row.service, row.sku)
    if found is None:
        return None
    items = list(_azure_items(transport, found, row.region))
    on_demand = [item["retailPrice"] for item in items if not _is_spot(item)]
    spot = [item["retailPrice"] for item in items if _is_spot(item)]
    if not on_demand:
        return None
    return dataclasses.replace(
        row,
        price=float(min(on_demand)),
        spot_low=float(min(spot)) if spot else None,
        spot_high=float(max(spot)) if spot else None,
        source=_azure_url(found, row.region),
        date=today,
        note="Azure Retail Prices API, Linux pay-as-you-go" + ("; spot meter" if spot else "; no spot meter"),
    )


def _aws_price(offer: Mapping[str, Any], rule: AwsRule, region: str) -> float | None:
    prices: list[float] = []
    on_demand = (offer.get("terms") or {}).get("OnDemand") or {}
    for sku, product in (offer.get("products") or {}).items():
        attributes = product.get("attributes") or {}
        if attributes.get("regionCode", region) != region:
            raise InputError(
                [f"prices refresh: the {rule.offer} file for {region} priced {attributes['regionCode']}"]
            )
        if any(attributes.get(name) != value for name, value in rule.attributes.items()):
            continue
        if rule.usagetype_suffix and not str(attributes.get("usagetype", "")).endswith(rule.usagetype_suffix):
            continue
        for term in (on_demand.get(sku) or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = (dimension.get("pricePerUnit") or {}).get("USD")
                # Tiered prices list the first tier from 0; free tiers are priced 0 and skipped.
                first = str(dimension.get("beginRange", "0")) in ("0", "0.0")
                if dimension.get("unit") == rule.unit and usd is not None and float(usd) > 0 and first:
                    prices.append(float(usd))
    return min(prices) if prices else None


def _azure_url(rule: AzureRule, region: str) -> str:
    query = {
        "api-version": AZURE_API_VERSION,
        "$filter": f"armRegionName eq '{region}' and priceType eq 'Consumption' and {rule.filter}",
    }
    return f"{AZURE_PRICES}?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


def _azure_items(transport: Transport, rule: AzureRule, region: str) -> Iterator[dict[str, Any]]:
    url: str | None = _azure_url(rule, region)
    while url:
        page = json.loads(transport(url))
        for item in page.get("Items") or []:
            if item.get("armRegionName") != region:
                raise InputError(
                    [f"prices refresh: asked Azure for {region}, got {item.get('armRegionName')}"]
                )
            if item.get("type") != "Consumption" or item.get("tierMinimumUnits", 0) not in (0, 0.0):
                continue
            if rule.linux_only and (
                "Windows" in str(item.get("productName")) or "Low Priority" in str(item.get("meterName"))
            ):
                continue
            yield item
        url = page.get("NextPageLink")


def _is_spot(item: Mapping[str, Any]) -> bool:
    return str(item.get("skuName", "")).endswith(" Spot") or str(item.get("meterName", "")).endswith(" Spot")
