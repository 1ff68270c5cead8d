"""The drift monitor's window: the shortest time between two runs of its CronJob's schedule
(workloads/delivery/cron.py), which the alert on the label-free estimate holds for k times. The fields
are batch/v1 CronJob's (kubernetes.io, "CronJob": "# ┌───────────── minute (0 - 59)" ... "day of the week
(0 - 6) (Sunday to Saturday) OR sun, mon, tue, wed, thu, fri, sat"); two restricted day fields match
either (cron(5))."""

from __future__ import annotations

import pytest

from workloads.delivery.cron import shortest_interval_seconds

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
