"""tests/once.py: what a test run makes once is made once however many processes ask for it at once
(pytest-xdist's workers), and each gets the same thing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import once

REPO = Path(__file__).resolve().parents[1]

# Each process asks for the same plan and the same folder; `make` logs its pid and takes a moment, so
# the three ask while the first one is still making them.
ASK = """
import os, pickle, sys, time
from pathlib import Path
from mlplatform.graph import Plan
from tests import once

made = Path(sys.argv[1])

def plan():
    with made.open("a") as log:
        log.write(f"plan {os.getpid()}\\n")
    time.sleep(1)
    return Plan("project", "stack", outputs={"maker": os.getpid()})

def fill(folder):
    with made.open("a") as log:
        log.write(f"folder {os.getpid()}\\n")
    time.sleep(1)
    (folder / "model").write_text(str(os.getpid()))

got = once.plan("stack", "config: {}", plan)
folder = once.folder("model", fill, Path(sys.argv[2]))
print(got.outputs["maker"], (folder / "model").read_text(), folder)
"""


def test_three_processes_asking_at_once_share_one_plan_and_one_folder(tmp_path: Path) -> None:
    made = tmp_path / "made.log"
    env = {**os.environ, once.RUN_DIR: str(tmp_path / "run"), "PYTHONPATH": str(REPO)}
    (tmp_path / "run").mkdir()
    command = [sys.executable, "-c", ASK, str(made), str(tmp_path / "unused")]
    askers = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    answers = [asker.communicate(timeout=120)[0].split() for asker in askers]
    assert [asker.returncode for asker in askers] == [0, 0, 0]
    makers = made.read_text().splitlines()
    assert sorted(line.split()[0] for line in makers) == ["folder", "plan"], makers
    # All three got what one of them made: the same plan, the same folder.
    assert len({tuple(answer) for answer in answers}) == 1, answers
    assert answers[0][2] == str(tmp_path / "run" / "model")
