"""A replica's watcher looks at the store about once an interval, and at once when follow
mode's file says it holds something new (``news``): a change is not left waiting for the
end of a second."""

from __future__ import annotations

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
