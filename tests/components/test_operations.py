"""The day-2 runbooks of docs/operations.md, each exercised where the mocks allow (the others: the
tests each section names)."""

from __future__ import annotations

from typing import Any

import pytest

from components.config import PLATFORM_KEY, ConfigError, parse_stack_config
from tests.stack_variants import template


def _refused(stack: str, version: str) -> list[str]:
    body: dict[str, Any] = template(stack)
    body[PLATFORM_KEY].setdefault("cluster", {})["kubernetesVersion"] = version
    with pytest.raises(ConfigError) as refused:
        parse_stack_config(body, stack)
    return refused.value.problems


@pytest.mark.parametrize(
    ("stack", "missing"),
    [
        ("aws-enterprise-prod", ("the cluster-autoscaler chart", "the EKS add-ons")),
        ("azure-enterprise-prod", ("the cluster-autoscaler chart",)),
    ],
)
def test_upgrading_to_1_36_names_every_pin_it_still_needs(stack: str, missing: tuple[str, ...]) -> None:
    """ "Upgrade Kubernetes by one minor": 1.35 → 1.36 is refused, in one line under
    ``cluster.kubernetesVersion``, until every per-minor pin has a 1.36 row; the line names them (the
    cluster-autoscaler chart for 1.36, not in charts/; on AWS the EKS add-on versions too)."""
    pins = next(p for p in _refused(stack, "1.36") if "1.36 is not pinned in" in p)
    assert "cluster.kubernetesVersion" in pins and "pinned everywhere: " in pins and "1.35" in pins
    named = pins.split(" is not pinned in ", 1)[1].split("; pinned everywhere", 1)[0]
    assert [part.split(" (")[0] for part in named.split("), ")] == list(missing)
