"""Drift triggers (issue 40, item 1): thresholds calibrated per sample size from the reference data,
K of M windows, a cooldown and a rate limit, on the digits data (scikit-learn's, as the trainer's task).

The issue's claim, measured here: a fixed "max PSI > 0.1" rule fires on most unchanged windows of 100
rows and almost never at 1,000, while the calibrated threshold's false-alarm rate stays near the one
stated at every size, and a real shift is still caught.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest

from workloads.delivery.trigger import Action, TriggerPolicy, Window, decide, null_threshold
from workloads.inference.drift import bin_counts, psi
from workloads.training.tasks import digits as digits_dataset

RATE = 0.01
TRIALS = 300


@pytest.fixture(scope="module")
def digits() -> tuple[npt.NDArray[np.float32], list[npt.NDArray[np.float64]], list[list[int]]]:
    """The rows, each feature's bin edges and reference counts (10 bins, as the trainer's histograms)."""
    x = digits_dataset().features  # scikit-learn's digits in float32, as load_digits().data cast
    edges, counts = [], []
    for column in x.T:
        found, edge = np.histogram(column, bins=10)
        edges.append(edge)
        counts.append(found.tolist())
    return x, edges, counts


def _max_psi(
    rows: npt.NDArray[np.float32], edges: list[npt.NDArray[np.float64]], counts: list[list[int]]
) -> float:
    return max(psi(counts[f], bin_counts(rows[:, f], edges[f])) for f in range(rows.shape[1]))


@pytest.mark.parametrize("n", [100, 1000])
def test_the_calibrated_threshold_keeps_its_false_alarm_rate_where_a_fixed_one_does_not(
    digits: tuple[npt.NDArray[np.float32], list[npt.NDArray[np.float64]], list[list[int]]], n: int
) -> None:
    """Unchanged traffic: windows of real rows drawn from the reference data itself."""
    x, edges, counts = digits
    threshold = null_threshold(counts, n, RATE)
    rng = np.random.default_rng(1)
    scores = [_max_psi(x[rng.integers(0, len(x), n)], edges, counts) for _ in range(TRIALS)]
    fixed = sum(s > 0.1 for s in scores) / TRIALS
    calibrated = sum(s > threshold for s in scores) / TRIALS
    print(f"n={n}: threshold {threshold:.3f}; alarms: fixed 0.1 {fixed:.1%}, calibrated {calibrated:.1%}")
    assert calibrated <= 3 * RATE  # the stated rate, within the noise of 300 trials (and conservative)
    if n == 100:
        assert fixed > 0.5, "the fixed rule fires on most unchanged small windows"
    else:
        assert fixed < 0.05 and threshold < 0.1


def test_a_real_shift_is_caught_at_the_calibrated_threshold(
    digits: tuple[npt.NDArray[np.float32], list[npt.NDArray[np.float64]], list[list[int]]],
) -> None:
    x, edges, counts = digits
    rng = np.random.default_rng(2)
    rows = x[rng.integers(0, len(x), 1000)]
    shifted = np.clip(rows + 2.0, 0, 16)  # every pixel two levels brighter
    assert _max_psi(shifted, edges, counts) > null_threshold(counts, 1000, RATE)


HOUR = 3600.0
POLICY = TriggerPolicy(k=3, m=5, cooldown_s=6 * HOUR, max_actions=2, per_s=24 * HOUR)


def _run(breaches: list[bool], policy: TriggerPolicy = POLICY, every_s: float = 600) -> list[Action]:
    """Play one window per ``every_s``; act on every RETRAIN (recorded as an action)."""
    windows: list[Window] = []
    actions: list[float] = []
    taken = []
    for index, breach in enumerate(breaches):
        now = (index + 1) * every_s
        windows.append(Window(now, 1000, 0.5 if breach else 0.01, 0.05))
        decision = decide(windows, actions, now, policy)
        taken.append(decision.action)
        if decision.action is Action.RETRAIN:
            actions.append(now)
    return taken


def test_steady_traffic_triggers_nothing_and_a_single_breach_is_not_drift() -> None:
    assert set(_run([False] * 200)) == {Action.NONE}
    assert set(_run([False] * 50 + [True] + [False] * 50)) == {Action.NONE}


def test_sustained_drift_retrains_once_within_k_windows_then_cools_down() -> None:
    taken = _run([False] * 10 + [True] * 30)
    assert taken.index(Action.RETRAIN) == 10 + POLICY.k - 1, "on the k-th breaching window"
    within_cooldown = int(POLICY.cooldown_s // 600)
    assert taken.count(Action.RETRAIN) == 1 and Action.COOLING_DOWN in taken
    assert len(taken) - taken.index(Action.RETRAIN) <= within_cooldown


def test_flapping_around_the_threshold_retrains_at_most_once_per_cooldown() -> None:
    flapping = [i % 2 == 0 for i in range(24 * 6)]  # a day of 10-minute windows, every other breaching
    taken = _run(flapping)
    retrains = [i for i, a in enumerate(taken) if a is Action.RETRAIN]
    assert all(b - a >= POLICY.cooldown_s // 600 for a, b in itertools.pairwise(retrains))
    assert len(retrains) <= POLICY.max_actions


def test_the_rate_limit_holds_whatever_the_cooldown() -> None:
    fast = TriggerPolicy(k=1, m=1, cooldown_s=0, max_actions=2, per_s=24 * HOUR)
    taken = _run([True] * 10, fast)
    assert taken.count(Action.RETRAIN) == 2 and taken[2:] == [Action.RATE_LIMITED] * 8
