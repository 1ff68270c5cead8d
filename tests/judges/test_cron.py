"""A CronJob's schedule as the API server validates it on create: k8s.io/kubernetes
``pkg/apis/batch/validation`` ``validateScheduleFormat``, which parses with robfig/cron/v3
``ParseStandard`` (``parser.go`` ``getRange``, ``parseDescriptor``; ``spec.go`` bounds) and refuses
``TZ``/``CRON_TZ`` in the schedule. The expected texts are the parser's own errors."""

from __future__ import annotations

import pytest

from judges.cron import schedule_problems


@pytest.mark.parametrize(
    "schedule",
    [
        "0 3 * * *",
        "*/15 * * * *",
        "*/61 * * * *",  # a step past the range keeps its first value (minute 0): accepted
        "0 0 1 jan,JUL *",
        "0 0 * * mon-fri",
        "0 0 ? * 0",
        "5/10 * * * *",  # N/step is N-max/step
        "@hourly",
        "@midnight",
        "@annually",
        "@every 1h30m",
        "@every 0",
    ],
)
def test_schedules_the_standard_parser_accepts(schedule: str) -> None:
    assert schedule_problems(schedule) == []


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        ("61 * * * *", "end of range (61) above maximum (59): 61"),
        ("0 24 * * *", "end of range (24) above maximum (23): 24"),
        ("0 0 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("0 0 * * 7", "end of range (7) above maximum (6): 7"),  # Sunday is 0 only
        ("0 0 * 13 *", "end of range (13) above maximum (12): 13"),
        ("30-10 * * * *", "beginning of range (30) beyond end of range (10): 30-10"),
        ("*/0 * * * *", "step of range should be a positive number: */0"),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("*/2/3 * * * *", "too many slashes: */2/3"),
        ("0 0 * * funday", "failed to parse int from funday"),
        ("* * * *", "expected exactly 5 fields, found 4"),
        ("0 0 * * * *", "expected exactly 5 fields, found 6"),  # no seconds field in the standard parser
        ("@fortnightly", "unrecognized descriptor: @fortnightly"),
        ("@every 5", "failed to parse duration @every 5"),
        ("", "Required value"),
    ],
)
def test_schedules_the_api_server_refuses(schedule: str, problem: str) -> None:
    [found] = schedule_problems(schedule)
    assert found.startswith(problem), found


def test_a_time_zone_in_the_schedule_is_refused_on_create_even_when_it_parses() -> None:
    """validateScheduleFormat: "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"."""
    assert schedule_problems("CRON_TZ=Asia/Dubai 0 3 * * *") == [
        "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
    ]
    assert schedule_problems("TZ=Mars/Olympus 0 3 * * *") == [
        "provided bad location Mars/Olympus: unknown time zone Mars/Olympus",
        "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
    ]
