"""Several stacks at once: one process per CPU, each working through every n-th stack.

Planning and judging a stack is pure Python bound to one core (Pulumi's runtime under mocks, the policy
pack, the judges) and stacks do not depend on each other, so ``check --all`` and ``cost`` spread them
over the machine's CPUs. The first share runs in this process (with what it already holds: a started
policy pack); the others in fresh interpreters (``spawn``: this process may already run gRPC threads,
which must not be forked). Results come back in the order of the items; what the others write to
``sys.stderr`` (progress, warnings) comes out of this process's ``sys.stderr``, a line at a time.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.queues import Queue
from typing import IO, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cpus() -> int:
    """The CPUs this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def spread(
    items: Sequence[T],
    work: Callable[[list[T]], list[R]],
    here: Callable[[list[T]], list[R]] | None = None,
) -> list[R]:
    """``work`` on shares of ``items`` (``work(share)`` gives one result per item, in order), one share
    per CPU; ``here`` (default ``work``) does this process's share. ``work`` must be picklable (a
    module-level function or a ``functools.partial`` of one)."""
    workers = min(len(items), cpus())
    if workers < 2:
        return (here or work)(list(items))
    shares = [list(items[index::workers]) for index in range(workers)]
    context = multiprocessing.get_context("spawn")
    lines: Queue[str | None] = context.Queue()
    relay = threading.Thread(target=_relay, args=(lines, sys.stderr), daemon=True)
    relay.start()
    try:
        with ProcessPoolExecutor(
            workers - 1, mp_context=context, initializer=_stderr_to, initargs=(lines,)
        ) as pool:
            futures = [pool.submit(work, share) for share in shares[1:]]
            done = [(here or work)(shares[0]), *(future.result() for future in futures)]
    finally:
        lines.put(None)  # the workers have ended and flushed theirs: nothing comes after it
        relay.join()
    order = [index for share in range(workers) for index in range(share, len(items), workers)]
    by_index = dict(zip(order, (result for share in done for result in share), strict=True))
    return [by_index[index] for index in range(len(items))]


class _Lines(io.TextIOBase):
    """A worker's ``sys.stderr``: each whole line put on the queue the first process relays."""

    def __init__(self, queue: Queue[str | None]) -> None:
        super().__init__()
        self.queue, self.pending = queue, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        head, newline, self.pending = (self.pending + text).rpartition("\n")
        if newline:
            self.queue.put(head + newline)
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.queue.put(self.pending)
            self.pending = ""


def _stderr_to(queue: Queue[str | None]) -> None:
    sys.stderr = _Lines(queue)


def _relay(queue: Queue[str | None], stderr: IO[str]) -> None:
    while (text := queue.get()) is not None:
        stderr.write(text)
        stderr.flush()
