"""The inference image's Dockerfile passes hadolint, and keeps the properties the Deployment relies on."""

from __future__ import annotations

import re
from pathlib import Path

from tests.linters import hadolint, needs_hadolint

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "workloads" / "inference" / "Dockerfile"


@needs_hadolint
def test_hadolint_is_clean() -> None:
    done = hadolint(DOCKERFILE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_multi_stage_pinned_and_non_root() -> None:
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert len(stages) == 2 and set(stages) == {"${PYTHON_IMAGE}"}
    assert re.search(r"^ARG PYTHON_IMAGE=python:\d+\.\d+\.\d+-slim-\w+$", text, flags=re.MULTILINE)
    final = text.split("\nFROM ")[-1]
    assert re.search(r"^USER 10001:10001$", final, flags=re.MULTILINE)
    assert "pip install" not in final and "apt-get" not in final, "no installing in the runtime stage"
    assert 'ENTRYPOINT ["python", "-m", "workloads.inference"]' in final
