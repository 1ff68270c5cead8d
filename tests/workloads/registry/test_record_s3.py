"""The lifecycle record in S3 (workloads/registry/record.py ``S3Record``), against moto's S3 server in its
own process on loopback (moto 5.2.5 implements Object Lock retention, refusing to delete a locked
version, and ``PutObject`` with ``If-None-Match: *``, moto/s3/responses.py ``put_object``).

Issue 40, "An append-only record": each event one object, written create-only, into a bucket whose Object
Lock default retention is COMPLIANCE (S3 user guide, "Object Lock retention modes"; "Add preconditions to
S3 operations with conditional requests"), read back in order by ``mlplatform models history``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from mlplatform import models_cmd
from mlplatform.cli import app
from tests.workloads.inference.serving import free_port
from tests.workloads.registry.events import sample_event
from workloads.registry import operations
from workloads.registry import record as record_module
from workloads.registry.record import Identity, RecordError, open_record

START_TIMEOUT_S = 30
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "me-central-1",
}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's server (``python -m moto.server``) in its own process group, killed at teardown."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                _, err = process.communicate()
                raise AssertionError(f"moto server exited {process.returncode}: {err!r}")
            try:
                if httpx.get(f"{endpoint}/moto-api/", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"moto server not ready on {endpoint} in {START_TIMEOUT_S} s")
            time.sleep(0.1)
        yield endpoint
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> object:
    """A boto3 client on moto, with boto3's own configuration in the environment as the record's is."""
    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL_S3": s3_endpoint}.items():
        monkeypatch.setenv(name, value)
    return boto3.client("s3")


def _locked_bucket(s3: object, name: str, mode: str = "COMPLIANCE") -> str:
    s3.create_bucket(  # type: ignore[attr-defined]
        Bucket=name,
        ObjectLockEnabledForBucket=True,
        CreateBucketConfiguration={"LocationConstraint": "me-central-1"},
    )
    s3.put_object_lock_configuration(  # type: ignore[attr-defined]
        Bucket=name,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": mode, "Days": 1}},
        },
    )
    return name


def test_history_reads_every_event_back_in_order_with_who_and_why(s3: object) -> None:
    bucket = _locked_bucket(s3, "record-history")
    uri = f"s3://{bucket}/lifecycle-record"
    record = open_record(uri)
    events = [
        sample_event("request-promotion", "2026-11-29T08:00:00.000+00:00", "better on the same set"),
        sample_event("approve", "2026-11-29T08:01:00.000+00:00", "checked the numbers"),
        sample_event("promote", "2026-11-29T08:02:00.000+00:00"),
    ]
    for event in reversed(events):  # written out of order: read back in time order
        record.append(event)

    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]  # type: ignore[attr-defined]
    assert len(keys) == 3 and all(k.startswith("lifecycle-record/digits-mlp/") for k in keys)
    assert open_record(uri).read("digits-mlp") == events

    result = CliRunner().invoke(app, ["models", "history", "digits-mlp", "--record", uri])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split()[1] for line in lines] == ["request-promotion", "approve", "promote"]
    assert "ana" in lines[1] and "champion=2" in lines[1] and lines[1].endswith("checked the numbers")


def test_an_event_is_never_replaced_and_its_version_cannot_be_deleted(
    s3: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Create-only (If-None-Match: *) and COMPLIANCE retention: the writer cannot replace or remove what
    is on the record."""
    bucket = _locked_bucket(s3, "record-immutable")
    record = open_record(f"s3://{bucket}/lifecycle-record")
    monkeypatch.setattr(record_module, "event_name", lambda event: "same-name.json")
    first = sample_event("approve", "2026-11-29T08:01:00.000+00:00", "first")
    key = record.append(first)

    with pytest.raises(
        RecordError, match=r"cannot append lifecycle-record/digits-mlp/same-name.json \(Precondition"
    ):
        record.append(sample_event("reject", "2026-11-29T08:02:00.000+00:00", "rewritten"))
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")  # type: ignore[attr-defined]
    assert head["ObjectLockMode"] == "COMPLIANCE"
    # S3 refuses a put under a default retention without Content-MD5 or a checksum header (moto does not).
    assert head["ChecksumSHA256"]
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.delete_object(Bucket=bucket, Key=key, VersionId=head["VersionId"])  # type: ignore[attr-defined]
    assert record.read("digits-mlp") == [first]


def test_a_delete_marker_hides_no_event_from_the_history(s3: object) -> None:
    """A simple DELETE in a versioned bucket adds a delete marker that hides the key from a listing of
    current objects (S3 user guide, "Working with delete markers"); Object Lock keeps the version, and the
    reader reads versions, so the event stays in the history (review rev35f A7)."""
    bucket = _locked_bucket(s3, "record-delete-marker")
    record = open_record(f"s3://{bucket}/lifecycle-record")
    events = [
        sample_event("request-promotion", "2026-11-29T08:00:00.000+00:00", "better on the same set"),
        sample_event("reject", "2026-11-29T08:01:00.000+00:00", "worse on the holdout"),
    ]
    keys = [record.append(event) for event in events]

    marker = s3.delete_object(Bucket=bucket, Key=keys[1])  # type: ignore[attr-defined]
    assert marker["DeleteMarker"] is True
    current = s3.list_objects_v2(Bucket=bucket, Prefix="lifecycle-record/")  # type: ignore[attr-defined]
    assert [o["Key"] for o in current["Contents"]] == keys[:1]
    assert record.read("digits-mlp") == events


@pytest.mark.parametrize("mode", [None, "GOVERNANCE"])
def test_a_bucket_without_compliance_retention_is_refused_and_nothing_written(
    s3: object, mode: str | None
) -> None:
    """GOVERNANCE retention can be lifted by anyone with s3:BypassGovernanceRetention; none, by anyone."""
    bucket = f"record-{(mode or 'none').lower()}"
    if mode is None:
        s3.create_bucket(  # type: ignore[attr-defined]
            Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "me-central-1"}
        )
    else:
        _locked_bucket(s3, bucket, mode)
    with pytest.raises(RecordError) as refused:
        open_record(f"s3://{bucket}/lifecycle-record").append(
            sample_event("promote", "2026-11-29T08:02:00.000+00:00")
        )
    assert str(refused.value) == (
        f"lifecycle record s3://{bucket}/lifecycle-record: bucket {bucket} has no Object Lock default "
        f"retention in COMPLIANCE mode (found {mode or 'none'}); refusing to write a record that can be "
        "rewritten"
    )
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]


def test_history_of_an_unreachable_record_is_one_line_and_exit_2(s3: object) -> None:
    result = CliRunner().invoke(app, ["models", "history", "digits-mlp", "--record", "s3://no-such-bucket/r"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: lifecycle record s3://no-such-bucket/r: cannot read r/digits-mlp/ (NoSuchBucket: The "
        "specified bucket does not exist)"
    ]


def test_a_command_that_would_act_refuses_an_unlocked_record_before_acting(
    s3: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``models promote --record`` checks the record first (``Record.ensure_ready``): a bucket without
    COMPLIANCE retention refuses the promotion with no alias moved, rather than after it (review 35b A1).
    The registry stands aside (promote replaced, no authentication), as in
    tests/mlplatform/test_models_cmd.py."""
    s3.create_bucket(  # type: ignore[attr-defined]
        Bucket="record-unready", CreateBucketConfiguration={"LocationConstraint": "me-central-1"}
    )
    promoted: list[str] = []
    monkeypatch.setattr(operations, "promote", lambda *args, **_: promoted.append(args[1]))
    monkeypatch.setattr(models_cmd, "identity", lambda _client, declared: Identity(declared, False))
    command = ["models", "promote", "digits-mlp", "2", "--registry-uri", "http://127.0.0.1:9", "--actor", "t"]
    result = CliRunner().invoke(app, [*command, "--record", "s3://record-unready/lifecycle-record"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: lifecycle record s3://record-unready/lifecycle-record: bucket record-unready has no Object "
        "Lock default retention in COMPLIANCE mode (found none); refusing to write a record that can be "
        "rewritten"
    ]
    assert promoted == []
