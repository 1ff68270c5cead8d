"""The price snapshot and its refresh: every row dated and sourced, a price used only in its own region,
and `mlplatform prices refresh` rebuilding rows from recorded AWS Price List and Azure Retail Prices
answers (tests/mlplatform/data/prices/README.md) through an injected transport, with no network."""

from __future__ import annotations

import datetime
import urllib.parse
from pathlib import Path

import pytest
import typer
import yaml

from mlplatform.costing import estimate
from mlplatform.errors import InputError
from mlplatform.graph import Plan, PlannedResource
from mlplatform.prices_cmd import run_refresh
from mlplatform.prices_refresh import AWS_OFFERS, Transport, aws_rule, azure_rule, refresh
from mlplatform.pricing import COLUMNS, REGIONS, Snapshot, load_snapshot, parse_rows

DATA = Path(__file__).parent / "data" / "prices"
TODAY = datetime.date(2026, 12, 1)
HEADER = ",".join(COLUMNS)


def _rows(*lines: str) -> list[str]:
    return [HEADER, *lines]


def test_every_shipped_row_is_in_its_clouds_regions_and_sourced_or_explained() -> None:
    snapshot = load_snapshot()
    for row in snapshot.rows:
        assert row.region in REGIONS[row.cloud], row
        assert row.source if row.price is not None else row.note, row
    # The catalogue rows name the commit and file they were read from.
    instances = [row for row in snapshot.rows if row.service == "ec2-instance"]
    assert instances and all("@" in row.source and ":catalogs/" in row.source for row in instances)


def test_a_row_promises_a_refresh_only_where_refresh_has_a_rule_for_it() -> None:
    """A note saying `prices refresh` fills a row is a promise: prices_refresh.py must match that row."""
    for row in load_snapshot().rows:
        rule = (aws_rule if row.cloud == "aws" else azure_rule)(row.service, row.sku)
        if "refresh fills" in row.note:
            assert rule is not None, f"{row.cloud} {row.service} {row.sku}: note promises a refresh rule"
        if "no refresh rule yet" in row.note:
            assert rule is None, f"{row.cloud} {row.service} {row.sku}: has a rule, says it has none"


def test_every_pool_of_every_shipped_stack_has_a_row_in_its_own_region() -> None:
    """Priced or explained, never missing: the snapshot covers what the stacks run (issue 39)."""
    snapshot = load_snapshot()
    for path in sorted(Path("stacks").glob("Pulumi.*.yaml")):
        config = yaml.safe_load(path.read_text())["config"]
        cloud = "aws" if "aws:region" in config else "azure"
        region = config.get("aws:region") or config["azure-native:location"]
        service = "ec2-instance" if cloud == "aws" else "vm"
        for pool in config["ml-platform:platform"]["nodePools"]:
            assert snapshot.find(cloud, region, service, pool["instanceType"]) is not None, (path, pool)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("aws,uaenorth,ec2-instance,x,hour,1,,,USD,src,2026-11-29,", "region 'uaenorth' is not a aws region"),
        ("azure,uaenorth,vm,x,hour,1,,,USD,,2026-11-29,", "a price needs its source"),
        ("azure,uaenorth,vm,x,hour,,,,USD,,2026-11-29,", "an unpriced row says why in note"),
        (
            "aws,me-central-1,ec2-instance,x,hour,1,0.5,,USD,src,2026-11-29,",
            "spot_low and spot_high are a range",
        ),
        ("aws,me-central-1,ec2-instance,x,hour,1,,,AED,src,2026-11-29,", "the snapshot is in USD"),
    ],
)
def test_a_bad_row_is_one_line_naming_it(line: str, problem: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_rows(_rows(line), "snapshot.csv")
    [message] = raised.value.problems
    assert message.startswith("snapshot.csv:2") and problem in message


def test_a_price_is_never_borrowed_from_another_region() -> None:
    """uaenorth's price does not price a pool in uaecentral: the pool is listed as unpriced instead."""
    rows = parse_rows(
        _rows("azure,uaenorth,vm,Standard_D4s_v5,hour,0.2,,,USD,src,2026-11-29,"), "snapshot.csv"
    )
    snapshot = Snapshot(rows, Path("snapshot.csv"))
    assert snapshot.find("azure", "uaecentral", "vm", "Standard_D4s_v5") is None
    pool = PlannedResource(
        "urn:pool",
        "azure-native:containerservice:AgentPool",
        "pool",
        None,
        True,
        None,
        {"vmSize": "Standard_D4s_v5", "minCount": 1.0, "maxCount": 2.0, "osDiskType": "Ephemeral"},
    )
    plan = Plan("p", "s", [pool], {"cloud": "azure", "region": "uaecentral"})
    [item, egress] = estimate(plan, snapshot).items
    assert not item.priced and "no vm Standard_D4s_v5 row for uaecentral" in (item.unpriced or "")
    assert egress.usage


def _transport(answers: dict[str, Path], asked: list[str]) -> Transport:
    def get(url: str) -> bytes:
        asked.append(url)
        for needle, path in answers.items():
            if needle in urllib.parse.unquote(url):
                return path.read_bytes()
        raise OSError(f"no recorded answer for {url}")

    return get


SNAPSHOT_LINES = (
    "aws,me-central-1,ec2-instance,c7i.2xlarge,hour,0.429,0.18,0.21,USD,catalogue,2026-11-29,",
    "aws,me-central-1,ebs,gp3,GB-month,,,,USD,,2026-11-29,not reachable",
    "aws,me-central-1,nat-gateway,gateway,hour,,,,USD,,2026-11-29,not reachable",
    "aws,me-central-1,efs,standard-elastic,GB-month,,,,USD,,2026-11-29,no rule for this one",
    "azure,uaenorth,vm,Standard_D4s_v5,hour,,,,USD,,2026-11-29,not reachable",
)


def test_refresh_rebuilds_rows_from_recorded_answers_in_their_own_region() -> None:
    asked: list[str] = []
    transport = _transport(
        {
            "AmazonEC2/current/me-central-1": DATA / "aws-ec2-me-central-1.json",
            "page=2": DATA / "azure-vm-uaenorth-2.json",
            "armRegionName eq 'uaenorth'": DATA / "azure-vm-uaenorth-1.json",
        },
        asked,
    )
    outcome = refresh(list(parse_rows(_rows(*SNAPSHOT_LINES), "s.csv")), transport, TODAY)
    rows = {(row.service, row.sku): row for row in outcome.rows}
    instance = rows["ec2-instance", "c7i.2xlarge"]
    # Linux, shared tenancy: neither the Windows nor the Dedicated product.
    assert instance.price == 0.4 and instance.date == TODAY
    assert instance.source == AWS_OFFERS.format(offer="AmazonEC2", region="me-central-1")
    # The Price List has no spot prices: the range stays, and says where it came from.
    assert (instance.spot_low, instance.spot_high) == (0.18, 0.21) and "catalogue" in instance.note
    assert rows["ebs", "gp3"].price == 0.1 and rows["nat-gateway", "gateway"].price == 0.05
    vm = rows["vm", "Standard_D4s_v5"]
    # Linux pay-as-you-go; the Windows, Low Priority and DevTest meters ignored; spot from its own meter.
    assert (vm.price, vm.spot_low, vm.spot_high) == (0.2, 0.04, 0.04)
    assert "armRegionName eq 'uaenorth'" in urllib.parse.unquote(vm.source)
    assert outcome.kept == ["aws me-central-1 efs standard-elastic"]
    assert rows["efs", "standard-elastic"].note == "no rule for this one"
    # One offer file per service and region, however many rows it prices; two Azure pages followed.
    assert sum("AmazonEC2" in url for url in asked) == 1 and len(asked) == 3


def test_refresh_refuses_an_answer_for_another_region() -> None:
    line = "azure,uaecentral,vm,Standard_D4s_v5,hour,,,,USD,,2026-11-29,not reachable"
    transport = _transport({"uaecentral": DATA / "azure-vm-uaecentral-wrong-region.json"}, [])
    with pytest.raises(InputError) as raised:
        refresh(list(parse_rows(_rows(line), "s.csv")), transport, TODAY)
    assert raised.value.problems == ["prices refresh: asked Azure for uaecentral, got uaenorth"]


def test_prices_refresh_writes_the_snapshot_and_says_what_it_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "snapshot.csv"
    snapshot.write_text("\n".join(_rows(*SNAPSHOT_LINES[:1], SNAPSHOT_LINES[3])) + "\n")
    run_refresh(snapshot, _transport({"AmazonEC2": DATA / "aws-ec2-me-central-1.json"}, []))
    row = load_snapshot(snapshot).find("aws", "me-central-1", "ec2-instance", "c7i.2xlarge")
    assert row is not None and row.price == 0.4
    out = capsys.readouterr().out
    assert "1 rows refreshed, 1 kept" in out and "efs standard-elastic" in out


def test_an_unreachable_api_is_one_line_and_leaves_the_snapshot_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "snapshot.csv"
    before = "\n".join(_rows(SNAPSHOT_LINES[0])) + "\n"
    snapshot.write_text(before)
    with pytest.raises(typer.Exit) as exited:
        run_refresh(snapshot, _transport({}, []))
    assert exited.value.exit_code == 2 and snapshot.read_text() == before
    [line] = capsys.readouterr().err.splitlines()
    assert "ec2-instance c7i.2xlarge: no recorded answer" in line
