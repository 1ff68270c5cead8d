"""The rollout plan: its steps, the analysis window and the gates each window is judged on.

What a stack carries under ``ml-platform:platform`` → ``workloads.inference.rollout`` (camelCase keys,
as every stack key) and what ``mlplatform rollout --plan FILE`` reads. Validated once, here, with one line
per problem naming the key; the runner and the decision below it trust the typed model. Plain pydantic,
no Pulumi: the rollout Job runs in the inference image, which has none.

Defaults are choices, not sourced facts, except the drift floor: the server reports no PSI below 500 rows
in its window (workloads/inference/drift.py measured why), so ``driftMinSamples`` may not go below it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from workloads.delivery.cron import longest_span_seconds, shortest_interval_seconds

SHADOW: Final = "shadow"
# The server's floor (workloads/inference/drift.py: PSI is absent below its min_samples, 500 by default).
DRIFT_FLOOR: Final = 500
# Beyond the plan's own time: the image pull, the first registry calls, the final alias move.
DEADLINE_MARGIN_S: Final = 600

Step = int | Literal["shadow"]


class _Model(BaseModel):
    # As components/config.py's _Model: camelCase keys, unknown keys refused, no coercion.
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class Gates(_Model):
    """What each step's window must show of the challenger; a gate set to null is not judged."""

    # Errors (inference_version_errors_total, every reason) per response of the challenger.
    max_error_rate: float | None = Field(default=0.01, ge=0, le=1)
    # ... and above the champion's in the same window (client errors hit both alike).
    max_error_rate_increase: float | None = Field(default=None, ge=0, le=1)
    # p99 latency against the champion's in the same window: it fails only when it exceeds BOTH the
    # ratio and the added milliseconds that are set (a 1 ms model twice as slow is no regression).
    max_p99_ratio: float | None = Field(default=1.5, ge=1)
    max_p99_added_ms: float | None = Field(default=10.0, ge=0)
    # Largest per-feature PSI of the challenger, judged only on drift windows of driftMinSamples rows.
    max_psi: float | None = Field(default=0.2, gt=0)
    # Shadow: compared requests whose every row's label agreed with the champion's. Where the plan judges
    # the challenger beside the champion on labelled rows (``labelledSet`` with ``maxAccuracyDrop``:
    # ``RolloutPlan.judges_beside_champion``) that comparison replaces agreement for every challenger, and
    # agreement is only reported with its numbers: a version retrained on shifted data disagrees with the
    # stale champion by design (review rev40b A3). No version tag decides which (review rev40c A2: the
    # ``mlplatform.trigger`` tag is written by any EDIT holder).
    min_shadow_agreement: float | None = Field(default=0.95, ge=0, le=1)
    # Accuracy on the labelled set (``labelledSet``), sent to the challenger through the V2 API.
    min_accuracy: float | None = Field(default=None, ge=0, le=1)
    # How far the challenger's accuracy on the labelled set may fall below the champion's on the same set,
    # measured beside it at each step: the like-for-like comparison (``promoteTolerance``'s default, one
    # point, is the natural value).
    max_accuracy_drop: float | None = Field(default=None, ge=0, le=1)


class BakePlan(_Model):
    """After promotion: the new champion is watched this long, window by window, and rolled back to the
    previous champion when a window breaches a gate. 0 seconds: no bake."""

    seconds: int = Field(default=600, ge=0, le=7 * 24 * 3600)
    max_error_rate: float | None = Field(default=0.01, ge=0, le=1)
    max_psi: float | None = Field(default=0.2, gt=0)


class RolloutPlan(_Model):
    """Steps in order (``shadow`` first if at all, then challenger percentages rising), then promotion."""

    steps: tuple[Step, ...] = (SHADOW, 5, 25, 50)
    # The share of champion requests copied to the challenger during the shadow step.
    shadow_percent: int = Field(default=20, ge=1, le=100)
    window_seconds: int = Field(default=300, ge=1, le=24 * 3600)
    # Requests a gate needs before it is judged (challenger, and the champion it is compared with).
    min_requests: int = Field(default=200, ge=1)
    # A window without enough evidence (requests, drift rows) is extended by another window this many
    # times; then the step fails: too little traffic to judge is not a pass.
    max_extensions: int = Field(default=3, ge=0, le=1000)
    drift_min_samples: int = Field(default=DRIFT_FLOOR, ge=DRIFT_FLOOR)
    # How long every server may take to apply a new setting (they poll the registry).
    apply_timeout_seconds: int = Field(default=300, ge=1, le=24 * 3600)
    # How far past one window the rollout's lease reaches at each renewal (workloads/registry/lock.py): the
    # slack for a slow registry call (3 tries with back-off) and the servers' clocks. A rollout that dies
    # has its share back at 0 on every server within windowSeconds + leaseGraceSeconds + one poll of theirs.
    lease_grace_seconds: int = Field(default=60, ge=1, le=3600)
    # An .npz with ``x`` (float32 rows) and ``y`` (int labels): a local path, or an ``mlflow-artifacts:``
    # URI of a file the registry serves. Required by, and only with, gates.minAccuracy.
    labelled_set: str | None = None
    # Whether passing every step promotes: the rollout's gates as the pre-approved path, declared here (the
    # stack's plan). False: the rollout ends ``passed`` with the traffic back at the champion, and the
    # challenger waits for a promotion as a change (an approval where the stack requires one: mlplatform
    # models request-promotion, approve, promote), judged on this rollout against the same champion.
    promote: bool = True
    gates: Gates = Gates()
    bake: BakePlan = BakePlan()

    @field_validator("steps", mode="before")
    @classmethod
    def _steps(cls, value: Any) -> Any:
        if not isinstance(value, list | tuple) or not value:
            raise ValueError("a non-empty list such as [shadow, 5, 25, 50]")
        last = 0
        for index, step in enumerate(value):
            if step == SHADOW and not isinstance(step, bool):
                if index != 0:
                    raise ValueError(f"[{index}]: shadow comes first, before any live traffic")
                continue
            if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= 99:
                raise ValueError(f"[{index}]: {step!r} is neither 'shadow' nor a percentage from 1 to 99")
            if step <= last:
                raise ValueError(f"[{index}]: {step} after {last}: percentages must rise")
            last = step
        return tuple(value)

    @model_validator(mode="after")
    def _labelled(self) -> RolloutPlan:
        judged = self.gates.min_accuracy is not None or self.gates.max_accuracy_drop is not None
        if (self.labelled_set is None) == judged:
            raise ValueError(
                "labelledSet and gates.minAccuracy or gates.maxAccuracyDrop: set the set with at least one"
                " of its gates, or neither"
            )
        if 0 < self.bake.seconds < self.window_seconds:
            raise ValueError(
                f"bake.seconds: {self.bake.seconds} is shorter than one window ({self.window_seconds});"
                " 0 for no bake"
            )
        return self

    @property
    def judges_beside_champion(self) -> bool:
        """Whether each step measures the challenger beside the champion on the same labelled rows and
        fails it on a drop (``labelledSet`` with ``gates.maxAccuracyDrop``): then that comparison, not
        shadow agreement, judges every challenger. A floor alone (``minAccuracy``) compares nothing with
        the champion."""
        return self.labelled_set is not None and self.gates.max_accuracy_drop is not None

    @property
    def deadline_seconds(self) -> int:
        """The longest a rollout following this plan runs: each step waits for the servers to apply its
        setting, then judges windows (one, plus every extension a thin window may get); after promotion
        the bake period; then a margin. The Job's ``activeDeadlineSeconds`` (a paused rollout too ends by
        it)."""
        step = self.apply_timeout_seconds + self.window_seconds * (1 + self.max_extensions)
        return len(self.steps) * step + self.apply_timeout_seconds + self.bake.seconds + DEADLINE_MARGIN_S

    def setting(self, step: Step) -> tuple[int, int]:
        """(challenger percent, shadow percent) for ``step``."""
        return (0, self.shadow_percent) if step == SHADOW else (int(step), 0)


def step_name(step: Step) -> str:
    return SHADOW if step == SHADOW else f"{step}%"


class PlanError(Exception):
    """An invalid plan; ``problems`` holds one printable line per problem, each naming its key."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def parse_plan(raw: Mapping[str, Any] | None, where: str) -> RolloutPlan:
    """Validate ``raw`` (as read from YAML or JSON) into a plan; ``where`` prefixes each problem with the
    file and key it came from, e.g. ``Pulumi.dev.yaml: ml-platform:platform.workloads.inference.rollout``."""
    try:
        # JSON mode, as components/config.py: strict types as they arrive from YAML.
        return RolloutPlan.model_validate_json(json.dumps(dict(raw or {})))
    except ValidationError as exc:
        raise PlanError([_line(where, error) for error in exc.errors()]) from None


def _line(where: str, error: Any) -> str:
    path = where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{path}: unknown key"
    message: str = error["msg"]
    return f"{path}: {message.removeprefix('Value error, ')}"


class MonitorPolicy(_Model):
    """``workloads.inference.driftMonitor``: the stack keys, defaults with their reasons."""

    # The CronJob's schedule: one window per run. Every 15 minutes: windows long enough for the servers'
    # drift window (1,000 rows by default) to turn over at moderate traffic, k of m within about an hour.
    schedule: str = "*/15 * * * *"
    # Per window: about one breach in a hundred unchanged windows (trigger.py measured it on real rows).
    false_alarm_rate: float = Field(default=0.01, gt=0, lt=1)
    # 3 breaches among the last 5 windows: sustained, not a burst of odd traffic.
    k: int = Field(default=3, ge=1)
    m: int = Field(default=5, ge=1, le=100)
    # A retrain and its rollout take hours; judging the new version needs windows of its own.
    cooldown_seconds: int = Field(default=6 * 3600, ge=0)
    # At most two retrains a day per model, whatever the traffic does.
    max_retrains: int = Field(default=2, ge=1)
    per_seconds: int = Field(default=24 * 3600, ge=1)
    # Labels as they arrive: an ``.npz`` (arrays x, y) path or ``mlflow-artifacts:`` URI, sent to the
    # champion through the V2 API each window (the rollout's labelledSet format); unset: no labels.
    labelled_set: str | None = None
    # How far the champion's labelled accuracy may fall below the previous champion's, on the same labels,
    # before the monitor rolls back: promoteTolerance's default, one point of accuracy.
    accuracy_tolerance: float = Field(default=0.01, ge=0, le=1)
    # The label-free accuracy estimate (workloads/delivery/estimate.py, as NannyML's CBPE): a window whose
    # estimate is below the champion's estimate on its own test split by more than this is an estimated
    # drop. Five points: about five standard errors of the estimate over 500 rows at accuracy 0.95, so an
    # unchanged window almost never shows one.
    estimated_drop: float = Field(default=0.05, gt=0, lt=1)
    # Whether an estimated drop in a window without labels counts as a breach towards the k of m that
    # starts a retrain. Off by default: recorded and warned (the monitor's log) only, because the
    # estimate holds only while the model's confidences stay calibrated on the new inputs and P(y|x) is
    # unchanged (CBPE's stated assumptions), which no label checks; turn it on where labels lag for long
    # and a retrain is cheap.
    act_on_estimate: bool = False
    # The dataset source the retrain trains on: a ``module:function`` hook that returns its newest
    # version (docs/training.md); unset: the training Job's own dataset.
    dataset: str | None = None

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        # batch/v1 CronJob: the five fields of cron (minute hour day-of-month month day-of-week).
        if not re.fullmatch(r"[0-9*/,\-]+( [0-9A-Za-z*/,\-]+){4}", value):
            raise ValueError(f"{value!r} is not a cron schedule of five fields such as '*/15 * * * *'")
        shortest_interval_seconds(value)  # every field in its range, and runs at all
        return value

    def sustained_seconds(self) -> int:
        """The longest time ``k`` consecutive windows (from one run of ``schedule`` to the next) cover: as
        long as the monitor can take to see ``k`` breaches (workloads/delivery/cron.py)."""
        return longest_span_seconds(self.schedule, self.k)

    @model_validator(mode="after")
    def _k_within_m(self) -> MonitorPolicy:
        if self.k > self.m:
            raise ValueError(
                f"k ({self.k}) must not exceed m ({self.m}): k breaches among the last m windows"
            )
        return self


def parse_policy(raw: Mapping[str, Any] | None, where: str) -> MonitorPolicy:
    """Validate ``raw`` into the policy; PlanError with one line per problem naming its key."""
    try:
        return MonitorPolicy.model_validate_json(json.dumps(dict(raw or {})))
    except ValidationError as exc:
        raise PlanError([_line(where, error) for error in exc.errors()]) from None
