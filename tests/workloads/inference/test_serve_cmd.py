"""``mlplatform serve``: bad input is one line on stderr and exit 2, before any socket opens."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlplatform.cli import app
from workloads.inference import config


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


def test_an_engine_to_pin_must_be_one_the_server_has(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--engine`` (``SERVE_ENGINE``) names ONNX Runtime or OpenVINO, and OpenVINO only where installed
    (the serve extra's optional engine, workloads/inference/engines.py)."""
    code, lines = serve("--model", str(model_dir), "--engine", "tensorrt")
    assert (code, lines) == (2, ["error: --engine: Input should be 'onnxruntime' or 'openvino'"])
    monkeypatch.setattr(config, "openvino_installed", lambda: False)
    code, lines = serve("--model", str(model_dir), "--engine", "openvino")
    assert (code, lines) == (2, [f"error: --engine: {config.OPENVINO_MISSING}"])


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


def test_a_certificate_or_key_that_is_not_pem_is_one_line(model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    code, lines = serve("--model", str(model_dir), "--tls-cert-file", cert, "--tls-key-file", key)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: --tls-cert-file: not a PEM certificate and matching private key")


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--max-instances", "64"], "error: --max-instances: must not exceed the maximum batch size 32"),
        (["--max-instances", "0"], "error: --max-instances: Input should be greater than or equal to 1"),
        (["--max-queue", "0"], "error: --max-queue: Input should be greater than or equal to 1"),
        (["--deadline-ms", "0"], "error: --deadline-ms: Input should be greater than 0"),
        (["--max-connections", "-1"], "error: --max-connections: Input should be greater than or equal to 1"),
        (["--drift-window", "5"], "error: --drift-window: Input should be greater than or equal to 10"),
    ],
)
def test_numbers_out_of_range_name_their_flag(model_dir: Path, flags: list[str], line: str) -> None:
    code, lines = serve("--model", str(model_dir), *flags)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(line)


def test_a_host_or_port_that_cannot_be_bound_is_one_line(model_dir: Path) -> None:
    # 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this machine.
    code, lines = serve("--model", str(model_dir), "--host", "192.0.2.1", "--port", "8080")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: --host: cannot listen on 192.0.2.1:8080: ")
    code, lines = serve("--model", str(model_dir), "--host", "no-such-host.invalid")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: --host: cannot listen on 'no-such-host.invalid': ")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = serve("--model", str(model_dir), "--port", str(port))
    assert (code, lines) == (2, [f"error: --port: cannot listen on 127.0.0.1:{port}: Address already in use"])


def _variant(model_dir: Path, tmp_path: Path, onnx: bytes | None = None, **metadata: object) -> Path:
    """A copy of the model version with other ONNX bytes or metadata, its recorded hashes made to match:
    what a wrong export or a hand-edited metadata.json looks like to the server."""
    copy = tmp_path / "variant"
    shutil.copytree(model_dir, copy)
    if onnx is not None:
        (copy / "model.onnx").write_bytes(onnx)
    document = json.loads((copy / "metadata.json").read_text())
    document |= metadata
    document["files"]["model.onnx"] = hashlib.sha256((copy / "model.onnx").read_bytes()).hexdigest()
    (copy / "metadata.json").write_text(json.dumps(document))
    return copy


@pytest.mark.parametrize(
    ("onnx", "metadata", "says"),
    [
        (b"not an ONNX graph", {}, "model.onnx does not load in ONNX Runtime ("),
        (b"", {}, "model.onnx does not load in ONNX Runtime ("),
        (
            None,
            {"inputs": [{"name": "features", "dtype": "float32", "shape": [None, 63]}]},
            "model.onnx's inputs are features float32 [None, 64] "
            "but metadata.json says features float32 [None, 63]",
        ),
        (
            None,
            {"inputs": [{"name": "pixels", "dtype": "float32", "shape": [None, 64]}]},
            "model.onnx's inputs are features float32 [None, 64] but metadata.json says pixels float32",
        ),
        (
            None,
            {"outputs": [{"name": "logits", "dtype": "float32", "shape": [None, 9]}]},
            "model.onnx's outputs are logits float32 [None, 10] "
            "but metadata.json says logits float32 [None, 9]",
        ),
    ],
)
def test_a_model_that_does_not_load_or_match_is_refused_before_listening(
    model_dir: Path, tmp_path: Path, onnx: bytes | None, metadata: dict[str, object], says: str
) -> None:
    """Exit 2 and one line before any socket opens (the port stays free), not a failure after
    "startup complete"."""
    variant = _variant(model_dir, tmp_path, onnx, **metadata)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, lines = serve("--model", str(variant), "--port", str(port))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: {variant}: {says}"), lines
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))  # nothing listened on it


def test_the_server_logs_the_address_it_listens_on(model_dir: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Engine and threads pinned by their flags (tests/workloads/inference/serving.py PINNED).
    command = [sys.executable, "-c", "from mlplatform.cli import main; main()"]
    pinned = ["--engine", "onnxruntime", "--threads", "1"]
    process = subprocess.Popen(
        [*command, "serve", "--model", str(model_dir), "--port", str(port), *pinned],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    assert first.rstrip().endswith(f"listening on http://127.0.0.1:{port}"), first


def test_no_traceback_from_the_real_command(model_dir: Path) -> None:
    """The entry point itself, not typer's test runner: stderr is exactly one line."""
    command = [sys.executable, "-c", "from mlplatform.cli import main; main()"]
    done = subprocess.run(
        [*command, "serve", "--model", str(model_dir), "--host", "192.0.2.1", "--engine", "onnxruntime"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr


def test_the_command_module_imports_no_serving_dependency() -> None:
    """The infrastructure install has no ``serve`` extra: importing the command must not need it."""
    probe = (
        "import sys, mlplatform.serve_cmd; print(sorted({'fastapi', 'uvicorn', 'numpy'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
