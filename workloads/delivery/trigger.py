"""When input drift should start a retrain: calibrated thresholds, K of M windows, a cooldown, a rate limit.

A fixed rule such as "max PSI > 0.1" is not a drift test: PSI over a small window is mostly sampling
noise, so the rule fires on most unchanged windows of 100 rows and almost never on windows of 1,000 or
more, whatever the shift (workloads/inference/drift.py measured the same on the digits model). This module
decides from numbers whose false-alarm rate is stated:

- ``null_threshold``: the (1 - ``false_alarm_rate``) quantile of the largest per-feature PSI over windows
  of ``n`` rows drawn from the reference itself (multinomial draws from the training histograms, each
  feature on its own). Drawing features independently ignores their correlation; the largest of
  correlated statistics is no larger in distribution than that of independent ones, so the threshold
  errs high: the real false-alarm rate is at most the one stated (tests/workloads/delivery/
  test_trigger.py measures it on real rows).
- ``decide``: a retrain only when ``k`` of the last ``m`` windows since the last action breach their
  threshold (one noisy window is not drift), never within ``cooldown_s`` of the last action ("breach, but
  cooling down" is itself a decision, recorded), and at most ``max_actions`` per ``per_s`` (a storm of
  retrains costs accelerators and reviewers). Each decision carries the numbers it was taken on.

Pure functions of their inputs (time passed in), so a CronJob, a test or a replay decides the same; the
monitor that reads the servers' windows and acts on the decision is workloads/delivery/monitor.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from workloads.inference.drift import PSI_EPSILON


@dataclass(frozen=True)
class TriggerPolicy:
    """The monitor's settings; defaults are choices, with their reasons."""

    # Per window: 1 % means about one breach in a hundred unchanged windows, and with k of m below a
    # false retrain needs several such coincidences.
    false_alarm_rate: float = 0.01
    # 3 breaches in the last 5 windows: sustained, not a burst of odd traffic.
    k: int = 3
    m: int = 5
    # A retrain and its rollout take hours; judging the new version needs its own windows.
    cooldown_s: float = 6 * 3600
    # At most two retrains a day per model, whatever the traffic does.
    max_actions: int = 2
    per_s: float = 24 * 3600

    def __post_init__(self) -> None:
        if not 0 < self.false_alarm_rate < 1 or not 1 <= self.k <= self.m or self.max_actions < 1:
            raise ValueError("false_alarm_rate in (0, 1), 1 <= k <= m, max_actions >= 1")


def _psi_rows(reference: npt.NDArray[np.float64], live: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """PSI of each row of ``live`` counts against ``reference`` counts (the server's formula, drift.psi)."""
    ref_p = np.maximum(reference / max(reference.sum(), 1.0), PSI_EPSILON)
    live_p = np.maximum(live / np.maximum(live.sum(axis=-1, keepdims=True), 1.0), PSI_EPSILON)
    scores: npt.NDArray[np.float64] = np.sum((live_p - ref_p) * np.log(live_p / ref_p), axis=-1)
    return scores


def null_threshold(
    reference_counts: Sequence[Sequence[int]],
    n: int,
    false_alarm_rate: float,
    *,
    replicates: int = 2000,
    seed: int = 0,
) -> float:
    """The largest per-feature PSI that windows of ``n`` rows from the reference exceed with probability
    ``false_alarm_rate`` (see the module's docstring); ``reference_counts``: each feature's histogram."""
    if n < 1 or replicates < 1:
        raise ValueError("n and replicates must be at least 1")
    rng = np.random.default_rng(seed)
    largest = np.zeros(replicates)
    for counts in reference_counts:
        reference = np.asarray(counts, dtype=np.float64)
        if reference.sum() <= 0:
            continue
        draws = rng.multinomial(n, reference / reference.sum(), size=replicates).astype(np.float64)
        largest = np.maximum(largest, _psi_rows(reference, draws))
    return float(np.quantile(largest, 1 - false_alarm_rate))


@dataclass(frozen=True)
class Window:
    """One monitoring window of a served version: when it ended, its rows, its largest PSI and the
    threshold calibrated for its row count; ``estimated_drop``: its label-free accuracy estimate fell
    and the policy counts that as a breach (the monitor's ``driftMonitor.actOnEstimate``)."""

    at: float
    samples: int
    max_psi: float
    threshold: float
    estimated_drop: bool = False

    @property
    def breach(self) -> bool:
        return self.max_psi > self.threshold or self.estimated_drop


class Action(StrEnum):
    NONE = "none"
    RETRAIN = "retrain"
    COOLING_DOWN = "cooling-down"
    RATE_LIMITED = "rate-limited"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    breaches: int
    windows: int


def decide(
    windows: Sequence[Window], actions: Sequence[float], now: float, policy: TriggerPolicy
) -> Decision:
    """What to do now, given the windows so far (oldest first) and the times of past retrains."""
    last = max(actions, default=float("-inf"))
    recent = [w for w in windows if w.at > last][-policy.m :]
    breaches = sum(w.breach for w in recent)
    shown = ", ".join(
        f"{w.max_psi:.3f}/{w.threshold:.3f}{' + estimated drop' if w.estimated_drop else ''}" for w in recent
    )
    counted = f"{breaches} of the last {len(recent)} windows breach (PSI/threshold: {shown})"
    if breaches < policy.k:
        return Decision(Action.NONE, f"{counted}; {policy.k} needed", breaches, len(recent))
    if now - last < policy.cooldown_s:
        left = policy.cooldown_s - (now - last)
        return Decision(
            Action.COOLING_DOWN, f"{counted}; cooling down {left:.0f} s more", breaches, len(recent)
        )
    done = sum(1 for at in actions if now - at < policy.per_s)
    if done >= policy.max_actions:
        return Decision(
            Action.RATE_LIMITED,
            f"{counted}; {done} retrains in the last {policy.per_s:.0f} s (limit {policy.max_actions})",
            breaches,
            len(recent),
        )
    return Decision(Action.RETRAIN, counted, breaches, len(recent))
