"""The rollout loop: step the challenger's traffic up, judge each window, promote or send traffic back.

For each step the split and shadow tags are set on the registered model (workloads/delivery/contract.py);
every server must show the setting applied (``apply_timeout_seconds``), the labelled set, if any, is sent
to the challenger, then a window is taken between two snapshots of the servers' metrics and judged
(workloads/delivery/decision.py). A window short of evidence is extended (the start kept) up to
``max_extensions`` times, then fails. A failure sets both tags to 0 in one step (split first: the
traffic), so every server sends all traffic back to the champion at its next poll, within one window;
the reason is recorded as tags on the challenger version. Passing every step promotes the challenger
(``operations.promote``: previous-champion recorded, audit tags), sets both tags to 0, and bakes: the new
champion is judged window by window for ``bake.seconds``; a breach rolls back (``operations.rollback``).

Any error mid-rollout (the registry or every server unreachable), a termination (``Terminated``: the
Job's deadline, ``kubectl delete job``, a node drain) or any other exception also sends traffic back
first (both tags to 0) and records why, then reports; a rollout never leaves a split behind it with
nothing watching. Only one rollout of a model runs at a time: ``contract.RUNNING_TAG`` on the registered
model is set at the start and cleared at the end; a second rollout refuses to start while it holds, up to
the plan's deadline (after which a rollout killed without its cleanup is presumed gone). MLflow has no
compare-and-set, so the lock is read back after it is written; two starts in the same instant may
still both pass, which is what it cannot rule out.

Time comes from ``clock`` and ``sleep``, injectable so tests play hours in milliseconds.
"""

from __future__ import annotations

import json
import math
import socket
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from workloads.delivery import contract
from workloads.delivery.decision import Outcome, Verdict, judge_bake, judge_step
from workloads.delivery.plan import RolloutPlan, Step, step_name
from workloads.delivery.scrape import (
    ScrapeError,
    Scraper,
    Snapshot,
    Target,
    bearer,
    http_call,
    not_applied,
    window_stats,
)
from workloads.registry import operations
from workloads.registry.client import RegistryClient, RegistryError
from workloads.registry.rollout import CHALLENGER, CHAMPION

# Version tags recording how the rollout of a challenger ended (beside the alias moves' own tags).
RESULT_PREFIX = "mlplatform.delivery"
RESULT_TAG = f"{RESULT_PREFIX}.result"  # one line: "promoted after ...", "stopped at 25%: ...", ...
OUTCOME_TAG = f"{RESULT_PREFIX}.outcome"  # promoted | stopped | rolled-back
# Servers are polled this often while a setting is being applied.
APPLY_POLL_S = 2.0
# Rows per V2 request of the labelled set: at most what a server takes in one request, its
# ``max_instances`` (workloads/inference/config.py, 32 by default; the Deployment does not change it).
# More is a 422 for the whole request.
LABELLED_BATCH = 32


class RolloutError(Exception):
    """The rollout could not start (bad input: exit 2); one printable line."""


class Terminated(BaseException):
    """The process was told to stop (SIGTERM: the Job's deadline, its deletion, a node drain).

    A BaseException, as KeyboardInterrupt is: no ``except Exception`` on the way (a retrying client)
    swallows it, and the rollout's own ending sends the traffic back."""


@dataclass(frozen=True)
class Result:
    outcome: str  # promoted | stopped | rolled-back
    reason: str
    challenger: str
    champion: str

    @property
    def ok(self) -> bool:
        return self.outcome == "promoted"


@dataclass(frozen=True)
class LabelledSet:
    """Rows and their labels, sent to the challenger through the V2 API at each step."""

    x: Any  # numpy float32 (rows, features)
    y: Any  # numpy int (rows,)

    @classmethod
    def load(cls, source: str, client: RegistryClient, scratch: Path) -> LabelledSet:
        """A local ``.npz`` path, or an ``mlflow-artifacts:`` URI of one (downloaded through the
        registry's artifact proxy: the file's directory is fetched, the file picked by name)."""
        import numpy as np  # the serve extra's; only a rollout with a labelled set needs it

        if source.startswith("mlflow-artifacts:"):
            folder, _, name = source.rpartition("/")
            path = client.download(folder, scratch / "labelled") / name
        else:
            path = Path(source)
        try:
            with np.load(path) as data:
                x, y = np.asarray(data["x"], dtype=np.float32), np.asarray(data["y"]).astype(np.int64)
        except (OSError, KeyError, ValueError) as exc:
            raise RolloutError(f"labelled set {source}: {exc} (an .npz with arrays x and y)") from None
        if x.ndim != 2 or y.shape != (x.shape[0],) or not len(y):
            raise RolloutError(f"labelled set {source}: x must be (rows, features) and y (rows,)")
        return cls(x, y)


@dataclass
class ServiceClient:
    """The inference Service's V2 API, for the labelled set; over HTTPS verified with ``tls`` against
    ``tls_name`` (the name the servers' certificate is issued for), else the URL's host."""

    url: str
    token_file: Path | None = None
    tls: ssl.SSLContext = field(default_factory=ssl.create_default_context)
    tls_name: str | None = None
    timeout_s: float = 30.0

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", **bearer(self.token_file)}
        target = Target(self.url.rstrip("/") + path, self.tls_name)
        try:
            status, raw = http_call(
                target, method, headers, tls=self.tls, timeout_s=self.timeout_s, body=data
            )
        except ScrapeError as exc:
            raise RolloutError(str(exc)) from None
        if status != 200:
            raise RolloutError(f"{method} {path}: HTTP {status} {raw[:200]!r}")
        result: dict[str, Any] = json.loads(raw)
        return result

    def accuracy(self, model: str, version: str, labelled: LabelledSet) -> float:
        import numpy as np

        base = f"/v2/models/{model}/versions/{version}"
        name = self._call("GET", base)["inputs"][0]["name"]
        right = 0
        for start in range(0, len(labelled.y), LABELLED_BATCH):
            rows = labelled.x[start : start + LABELLED_BATCH]
            tensor = {
                "name": name,
                "shape": list(rows.shape),
                "datatype": "FP32",
                "data": rows.ravel().tolist(),
            }
            answer = self._call("POST", f"{base}/infer", {"inputs": [tensor]})
            if str(answer.get("model_version")) != version:
                raise RolloutError(f"{base}/infer answered with version {answer.get('model_version')!r}")
            output = answer["outputs"][0]
            scores = np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
            right += int((scores.argmax(axis=1) == labelled.y[start : start + len(rows)]).sum())
        return right / len(labelled.y)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class Rollout:
    """One rollout of ``name``'s ``@challenger`` against its ``@champion``."""

    client: RegistryClient
    name: str
    plan: RolloutPlan
    scraper: Scraper
    actor: str
    service: ServiceClient | None = None
    labelled: LabelledSet | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    log: Callable[[str], None] = _log
    _passed: list[str] = field(default_factory=list)

    def run(self) -> Result:
        champion = self.client.alias_or_none(self.name, CHAMPION)
        challenger = self.client.alias_or_none(self.name, CHALLENGER)
        if champion is None or challenger is None:
            missing = CHAMPION if champion is None else CHALLENGER
            raise RolloutError(
                f"{self.name}: no @{missing} (mlplatform models promote / train registers one)"
            )
        if champion.version == challenger.version:
            raise RolloutError(f"{self.name}: @challenger is version {challenger.version}, already @champion")
        if self.plan.gates.min_accuracy is not None and (self.labelled is None or self.service is None):
            raise RolloutError("gates.minAccuracy needs the labelled set and the service URL")
        old, new = champion.version, challenger.version
        lock = self._lock()
        try:
            self.log(f"{self.name}: rolling out version {new} against champion {old}: {self._steps()}")
            return self._roll(old, new)
        finally:
            self._unlock(lock)

    def _roll(self, old: str, new: str) -> Result:
        """Every step, then the promotion; whatever ends it early sends the traffic back first."""
        where = step_name(self.plan.steps[0])
        try:
            for step in self.plan.steps:
                where = step_name(step)
                verdict = self._step(step, old, new)
                if verdict.outcome is not Outcome.PASS:
                    return self._stop(f"stopped at {where}: {verdict.reason}", old, new)
                self._passed.append(where)
                self.log(f"{self.name}: {where} passed: {verdict.reason}")
            where = "promote"
            self._promote(old, new)
        except (RegistryError, RolloutError, OSError) as exc:
            return self._stop(f"stopped at {where}: {exc}", old, new)
        except Terminated as exc:
            # Within the pod's grace period: the writes only, no wait for the servers to confirm.
            return self._stop(f"stopped at {where}: {exc}", old, new, confirm=False)
        except BaseException as exc:
            self._stop(f"stopped at {where}: unexpected {type(exc).__name__}: {exc}", old, new, confirm=False)
            raise
        return self._bake(old, new)

    # -- one rollout at a time -------------------------------------------------------------------

    def _lock(self) -> str:
        """Set RUNNING_TAG, refusing while another rollout's holds; the value set."""
        now = datetime.now(UTC)
        held = self.client.registered_model(self.name).tags.get(contract.RUNNING_TAG, "")
        holder = _holder(held)
        if holder is not None and _until(holder) > now:
            raise RolloutError(
                f"{self.name}: another rollout is in progress (by {holder.get('by')} on {holder.get('host')}"
                f" since {holder.get('at')}); it holds {contract.RUNNING_TAG} until {holder.get('until')}"
            )
        if held:
            self.log(f"{self.name}: taking over a stale {contract.RUNNING_TAG}: {held}")
        until = now + timedelta(seconds=self.plan.deadline_seconds)
        mine = json.dumps(
            {
                "by": self.actor,
                "host": socket.gethostname(),
                "at": now.isoformat(timespec="seconds"),
                "until": until.isoformat(timespec="seconds"),
            }
        )
        self.client.set_model_tag(self.name, contract.RUNNING_TAG, mine)
        if self.client.registered_model(self.name).tags.get(contract.RUNNING_TAG) != mine:
            raise RolloutError(f"{self.name}: another rollout started at the same time; try again")
        return mine

    def _unlock(self, mine: str) -> None:
        """Clear RUNNING_TAG if it is still this rollout's (a stale one may have been taken over)."""
        try:
            if self.client.registered_model(self.name).tags.get(contract.RUNNING_TAG) == mine:
                self.client.delete_model_tag(self.name, contract.RUNNING_TAG)
        except RegistryError as exc:
            self.log(f"{self.name}: clearing {contract.RUNNING_TAG} failed ({exc}); it expires by itself")

    def _steps(self) -> str:
        return ", ".join(step_name(s) for s in self.plan.steps) + ", promote"

    # -- one step --------------------------------------------------------------------------------

    def _step(self, step: Step, champion: str, challenger: str) -> Verdict:
        split, shadow = self.plan.setting(step)
        self._set(split, shadow)
        self._await_applied(split, shadow, challenger)
        accuracy = None
        if self.labelled is not None and self.service is not None:
            # Before the window's start: its requests are not counted in the window they would inflate.
            accuracy = self.service.accuracy(self.name, challenger, self.labelled)
        start = self.scraper.snapshot()
        self.log(
            f"{self.name}: {step_name(step)}: applied on {len(start)} servers; window of"
            f" {self.plan.window_seconds} s"
        )
        for extension in range(self.plan.max_extensions + 1):
            self.sleep(self.plan.window_seconds)
            end = self.scraper.snapshot()
            stats = window_stats(start, end, self.name, champion, challenger)
            stats = replace(stats, accuracy=accuracy)
            verdict = judge_step(step, stats, self.plan)
            if verdict.outcome is not Outcome.EXTEND:
                return verdict
            self.log(f"{self.name}: {step_name(step)}: window extended ({extension + 1}): {verdict.reason}")
        seconds = self.plan.window_seconds * (self.plan.max_extensions + 1)
        unreachable = (
            f"; unreachable: {', '.join(self.scraper.unreachable)}" if self.scraper.unreachable else ""
        )
        return Verdict(Outcome.FAIL, f"too little evidence after {seconds} s: {verdict.reason}{unreachable}")

    def _set(self, split: int, shadow: int) -> None:
        # Split first: when traffic goes back, the live share goes before the copies.
        self.client.set_model_tag(self.name, contract.SPLIT_TAG, str(split))
        self.client.set_model_tag(self.name, contract.SHADOW_TAG, str(shadow))

    def _await_applied(self, split: int, shadow: int, challenger: str) -> None:
        deadline = self.clock() + self.plan.apply_timeout_seconds
        while True:
            snapshot = self.scraper.snapshot()
            lagging = self._lagging(snapshot, split, shadow, challenger)
            if snapshot and not lagging:
                return
            if self.clock() >= deadline:
                shown = "; ".join(lagging + self.scraper.unreachable) or "no server found"
                raise RolloutError(
                    f"servers did not apply split {split}% / shadow {shadow}% within"
                    f" {self.plan.apply_timeout_seconds} s: {shown}"
                )
            self.sleep(APPLY_POLL_S)

    def _lagging(self, snapshot: Snapshot, split: int, shadow: int, challenger: str) -> list[str]:
        return not_applied(snapshot, self.name, contract.SPLIT_APPLIED, split, challenger) + not_applied(
            snapshot, self.name, contract.SHADOW_APPLIED, shadow, challenger
        )

    # -- endings ---------------------------------------------------------------------------------

    def _stop(self, reason: str, champion: str, challenger: str, *, confirm: bool = True) -> Result:
        self.log(f"{self.name}: {reason}; traffic back to champion {champion}")
        try:
            self._set(0, 0)
        except RegistryError as exc:
            reason += f" (and resetting the split failed: {exc}; set {contract.SPLIT_TAG}=0 by hand)"
            return Result("stopped", reason, challenger, champion)
        if confirm:
            try:  # confirmed by every server, or said that it is not
                self._await_applied(0, 0, challenger)
            except RolloutError as exc:
                reason += f" (traffic back not confirmed: {exc})"
        try:
            self._record(challenger, "stopped", reason)
        except RegistryError as exc:
            self.log(f"{self.name}: recording the result failed: {exc}")
        return Result("stopped", reason, challenger, champion)

    def _promote(self, old: str, new: str) -> None:
        action = f"promote (rollout: passed {', '.join(self._passed)})"
        operations.promote(
            self.client, self.name, new, metric="", tolerance=0.0, force=True, actor=self.actor, action=action
        )
        self._set(0, 0)
        self.log(f"{self.name}: version {new} promoted to champion (previous-champion: {old})")

    def _bake(self, old: str, new: str) -> Result:
        reason = f"promoted after {', '.join(self._passed)}"
        bake = self.plan.bake
        elapsed = 0.0
        while elapsed < bake.seconds:
            window = min(self.plan.window_seconds, bake.seconds - elapsed)
            try:
                start = self.scraper.snapshot()
                self.sleep(window)
                elapsed += window
                stats = window_stats(start, self.scraper.snapshot(), self.name, new, None)
            except BaseException as exc:
                # Promoted, the tags already at 0: what is left to say is that the bake did not finish.
                line = f"{reason}; bake cut short at {math.floor(elapsed)} s: {type(exc).__name__}: {exc}"
                self.log(f"{self.name}: {line}")
                try:
                    self._record(new, "promoted", line)
                except RegistryError as failed:
                    self.log(f"{self.name}: recording the result failed: {failed}")
                raise
            verdict = judge_bake(stats.champion, stats.drift, bake, self.plan)
            if verdict.outcome is Outcome.FAIL:
                why = f"bake: {verdict.reason}"
                operations.rollback(self.client, self.name, actor=self.actor, action=f"rollback ({why})")
                line = f"rolled back {math.floor(elapsed)} s after promotion: {verdict.reason}"
                self.log(f"{self.name}: {line}; champion back to version {old}")
                self._record(new, "rolled-back", line)
                return Result("rolled-back", line, new, old)
            self.log(f"{self.name}: bake {math.floor(elapsed)}/{bake.seconds} s: {verdict.reason}")
        if bake.seconds:
            reason += f", baked {bake.seconds} s"
        self._record(new, "promoted", reason)
        return Result("promoted", reason, new, new)

    def _record(self, version: str, outcome: str, reason: str) -> None:
        when = datetime.now(UTC).isoformat(timespec="seconds")
        # One readable line; an endless list of unreachable servers is cut, not sent whole.
        tags = {RESULT_TAG: reason[:1000], OUTCOME_TAG: outcome}
        tags |= {f"{RESULT_PREFIX}.by": self.actor, f"{RESULT_PREFIX}.at": when}
        for key, value in tags.items():
            self.client.set_version_tag(self.name, version, key, value)


def _holder(value: str) -> dict[str, str] | None:
    """A RUNNING_TAG's fields; None when empty or unreadable (a lock no rollout of ours wrote)."""
    try:
        found = json.loads(value) if value else None
    except ValueError:
        return None
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else None


def _until(holder: dict[str, str]) -> datetime:
    """Until when a lock holds; a lock without a readable ``until`` holds no longer (it is taken over)."""
    try:
        until = datetime.fromisoformat(holder.get("until", ""))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return until if until.tzinfo is not None else until.replace(tzinfo=UTC)
