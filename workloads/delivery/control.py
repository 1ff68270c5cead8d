"""An operator's hand on a rollout: abort, pause, resume (``mlplatform rollout abort|pause|resume NAME``).

None of them talks to the rollout process: each sets tags on the registered model that the rollout reads
at its next lease renewal (workloads/registry/lock.py), so they work the same on a laptop and against the
cluster's Job, and whatever the rollout's state:

- ``abort`` sends the traffic back at once (split and shadow to 0: every server follows at its next
  poll), then asks a live rollout to stop (``ABORT_TAG``: it stops at its next renewal, within one window,
  and records why); a rollout whose lease has lapsed (killed) is cleared here instead, and its challenger
  records the abort. With no rollout at all it only makes sure the shares are 0.
- ``pause`` holds a live rollout at its current step after that step passes (windows still judged),
  ``resume`` lets it go on. Both refuse (``ControlError``) when there is nothing to pause or resume.
"""

from __future__ import annotations

from datetime import UTC, datetime

from workloads.delivery import contract
from workloads.registry import lock
from workloads.registry.client import RegistryClient
from workloads.registry.rollout import CHALLENGER


class ControlError(Exception):
    """Nothing to act on (bad input: exit 2); one printable line."""


def abort(client: RegistryClient, name: str, by: str) -> str:
    """Traffic back to the champion now, and the rollout stopped; what was done, in one line."""
    now = datetime.now(UTC)
    model = client.registered_model(name)  # a RegistryError (not found) for an unknown model
    client.set_model_tag(name, contract.SPLIT_TAG, "0")  # split first, as the rollout itself resets
    client.set_model_tag(name, contract.SHADOW_TAG, "0")
    holder = lock.holder(model.tags, now)
    if holder is not None:
        client.set_model_tag(name, lock.ABORT_TAG, lock.stamp(by, now))
        return f"{name}: traffic back to the champion; {holder}, and stops at its next window"
    if lock.RUNNING_TAG not in model.tags:
        return f"{name}: no rollout is running; split and shadow are at 0"
    for key in (lock.ABORT_TAG, lock.PAUSE_TAG, lock.LEASE_TAG, lock.RUNNING_TAG):
        if key in model.tags:
            client.delete_model_tag(name, key)
    reason = f"stopped: aborted by {by} at {now.isoformat(timespec='seconds')} (its rollout had died)"
    if (challenger := model.aliases.get(CHALLENGER)) is not None:
        client.set_version_tag(name, challenger, lock.RESULT_TAG, reason)
        client.set_version_tag(name, challenger, lock.OUTCOME_TAG, lock.STOPPED)
    return f"{name}: traffic back to the champion; a lapsed rollout lock cleared"


def pause(client: RegistryClient, name: str, by: str) -> str:
    now = datetime.now(UTC)
    model = client.registered_model(name)
    holder = lock.holder(model.tags, now)
    if holder is None:
        raise ControlError(f"{name}: no rollout is running, nothing to pause")
    client.set_model_tag(name, lock.PAUSE_TAG, lock.stamp(by, now))
    return f"{name}: paused; {holder}, and stays at its current step once it passes"


def resume(client: RegistryClient, name: str, by: str) -> str:
    model = client.registered_model(name)
    if lock.PAUSE_TAG not in model.tags:
        raise ControlError(f"{name}: not paused (mlplatform rollout pause {name} pauses a running rollout)")
    client.delete_model_tag(name, lock.PAUSE_TAG)
    return f"{name}: resumed by {by}"
