"""Structured log lines: one JSON object per line on stdout, so a log shipper or a test can parse them.

Rank 0 logs metrics (INFO and up); other ranks log only warnings and errors, so a multi-rank run prints
each metric once.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

logger = logging.getLogger("workloads.training")


class _JsonFormatter(logging.Formatter):
    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "fields", {})
        line = {"ts": round(record.created, 3), "level": record.levelname, "rank": self.rank}
        return json.dumps({**line, "event": record.getMessage(), **fields}, default=str)


def configure(rank: int) -> None:
    """Route this package's log records to stdout as JSON; idempotent across calls."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_JsonFormatter(rank))
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    logger.propagate = False


def log_event(event: str, level: int = logging.INFO, **fields: Any) -> None:
    logger.log(level, event, extra={"fields": fields})


class Stopwatch:
    """Wall-clock seconds since construction (monotonic, so clock steps don't skew throughput)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start
