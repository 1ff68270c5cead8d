"""README's two commands in order (issue 41): in a copy of the tree, the doc tests pass after `make demo`,
so `make test` after `make demo` is not red for what the demo left in `out/`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mlplatform.plan import REPO_ROOT

# The tests that read the pages and what they name (the ones `make demo` once broke).
DOC_TESTS = ["tests/mlplatform/test_readme.py", "tests/mlplatform/test_docs.py"]


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``command`` in its own process group, so the planner and the pack it starts die with it."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return subprocess.CompletedProcess(command, process.returncode, output, None)


def _copy_of_the_tree(destination: Path) -> Path:
    """The tracked files (their times kept, as a clone's are older than its venvs), and the venvs the
    checkout already built, linked, so `make` installs nothing."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True, text=True
    ).stdout.split("\0")
    for name in filter(None, tracked):
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target)
    for venv in (".venv", "policies/.venv"):
        (destination / venv).symlink_to((REPO_ROOT / venv).resolve())
    return destination


@pytest.mark.slow
def test_make_demo_then_the_doc_tests_pass_in_a_copy_of_the_tree(tmp_path: Path) -> None:
    """`make demo` (its own recipe, for the cheaper of its two stacks: what it leaves in `out/` has the
    same shape for either) passes and fills `out/`; then the doc tests pass. (Without `out/` they run in
    every plain `make test`, as CI runs it.) The copy's own sources run (PYTHONPATH), as a clone's
    editable install would."""
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    if not (REPO_ROOT / "policies/.venv/bin/python").exists():
        pytest.skip("the pack's venv is not built (make setup builds it before the suite)")
    tree = _copy_of_the_tree(tmp_path / "clone")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    pytest_run = [str(tree / ".venv/bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m"]
    pytest_run += ["not slow", *DOC_TESTS]
    # The venvs' stamps as the Makefile names them; -o: the linked venvs count as built.
    stamp = ".installed-{}.{}.{}".format(*sys.version_info[:3])
    old = [f".venv/bin/{stamp}", f".venv/bin/{stamp}-infra", f"policies/.venv/{stamp}"]
    demo = _run(["make", *(f"-o{name}" for name in old), "demo", "STACKS=azure-smb-dev"], tree, env)
    assert demo.returncode == 0, demo.stdout[-3000:]
    assert "pip install" not in demo.stdout and "venv --clear" not in demo.stdout, "make reinstalled"
    assert (tree / "out/azure-smb-dev.json").is_file() and (tree / "out/manifests/azure-smb-dev").is_dir()
    after = _run(pytest_run, tree, env)
    assert after.returncode == 0, after.stdout[-3000:]
