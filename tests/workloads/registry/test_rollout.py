"""The registry's client rules without a server: alias decisions, model URIs, serve settings, CLI input.

Aliases and model URIs as MLflow defines them (https://mlflow.org/docs/latest/ml/model-registry/:
``models:/<name>@<alias>`` loads the version an alias points at, ``models:/<name>/<version>`` a fixed one).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.workloads.inference.serving import free_port
from workloads.inference.config import ServeConfig
from workloads.registry import approval, rollout
from workloads.registry.client import ModelRef, RegistryClient, RegistryError, artifact_path
from workloads.registry.lock import PASSED, STOPPED, verdict_action
from workloads.registry.record import Event
from workloads.training.config import ConfigError, parse_args

DATASET = "ce8026359bba" + "0" * 52
MLPLATFORM = str(Path(sys.executable).with_name("mlplatform"))


def promote(
    champion: str | None, candidate: float | None, held: float | None, *, force: bool = False
) -> rollout.Decision:
    return rollout.promotion(
        "2",
        champion,
        metric="test_accuracy",
        candidate=rollout.Evidence(candidate, DATASET),
        held=rollout.Evidence(held, DATASET),
        tolerance=0.01,
        force=force,
    )


def test_first_promotion_moves_champion_only() -> None:
    assert promote(None, 0.5, None).moves == (rollout.AliasMove("champion", "2"),)


def test_promotion_records_the_replaced_champion_before_moving_champion() -> None:
    decision = promote("1", 0.95, 0.95)
    assert decision.moves == (rollout.AliasMove("previous-champion", "1"), rollout.AliasMove("champion", "2"))


def test_a_challenger_below_the_champion_by_more_than_the_tolerance_is_refused_unless_forced() -> None:
    assert promote("1", 0.949, 0.95).refused is None  # within 0.01
    refused = promote("1", 0.93, 0.95)
    assert refused.moves == () and refused.refused is not None and "0.9300" in refused.refused
    assert promote("1", 0.93, 0.95, force=True).moves[-1] == rollout.AliasMove("champion", "2")
    assert promote("1", None, 0.95).refused is not None, "no metric, no comparison: refused"


def test_a_metric_measured_on_another_dataset_is_not_compared_unless_forced() -> None:
    """Trial defect 1: v3, trained and tested on shifted data, had a higher test accuracy than the champion
    on its own split and was promoted without --force; it served at 0.1 %."""

    def decide(candidate: rollout.Evidence, *, force: bool = False) -> rollout.Decision:
        held = rollout.Evidence(0.9721, DATASET)
        return rollout.promotion(
            "3", "2", metric="test_accuracy", candidate=candidate, held=held, tolerance=0.01, force=force
        )

    shifted = decide(rollout.Evidence(0.9777, "f" * 64))
    assert shifted.moves == () and shifted.refused is not None
    assert f"measured on dataset {'f' * 12}, the champion's (version 2) on {DATASET[:12]}" in shifted.refused
    unknown = decide(rollout.Evidence(0.9777, None))
    assert unknown.refused is not None and "version 3 records no dataset digest" in unknown.refused
    assert decide(rollout.Evidence(0.9777, DATASET)).moves[-1] == rollout.AliasMove("champion", "3")
    assert decide(rollout.Evidence(0.9777, "f" * 64), force=True).moves[-1] == rollout.AliasMove(
        "champion", "3"
    )


# The stack's rollout user (components/handle.py ROLLOUT_USER), whose record endings count.
ROLLOUT_USER = "ml-inference-rollout"
# The digests the record's events carry for each version (record.py ``version_digest``).
DIGESTS = {"1": "sha256:" + "1" * 64, "2": "sha256:" + "2" * 64, "3": "sha256:" + "3" * 64}


def test_a_passed_rollout_counts_only_until_the_champion_moves() -> None:
    """Review rev40b C2: a ``passed`` judged the version beside the champion of its time; a promotion or a
    rollback since (one that returned the same champion included) ends it, a new rollout counts again."""

    def event(action: str, versions: dict[str, str], by: str = ROLLOUT_USER) -> Event:
        at = f"2026-11-29T21:{len(events):02d}:00+00:00"
        digests = {v: DIGESTS[v] for v in versions.values()}
        return Event(
            at=at, model="m", action=action, by=by, authenticated=True, versions=versions, digests=digests
        )

    judged = {rollout.CHAMPION: "1", rollout.CHALLENGER: "3"}
    events: list[Event] = []
    events.append(event(verdict_action(PASSED), judged))
    assert approval.rollout_verdict(events, "3", DIGESTS["3"], ROLLOUT_USER) == approval.Verdict(
        PASSED, "", "1"
    )
    for move in (approval.PROMOTE, approval.ROLLBACK):
        # 1 -> 2, then back to 1: the champion is version 1 again, but not the one the rollout judged beside.
        events.append(event(move, {rollout.CHAMPION: "2" if move == approval.PROMOTE else "1"}, by="alice"))
        assert approval.rollout_verdict(events, "3", DIGESTS["3"], ROLLOUT_USER) is None, move
    events.append(event(verdict_action(PASSED), judged))
    assert approval.rollout_verdict(events, "3", DIGESTS["3"], ROLLOUT_USER) == approval.Verdict(
        PASSED, "", "1"
    )
    # A stop is never a privilege: it counts whatever moved since.
    events.extend([event(verdict_action(STOPPED), judged), event(approval.PROMOTE, {}, by="alice")])
    assert approval.rollout_verdict(events, "3", DIGESTS["3"], ROLLOUT_USER) == approval.Verdict(
        STOPPED, "", "1"
    )
    # Review rev40c C3: version 3 of a model deleted and re-created is another version; no ending counts.
    assert approval.rollout_verdict(events, "3", "sha256:" + "f" * 64, ROLLOUT_USER) is None


def test_a_passed_rollout_compares_only_where_it_measured_both_versions_on_one_labelled_set() -> None:
    """Issue 40 item 5: "promotion compares like with like (the same evaluation set, or refuses and says
    why)". A version retrained on the newest dataset has a test metric on another dataset than the
    champion's, which compares with nothing. A rollout that passed against this very champion and measured
    both on its plan's labelled set compares them there, within the tolerance; one whose plan had no
    labelled set judged errors, latency and drift, never accuracy (review rev40b A2): the dataset rule
    applies and the refusal says why; against another champion, likewise."""

    def decide(against: str, labelled: tuple[float, float] | None) -> rollout.Decision:
        passed = rollout.Evidence(0.86, "f" * 64, "passed", "passed shadow, 50%", against, labelled)
        return rollout.promotion(
            "3",
            "2",
            metric="test_accuracy",
            candidate=passed,
            held=rollout.Evidence(0.97, DATASET),
            tolerance=0.01,
            force=False,
        )

    assert decide("2", (0.905, 0.91)).moves[-1] == rollout.AliasMove("champion", "3")
    worse = decide("2", (0.80, 0.91)).refused
    assert worse == (
        "version 3's labelled-set accuracy 0.8000 in its rollout is below the champion's (version 2) 0.9100"
        " on the same set by more than the tolerance 0.01 (use --force)"
    )
    unmeasured = decide("2", None).refused
    assert unmeasured is not None and f"measured on dataset {'f' * 12}" in unmeasured
    assert "its rollout passed against version 2 but measured no accuracy beside it (the plan has no" in (
        unmeasured
    )
    other = decide("1", (0.95, 0.91)).refused
    assert other is not None and f"measured on dataset {'f' * 12}" in other


@pytest.mark.parametrize("outcome", ["stopped", "rolled-back"])
def test_a_version_whose_last_rollout_failed_is_not_promoted_unless_forced(outcome: str) -> None:
    """Trial defect 1: a rollout's ``outcome=stopped`` was ignored by ``models promote``."""
    failed = rollout.Evidence(0.99, DATASET, outcome, "stopped at shadow: PSI 18.419 > 0.2")
    for champion in ("1", None):
        decision = rollout.promotion(
            "2",
            champion,
            metric="m",
            candidate=failed,
            held=rollout.Evidence(0.9, DATASET),
            tolerance=0,
            force=False,
        )
        assert decision.refused == (
            f"version 2's last rollout ended {outcome}: stopped at shadow: PSI 18.419 > 0.2 (use --force)"
        )
    forced = rollout.promotion(
        "2", "1", metric="m", candidate=failed, held=rollout.Evidence(), tolerance=0, force=True
    )
    assert forced.moves[-1] == rollout.AliasMove("champion", "2")


def test_promoting_the_champion_is_a_no_op() -> None:
    decision = promote("2", 0.9, 0.9)
    assert decision.moves == () and decision.refused is None and decision.note


def test_rollback_swaps_champion_and_previous_so_a_second_one_undoes_it() -> None:
    first = rollout.rollback("2", "1")
    assert first.moves == (rollout.AliasMove("previous-champion", "2"), rollout.AliasMove("champion", "1"))
    assert rollout.rollback("1", "2").moves[-1] == rollout.AliasMove("champion", "2")
    assert rollout.rollback("2", None).refused is not None


def test_audit_tags_name_who_when_and_how() -> None:
    when = datetime(2026, 11, 26, 3, 0, tzinfo=UTC)
    tags = rollout.audit_tags(rollout.AliasMove("champion", "3"), actor="ana", action="rollback", when=when)
    assert tags == {
        "mlplatform.alias.champion.by": "ana",
        "mlplatform.alias.champion.at": "2026-11-26T03:00:00+00:00",
        "mlplatform.alias.champion.action": "rollback",
    }


@pytest.mark.parametrize(
    ("uri", "ref"),
    [
        ("models:/digits@champion", ModelRef("digits", alias="champion")),
        ("models:/digits/7", ModelRef("digits", version="7")),
    ],
)
def test_model_uris(uri: str, ref: ModelRef) -> None:
    assert ModelRef.parse(uri) == ref and str(ref) == uri


@pytest.mark.parametrize("uri", ["models:/digits", "models:/digits@", "runs:/abc/model", "models:/a/b/c"])
def test_bad_model_uris(uri: str) -> None:
    with pytest.raises(ValueError, match="models:/<name>@<alias>"):
        ModelRef.parse(uri)


def test_artifact_paths_stay_inside_the_proxy() -> None:
    assert artifact_path("mlflow-artifacts:/1/abc/artifacts/model") == "1/abc/artifacts/model"
    assert artifact_path("mlflow-artifacts://registry:5000/1/abc/artifacts/model") == "1/abc/artifacts/model"
    for bad in ("s3://bucket/model", "mlflow-artifacts:/1/../../etc"):
        with pytest.raises(RegistryError):
            artifact_path(bad)


def test_serve_settings_take_a_registry_model_from_the_container_environment(tmp_path: Path) -> None:
    env = {"SERVE_MODEL_URI": "models:/digits@champion", "MLFLOW_TRACKING_URI": "http://registry:5000"}
    config = ServeConfig.from_env(env)
    assert (config.model_uri, config.registry_uri, config.model_dir) == (
        "models:/digits@champion",
        "http://registry:5000",
        None,
    )
    with pytest.raises(ValidationError, match="MLFLOW_TRACKING_URI"):
        ServeConfig.from_env({"SERVE_MODEL_URI": "models:/digits@champion"})
    with pytest.raises(ValidationError, match="not both"):
        ServeConfig.from_env({**env, "SERVE_MODEL_DIR": str(tmp_path)})


def test_an_unreachable_registry_is_one_error_after_the_retries() -> None:
    client = RegistryClient(f"http://127.0.0.1:{free_port()}", attempts=2, timeout_s=1)
    with pytest.raises(RegistryError, match="unreachable") as caught:
        client.version_by_alias("digits", "champion")
    assert caught.value.code == "UNREACHABLE"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["promote", "digits", "two", "--registry-uri", "http://127.0.0.1:9"], "VERSION must be"),
        (["rollback", "digits"], "--registry-uri"),
        (["promote", "digits", "2", "--registry-uri", "ftp://x"], "--registry-uri"),
        (["list", "digits", "--registry-uri", "http://127.0.0.1:9"], "unreachable"),
    ],
)
def test_models_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        [MLPLATFORM, "models", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_the_trainer_takes_its_registry_from_the_flag_or_mlflows_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://registry:5000/")
    assert parse_args([]).registry_uri == "http://registry:5000"
    assert parse_args(["--registry-uri", "https://other"]).registry_uri == "https://other"
    with pytest.raises(ConfigError, match="--registry-uri"):
        parse_args(["--registry-uri", "registry:5000"])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:///tmp/mlruns")
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI"):
        parse_args([])
