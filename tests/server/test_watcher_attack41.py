"""Outside attack on a replica's news poll (``RevisionWatcher._until_next_look``): news read
on a thread must go on being read, interval after interval."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio

from tests.server import test_watcher as base
from toolcat.server.watcher import RevisionWatcher

catalog_file = base.catalog_file  # the fixture


def run_for(watcher: RevisionWatcher, seconds: float) -> None:
    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(watcher.run)
            await anyio.sleep(seconds)
            group.cancel_scope.cancel()

    anyio.run(main)


def test_news_is_still_asked_after_the_first_interval(catalog_file: Path) -> None:
    # The poll's last ask in an interval comes when the interval is (about) over: its thread
    # was cancelled before it started, and the flag saying "a read hangs" stayed set, so
    # news was never asked again (a replica then waited whole intervals for each change).
    looks: list[float] = []
    asked: list[float] = []

    def follow() -> bool:
        looks.append(time.monotonic())
        return False

    def news() -> bool:
        asked.append(time.monotonic())
        return False

    watcher = RevisionWatcher(catalog_file, interval=0.2, follow=follow, news=news)
    run_for(watcher, 1.5)
    assert len(looks) >= 4
    late = [t for t in asked if t > looks[2]]  # asked in the third interval and after
    assert len(late) >= 3, (len(asked), [round(t - looks[0], 2) for t in asked])


def test_a_news_read_that_hangs_then_ends_lets_news_be_asked_again(catalog_file: Path) -> None:
    looks: list[float] = []
    asked: list[float] = []
    release = threading.Event()

    def follow() -> bool:
        looks.append(time.monotonic())
        return False

    def news() -> bool:
        asked.append(time.monotonic())
        if len(asked) == 1:  # the first read hangs for two intervals, then returns
            release.wait(0.5)
        return False

    watcher = RevisionWatcher(catalog_file, interval=0.2, follow=follow, news=news)
    run_for(watcher, 1.6)
    release.set()
    assert len(asked) >= 4, len(asked)  # no second read while the first hung, then again
    hung_until = asked[0] + 0.5
    assert all(t >= hung_until - 0.01 for t in asked[1:])
