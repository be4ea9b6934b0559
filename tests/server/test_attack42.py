"""attack42: a replica's early looks come back after ``news`` failed once (issue 42's outside
attack on b3419f2). A ``news`` that raised anything but OSError switched news off for good:
one passing failure (no thread to be had, memory short for a moment) cost every later change
on that replica the rest of an interval, until the server restarted."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from tests.server.test_watcher import catalog_file, looks_within
from toolcat.server.watcher import RevisionWatcher

__all__ = ["catalog_file"]  # the fixture, from test_watcher


def test_news_that_failed_once_starts_early_looks_again(
    catalog_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    looks: list[float] = []
    asked: list[int] = []

    def news() -> bool:  # fails at its first ask; then something new after each look
        asked.append(len(looks))
        if len(asked) == 1:
            raise RuntimeError("can't start new thread")
        return asked.count(len(looks)) == 1

    watcher = RevisionWatcher(
        catalog_file, interval=1.5, follow=lambda: looks.append(time.monotonic()), news=news
    )
    with caplog.at_level(logging.ERROR, logger="toolcat.server.watcher"):
        assert looks_within(watcher, looks, 3, seconds=8) == 3
    assert looks[1] - looks[0] >= 1.4  # the failed ask: the look at the interval
    assert looks[2] - looks[1] < 1.0  # news works again: the next look at once
    assert watcher.news is not None
    watcher.close()


def test_news_that_always_fails_is_asked_once_an_interval_and_logged_once(
    catalog_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    looks: list[float] = []
    asked: list[float] = []

    def news() -> bool:
        asked.append(time.monotonic())
        raise TypeError("a bug")

    watcher = RevisionWatcher(
        catalog_file, interval=0.3, follow=lambda: looks.append(time.monotonic()), news=news
    )
    with caplog.at_level(logging.ERROR, logger="toolcat.server.watcher"):
        looks_within(watcher, looks, 5, seconds=5)
    assert len(looks) == 5
    assert len(asked) <= len(looks)  # not every 50 ms
    failures = [r for r in caplog.records if "news failed" in r.getMessage()]
    assert len(failures) == 1
    watcher.close()
