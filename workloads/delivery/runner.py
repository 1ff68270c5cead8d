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
A plan with ``promote: false`` (where the stack does not declare the gates a pre-approved path) ends there
instead: both tags to 0, confirmed, and the challenger ``passed`` against that champion, awaiting a
promotion as a change (``mlplatform models promote``, after an approval where the stack requires one).

Any error mid-rollout (the registry or every server unreachable), a termination (``Terminated``: the
Job's deadline, ``kubectl delete job``, a node drain) or any other exception also sends traffic back
first (both tags to 0) and records why, then reports. A rollout that cannot (SIGKILL, OOM, a lost node,
cut off from the registry) leaves no split live either: it holds a lease (workloads/registry/lock.py),
renewed at every window and every apply poll, and the servers count a share only while the lease is
current, so theirs returns to 0 within one window plus ``leaseGraceSeconds``. Only one rollout of a model
runs at a time: ``lock.RUNNING_TAG`` on the registered model is set at the start and cleared at the end; a
second rollout refuses to start while its lease holds, and takes over a lapsed one. MLflow has no
compare-and-set, so the lock is read back after it is written; two starts in the same instant may still
both pass, which is what it cannot rule out.

Each renewal also reads what an operator asked (``mlplatform rollout pause|resume|abort``): an abort
stops the rollout as a failed step does; a pause holds the current step after it passes (its windows
still judged, a failure still stops) until resumed; and an alias moved under the rollout stops it. Before
any tag is set, every server's ``/metrics`` must answer (a mistyped URL changes nothing).

Time comes from ``clock`` and ``sleep``, injectable so tests play hours in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
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
from workloads.registry import lock, operations
from workloads.registry.client import RegisteredModel, RegistryClient, RegistryError
from workloads.registry.lock import AGAINST_TAG, OUTCOME_TAG, PASSED, PROMOTED, RESULT_PREFIX, RESULT_TAG
from workloads.registry.record import Journal, Kind, RecordError
from workloads.registry.rollout import CHALLENGER, CHAMPION

# Servers are polled this often while a setting is being applied.
APPLY_POLL_S = 2.0
# Rows per V2 request of the labelled set: at most what a server takes in one request, its
# ``max_instances`` (workloads/inference/config.py, 32 by default; the Deployment does not change it).
# More is a 422 for the whole request.
LABELLED_BATCH = 32


class RolloutError(Exception):
    """The rollout could not start (bad input: exit 2); one printable line."""


class AbortedError(RolloutError):
    """``mlplatform rollout abort NAME``: the rollout stops as a failed step does."""


class Terminated(BaseException):
    """The process was told to stop (SIGTERM: the Job's deadline, its deletion, a node drain).

    A BaseException, as KeyboardInterrupt is: no ``except Exception`` on the way (a retrying client)
    swallows it, and the rollout's own ending sends the traffic back."""


@dataclass(frozen=True)
class Result:
    outcome: str  # promoted | passed | stopped | rolled-back
    reason: str
    challenger: str
    champion: str

    @property
    def ok(self) -> bool:
        return self.outcome in (PROMOTED, PASSED)


@dataclass(frozen=True)
class LabelledSet:
    """Rows and their labels, sent to the challenger through the V2 API at each step."""

    x: Any  # numpy float32 (rows, features)
    y: Any  # numpy int (rows,)

    @property
    def digest(self) -> str:
        """sha256 of the rows and labels: accuracies compare only on the same labels."""
        return "sha256:" + hashlib.sha256(self.x.tobytes() + self.y.tobytes()).hexdigest()

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
    # The lifecycle record (workloads/registry/record.py): every judged window and the ending, appended.
    journal: Journal | None = None
    _passed: list[str] = field(default_factory=list)
    _mine: str = ""  # the lock this rollout holds (RUNNING_TAG's value)
    _aliases: tuple[str, str] = ("", "")  # (champion, challenger) the rollout started with
    # The last step's accuracies on the labelled set (``accuracy``, ``champion_accuracy``); empty without one.
    _labelled: dict[str, float] = field(default_factory=dict)

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
        if self.plan.labelled_set is not None and (self.labelled is None or self.service is None):
            raise RolloutError("labelledSet's gates need the labelled set and the service URL")
        old, new = champion.version, challenger.version
        if self.plan.judges_beside_champion and self.plan.gates.min_shadow_agreement is not None:
            # Every challenger alike: no version tag decides a gate (review rev40c A2).
            self.log(
                f"{self.name}: version {new} is judged on the labelled set beside the champion"
                f" (gates.maxAccuracyDrop {self.plan.gates.max_accuracy_drop:g}); shadow agreement is"
                " reported, not judged"
            )
        self._preflight()
        self._aliases = (old, new)
        self._lock()
        try:
            self.log(f"{self.name}: rolling out version {new} against champion {old}: {self._steps()}")
            return self._roll(old, new)
        finally:
            self._unlock()

    def _roll(self, old: str, new: str) -> Result:
        """Every step, then the promotion; whatever ends it early sends the traffic back first."""
        where = step_name(self.plan.steps[0])
        try:
            for step in self.plan.steps:
                where = step_name(step)
                verdict = self._step(step, old, new)
                while verdict.outcome is Outcome.PASS and (paused := self._paused()) is not None:
                    self.log(f"{self.name}: {where} passed; held there, paused by {paused} (judged on)")
                    verdict = self._step(step, old, new)
                if verdict.outcome is not Outcome.PASS:
                    return self._stop(f"stopped at {where}: {verdict.reason}", old, new)
                self._passed.append(where)
                self.log(f"{self.name}: {where} passed: {verdict.reason}")
            if not self.plan.promote:
                where = "hand-over"
                return self._hand_over(old, new)
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

    def _preflight(self) -> None:
        """Every server's ``/metrics`` answers before anything changes (else bad input, exit 2)."""
        self.scraper.snapshot()
        if self.scraper.unreachable:
            raise RolloutError(
                f"{self.name}: nothing changed, the servers' metrics do not answer: "
                + "; ".join(self.scraper.unreachable)
            )

    def _lease(self) -> str:
        until = datetime.now(UTC) + timedelta(
            seconds=self.plan.window_seconds + self.plan.lease_grace_seconds
        )
        return until.isoformat(timespec="milliseconds")

    def _lock(self) -> None:
        """Take the model: refused while another rollout's lease holds; a lapsed lock is taken over."""
        now = datetime.now(UTC)
        tags = self.client.registered_model(self.name).tags
        holder = lock.holder(tags, now)
        if holder is not None:
            raise RolloutError(f"{self.name}: another rollout is in progress: {holder}")
        if lock.RUNNING_TAG in tags:
            self.log(f"{self.name}: taking over a lapsed {lock.RUNNING_TAG}: {tags[lock.RUNNING_TAG]}")
        for stale in (lock.PAUSE_TAG, lock.ABORT_TAG):  # asked of a rollout that is gone
            if stale in tags:
                self.client.delete_model_tag(self.name, stale)
        self.client.set_model_tag(self.name, lock.LEASE_TAG, self._lease())
        mine = json.dumps(
            {"by": self.actor, "host": socket.gethostname(), "at": now.isoformat(timespec="seconds")}
        )
        self.client.set_model_tag(self.name, lock.RUNNING_TAG, mine)
        if self.client.registered_model(self.name).tags.get(lock.RUNNING_TAG) != mine:
            raise RolloutError(f"{self.name}: another rollout started at the same time; try again")
        self._mine = mine

    def _renew(self, *, aliases: bool = True) -> RegisteredModel:
        """Extend the lease by one window plus the grace, after checking the rollout still holds the
        model, nobody aborted it and (``aliases``) neither alias moved under it; the model as read."""
        model = self.client.registered_model(self.name)
        if model.tags.get(lock.RUNNING_TAG) != self._mine:
            raise RolloutError(f"{lock.RUNNING_TAG} is no longer this rollout's (its lease lapsed)")
        if (abort := lock.request(model.tags, lock.ABORT_TAG)) is not None:
            raise AbortedError(f"aborted by {abort.get('by')} at {abort.get('at')}")
        if aliases:
            now = (model.aliases.get(CHAMPION, ""), model.aliases.get(CHALLENGER, ""))
            for alias, was, is_now in zip((CHAMPION, CHALLENGER), self._aliases, now, strict=True):
                if is_now != was:
                    raise RolloutError(f"@{alias} moved from version {was} to {is_now or 'nothing'} under it")
        self.client.set_model_tag(self.name, lock.LEASE_TAG, self._lease())
        return model

    def _paused(self) -> str | None:
        """Who paused the rollout, if it is paused (the lease renewed on the way)."""
        paused = lock.request(self._renew().tags, lock.PAUSE_TAG)
        return f"{paused.get('by')} at {paused.get('at')}" if paused is not None else None

    def _unlock(self) -> None:
        """Clear the lock, its lease and any pause or abort, if the lock is still this rollout's."""
        try:
            tags = self.client.registered_model(self.name).tags
            if tags.get(lock.RUNNING_TAG) == self._mine:
                for key in (lock.ABORT_TAG, lock.PAUSE_TAG, lock.LEASE_TAG, lock.RUNNING_TAG):
                    if key in tags:
                        self.client.delete_model_tag(self.name, key)
        except RegistryError as exc:
            self.log(f"{self.name}: clearing {lock.RUNNING_TAG} failed ({exc}); its lease lapses by itself")

    def _steps(self) -> str:
        ending = "promote" if self.plan.promote else "await a promotion"
        return ", ".join(step_name(s) for s in self.plan.steps) + f", {ending}"

    # -- one step --------------------------------------------------------------------------------

    def _step(self, step: Step, champion: str, challenger: str) -> Verdict:
        split, shadow = self.plan.setting(step)
        self._set(split, shadow)
        self._await_applied(split, shadow, challenger)
        accuracy = held = None
        if self.labelled is not None and self.service is not None:
            # Before the window's start: its requests are not counted in the window they would inflate.
            # Both versions on the same set: the comparison a promotion after a hand-over is judged on.
            accuracy = self.service.accuracy(self.name, challenger, self.labelled)
            held = self.service.accuracy(self.name, champion, self.labelled)
            self._labelled = {"accuracy": accuracy, "champion_accuracy": held}
        start = self.scraper.snapshot()
        self.log(
            f"{self.name}: {step_name(step)}: applied on {len(start)} servers; window of"
            f" {self.plan.window_seconds} s"
        )
        for extension in range(self.plan.max_extensions + 1):
            self._renew()
            self.sleep(self.plan.window_seconds)
            end = self.scraper.snapshot()
            stats = window_stats(start, end, self.name, champion, challenger)
            stats = replace(stats, accuracy=accuracy, champion_accuracy=held)
            verdict = judge_step(step, stats, self.plan)
            self._journal(
                Kind.ROLLOUT_STEP, f"{step_name(step)}: {verdict.outcome}: {verdict.reason}", asdict(stats)
            )
            if verdict.outcome is not Outcome.EXTEND:
                return verdict
            if extension < self.plan.max_extensions:  # the last thin window fails, it is not extended
                self.log(
                    f"{self.name}: {step_name(step)}: window extended ({extension + 1}): {verdict.reason}"
                )
        seconds = self.plan.window_seconds * (self.plan.max_extensions + 1)
        unreachable = (
            f"; unreachable: {', '.join(self.scraper.unreachable)}" if self.scraper.unreachable else ""
        )
        return Verdict(Outcome.FAIL, f"too little evidence after {seconds} s: {verdict.reason}{unreachable}")

    def _set(self, split: int, shadow: int) -> None:
        if split or shadow:  # a share only under a current lease, and never after an abort
            self._renew()
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
            if split or shadow:
                self._renew()
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

    def _hand_over(self, old: str, new: str) -> Result:
        """Every step passed on a plan that does not promote: traffic back to the champion, confirmed by
        every server, and the challenger left to a promotion as a change, ``passed`` on its tags and the
        record against this champion."""
        reason = (
            f"passed {', '.join(self._passed)}; awaits a promotion of version {new}"
            " (mlplatform models request-promotion, approve, promote)"
        )
        self._set(0, 0)
        self._await_applied(0, 0, new)
        self._record(new, PASSED, reason, self._labelled)
        self.log(f"{self.name}: {reason}; traffic back to champion {old}")
        return Result(PASSED, reason, new, old)

    def _promote(self, old: str, new: str) -> None:
        action = f"promote (rollout: passed {', '.join(self._passed)})"
        self._renew()
        # What the registry admits the rollout user's move of @champion on (guard.py ``move_decision``): its
        # own ``rollout-passed`` of this version against this champion, on the record before the move.
        self._journal(
            lock.verdict_action(PASSED), f"passed {', '.join(self._passed)}; promoting", self._labelled
        )
        operations.promote(
            self.client,
            self.name,
            new,
            metric="",
            tolerance=0.0,
            force=True,
            actor=self.actor,
            action=action,
            holding=self._mine,
            journal=self.journal,
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
                self._renew(aliases=False)
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
                if isinstance(exc, AbortedError):  # an operator ended the watch: promoted, unwatched
                    return Result("promoted", line, new, new)
                raise
            verdict = judge_bake(stats.champion, stats.drift, bake, self.plan)
            if verdict.outcome is Outcome.FAIL:
                why = f"bake: {verdict.reason}"
                operations.rollback(
                    self.client,
                    self.name,
                    actor=self.actor,
                    action=f"rollback ({why})",
                    holding=self._mine,
                    journal=self.journal,
                )
                line = f"rolled back {math.floor(elapsed)} s after promotion: {verdict.reason}"
                self.log(f"{self.name}: {line}; champion back to version {old}")
                self._record(new, "rolled-back", line)
                return Result("rolled-back", line, new, old)
            self.log(f"{self.name}: bake {math.floor(elapsed)}/{bake.seconds} s: {verdict.reason}")
        if bake.seconds:
            reason += f", baked {bake.seconds} s"
        self._record(new, "promoted", reason)
        return Result("promoted", reason, new, new)

    def _journal(self, action: str, reason: str, numbers: dict[str, Any] | None = None) -> None:
        """Append to the lifecycle record, if any; a record that fails is said, never a rollout's end."""
        if self.journal is None:
            return
        champion, challenger = self._aliases
        try:
            self.journal.append(
                self.name,
                action,
                {CHAMPION: champion, CHALLENGER: challenger},
                reason=reason,
                numbers=numbers,
            )
        except (RecordError, RegistryError) as exc:
            self.log(f"{self.name}: appending to the lifecycle record failed: {exc}")

    def _record(self, version: str, outcome: str, reason: str, numbers: dict[str, Any] | None = None) -> None:
        self._journal(lock.verdict_action(outcome), reason, numbers)
        when = datetime.now(UTC).isoformat(timespec="seconds")
        # One readable line; an endless list of unreachable servers is cut, not sent whole.
        tags = {RESULT_TAG: reason[:1000], OUTCOME_TAG: outcome, AGAINST_TAG: self._aliases[0]}
        tags |= {f"{RESULT_PREFIX}.by": self.actor, f"{RESULT_PREFIX}.at": when}
        for key, value in tags.items():
            self.client.set_version_tag(self.name, version, key, value)
