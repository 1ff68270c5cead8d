"""Bearer-token authentication for the model API and ``/metrics``, with rotation without a restart."""

from __future__ import annotations

import hmac
import logging
import os
import time
from pathlib import Path

from starlette.datastructures import Headers

# How often a request may trigger a look at the token file (a stat), so rotation needs no restart.
TOKEN_CHECK_S = 1.0

log = logging.getLogger("workloads.inference")


def read_token(path: Path) -> bytes:
    """The bearer token from a mounted secret file; an empty file is a misconfiguration, not 'no auth'."""
    token = path.read_bytes().strip()
    if not token:
        raise ValueError(f"{path}: auth token file is empty")
    return token


class TokenFile:
    """The bearer token, re-read when its file changes (a Kubernetes Secret rotates by swapping a
    symlink, so the file's identity and modification time change), checked at most once a second.

    A rotation to an empty or unreadable file keeps the previous token and logs it: failing open would
    drop authentication, failing shut would take the service down for a bad secret update.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.token = read_token(path)
        self._seen = self._identity()
        self._checked = time.monotonic()

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return (stat.st_ino, stat.st_mtime_ns, stat.st_size)

    def current(self) -> bytes:
        now = time.monotonic()
        if now - self._checked >= TOKEN_CHECK_S:
            self._checked = now
            seen = self._identity()
            if seen != self._seen:
                self._seen = seen
                try:
                    self.token = read_token(self.path)
                    log.info("auth token file changed: token reloaded")
                except (OSError, ValueError) as exc:
                    log.error(
                        "auth token file changed but cannot be used, keeping the previous token: %s", exc
                    )
        return self.token


def authorized(headers: Headers, token: bytes) -> bool:
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    # compare_digest takes the same time wherever the first differing byte is.
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token)
