"""The micro-batcher on its own: concurrent submissions share runs, within the size and wait limits."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from workloads.inference.batcher import BatcherStoppedError, MicroBatcher, QueueFullError

pytestmark = pytest.mark.anyio


class Recorder:
    """A ``run_batch`` that doubles its inputs and remembers every batch it was given, and on which thread."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.batches: list[list[int]] = []
        self.started: list[float] = []
        self.threads: set[int] = set()
        self.thread_of: list[int] = []  # per batch
        self.delay_s = delay_s

    def __call__(self, items: Sequence[int]) -> list[int]:
        self.started.append(time.perf_counter())
        self.threads.add(threading.get_ident())
        self.thread_of.append(threading.get_ident())
        self.batches.append(list(items))
        time.sleep(self.delay_s)
        return [2 * i for i in items]


async def test_concurrent_submissions_share_one_run_and_get_their_own_results() -> None:
    run = Recorder()
    batcher = MicroBatcher(run, max_batch_size=16, max_wait_s=0.05)
    batcher.start()
    results = await asyncio.gather(*(batcher.submit(i) for i in range(8)))
    await batcher.stop()
    assert [r for r, _ in results] == [2 * i for i in range(8)]
    assert run.batches == [list(range(8))]
    assert {size for _, size in results} == {8}
    assert threading.get_ident() not in run.threads, "the model must run off the event loop"


async def test_batches_never_exceed_the_row_limit() -> None:
    run = Recorder()
    batcher = MicroBatcher(run, max_batch_size=4, max_wait_s=0.05)
    batcher.start()
    await asyncio.gather(*(batcher.submit(i) for i in range(10)))
    await batcher.stop()
    assert [len(b) for b in run.batches] == [4, 4, 2]


async def test_rows_count_toward_the_limit_and_an_overflowing_item_opens_the_next_batch() -> None:
    run = Recorder()
    batcher = MicroBatcher(run, max_batch_size=4, max_wait_s=0.05)
    batcher.start()
    results = await asyncio.gather(
        batcher.submit(1, rows=3), batcher.submit(2, rows=2), batcher.submit(3, rows=2)
    )
    await batcher.stop()
    assert run.batches == [[1], [2, 3]]
    assert [size for _, size in results] == [3, 4, 4]
    with pytest.raises(ValueError, match="exceed"):
        await batcher.submit(4, rows=5)


async def test_a_lone_request_waits_at_most_max_wait() -> None:
    batcher = MicroBatcher(Recorder(), max_batch_size=64, max_wait_s=0.02)
    batcher.start()
    started = time.perf_counter()
    assert await batcher.submit(21) == (42, 1)
    elapsed = time.perf_counter() - started
    await batcher.stop()
    assert 0.015 <= elapsed < 0.5


async def test_with_nobody_else_admitted_a_lone_request_does_not_wait() -> None:
    batcher = MicroBatcher(Recorder(), max_batch_size=64, max_wait_s=1.0, pending=lambda: 1)
    batcher.start()
    started = time.perf_counter()
    assert await batcher.submit(21) == (42, 1)
    elapsed = time.perf_counter() - started
    await batcher.stop()
    assert elapsed < 0.2


async def test_a_burst_goes_as_soon_as_every_admitted_request_has_joined() -> None:
    run = Recorder()
    batcher = MicroBatcher(run, max_batch_size=64, max_wait_s=1.0, pending=lambda: 3)
    batcher.start()
    started = time.perf_counter()

    async def late(i: int) -> tuple[int, int]:
        await asyncio.sleep(0.05 * i)
        return await batcher.submit(i)

    results = await asyncio.gather(*(late(i) for i in range(3)))
    elapsed = time.perf_counter() - started
    await batcher.stop()
    assert run.batches == [[0, 1, 2]] and {size for _, size in results} == {3}
    assert elapsed < 0.5, "the batch should not have waited out its 1 s window"


async def test_requests_that_queued_during_a_run_go_next_without_a_fresh_wait() -> None:
    """Under load the next batch is what queued during the previous run; their wait already counted."""
    run = Recorder(delay_s=0.4)
    batcher = MicroBatcher(run, max_batch_size=64, max_wait_s=0.1)
    batcher.start()
    first = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0.15)  # the first batch is running now, until about t=0.5
    await asyncio.gather(*(batcher.submit(i) for i in range(1, 5)))
    await first
    await batcher.stop()
    assert run.batches == [[0], [1, 2, 3, 4]]
    gap = run.started[1] - (run.started[0] + run.delay_s)
    assert gap < 0.05, f"the second batch waited {gap:.3f}s after the first finished"


async def test_a_failing_run_fails_its_requests_and_the_batcher_carries_on() -> None:
    calls = 0

    def flaky(items: Sequence[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return list(items)

    batcher = MicroBatcher(flaky, max_batch_size=8, max_wait_s=0.01)
    batcher.start()
    with pytest.raises(RuntimeError, match="boom"):
        await batcher.submit(1)
    assert await batcher.submit(2) == (2, 1)
    await batcher.stop()


async def test_a_full_queue_refuses_and_stop_fails_what_is_still_queued() -> None:
    batcher = MicroBatcher(Recorder(), max_batch_size=8, max_wait_s=10, max_queue=2)  # never started
    queued = [asyncio.ensure_future(batcher.submit(i)) for i in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(QueueFullError):
        await batcher.submit(3)
    await batcher.stop()
    for future in queued:
        with pytest.raises(BatcherStoppedError):
            await future


async def test_a_request_runs_inline_on_the_loop_only_when_no_other_is_received() -> None:
    run = Recorder()
    received = 1
    # (loop_below_s 0: every batch on the worker, whatever it costs; the next test covers cheap batches)
    batcher = MicroBatcher(run, max_batch_size=8, max_wait_s=0.01, pending=lambda: received, loop_below_s=0)
    batcher.start()
    await batcher.submit(1)
    assert run.threads == {threading.get_ident()}
    received = 3
    await asyncio.gather(*(batcher.submit(i) for i in range(3)))
    await batcher.stop()
    assert len(run.threads) == 2 and run.batches[-1] == [0, 1, 2], "others waiting: batched on the worker"


@pytest.mark.parametrize(("run_s", "on_loop"), [(0.0, True), (0.06, False)])
async def test_a_batch_measured_shorter_than_loop_below_s_runs_on_the_loop(
    run_s: float, on_loop: bool
) -> None:
    """Issue 42: handing a cheap batch to the worker thread and back cost more than running it (two GIL
    hand-offs of up to a switch interval each); so once batches are measured (the first runs on the worker)
    one estimated under ``loop_below_s`` runs on the loop, and a longer one still goes to the worker."""
    run = Recorder(delay_s=run_s)
    batcher = MicroBatcher(run, max_batch_size=8, max_wait_s=0.01, loop_below_s=0.05)
    batcher.start()
    loop_thread = threading.get_ident()
    first = await asyncio.gather(*(batcher.submit(i) for i in range(3)))
    second = await asyncio.gather(*(batcher.submit(i) for i in range(3, 6)))
    await batcher.stop()
    assert run.batches == [[0, 1, 2], [3, 4, 5]]
    assert [r for r, _ in first + second] == [0, 2, 4, 6, 8, 10]
    assert {size for _, size in first + second} == {3}
    assert run.thread_of[0] != loop_thread, "unmeasured: the first batch runs on the worker"
    assert (run.thread_of[1] == loop_thread) is on_loop


async def test_requests_that_would_miss_the_deadline_are_shed_at_once() -> None:
    """With 0.2 s batches measured and a 0.5 s deadline: behind the running batch, the first queued request
    expects 0.4 s and is taken, the next 0.6 s and is refused up front, not served late."""
    run = Recorder(delay_s=0.2)
    batcher = MicroBatcher(run, max_batch_size=1, max_wait_s=0, deadline_s=0.5)
    batcher.start()
    await batcher.submit(0)  # measures a batch
    first = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0)  # running now
    second = asyncio.ensure_future(batcher.submit(2))
    await asyncio.sleep(0)
    started = time.perf_counter()
    with pytest.raises(QueueFullError, match=r"delay 6\d\d ms exceeds the 500 ms deadline"):
        await batcher.submit(3)
    assert time.perf_counter() - started < 0.05
    assert [r for r, _ in await asyncio.gather(first, second)] == [2, 4]
    await batcher.stop()


async def test_on_queue_follows_the_queue_length_as_it_fills_and_empties() -> None:
    """What the queue-depth gauge is set from: with several workers it cannot be read at scrape time."""
    lengths: list[int] = []
    batcher = MicroBatcher(Recorder(), max_batch_size=4, max_wait_s=0.05, on_queue=lengths.append)
    batcher.start()
    await asyncio.gather(*(batcher.submit(i) for i in range(6)))
    await batcher.stop()
    # Four queue, a full batch takes them at once; two more queue behind it and go when it ends; stop()
    # reports the (already empty) queue once more.
    assert lengths == [1, 2, 3, 4, 0, 1, 2, 0, 0]
