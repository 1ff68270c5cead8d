"""examples/byom runs as examples/README.md says: the hook pair trains through `mlplatform train --local`,
the model it publishes serves predictions, and the team's Dockerfile passes hadolint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.linters import hadolint, needs_hadolint
from tests.workloads.inference.serving import PINNED, Server, free_port, wait_ready
from workloads.artifacts import load_metadata, model_version_dir

REPO = Path(__file__).resolve().parents[2]
BYOM = REPO / "examples" / "byom"
DATASET, MODEL = "tabular.data:breast_cancer", "tabular.model:mlp"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's command with tiny epochs, through the real CLI and torchrun."""
    output = tmp_path_factory.mktemp("byom")
    command = [sys.executable, "-c", "from mlplatform.cli import main; main()", "train", "--local"]
    command += ["--nproc", "1", "--epochs", "2", "--output", str(output), "--dataset", DATASET]
    command += ["--model", MODEL, "--model-name", "tabular", "--model-version", "1", "--log-format", "json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BYOM), str(REPO)])}
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return model_version_dir(output, "tabular", "1")


@pytest.mark.slow
def test_the_hook_pair_trains_and_publishes_a_model_version(trained: Path) -> None:
    metadata = load_metadata(trained)
    assert metadata.dataset.name == DATASET
    assert sum(metadata.dataset.split_sizes.values()) == 569  # every row of the dataset, split three ways
    assert metadata.inputs[0].shape[-1] == 30
    assert (trained / "model.onnx").is_file()


@pytest.mark.slow
def test_the_published_model_serves_predictions_for_rows_of_its_dataset(
    trained: Path, tmp_path: Path
) -> None:
    port = free_port()
    env = {**os.environ, **PINNED, "SERVE_MODEL_DIR": str(trained), "SERVE_HOST": "127.0.0.1"}
    env["SERVE_PORT"] = str(port)
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "workloads.inference"], cwd=REPO, env=env, stdout=sink, stderr=sink
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_ready(server)
        from sklearn.datasets import load_breast_cancer  # the example's data; imported by this test alone

        rows = np.asarray(load_breast_cancer().data[:3], dtype=np.float32).tolist()
        with server.client() as client:
            answer = client.post("/v1/predict", json={"instances": rows})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["model"] == "tabular"
        assert len(body["predictions"]) == 3
        assert set(body["labels"]) <= {"malignant", "benign"}
    finally:
        assert server.terminate() == 0, server.logs()


@needs_hadolint
def test_the_example_dockerfile_passes_hadolint() -> None:
    done = hadolint(BYOM / "Dockerfile")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_example_image_builds_on_the_trainer_and_puts_the_hooks_on_the_path() -> None:
    """The hooks are importable in the image as the stack names them (`tabular.data:...`)."""
    lines = [line.strip() for line in (BYOM / "Dockerfile").read_text().splitlines()]
    assert "FROM ${TRAINER_IMAGE}" in lines
    assert "COPY tabular/ /opt/team/tabular/" in lines
    assert "ENV PYTHONPATH=/opt/team" in lines
    assert not any(line.startswith("USER") for line in lines), "the trainer's non-root user stays"
