"""The drift monitor's window: the shortest time between two runs of its CronJob's schedule
(workloads/delivery/cron.py), and the longest time k consecutive windows cover, which the alert on the
label-free estimate holds for (review of issue 40, C1: k times the shortest gap fired sooner than the
monitor could act on an irregular schedule). The fields
are batch/v1 CronJob's (kubernetes.io, "CronJob": "# ┌───────────── minute (0 - 59)" ... "day of the week
(0 - 6) (Sunday to Saturday) OR sun, mon, tue, wed, thu, fri, sat"); two restricted day fields match
either (cron(5))."""

from __future__ import annotations

import pytest

from workloads.delivery.cron import longest_span_seconds, shortest_interval_seconds

MINUTE, HOUR, DAY = 60, 3600, 86400


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [
        ("*/15 * * * *", 15 * MINUTE),  # the default
        ("5,50 * * * *", 15 * MINUTE),  # :50 to the next hour's :05
        ("0 */6 * * *", 6 * HOUR),
        ("0 9-17 * * 1-5", HOUR),  # office hours: the window is an hour, not the weekend's gap
        ("30 2 * * SUN", 7 * DAY),
        ("30 2 * * 7", 7 * DAY),  # 7 is Sunday too
        ("0 0 1 * *", 28 * DAY),  # February
        ("0 0 1 * MON", DAY),  # both day fields restricted: either matches (every Monday, every 1st)
        ("0 0 1 JAN,JUL *", 181 * DAY),
    ],
)
def test_the_window_is_the_shortest_gap_between_two_runs(schedule: str, seconds: int) -> None:
    assert shortest_interval_seconds(schedule) == seconds


@pytest.mark.parametrize(
    ("schedule", "windows", "seconds"),
    [
        ("*/15 * * * *", 3, 45 * MINUTE),  # the default: k times the interval
        ("0,5 * * * *", 3, 115 * MINUTE),  # :05 to :00, :05, :00 (the shortest gap, 5 min, gave 15)
        ("*/7 * * * *", 3, 21 * MINUTE),  # :56 to :00 is 4 minutes, never three times
        ("0 9-17 * * 1-5", 3, 66 * HOUR),  # Friday 16:00, 17:00, Monday 09:00, 10:00
        ("0 9-17 * * 1-5", 12, 90 * HOUR),  # Friday 16:00, 17:00, Monday 9 runs, Tuesday 09:00, 10:00
        ("30 2 * * SUN", 2, 14 * DAY),
        ("0 0 1 JAN,JUL *", 1, 184 * DAY),  # July to January
    ],
)
def test_the_monitors_k_windows_are_the_longest_span_of_k_gaps(
    schedule: str, windows: int, seconds: int
) -> None:
    assert longest_span_seconds(schedule, windows) == seconds


def test_a_schedule_with_too_few_runs_for_k_windows_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^'0 0 29 2 \*' runs fewer than 3 times in eight years"):
        longest_span_seconds("0 0 29 2 *", 2)


@pytest.mark.parametrize(
    ("schedule", "line"),
    [
        ("60 * * * *", "'60' is outside the minute's 0-59"),
        ("*/0 * * * *", "'*/0' is outside the minute's 0-59"),
        ("0 0 * * FUN", "'FUN' is not a day of week"),
        ("0 0 31 2 *", "'0 0 31 2 *' runs less than twice in eight years"),
        ("* * * *", "'* * * *' is not a cron schedule of five fields"),
    ],
)
def test_a_schedule_that_cannot_run_is_one_line(schedule: str, line: str) -> None:
    with pytest.raises(ValueError, match="^" + line.replace("*", r"\*")):
        shortest_interval_seconds(schedule)
