"""A replica's watcher looks at the store about once an interval, and at once when follow
mode's file says it holds something new (``news``): a change is not left waiting for the
end of a second."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import anyio
import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.server.watcher import RevisionWatcher


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS / "math.yaml")
    return path


def looks_within(watcher: RevisionWatcher, looks: list[float], wanted: int, seconds: float) -> int:
    """Run the watcher until it looked ``wanted`` times or ``seconds`` passed: the count."""

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(watcher.run)
            with anyio.move_on_after(seconds):
                while len(looks) < wanted:
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()

    anyio.run(main)
    return len(looks)


def test_news_from_follow_mode_starts_the_next_look_at_once(catalog_file: Path) -> None:
    looks: list[float] = []
    told: list[bool] = []

    def news() -> bool:  # something new once, after the first look
        if looks and not told:
            told.append(True)
            return True
        return False

    watcher = RevisionWatcher(
        catalog_file, interval=60, follow=lambda: looks.append(time.monotonic()), news=news
    )
    assert looks_within(watcher, looks, 2, seconds=10) == 2
    assert looks[1] - looks[0] < 1.0  # not the 60 s interval
    watcher.close()


def test_without_news_a_replica_waits_its_interval(catalog_file: Path) -> None:
    looks: list[float] = []
    watcher = RevisionWatcher(
        catalog_file, interval=60, follow=lambda: looks.append(0.0), news=lambda: False
    )
    assert looks_within(watcher, looks, 2, seconds=1.0) == 1
    watcher.close()


def test_news_that_cannot_be_read_waits_for_the_interval(catalog_file: Path) -> None:
    looks: list[float] = []

    def unreadable() -> bool:
        raise PermissionError(13, "Permission denied")

    watcher = RevisionWatcher(
        catalog_file, interval=60, follow=lambda: looks.append(0.0), news=unreadable
    )
    assert looks_within(watcher, looks, 2, seconds=1.0) == 1
    watcher.close()


# attack40: the watcher's side of follow mode's news (the bound on a lying ``-txid`` file
# lives in ``Follower.news``: tests/store/test_replica_attack40.py).


def looks_in(watcher: RevisionWatcher, looks: list[int], seconds: float) -> int:
    async def main() -> None:
        with anyio.move_on_after(seconds):
            await watcher.run()

    anyio.run(main)
    return len(looks)


def test_news_that_swaps_in_still_looks_at_once(catalog_file: Path) -> None:
    """News followed by a swap keeps starting looks early, each one at once."""
    looks: list[int] = []
    pending = [False]

    def follow() -> bool:
        looks.append(1)
        swapped, pending[0] = pending[0], False
        return swapped

    polls = [0]

    def news() -> bool:
        polls[0] += 1
        if polls[0] % 3 == 0:  # a real transaction every 150 ms, taken by the look
            pending[0] = True
            return True
        return False

    watcher = RevisionWatcher(catalog_file, interval=10.0, follow=follow, news=news)
    assert looks_in(watcher, looks, 1.5) >= 5


def test_a_primary_never_asks_news(catalog_file: Path) -> None:
    asked: list[int] = []

    def news() -> bool:
        asked.append(1)
        return True

    watcher = RevisionWatcher(catalog_file, interval=0.05, news=news)

    async def main() -> None:
        with anyio.move_on_after(0.5):
            await watcher.run()

    anyio.run(main)
    assert asked == []


def test_cancel_during_the_news_poll_ends_the_task_promptly(catalog_file: Path) -> None:
    import time

    watcher = RevisionWatcher(catalog_file, interval=3600, follow=lambda: False, news=lambda: False)
    started = time.monotonic()

    async def main() -> None:
        with anyio.move_on_after(0.3):
            await watcher.run()

    anyio.run(main)
    assert time.monotonic() - started < 1.0
    assert watcher._conn is None


def test_news_that_hangs_never_holds_up_the_server(catalog_file: Path) -> None:
    """``news`` reads a file: one that hangs (a network disk gone) ran on the event loop and
    held up every request served meanwhile. It runs on a thread: the loop goes on, and the
    look at the interval still comes."""
    looks: list[float] = []
    running: list[int] = []
    most: list[int] = [0]
    guard = threading.Lock()

    def hanging() -> bool:  # hangs past the interval: reads hung one after another
        with guard:
            running.append(1)
            most[0] = max(most[0], len(running))
        time.sleep(1.3)
        with guard:
            running.pop()
        return False

    watcher = RevisionWatcher(
        catalog_file, interval=1.0, follow=lambda: looks.append(time.monotonic()), news=hanging
    )
    ticks: list[float] = []

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(watcher.run)
            with anyio.move_on_after(2.5):
                while True:  # what serving requests needs: the loop turning
                    ticks.append(time.monotonic())
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()

    anyio.run(main)
    watcher.close()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 0.3, f"the loop stood still {max(gaps):.2f} s"
    assert len(looks) >= 2  # the interval's look still came
    assert most[0] == 1  # never more than one thread on it: the others serve requests


def test_news_that_raises_a_bug_never_ends_following(catalog_file: Path) -> None:
    """An error other than an unreadable file (a bug) ended the watcher's task: the replica
    stopped following for good, still answering. Now it is logged once, news is asked again
    only after the next look (attack42: a passing failure must not end the early looks for
    good), and the looks go on at the interval."""
    looks: list[float] = []
    asked: list[int] = []

    def broken() -> bool:
        asked.append(1)
        raise ValueError("a bug")

    watcher = RevisionWatcher(
        catalog_file, interval=0.3, follow=lambda: looks.append(time.monotonic()), news=broken
    )
    assert looks_within(watcher, looks, 4, seconds=5) == 4
    assert len(asked) <= len(looks)  # once after each look, not every NEWS_POLL
    watcher.close()
