"""When a CronJob's schedule runs: the shortest time between two of its runs, and the longest time k
consecutive windows (from one run to the next) cover.

The drift monitor is one window per run of its CronJob (``driftMonitor.schedule``), so the time between
runs is its window; the alert on the servers' label-free estimate holds for as long as the monitor's k
windows can take (components/kubernetes/monitoring.py), so on an irregular schedule (``0,5 * * * *``)
it is no faster than the monitor either. The fields are the five of batch/v1
CronJob's schedule, as Kubernetes parses them (robfig/cron v3's standard parser, which the CronJob
controller uses: minute 0-59, hour 0-23, day of month 1-31, month 1-12 or JAN-DEC, day of week 0-6 or
SUN-SAT, 7 also Sunday as in cron(5)); each a list of ``*``, ``N``, ``A-B`` with an optional ``/STEP``
(``N/STEP``: from N to the field's end). When both day fields are restricted a day matches either (cron(5):
"If both fields are restricted (i.e., don't start with *), the command will be run when either field
matches the current time"); when one starts with ``*``, the other alone decides.
"""

from __future__ import annotations

from datetime import date, timedelta
from itertools import pairwise

_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
_NAMES = {
    3: {
        m: i + 1
        for i, m in enumerate(
            ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
        )
    },
    4: {d: i for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))},
}
# Eight years from a leap year: every calendar pattern (a 29 February every four years) shows twice.
_SPAN_DAYS = 8 * 366
_START = date(2024, 1, 1)
DAY_S = 86400


def _value(text: str, index: int) -> int:
    named = _NAMES.get(index, {}).get(text.upper())
    if named is not None:
        return named
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a {_FIELDS[index]}")
    return int(text)


def _field(spec: str, index: int) -> frozenset[int]:
    low, high = _BOUNDS[index]
    values: set[int] = set()
    for part in spec.split(","):
        body, slash, step_text = part.partition("/")
        if slash and not step_text.isdigit():
            raise ValueError(f"{part!r}: the step of a {_FIELDS[index]} is a number")
        step = int(step_text) if slash else 1
        if body == "*":
            first, last = low, high
        else:
            start, dash, end = body.partition("-")
            first = _value(start, index)
            last = _value(end, index) if dash else (high if slash else first)
        if step < 1 or not low <= first <= last <= high:
            raise ValueError(f"{part!r} is outside the {_FIELDS[index]}'s {low}-{high}")
        values.update(range(first, last + 1, step))
    if index == 4 and 7 in values:  # 7 is Sunday too
        values = (values - {7}) | {0}
    return frozenset(values)


def _runs(schedule: str) -> tuple[list[int], list[int]]:
    """When ``schedule`` runs: the seconds into a day of its runs, and the matching days of the eight
    years (counted from _START); ValueError (one line) for a malformed field or schedule."""
    fields = schedule.split()
    if len(fields) != 5:
        raise ValueError(f"{schedule!r} is not a cron schedule of five fields such as '*/15 * * * *'")
    minutes, hours, days, months, weekdays = (_field(f, i) for i, f in enumerate(fields))
    either = not fields[2].startswith("*") and not fields[4].startswith("*")
    in_day = sorted(h * 3600 + m * 60 for h in hours for m in minutes)
    matching = []
    for offset in range(_SPAN_DAYS):
        day = _START + timedelta(days=offset)
        by_date, by_weekday = day.day in days, (day.isoweekday() % 7) in weekdays
        if day.month in months and ((by_date or by_weekday) if either else (by_date and by_weekday)):
            matching.append(offset)
    return in_day, matching


def shortest_interval_seconds(schedule: str) -> int:
    """The shortest time between two consecutive runs of the five-field ``schedule``; ValueError (one
    line) for a malformed field or a schedule that runs less than twice in eight years."""
    in_day, matching = _runs(schedule)
    gaps = [b - a for a, b in pairwise(in_day)]
    gaps += [(b - a) * DAY_S - in_day[-1] + in_day[0] for a, b in pairwise(matching)] if in_day else []
    if not gaps or not matching:
        raise ValueError(f"{schedule!r} runs less than twice in eight years")
    return min(gaps)


def longest_span_seconds(schedule: str, windows: int) -> int:
    """The longest time ``windows`` consecutive windows of ``schedule`` cover: from a run to the run
    ``windows`` later, the longest over the eight years (``windows`` times the interval on a regular
    schedule); ValueError (one line) for a schedule that runs fewer than ``windows + 1`` times in them.

    The run ``windows`` after the ``i``-th of a day is the ``(i + windows) % n``-th of the matching day
    ``(i + windows) // n`` later (``n`` runs a day), so each ``i`` needs only the widest such gap in days.
    """
    in_day, matching = _runs(schedule)
    runs = len(in_day)
    widest: dict[int, int | None] = {}
    spans = []
    for index, start in enumerate(in_day):
        later, end = divmod(index + windows, runs)
        if later not in widest:
            pairs = zip(matching[: max(len(matching) - later, 0)], matching[later:], strict=True)
            widest[later] = max((b - a for a, b in pairs), default=None)
        days = widest[later]
        if days is not None:
            spans.append(days * DAY_S + in_day[end] - start)
    if not spans:
        raise ValueError(f"{schedule!r} runs fewer than {windows + 1} times in eight years")
    return max(spans)
