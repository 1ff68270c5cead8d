"""UAE data residency: where each resource lives, and no copies of its data leaving the country.

AWS has one UAE region (me-central-1; me-south-1 is Bahrain), so any cross-region copy leaves the
UAE. Azure's uaenorth and uaecentral are a region pair, so geo-redundant storage stays in the country
only from those two. Destinations named by another resource in the stack (S3 replication, Azure object
replication) are judged over the graph in ``stack.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pulumi_policy import ResourceValidationPolicy, Severity

from .factory import Rule, by_type, resource_policy
from .subject import Subject
from .values import at, elements, is_true, is_unknown, known

REGION_SETTINGS = ("allowedAwsRegions", "allowedAzureLocations")
_NOTES = {"me-south-1": " (Bahrain, not the UAE)"}
# Types Azure creates only together with a location; everything else may inherit its parent's.
_MUST_BE_LOCATED = frozenset({"azure-native:resources:ResourceGroup"})
_GEO_REDUNDANT = ("GRS", "GZRS")


def aws_region_problem(region: Any, subject: Subject, what: str) -> str | None:
    """Why ``region`` is not an allowed AWS region, or ``None`` when it is."""
    allowed = subject.setting("allowedAwsRegions")
    if is_unknown(region):
        return f"{what} is not known; residency cannot be proven (allowed: {', '.join(allowed)})"
    if region not in allowed:
        return f"{what} is {region or 'empty'}{_NOTES.get(region, '')}; allowed: {', '.join(allowed)}"
    return None


def azure_location_problem(location: Any, subject: Subject, what: str) -> str | None:
    allowed = subject.setting("allowedAzureLocations")
    if is_unknown(location) or not isinstance(location, str):
        return f"{what} is not known; residency cannot be proven (allowed: {', '.join(allowed)})"
    if location.replace(" ", "").lower() not in allowed:
        return f"{what} is {location}; allowed: {', '.join(allowed)}"
    return None


def _residency(subject: Subject) -> Iterator[str]:
    if subject.package == "aws":
        region = subject.aws_region()
        if region is None:
            yield "region is not set, nor the provider's; set aws:region (or the provider's region)"
        elif problem := aws_region_problem(region, subject, "region"):
            yield problem
    elif subject.package == "azure-native":
        yield from _azure_residency(subject)


def _azure_residency(subject: Subject) -> Iterator[str]:
    location = subject.azure_location()
    if location is None:
        if subject.type in _MUST_BE_LOCATED:
            yield "location is not set, nor the provider's; set azure-native:location"
        return
    if location == "global" and subject.type in subject.setting("globalAzureTypes"):
        return
    problem = azure_location_problem(location, subject, "location")
    if problem:
        yield problem


def _arn_region(arn: Any) -> Any:
    """The region field of an ARN (``arn:partition:service:region:account:resource``)."""
    if is_unknown(arn) or not isinstance(arn, str):
        return arn
    parts = arn.split(":")
    return parts[3] if len(parts) > 3 else None


def _regions(paths: tuple[str, ...], from_arn: bool = False) -> Rule:
    """A rule: every copy destination named at ``paths`` (``a[].b`` walks lists) is in an allowed region."""

    def rule(subject: Subject) -> Iterator[str]:
        for path in paths:
            for where, value in _walk(subject.props, path):
                region = _arn_region(known(value, where)) if from_arn else known(value, where)
                what = f"{where} (its region)" if from_arn else where
                if region is not None and (problem := aws_region_problem(region, subject, what)):
                    yield f"{problem}; the copy would leave the UAE"

    return rule


def _walk(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(concrete path, value)`` for each value at a path whose ``[]`` steps walk lists."""
    head, sep, rest = path.partition("[].")
    if not sep:
        yield path, at(obj, path)
        return
    for index, element in enumerate(elements(obj, head)):
        yield from ((f"{head}[{index}].{where}", value) for where, value in _walk(element, rest))


def _multi_region_key(subject: Subject) -> Iterator[str]:
    if is_true(known(subject.get("multiRegion"), "multiRegion")):
        yield "multiRegion is true; its replicas can be created outside the UAE: make the key single-Region"


def _geo_redundant_storage(subject: Subject) -> Iterator[str]:
    sku = known(subject.get("sku.name"), "sku.name")
    if not isinstance(sku, str) or not any(kind in sku.upper() for kind in _GEO_REDUNDANT):
        return
    location = subject.azure_location()
    pair = subject.setting("azureRegionPairs").get(location) if isinstance(location, str) else None
    allowed = subject.setting("allowedAzureLocations")
    if pair not in allowed:
        where, copy = location or "an unset location", pair or "no known pair"
        yield (
            f"sku.name is {sku}: geo-redundant copies go to the region paired with {where} ({copy}), "
            f"not one of {', '.join(allowed)}; use LRS or ZRS"
        )


_REPLICATION = {
    "aws:ecr/replicationConfiguration:ReplicationConfiguration": _regions(
        ("replicationConfiguration.rules[].destinations[].region",)
    ),
    "aws:backup/plan:Plan": _regions(("rules[].copyActions[].destinationVaultArn",), from_arn=True),
    "aws:dlm/lifecyclePolicy:LifecyclePolicy": _regions(
        (
            "policyDetails.schedules[].crossRegionCopyRules[].target",
            "policyDetails.schedules[].crossRegionCopyRules[].targetRegion",
            "policyDetails.actions[].crossRegionCopies[].target",
        )
    ),
    "aws:dynamodb/table:Table": _regions(("replicas[].regionName",)),
    "aws:secretsmanager/secret:Secret": _regions(("replicas[].region",)),
    "aws:efs/replicationConfiguration:ReplicationConfiguration": _regions(("destination.region",)),
    "aws:kms/key:Key": _multi_region_key,
    "aws:kms/externalKey:ExternalKey": _multi_region_key,
    "azure-native:storage:StorageAccount": _geo_redundant_storage,
}

POLICIES: list[ResourceValidationPolicy] = [
    resource_policy(
        "uae-residency",
        "Every AWS resource is in an allowed UAE region (its own region, else its provider's) and every "
        "Azure resource in an allowed UAE location.",
        _residency,
        severity=Severity.CRITICAL,
        settings=(*REGION_SETTINGS, "globalAzureTypes"),
    ),
    resource_policy(
        "uae-no-replication-out",
        "No replication, backup or snapshot copy, replica or multi-Region key takes data out of the UAE; "
        "Azure geo-redundant storage only where the paired region is in the UAE.",
        by_type(_REPLICATION),
        severity=Severity.CRITICAL,
        settings=(*REGION_SETTINGS, "azureRegionPairs"),
    ),
]
