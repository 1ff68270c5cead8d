"""Self-signed test certificates, made with the real openssl (skipped where it is not installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def self_signed(directory: Path, subject: str, alt_name: str) -> tuple[Path, Path]:
    """A one-day self-signed certificate for ``subject`` (``/CN=...``) and ``alt_name`` (``IP:...`` or
    ``DNS:...``), and its key: ``(directory/tls.crt, directory/tls.key)``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", subject, "-addext", f"subjectAltName={alt_name}"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
