"""The plan validated at the edge: one line per problem, naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from workloads.delivery.plan import DRIFT_FLOOR, PlanError, RolloutPlan, parse_plan

WHERE = "Pulumi.dev.yaml: ml-platform:platform.workloads.inference.rollout"


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(PlanError) as caught:
        parse_plan(raw, WHERE)
    return caught.value.problems


def test_defaults_and_camel_case_keys() -> None:
    plan = parse_plan(
        {"steps": ["shadow", 10, 50], "windowSeconds": 60, "gates": {"maxP99AddedMs": 5, "maxPsi": None}},
        WHERE,
    )
    assert plan.steps == ("shadow", 10, 50)
    assert plan.window_seconds == 60
    assert plan.gates.max_p99_added_ms == 5.0 and plan.gates.max_psi is None
    assert plan.drift_min_samples == DRIFT_FLOOR == 500
    assert parse_plan(None, WHERE) == RolloutPlan()
    assert plan.setting("shadow") == (0, plan.shadow_percent) and plan.setting(10) == (10, 0)


LABELLED = (
    "labelledSet and gates.minAccuracy or gates.maxAccuracyDrop: set the set with at least one of its gates,"
    " or neither"
)


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        ({"steps": [5, "shadow"]}, f"{WHERE}.steps: [1]: shadow comes first, before any live traffic"),
        ({"steps": [25, 5]}, f"{WHERE}.steps: [1]: 5 after 25: percentages must rise"),
        ({"steps": [100]}, f"{WHERE}.steps: [0]: 100 is neither 'shadow' nor a percentage from 1 to 99"),
        ({"steps": ["10%"]}, f"{WHERE}.steps: [0]: '10%' is neither 'shadow' nor a percentage from 1 to 99"),
        ({"steps": [True]}, f"{WHERE}.steps: [0]: True is neither 'shadow' nor a percentage from 1 to 99"),
        ({"steps": []}, f"{WHERE}.steps: a non-empty list such as [shadow, 5, 25, 50]"),
        ({"windowSecs": 60}, f"{WHERE}.windowSecs: unknown key"),
        ({"windowSeconds": "60"}, f"{WHERE}.windowSeconds: Input should be a valid integer"),
        ({"driftMinSamples": 200}, f"{WHERE}.driftMinSamples: Input should be greater than or equal to 500"),
        (
            {"gates": {"maxErrorRate": 2}},
            f"{WHERE}.gates.maxErrorRate: Input should be less than or equal to 1",
        ),
        ({"gates": {"minAccuracy": 0.9}}, f"{WHERE}: {LABELLED}"),
        ({"gates": {"maxAccuracyDrop": 0.01}}, f"{WHERE}: {LABELLED}"),
        ({"labelledSet": "l.npz"}, f"{WHERE}: {LABELLED}"),
        (
            {"windowSeconds": 300, "bake": {"seconds": 60}},
            f"{WHERE}: bake.seconds: 60 is shorter than one window (300); 0 for no bake",
        ),
    ],
)
def test_one_line_per_problem_naming_the_key(raw: dict[str, Any], line: str) -> None:
    assert problems(raw) == [line]


def test_every_problem_is_reported() -> None:
    assert len(problems({"windowSeconds": 0, "minRequests": 0, "gates": {"maxPsi": -1}})) == 3


def test_the_plan_example_in_the_docs_is_a_plan_file_as_written() -> None:
    """Trial defect 12: docs/delivery.md's example (under a top-level ``rollout:``) was refused by
    ``--plan`` with ``rollout: unknown key``. The page's example parses as ``--plan`` reads a file."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "delivery.md").read_text()
    block = page.split("The plan (camelCase keys)", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    plan = parse_plan(yaml.safe_load(block), "docs/delivery.md")
    assert plan.steps == ("shadow", 5, 25, 50) and plan.lease_grace_seconds == 60
    assert plan.gates.min_accuracy == 0.9 and plan.labelled_set is not None


@pytest.mark.parametrize(
    ("raw", "beside"),
    [
        ({"labelledSet": "l.npz", "gates": {"maxAccuracyDrop": 0.01}}, True),  # the shipped gates
        ({"labelledSet": "l.npz", "gates": {"maxAccuracyDrop": 0.01, "minAccuracy": 0.9}}, True),
        ({"labelledSet": "l.npz", "gates": {"minAccuracy": 0.9}}, False),  # a floor compares nothing
        ({}, False),
    ],
)
def test_only_a_labelled_set_with_max_accuracy_drop_judges_beside_the_champion(
    raw: dict[str, Any], beside: bool
) -> None:
    """Reviews rev40c A2 and A3: what replaces shadow agreement is a property of the plan, the same for
    every challenger; a floor alone measures nothing against the champion."""
    assert parse_plan(raw, WHERE).judges_beside_champion is beside
