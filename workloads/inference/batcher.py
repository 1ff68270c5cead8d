"""Request dispatch that adapts to load: inline on the event loop, or micro-batched on one model thread.

On a CPU a batch-1 forward pass reads every weight from memory once per request; a batch of 32 reads them
once for all 32. But handing a request to a thread and back costs wake-ups (about 100 µs here, profiled),
which is ten times what the default model's run costs. So, per request:

- **inline**: when nothing is queued, the model thread is idle and no other request has been received
  (``pending``), the request runs right on the event loop: no hop, no wake-ups, nobody to batch with.
- **batched**: otherwise it joins the queue. When the model thread is idle the queue goes at once as one
  batch, unless more admitted requests are still being read (``pending``), in which case it waits for
  them at most ``max_wait_s`` from the oldest arrival. While the thread is busy, whatever queues up goes
  as the next batch the moment it finishes: under load nothing waits for a window.
- The thread resolves a whole batch with one wake-up of the loop (one ``call_soon_threadsafe``), not one
  per request, and that same callback dispatches the next batch.
- **batched on the loop**: a batch expected to run for less than ``loop_below_s`` (the running estimate
  of a batch's duration) runs on the event loop itself, as one callback, then resolves as above. The
  hop to the thread and back is two GIL hand-offs, and while the loop is busy parsing other requests
  each waits for the interpreter's switch interval (``sys.getswitchinterval()``, 5 ms by default:
  Python docs, ``sys.setswitchinterval``). Measured under wrk at 32 clients on 2 shared cores: the
  batch of the 1.1M-weight model ran 0.8 ms (p50) but waited 10 ms (p99) to start on the thread and
  11 ms (p99) to be resolved back on the loop; on the loop the server's p99 fell from 41-56 ms to
  28-29 ms. A model that runs longer than the switch interval still runs on the thread, so the loop keeps
  reading requests while the model computes.

Shedding looks at time as well as length: a request whose estimated queueing delay (batches ahead of it
times the measured batch duration) is past ``deadline_s`` is refused at once rather than served late.

The shape follows LitServe's ``batch`` / ``predict`` / ``unbatch`` hooks: ``run_batch`` receives the
queued items in arrival order and returns one result per item.
"""

from __future__ import annotations

import asyncio
import collections
import math
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")

# Weight of the newest batch in the running estimate of a batch's duration.
EWMA_WEIGHT = 0.2


class QueueFullError(Exception):
    """More is waiting than the server will hold or serve in time; the caller should shed load (503)."""


class BatcherStoppedError(Exception):
    """The batcher was stopped before this request ran."""


@dataclass
class _Queued(Generic[In, Out]):
    item: In
    rows: int
    enqueued_at: float
    future: asyncio.Future[tuple[Out, int]] = field(repr=False)


class MicroBatcher(Generic[In, Out]):
    """Runs items submitted from the event loop inline or in batches on one worker thread.

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
        deadline_s: float | None = None,
        on_batch: Callable[[int], None] | None = None,
        on_queue: Callable[[int], None] | None = None,
        pending: Callable[[], int] | None = None,
        loop_below_s: float | None = None,
    ) -> None:
        """``loop_below_s``: see the module's docstring; default the interpreter's switch interval, 0 to
        run every batch on the worker thread."""
        if max_batch_size < 1 or max_wait_s < 0 or max_queue < 1:
            raise ValueError("max_batch_size and max_queue must be >= 1 and max_wait_s >= 0")
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.deadline_s = deadline_s
        self._on_batch = on_batch
        self._on_queue = on_queue
        self._pending = pending
        self.loop_below_s = sys.getswitchinterval() if loop_below_s is None else loop_below_s
        self._queue: collections.deque[_Queued[In, Out]] = collections.deque()
        self._queued_rows = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: list[_Queued[In, Out]] = []  # the batch on the worker thread
        self._timer: asyncio.TimerHandle | None = None
        self._batch_s = 0.0  # running estimate of one batch's duration

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing running on the worker thread."""
        return not self._queue and not self._running

    def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._maybe_dispatch()

    async def stop(self) -> None:
        """Stop dispatching; anything queued or still running fails with ``BatcherStoppedError``."""
        self._loop = None
        if self._timer is not None:
            self._timer.cancel()
        stopped = BatcherStoppedError("server is shutting down")
        _fail([*self._running, *self._queue], stopped)
        self._queue.clear()
        self._queue_changed()
        await asyncio.to_thread(self._executor.shutdown, wait=True)

    async def submit(self, item: In, rows: int = 1) -> tuple[Out, int]:
        """Run one item of ``rows`` rows; returns its result and the row count of the run it shared."""
        if rows > self.max_batch_size:
            raise ValueError(f"{rows} rows exceed the maximum batch size {self.max_batch_size}")
        if self._loop is not None and not self._queue and not self._running and self._alone():
            started = time.perf_counter()
            result = self._run_batch([item])[0]
            self._observe(rows, time.perf_counter() - started)
            return result, rows
        self._check_admission()
        loop = asyncio.get_running_loop()
        entry = _Queued[In, Out](item, rows, loop.time(), loop.create_future())
        self._queue.append(entry)
        self._queued_rows += rows
        self._queue_changed()
        self._maybe_dispatch()
        return await entry.future

    def _queue_changed(self) -> None:
        """Tell ``on_queue`` the new queue length (a gauge that must be current in every process)."""
        if self._on_queue is not None:
            self._on_queue(len(self._queue))

    def _alone(self) -> bool:
        """Nothing else received: a thread hop would only add latency, and there is nobody to batch with."""
        return self._pending is not None and self._pending() <= 1

    def _check_admission(self) -> None:
        if len(self._queue) >= self.max_queue:
            raise QueueFullError(f"{self.max_queue} requests already queued")
        if self.deadline_s is not None and self._batch_s > 0:
            ahead = math.ceil((self._queued_rows + 1) / self.max_batch_size) + bool(self._running)
            delay = ahead * self._batch_s
            if delay > self.deadline_s:
                raise QueueFullError(
                    f"estimated queueing delay {delay * 1000:.0f} ms exceeds the "
                    f"{self.deadline_s * 1000:.0f} ms deadline"
                )

    def _maybe_dispatch(self) -> None:
        """Send the queue to the worker now, or arm the wait for requests still being read."""
        loop = self._loop
        if loop is None or self._running or not self._queue:
            return
        full = self._queued_rows >= self.max_batch_size
        others = self._pending is None or self._pending() > len(self._queue)
        wait_until = self._queue[0].enqueued_at + self.max_wait_s
        if not full and others and wait_until > loop.time():
            if self._timer is None:
                self._timer = loop.call_at(wait_until, self._window_closed)
            return
        self._dispatch()

    def _window_closed(self) -> None:
        self._timer = None
        if self._loop is not None and not self._running and self._queue:
            self._dispatch()

    def _dispatch(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch = [self._queue.popleft()]
        rows = batch[0].rows
        while self._queue and rows + self._queue[0].rows <= self.max_batch_size:
            entry = self._queue.popleft()
            batch.append(entry)
            rows += entry.rows
        self._queued_rows -= rows
        self._queue_changed()
        self._running = batch
        if 0 < self._batch_s < self.loop_below_s:
            self._work(batch, rows)  # on the loop; resolved by the callback it schedules, like the thread's
        else:
            self._executor.submit(self._work, batch, rows)

    def _work(self, batch: list[_Queued[In, Out]], rows: int) -> None:
        """On the worker thread (or the loop): one run, then one callback on the loop to resolve the whole
        batch."""
        started = time.perf_counter()
        try:
            outcome: Sequence[Out] | Exception = self._run_batch([entry.item for entry in batch])
        except Exception as exc:  # one bad batch must fail its requests, not the batcher
            outcome = exc
        elapsed = time.perf_counter() - started
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._finish, batch, rows, outcome, elapsed)

    def _finish(
        self, batch: list[_Queued[In, Out]], rows: int, outcome: Sequence[Out] | Exception, elapsed: float
    ) -> None:
        if self._running is batch:
            self._running = []
        if isinstance(outcome, Exception):
            _fail(batch, outcome)
        else:
            self._observe(rows, elapsed)
            for entry, result in zip(batch, outcome, strict=True):
                if not entry.future.done():  # the client may have gone away
                    entry.future.set_result((result, rows))
        self._maybe_dispatch()

    def _observe(self, rows: int, elapsed: float) -> None:
        self._batch_s = (
            elapsed if self._batch_s == 0 else (1 - EWMA_WEIGHT) * self._batch_s + EWMA_WEIGHT * elapsed
        )
        if self._on_batch is not None:
            self._on_batch(rows)


def _fail(queued: Sequence[_Queued[In, Out]], exc: BaseException) -> None:
    for entry in queued:
        if not entry.future.done():
            entry.future.set_exception(exc)
