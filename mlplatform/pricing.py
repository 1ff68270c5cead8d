"""The price snapshot: dated, sourced unit prices per cloud region (``mlplatform/prices/snapshot.csv``).

Each row prices one thing in one region: ``cloud, region, service, sku, unit``, the on-demand ``price``,
a ``spot_low``-``spot_high`` range where the cloud sells spot, the ``currency``, its ``source`` (a URL or
``owner/repo@commit:path``) and the ``date`` it was read. A row with no price says why in ``note``: a price
is looked up in its own region only, never borrowed from another (docs/cost.md). ``mlplatform prices
refresh`` rebuilds the file from the clouds' public price APIs (``mlplatform.prices_refresh``).
"""

from __future__ import annotations

import csv
import datetime
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mlplatform.errors import InputError

SNAPSHOT = Path(__file__).resolve().parent / "prices" / "snapshot.csv"
COLUMNS = (
    "cloud",
    "region",
    "service",
    "sku",
    "unit",
    "price",
    "spot_low",
    "spot_high",
    "currency",
    "source",
    "date",
    "note",
)
# The regions the platform's residency allows (policies: allowedAwsRegions, allowedAzureLocations).
REGIONS = {"aws": ("me-central-1",), "azure": ("uaenorth", "uaecentral")}
# The clouds bill by the hour and quote monthly figures at 730 hours (AWS and Azure pricing pages).
HOURS_PER_MONTH = 730.0
DAYS_PER_MONTH = HOURS_PER_MONTH / 24


@dataclass(frozen=True)
class PriceRow:
    cloud: str
    region: str
    service: str
    sku: str
    unit: str
    price: float | None
    spot_low: float | None
    spot_high: float | None
    currency: str
    source: str
    date: datetime.date
    note: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.cloud, self.region, self.service, self.sku)


@dataclass(frozen=True)
class Snapshot:
    rows: tuple[PriceRow, ...]
    path: Path

    def find(self, cloud: str, region: str, service: str, sku: str) -> PriceRow | None:
        """The row for exactly this region, or none: another region's price is never used."""
        return self._index.get((cloud, region, service, sku))

    @functools.cached_property
    def _index(self) -> Mapping[tuple[str, str, str, str], PriceRow]:
        return {row.key: row for row in self.rows}

    def oldest(self, rows: Iterable[PriceRow] | None = None) -> datetime.date:
        """The date of the oldest priced row (of ``rows``, else of the whole snapshot)."""
        dates = [row.date for row in (self.rows if rows is None else rows) if row.price is not None]
        return min(dates, default=min(row.date for row in self.rows))

    def age_line(self, today: datetime.date, rows: Iterable[PriceRow] | None = None) -> str:
        oldest = self.oldest(rows)
        days = (today - oldest).days
        return (
            f"prices as of {oldest.isoformat()} ({days} day{'s' if days != 1 else ''} old; {self.path.name})"
        )


def _number(text: str, where: str) -> float | None:
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError([f"{where}: {text!r} is not a number"]) from None
    if value < 0:
        raise InputError([f"{where}: a price is never negative, got {value}"])
    return value


def parse_rows(lines: Iterable[str], source_name: str) -> tuple[PriceRow, ...]:
    """Rows from CSV text, each checked: known region for its cloud, a source, a reason when unpriced, a
    spot range that is a range."""
    reader = csv.DictReader(lines)
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise InputError([f"{source_name}: columns must be {', '.join(COLUMNS)}"])
    rows: list[PriceRow] = []
    seen: set[tuple[str, str, str, str]] = set()
    for number, raw in enumerate(reader, start=2):
        where = f"{source_name}:{number}"
        regions = REGIONS.get(raw["cloud"])
        if regions is None:
            raise InputError([f"{where}: cloud {raw['cloud']!r} is not one of {', '.join(REGIONS)}"])
        if raw["region"] not in regions:
            raise InputError(
                [f"{where}: region {raw['region']!r} is not a {raw['cloud']} region this platform uses"]
            )
        try:
            date = datetime.date.fromisoformat(raw["date"])
        except ValueError:
            raise InputError([f"{where}: date {raw['date']!r} is not YYYY-MM-DD"]) from None
        row = PriceRow(
            cloud=raw["cloud"],
            region=raw["region"],
            service=raw["service"],
            sku=raw["sku"],
            unit=raw["unit"],
            price=_number(raw["price"], f"{where} price"),
            spot_low=_number(raw["spot_low"], f"{where} spot_low"),
            spot_high=_number(raw["spot_high"], f"{where} spot_high"),
            currency=raw["currency"],
            source=raw["source"].strip(),
            date=date,
            note=raw["note"].strip(),
        )
        if row.currency != "USD":
            raise InputError([f"{where}: currency {row.currency!r}; the snapshot is in USD"])
        if row.price is not None and not row.source:
            raise InputError([f"{where}: a price needs its source"])
        if row.price is None and not row.note:
            raise InputError([f"{where}: an unpriced row says why in note"])
        if (row.spot_low is None) != (row.spot_high is None) or (
            row.spot_low is not None and row.spot_high is not None and row.spot_low > row.spot_high
        ):
            raise InputError([f"{where}: spot_low and spot_high are a range (both, low <= high) or neither"])
        if row.key in seen:
            raise InputError([f"{where}: {'/'.join(row.key)} is priced twice"])
        seen.add(row.key)
        rows.append(row)
    if not rows:
        raise InputError([f"{source_name}: no rows"])
    return tuple(rows)


def load_snapshot(path: Path = SNAPSHOT) -> Snapshot:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError([f"{path}: cannot read the price snapshot ({error.strerror})"]) from None
    return Snapshot(parse_rows(text.splitlines(), path.name), path)


def write_rows(rows: Iterable[PriceRow], path: Path) -> None:
    """Write rows in the snapshot's format (the order given), atomically."""
    temporary = path.with_suffix(".csv.tmp")
    with temporary.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow(
                [
                    row.cloud,
                    row.region,
                    row.service,
                    row.sku,
                    row.unit,
                    _text(row.price),
                    _text(row.spot_low),
                    _text(row.spot_high),
                    row.currency,
                    row.source,
                    row.date.isoformat(),
                    row.note,
                ]
            )
    temporary.replace(path)


def _text(value: float | None) -> str:
    return "" if value is None else f"{value:g}"
