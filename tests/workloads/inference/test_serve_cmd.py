"""``mlplatform serve``: bad input is one line on stderr and exit 2, before any socket opens."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform.cli import app


@pytest.fixture
def tampered(model_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "1"
    shutil.copytree(model_dir, copy)
    (copy / "model.onnx").write_bytes(b"not the model that was trained")
    return copy


def serve(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["serve", *args])
    return result.exit_code, result.stderr.splitlines()


def test_missing_directory(tmp_path: Path) -> None:
    code, lines = serve("--model", str(tmp_path / "nope"))
    assert code == 2
    assert lines == [f"error: {tmp_path / 'nope'}: not a directory"]


def test_files_that_do_not_match_their_hashes(tampered: Path) -> None:
    code, lines = serve("--model", str(tampered))
    assert code == 2
    assert lines == [f"error: {tampered}: model.onnx does not match its recorded sha256"]


def test_a_directory_without_metadata(tmp_path: Path) -> None:
    code, lines = serve("--model", str(tmp_path))
    assert code == 2
    assert len(lines) == 1 and "no metadata.json" in lines[0]


def test_bad_flags_are_named_as_flags(model_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing-token"
    code, lines = serve("--model", str(model_dir), "--port", "70000", "--auth-token-file", str(missing))
    assert code == 2
    assert lines == [
        "error: --port: Input should be less than or equal to 65535",
        "error: --auth-token-file: Path does not point to a file",
    ]


def test_tls_needs_a_certificate_and_a_key(model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("x")
    code, lines = serve("--model", str(model_dir), "--tls-cert-file", str(tmp_path / "cert.pem"))
    assert (code, lines) == (2, ["error: TLS needs both a certificate file and a key file"])


def test_an_empty_token_file_is_refused_not_taken_as_no_auth(model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    code, lines = serve("--model", str(model_dir), "--auth-token-file", str(tmp_path / "token"))
    assert (code, lines) == (2, [f"error: {tmp_path / 'token'}: auth token file is empty"])


def test_container_entry_point_reports_settings_by_variable(tmp_path: Path) -> None:
    env = {"SERVE_MODEL_DIR": str(tmp_path), "SERVE_MAX_BATCH_SIZE": "zero", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "workloads.inference"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: SERVE_MAX_BATCH_SIZE: Input should be a valid integer, unable to parse string as an integer"
    ]
