"""The README's examples run as written."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from mlplatform.plan import REPO_ROOT
from tests.first_success import first_success_lines, first_success_training
from tests.mlplatform.pages import PAGES, fenced_shell_commands, inline_commands
from workloads.inference.schemas import request_model
from workloads.training.tasks import digits

REQUEST = Path("examples/requests/digits-v1.json")


def test_the_curl_example_posts_real_digits_rows_the_server_accepts() -> None:
    assert f"-d @{REQUEST}" in (REPO_ROOT / "README.md").read_text()
    request = request_model(64, 32).model_validate_json((REPO_ROOT / REQUEST).read_text())
    data = digits()  # scikit-learn's digits, as load_digits gives them (training/test_tasks.py)
    assert np.array_equal(np.asarray(request.instances), data.features[:2])
    assert list(data.labels[:2]) == [0, 1]


# The folder the Makefile's commands write to (`OUT := out`; `make demo` fills it, `make clean` empties it).
OUT = re.search(r"(?m)^OUT := (\S+)$", (REPO_ROOT / "Makefile").read_text()).group(1)  # type: ignore[union-attr]
_PATHLIKE = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?")


def _named_paths(page: Path) -> list[str]:
    """File paths in backticks (`components/images.py`, `examples/byom/`) and relative Markdown links."""
    text = page.read_text()
    named = [m for m in re.findall(r"`([^`\n]+)`", text) if _PATHLIKE.fullmatch(m) and "/" in m]
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    return named + [link for link in links if "://" not in link]


def _flag(words: tuple[str, ...], flag: str) -> str | None:
    return words[words.index(flag) + 1] if flag in words[:-1] else None


def written_paths(page: Path) -> set[str]:
    """What the page's own commands write: `new-stack NAME`'s stack file, a trained model version
    (`--output D --model-name N --model-version V`: D/models/N/V), plan's and check's `--json`,
    `--manifests` and `--sarif`, and the Makefile's output folder when the page runs `make demo`."""
    written = set()
    for command in [
        *fenced_shell_commands(page),
        *inline_commands(page, ("mlplatform", ".venv/bin/mlplatform")),
    ]:
        words = command.program
        verb = words[1] if len(words) > 1 else None
        if verb == "new-stack" and len(words) > 2:
            written.add(f"stacks/Pulumi.{words[2]}.yaml")
        if verb == "train":
            output = _flag(words, "--output") or "out"
            name, version = _flag(words, "--model-name"), _flag(words, "--model-version") or "1"
            if name:
                written.add(f"{output}/models/{name}/{version}")
        written |= {_flag(words, flag) or "" for flag in ("--json", "--manifests", "--sarif")} - {""}
    if any(command.program[:2] == ("make", "demo") for command in fenced_shell_commands(page)):
        written.add(OUT)
    return written


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    """A path in backticks whose first part is in the repository (or beside the page) is a promise that
    the file is there; a moved or renamed file breaks it. A path under the output folder is a command's
    output, whatever a run left there: the page must show the command that writes it. Other paths outside
    the tree (a Kubernetes label such as `nvidia.com/gpu`, an upstream repository's path) have a first
    part that is not here."""
    missing, unwritten = _path_problems(page)
    assert not missing, f"{page.relative_to(REPO_ROOT)} names paths that do not exist: {missing}"
    assert not unwritten, f"{page.relative_to(REPO_ROOT)} names outputs no command on it writes: {unwritten}"


def _path_problems(page: Path) -> tuple[list[str], list[str]]:
    """The paths ``page`` names that are not in the tree, and the outputs it names that no command on
    it writes."""
    missing, unwritten = [], []
    written = written_paths(page)
    for named in _named_paths(page):
        path = named.rstrip("/")
        if any(path == w or path.startswith(w + "/") for w in written):
            continue
        if path.split("/", 1)[0] == OUT:
            unwritten.append(named)
            continue
        for base in (page.parent, REPO_ROOT):
            first = path.split("/", 1)[0]
            if first not in {".", ".."} and not (base / first).exists():
                continue
            if not (base / path).exists():
                missing.append(named)
            break
    return missing, unwritten


def test_an_output_is_sourced_from_the_command_that_writes_it_whatever_out_holds(tmp_path: Path) -> None:
    """Issue 41: after `make demo` made `out/`, the examples page's model folder was demanded as if it
    were part of the checkout. An output is right when a command on the page writes it, and wrong when
    none does, whether or not a run left it there."""
    page = tmp_path / "page.md"
    train = "mlplatform train --local --output out --model-name tabular --model-version 1"
    page.write_text(
        f"`{train}` writes `out/models/tabular/1/`; `out/models/other/2` and `stacks/Pulumi.x.yaml`\n"
    )
    assert _path_problems(page) == (["stacks/Pulumi.x.yaml"], ["out/models/other/2"])
    page.write_text(page.read_text() + "`mlplatform new-stack x --cloud aws --tier smb --env dev`\n")
    assert _path_problems(page) == ([], ["out/models/other/2"])


@pytest.mark.slow
def test_the_first_success_commands_run_as_written(tmp_path: Path) -> None:
    """A newcomer after `make test` (which installs every extra): the three lines, as README writes them,
    from a folder holding the checkout's venv and examples, give a prediction for each request row. The
    train line runs once per test run (tests/first_success.py: test_train.py reads the same run)."""
    train, serve, curl = first_success_lines()
    assert (
        train.startswith(".venv/bin/mlplatform train ") and serve.endswith(" &") and curl.startswith("curl ")
    )
    done = first_success_training(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    server = subprocess.Popen(
        serve.removesuffix("&").split(), cwd=done.folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            # Until the server listens and has warmed the model (a 503 "model loading" before).
            answer = subprocess.run(
                curl, check=False, shell=True, cwd=done.folder, capture_output=True, text=True
            )
            if '"predictions"' in answer.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert answer.returncode == 0, (answer.stderr, server.poll())
        assert json.loads(answer.stdout).get("predictions") == [0, 1], answer.stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
