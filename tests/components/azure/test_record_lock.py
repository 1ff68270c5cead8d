"""The Azure lifecycle record's lock (components/azure/record.py ``lock_command``), and day 2.

Issue 40's Done-when: "the record cannot be rewritten by the identities that act (object lock in the plan;
a policy fails a stack without it)". Azure creates a time-based policy only Disabled or Unlocked and locks
it on a later update, irreversibly; a locked one "only allows the increase of the immutability retention
time" (azure-native ``AccountImmutabilityPolicyProperties.state``, the same text as azure-cli's
``--immutability-state`` help in ``storage account update``). The first ``pulumi up`` runs the lock right
after creating the account, so no plan ever holds an unlocked record.

The command runs in a real POSIX shell against ``az``, here a stand-in on PATH that keeps one account's
policy and answers as those rules say (a refused transition exits 1 with Azure's error, as the CLI does);
no Azure is reached. What this leaves untested: the real CLI and Resource Manager.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.azure import record
from components.azure.record import lock_command
from mlplatform.plan import Plan
from tests.stack_variants import cloud_only, plan_config, template

STACK = "azure-enterprise-prod"
ACCOUNT = "mlprecord0"
# `az storage account show ... --query immutableStorageWithVersioning.immutabilityPolicy.state` and
# `az storage account update ... --immutability-period N --immutability-state S
# [--allow-protected-append-writes B]`, on one account whose policy is kept in $AZ_STATE (JSON); each call
# appended to $AZ_CALLS as its verb and the state it sets.
AZ = r"""
import json, os, sys
args = sys.argv[1:]
state_file = os.environ["AZ_STATE"]
def option(name):
    return args[args.index(name) + 1] if name in args else None
with open(os.environ["AZ_CALLS"], "a") as calls:
    calls.write(f"{args[2]} {option('--immutability-state') or ''}".strip() + "\n")
assert args[:2] == ["storage", "account"] and option("--name") == "ACCOUNT", args
policy = json.load(open(state_file))
if args[2] == "show":
    print(policy.get("state", ""))
    sys.exit(0)
days, state = int(option("--immutability-period")), option("--immutability-state")
if policy.get("state") == "Locked":
    if state != "Locked" or days < policy["days"]:
        print("ERROR: (ImmutabilityPolicyCannotBeChanged) a Locked policy only allows the increase of the "
              "immutability retention time", file=sys.stderr)
        sys.exit(1)
elif "state" not in policy and state not in ("Disabled", "Unlocked"):
    print("ERROR: (InvalidImmutabilityPolicyState) a policy can only be created in a Disabled or Unlocked "
          "state", file=sys.stderr)
    sys.exit(1)
append = option("--allow-protected-append-writes")
policy.update(state=state, days=days, **({"appendWrites": append} if append else {}))
json.dump(policy, open(state_file, "w"))
""".replace("ACCOUNT", ACCOUNT)


@pytest.fixture
def run_lock(tmp_path: Path) -> Callable[[int, dict[str, Any]], tuple[int, dict[str, Any], list[str]]]:
    """``run_lock(days, policy)``: the lock command for ``days`` against an account whose policy is
    ``policy`` ({} for a new account), in /bin/sh: its exit status, the policy after, the az calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    az = bin_dir / "az"
    az.write_text(f"#!{sys.executable}\n{AZ}")
    az.chmod(0o755)

    def run(days: int, policy: dict[str, Any]) -> tuple[int, dict[str, Any], list[str]]:
        (tmp_path / "state.json").write_text(json.dumps(policy))
        (tmp_path / "calls").write_text("")
        env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "AZ_STATE": str(tmp_path / "state.json"),
            "AZ_CALLS": str(tmp_path / "calls"),
        }
        done = subprocess.run(
            ["/bin/sh", "-c", lock_command("sub", "ml-platform-x", ACCOUNT, days)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        calls = (tmp_path / "calls").read_text().splitlines()
        return done.returncode, json.loads((tmp_path / "state.json").read_text()), calls

    return run


def test_a_new_record_is_locked_by_its_first_up_and_a_second_run_changes_nothing(
    run_lock: Callable[[int, dict[str, Any]], tuple[int, dict[str, Any], list[str]]],
) -> None:
    status, policy, calls = run_lock(365, {})
    assert status == 0
    assert policy == {"state": "Locked", "days": 365, "appendWrites": "false"}
    assert calls == ["show", "update Unlocked", "update Locked"]
    # Run again (a `pulumi up` that replaces the command, or a record locked by an earlier release): it is
    # locked already, so only the Locked update, with the same period, which Azure accepts.
    status, again, calls = run_lock(365, policy)
    assert (status, again) == (0, policy)
    assert calls == ["show", "update Locked"]


def test_a_longer_retention_extends_the_lock_and_a_shorter_one_is_refused(
    run_lock: Callable[[int, dict[str, Any]], tuple[int, dict[str, Any], list[str]]],
) -> None:
    locked = {"state": "Locked", "days": 365, "appendWrites": "false"}
    status, extended, _ = run_lock(730, locked)
    assert (status, extended["state"], extended["days"]) == (0, "Locked", 730)
    # The preview refuses a shorter audit.retentionDays first (components/azure/audit.py
    # refuse_shorter_retention); were the command run anyway, Azure's refusal fails it.
    status, kept, _ = run_lock(30, locked)
    assert (status, kept) == (1, locked)


def test_the_second_plan_of_a_new_stack_is_a_no_op_for_the_record(
    cloud_plan: Callable[[str], Plan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first `pulumi up` (ARM: no record account yet) and every later one (ARM: the account exists,
    locked; the shared plan's mocks) plan the record's resources with the same inputs and dependencies:
    nothing to change on the second `pulumi up`, and the lock never runs again by itself."""
    monkeypatch.setattr(record, "existing_account", lambda *_: None)
    first = plan_config(cloud_only(template(STACK)), tmp_path, STACK)
    later = cloud_plan(STACK)

    def resources(plan: Plan) -> dict[str, tuple[dict[str, Any], list[str]]]:
        return {
            r.urn: (r.inputs, sorted(r.dependencies)) for r in plan.resources if "-azure-record-" in r.name
        }

    assert any(urn.endswith("record-immutability-lock") for urn in resources(first))
    assert resources(first) == resources(later)
