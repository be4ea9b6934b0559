"""Stuck and slow calls never hold up fresh ones: no fixed pool for timed-out calls to use up,
and ``acall`` never waits on asyncio's small default executor."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime.threads import ThreadRunner


@pytest.fixture(scope="module")
def rt_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("starve") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.runtime_tools"))
    return path


@pytest.fixture
def threaded(rt_db: Path) -> Iterator[Catalog]:
    with Catalog(rt_db, isolation="thread") as catalog:
        yield catalog


def test_forty_timed_out_sync_calls_leave_room_for_a_fresh_one(threaded: Catalog) -> None:
    for _ in range(40):
        assert threaded.call("nap", {"seconds": 4}, timeout=0.05).error_code == "TIMEOUT"
    # Each timed-out call still sleeps in its thread (unless it had not started: then it was
    # cancelled); a 32-thread pool would be used up by now.
    assert (
        threaded.runtime.executor.threads.busy > 32
        or threaded.runtime.executor.threads.threads > 32
    )
    started = time.monotonic()
    result = threaded.call("quick", timeout=1)
    assert result.data == "ok" and time.monotonic() - started < 0.5


def slow_and_fast(catalog: Catalog, slow_seconds: float) -> tuple[float, bool]:
    """Start 8 slow acalls, then one fast one: its latency, and whether the slow ones still ran."""

    async def main() -> tuple[float, bool]:
        slow = [
            asyncio.ensure_future(catalog.acall("nap", {"seconds": slow_seconds}, timeout=60))
            for _ in range(8)
        ]
        await asyncio.sleep(0.3)
        started = time.monotonic()
        fast = await catalog.acall("quick", timeout=30)
        latency = time.monotonic() - started
        still_running = not any(task.done() for task in slow)
        results = await asyncio.gather(*slow)
        assert fast.data == "ok" and all(r.data == "awake" for r in results)
        return latency, still_running

    return asyncio.run(main())


def test_eight_slow_acalls_do_not_delay_a_ninth_thread(threaded: Catalog) -> None:
    latency, still_running = slow_and_fast(threaded, 2.0)
    assert still_running and latency < 0.5, latency


def test_eight_slow_acalls_do_not_delay_a_ninth_process(rt_db: Path) -> None:
    with Catalog(rt_db, isolation="process") as catalog:
        catalog.call("quick")
        latency, still_running = slow_and_fast(catalog, 6.0)
    assert still_running, latency  # the 9th got its own worker and did not wait for the naps


def test_thread_runner_grows_and_shrinks() -> None:
    runner = ThreadRunner(idle_seconds=0.2, max_threads=50)
    futures = [runner.submit(time.sleep, 0.3) for _ in range(20)]
    assert runner.threads == 20
    for future in futures:
        future.result(timeout=5)
    assert runner.submit(lambda: 7).result(timeout=1) == 7
    deadline = time.monotonic() + 5
    while runner.threads > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.threads == 0 and runner.busy == 0
    runner.close()


def test_thread_runner_carries_base_exceptions_as_outcomes() -> None:
    runner = ThreadRunner()

    def interrupt() -> None:
        raise KeyboardInterrupt("x")

    future = runner.submit(interrupt)
    assert isinstance(future.exception(timeout=2), KeyboardInterrupt)
    assert runner.submit(lambda: 1).result(timeout=2) == 1  # the thread survived
    runner.close()
