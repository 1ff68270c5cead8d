"""Request micro-batching: many concurrent requests, one model run.

On a CPU a batch-1 forward pass reads every weight from memory once per request; a batch of 32 reads them
once for all 32. The batcher collects queued requests until it has ``max_batch_size`` rows or the oldest
has waited ``max_wait_s``, then hands the batch to ``run_batch`` on a worker thread so the event loop
keeps accepting requests while the model computes. The wait is measured from the oldest request's
arrival, so under load (requests already queued while the previous batch ran) nothing waits at all.

With ``pending`` (how many requests the server has admitted and not yet answered) it also stops waiting
once every admitted request is in the batch: nobody else is coming, so a lone client at low load pays no
window at all, and a burst goes as soon as its last member arrives.

The shape follows LitServe's ``batch`` / ``predict`` / ``unbatch`` hooks: ``run_batch`` receives the
queued items in arrival order and returns one result per item.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


class QueueFullError(Exception):
    """More requests are waiting than the server will hold; the caller should shed load (503)."""


class BatcherStoppedError(Exception):
    """The batcher was stopped before this request ran."""


@dataclass
class _Queued(Generic[In, Out]):
    item: In
    rows: int
    enqueued_at: float
    future: asyncio.Future[tuple[Out, int]] = field(repr=False)


class MicroBatcher(Generic[In, Out]):
    """Collects items submitted from the event loop and runs them in batches on one worker thread.

    One worker thread, because the model session already parallelises each run over the CPU limit;
    two concurrent runs would only fight over the same cores.
    """

    def __init__(
        self,
        run_batch: Callable[[Sequence[In]], Sequence[Out]],
        *,
        max_batch_size: int,
        max_wait_s: float,
        max_queue: int = 1024,
        on_batch: Callable[[int], None] | None = None,
        pending: Callable[[], int] | None = None,
    ) -> None:
        if max_batch_size < 1 or max_wait_s < 0 or max_queue < 1:
            raise ValueError("max_batch_size and max_queue must be >= 1 and max_wait_s >= 0")
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self._on_batch = on_batch
        self._pending = pending
        self._queue: asyncio.Queue[_Queued[In, Out]] = asyncio.Queue(maxsize=max_queue)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch")
        self._task: asyncio.Task[None] | None = None
        # Items taken off the queue whose results are not yet delivered; failed on stop, never dropped.
        self._held: list[_Queued[In, Out]] = []

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve(), name="micro-batcher")

    async def stop(self) -> None:
        """Stop collecting; anything still queued fails with ``BatcherStoppedError``."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while not self._queue.empty():
            self._held.append(self._queue.get_nowait())
        _fail(self._held, BatcherStoppedError("server is shutting down"))
        self._held = []
        self._executor.shutdown(wait=True)

    async def submit(self, item: In, rows: int = 1) -> tuple[Out, int]:
        """Queue one item of ``rows`` rows; returns its result and the row count of the batch it ran in."""
        if rows > self.max_batch_size:
            raise ValueError(f"{rows} rows exceed the maximum batch size {self.max_batch_size}")
        loop = asyncio.get_running_loop()
        entry = _Queued[In, Out](item, rows, loop.time(), loop.create_future())
        try:
            self._queue.put_nowait(entry)
        except asyncio.QueueFull:
            raise QueueFullError(f"{self._queue.maxsize} requests already queued") from None
        return await entry.future

    async def _serve(self) -> None:
        while True:
            if not self._held:
                self._held.append(await self._queue.get())
            batch = await self._collect()
            await self._dispatch(batch)
            self._held = self._held[len(batch) :]

    async def _collect(self) -> list[_Queued[In, Out]]:
        """Gather queued items behind the oldest held one until the batch is full or its wait is spent.

        An item that would overflow the batch stays held and opens the next batch.
        """
        loop = asyncio.get_running_loop()
        first = self._held[0]
        batch, rows = [first], first.rows
        deadline = first.enqueued_at + self.max_wait_s
        while rows < self.max_batch_size:
            try:
                nxt = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0 or not self._others_coming(len(batch)):
                    break
                try:
                    nxt = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            self._held.append(nxt)
            if rows + nxt.rows > self.max_batch_size:
                break
            batch.append(nxt)
            rows += nxt.rows
        return batch

    def _others_coming(self, collected: int) -> bool:
        return self._pending is None or self._pending() > collected

    async def _dispatch(self, batch: list[_Queued[In, Out]]) -> None:
        """Run one batch off the event loop and resolve every waiting request with its own result."""
        rows = sum(entry.rows for entry in batch)
        items = [entry.item for entry in batch]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self._executor, self._run_batch, items)
        except Exception as exc:  # one bad batch must fail its requests, not the batcher
            _fail(batch, exc)
            return
        if self._on_batch is not None:
            self._on_batch(rows)
        for entry, result in zip(batch, results, strict=True):
            if not entry.future.done():  # the client may have gone away
                entry.future.set_result((result, rows))


def _fail(queued: Sequence[_Queued[In, Out]], exc: BaseException) -> None:
    for entry in queued:
        if not entry.future.done():
            entry.future.set_exception(exc)
