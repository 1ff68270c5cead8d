"""A CronJob's ``spec.schedule`` as the API server validates it on create: k8s.io/kubernetes
``pkg/apis/batch/validation`` ``validateScheduleFormat`` parses it with ``cron.ParseStandard`` of
github.com/robfig/cron/v3 (v3.0.1, ``parser.go``, ``spec.go``) and refuses any schedule that contains
``TZ`` ("cannot use TZ or CRON_TZ in schedule, use timeZone field instead": the ``timeZone`` field says
it). The parser's semantics, reproduced here with its error texts:

- an optional ``TZ=<zone>`` or ``CRON_TZ=<zone>`` prefix, the zone loaded as Go's ``time.LoadLocation``;
- a descriptor (``@yearly``, ``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight``,
  ``@hourly``, or ``@every <Go duration>``), matched whole;
- else exactly 5 whitespace-separated fields: minute 0-59, hour 0-23, day of month 1-31, month 1-12
  (``jan``-``dec``), day of week 0-6 (``sun``-``sat``; 7 is out of range); each a comma list of ranges
  ``*``/``?``, ``N``, ``N-M``, each with an optional ``/step``; ``N/step`` means ``N-max/step``. A step
  larger than the range is accepted (``*/61`` runs at minute 0 only), a value outside it is not
  (``61``: "end of range (61) above maximum (59)").
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass, field

_DESCRIPTORS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
_EVERY = "@every "
# Go time.ParseDuration: [-+]? then one or more <decimal><unit>; a bare (signed) "0" is allowed.
_DURATION = re.compile(r"^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$")
# strconv.Atoi: an optional sign and decimal digits, within int64.
_INT = re.compile(r"^[+-]?[0-9]+$")
_INT64 = 2**63


@dataclass(frozen=True)
class _Bounds:
    low: int
    high: int
    names: dict[str, int] = field(default_factory=dict)


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# minute, hour, day of month, month, day of week (spec.go ``bounds``).
_FIELDS = (
    _Bounds(0, 59),
    _Bounds(0, 23),
    _Bounds(1, 31),
    _Bounds(1, 12, {name: n + 1 for n, name in enumerate(_MONTHS)}),
    _Bounds(0, 6, {name: n for n, name in enumerate(_DAYS)}),
)


class ScheduleError(ValueError):
    """What ``cron.ParseStandard`` returns for a schedule it refuses."""


def _int(expr: str) -> int:
    """``mustParseInt``."""
    if not _INT.match(expr) or not -_INT64 <= int(expr) < _INT64:
        raise ScheduleError(
            f'failed to parse int from {expr}: strconv.Atoi: parsing "{expr}": invalid syntax'
        )
    number = int(expr)
    if number < 0:
        raise ScheduleError(f"negative number ({number}) not allowed: {expr}")
    return number


def _int_or_name(expr: str, bounds: _Bounds) -> int:
    return bounds.names[expr.lower()] if expr.lower() in bounds.names else _int(expr)


def _range(expr: str, bounds: _Bounds) -> None:
    """``getRange``: ``number | number "-" number [ "/" number ]``, or ``*``/``?`` with a step."""
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    if low_and_high[0] in {"*", "?"}:
        start, end = bounds.low, bounds.high
    else:
        start = _int_or_name(low_and_high[0], bounds)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _int_or_name(low_and_high[1], bounds)
        else:
            raise ScheduleError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _int(range_and_step[1])
        if len(low_and_high) == 1:
            end = bounds.high  # "N/step" means "N-max/step"
    else:
        raise ScheduleError(f"too many slashes: {expr}")
    if start < bounds.low:
        raise ScheduleError(f"beginning of range ({start}) below minimum ({bounds.low}): {expr}")
    if end > bounds.high:
        raise ScheduleError(f"end of range ({end}) above maximum ({bounds.high}): {expr}")
    if start > end:
        raise ScheduleError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise ScheduleError(f"step of range should be a positive number: {expr}")


def _zone(name: str) -> None:
    """``time.LoadLocation``: ``""`` and ``UTC`` are UTC, ``Local`` the local zone, else an IANA name."""
    if name in {"", "UTC", "Local"}:
        return
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as error:
        raise ScheduleError(f"provided bad location {name}: unknown time zone {name}") from error


def parse_standard(spec: str) -> None:
    """``cron.ParseStandard``: returns when the spec parses, raises ``ScheduleError`` with its text."""
    if not spec:
        raise ScheduleError("empty spec string")
    if spec.startswith(("TZ=", "CRON_TZ=")):
        space = spec.find(" ")
        if space < 0:
            raise ScheduleError(f"provided bad location in {spec}: no schedule after the zone")
        _zone(spec[spec.index("=") + 1 : space])
        spec = spec[space:].strip()
    if spec.startswith("@"):
        if spec in _DESCRIPTORS:
            return
        if spec.startswith(_EVERY):
            duration = spec[len(_EVERY) :]
            if duration.lstrip("+-") != "0" and not _DURATION.match(duration):
                raise ScheduleError(f"failed to parse duration {spec}: not a Go duration (as 1h30m is)")
            return
        raise ScheduleError(f"unrecognized descriptor: {spec}")
    fields = spec.split()
    if len(fields) != len(_FIELDS):
        raise ScheduleError(
            f"expected exactly {len(_FIELDS)} fields, found {len(fields)}: [{' '.join(fields)}]"
        )
    for text, bounds in zip(fields, _FIELDS, strict=True):
        for expr in (part for part in text.split(",") if part):
            _range(expr, bounds)


def schedule_problems(schedule: str) -> list[str]:
    """What ``validateScheduleFormat`` says about ``schedule`` on create (empty: it is valid)."""
    if not schedule:
        return ["Required value"]
    problems = []
    try:
        parse_standard(schedule)
    except ScheduleError as error:
        problems.append(str(error))
    if "TZ" in schedule:
        problems.append("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
    return problems
