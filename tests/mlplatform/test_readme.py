"""The README's examples run as written."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from mlplatform.plan import REPO_ROOT
from workloads.inference.schemas import request_model

REQUEST = Path("examples/requests/digits-v1.json")


def test_the_curl_example_posts_real_digits_rows_the_server_accepts() -> None:
    assert f"-d @{REQUEST}" in (REPO_ROOT / "README.md").read_text()
    request = request_model(64, 32).model_validate_json((REPO_ROOT / REQUEST).read_text())
    digits = load_digits()
    assert np.array_equal(np.asarray(request.instances), digits.data[:2])
    assert list(digits.target[:2]) == [0, 1]


# The pages a newcomer reads: the front page, one page per area, the examples and the benchmarks.
PAGES = [
    REPO_ROOT / "README.md",
    REPO_ROOT / "CHANGELOG.md",
    REPO_ROOT / "benchmarks" / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    *sorted((REPO_ROOT / "examples").rglob("*.md")),
]
# Paths the pages name that a command writes, not the repository: the stack file `new-stack` creates
# (the CLI table's and the deploy walk-through's).
WRITTEN_BY_A_COMMAND = {"stacks/Pulumi.NAME.yaml", "stacks/Pulumi.team2-prod.yaml"}
_PATHLIKE = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?")


def _named_paths(page: Path) -> list[str]:
    """File paths in backticks (`components/images.py`, `examples/byom/`) and relative Markdown links."""
    text = page.read_text()
    named = [m for m in re.findall(r"`([^`\n]+)`", text) if _PATHLIKE.fullmatch(m) and "/" in m]
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    return named + [link for link in links if "://" not in link]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    """A path in backticks whose first part is in the repository (or beside the page) is a promise that
    the file is there; a moved or renamed file breaks it. Paths outside the tree (`out/`, a Kubernetes
    label such as `nvidia.com/gpu`, an upstream repository's path) have a first part that is not here."""
    missing = []
    for named in _named_paths(page):
        path = named.rstrip("/")
        for base in (page.parent, REPO_ROOT):
            first = path.split("/", 1)[0]
            if first not in {".", ".."} and not (base / first).exists():
                continue
            if path not in WRITTEN_BY_A_COMMAND and not (base / path).exists():
                missing.append(named)
            break
    assert not missing, f"{page.relative_to(REPO_ROOT)} names paths that do not exist: {missing}"


def _first_success() -> list[str]:
    """The README's first-success block: train, serve in the background, curl."""
    text = (REPO_ROOT / "README.md").read_text()
    block = text.split("First success on this machine", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.slow
def test_the_first_success_commands_run_as_written(tmp_path: Path) -> None:
    """A newcomer after `make test` (which installs every extra): the three lines, as README writes them,
    from a folder holding the checkout's venv and examples, give a prediction for each request row."""
    train, serve, curl = _first_success()
    assert (
        train.startswith(".venv/bin/mlplatform train ") and serve.endswith(" &") and curl.startswith("curl ")
    )
    for name in (".venv", "examples"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    done = subprocess.run(
        train, check=False, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    server = subprocess.Popen(
        serve.removesuffix("&").split(), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            # Until the server listens and has warmed the model (a 503 "model loading" before).
            answer = subprocess.run(
                curl, check=False, shell=True, cwd=tmp_path, capture_output=True, text=True
            )
            if '"predictions"' in answer.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert answer.returncode == 0, (answer.stderr, server.poll())
        assert json.loads(answer.stdout).get("predictions") == [0, 1], answer.stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
