"""Mandatory tags on every taggable AWS and Azure resource; policies (tier, cost) read them.

Whether a type takes tags is a schema fact the engine does not send, so it comes from
``taggable_types.txt`` (generated from the provider SDKs by ``policies/tools/taggable_types.py``); a
resource of another type that sets ``tags`` anyway is judged too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pulumi_policy import ResourceValidationPolicy, Severity

from .factory import resource_policy
from .subject import TIERS, Subject
from .values import is_set, is_unknown, known

_TAGGED_PACKAGES = ("aws", "azure-native")


def _load_taggable() -> frozenset[str]:
    lines = (Path(__file__).with_name("taggable_types.txt")).read_text(encoding="utf-8").splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


TAGGABLE = _load_taggable()


def _mandatory_tags(subject: Subject) -> Iterator[str]:
    if subject.package not in _TAGGED_PACKAGES or subject.is_provider:
        return
    if subject.type not in TAGGABLE and "tags" not in subject.props:
        return
    known(subject.props.get("tags"), "tags")
    tags = subject.tags()
    missing = [key for key in subject.setting("requiredTags") if not is_set(tags.get(key))]
    if missing:
        where = "tags or the provider's defaultTags" if subject.package == "aws" else "tags"
        yield f"missing tags: {', '.join(missing)} (set them in {where})"
    tier = tags.get("tier")
    if isinstance(tier, str) and not is_unknown(tier) and tier not in TIERS:
        yield f"tag tier is {tier!r}; expected one of {', '.join(TIERS)}"


POLICIES: list[ResourceValidationPolicy] = [
    resource_policy(
        "mandatory-tags",
        "Every taggable AWS and Azure resource carries project, environment, tier, data-classification, "
        "owner and cost-center (AWS: its own tags or the provider's defaultTags).",
        _mandatory_tags,
        severity=Severity.MEDIUM,
        settings=("requiredTags",),
    ),
]
