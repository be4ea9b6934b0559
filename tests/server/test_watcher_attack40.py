"""attack40: the watcher's side of follow mode's news (the bound on a lying ``-txid`` file
lives in ``Follower.news``: tests/store/test_replica_attack40.py)."""

from __future__ import annotations

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
