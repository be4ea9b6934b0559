"""Attack on the readers' own threads (a ``ThreadRunner`` per server, awaited through
``asyncio.wrap_future``): a caller cancelled while its read runs no longer waits for it, so
a server closing (its requests cancelled, then ``close``) met reads still under way; a
thread that could not start was counted as started."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from toolcat import Catalog
from toolcat.server.mcp import Readers
from toolcat.server.telemetry import Facts, _facts, noted


def _first_tool(path: Path) -> str:
    with Catalog(path) as catalog:
        return catalog.list(limit=1).tools[0].id


def _uses(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM usage").fetchone()[0])
    finally:
        conn.close()


def _until(done: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _is_closed(reader: Catalog) -> bool:
    try:
        reader.list(limit=1)
    except sqlite3.ProgrammingError:
        return True
    return False


def test_close_leaves_a_read_under_way_its_reader_until_it_is_done(sample_path: Path) -> None:
    """A server shutting down cancels its requests, then closes the readers: a read under
    way (a learned use being written) used to have its connection closed under it, and
    the write was lost ("Cannot operate on a closed database")."""
    tool = _first_tool(sample_path)
    before = _uses(sample_path)
    outcome: list[str] = []
    used: list[Catalog] = []
    started = threading.Event()

    def write(reader: Catalog) -> bool:
        used.append(reader)
        started.set()
        time.sleep(0.3)  # a slow read: the server closes meanwhile
        try:
            recorded = reader.record_use("convert a csv file", tool, principal="alice")
        except BaseException as e:
            outcome.append(repr(e))
            raise
        outcome.append("recorded")
        return recorded

    with Catalog(sample_path) as catalog:
        readers = Readers(catalog, 2)

        async def main() -> None:
            task = asyncio.ensure_future(readers.run(write))
            while not started.is_set():
                await asyncio.sleep(0.01)
            task.cancel()  # the request is cancelled (shutdown): it stops waiting at once
            with pytest.raises(asyncio.CancelledError):
                await task
            readers.close()  # not under the read: it finishes on its open reader

        asyncio.run(main())
        _until(lambda: bool(outcome))
        _until(lambda: not readers._opened)  # then its reader is closed, none left open
    assert outcome == ["recorded"]
    assert _uses(sample_path) == before + 1
    assert used and _is_closed(used[0])


def test_a_read_queued_when_the_readers_close_leaves_no_reader_open(sample_path: Path) -> None:
    """A read still waited for when ``close`` came runs (on a reader opened for it, or
    one given back) and that reader is closed afterwards, not given back to a closed pool."""
    with Catalog(sample_path) as catalog:
        readers = Readers(catalog, 1)

        def slow(reader: Catalog) -> int:
            time.sleep(0.2)
            return len(reader.list(limit=1).tools)

        async def main() -> list[int]:
            first = asyncio.ensure_future(readers.run(slow))
            second = asyncio.ensure_future(readers.run(slow))  # queued behind the first
            await asyncio.sleep(0.05)
            readers.close()
            return list(await asyncio.gather(first, second))

        assert asyncio.run(main()) == [1, 1]
        _until(lambda: not readers._opened)
        assert readers.now(lambda c: 1) is None  # nothing free after close


def test_readers_renewed_after_close_are_closed(sample_path: Path) -> None:
    """A replica's watcher may be warming readers on a new revision when the server
    closes: those are closed too, not left open in a closed pool."""
    with Catalog(sample_path) as catalog:
        readers = Readers(catalog, 2)
        readers.close()
        readers.renew(7)
        assert readers._opened == []
        assert readers.now(lambda c: 1) is None


def test_a_thread_that_cannot_start_fails_its_read_alone(
    sample_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process out of threads (a thread start raises) failed the read that asked, but
    the runner counted the thread anyway: with one reader, every later read waited for
    a thread that never existed, for good."""
    start = threading.Thread.start
    failing = [True]

    def flaky_start(self: threading.Thread) -> None:
        if failing[0] and self.name.startswith("toolcat-reader"):
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", flaky_start)
    with Catalog(sample_path) as catalog:
        readers = Readers(catalog, 1)

        async def main() -> int:
            with pytest.raises(RuntimeError, match="can't start"):
                await readers.run(lambda c: 0)
            failing[0] = False  # threads again
            return await asyncio.wait_for(readers.run(lambda c: len(c.list(limit=2).tools)), 5)

        try:
            assert asyncio.run(main()) == 2
            assert readers._threads.threads == 1
        finally:
            readers.close()


# -- properties that held --------------------------------------------------------------------


def test_reader_threads_see_the_requests_facts(sample_path: Path) -> None:
    """A read runs in a copy of its request's context variables: telemetry facts noted
    there (``noted()``) are the request's own, not a throwaway."""
    with Catalog(sample_path) as catalog:
        readers = Readers(catalog, 1)

        def note(reader: Catalog) -> None:
            noted().tool = "seen-in-reader"

        async def main() -> Facts:
            facts = Facts()
            token = _facts.set(facts)
            try:
                await readers.run(note)
            finally:
                _facts.reset(token)
            return facts

        try:
            assert asyncio.run(main()).tool == "seen-in-reader"
        finally:
            readers.close()


def test_many_cancelled_queued_reads_are_dropped_and_the_count_settles(
    sample_path: Path,
) -> None:
    """A client cancelling a thousand queued reads (a disconnect) runs none of them, and
    the runner ends with its one thread idle and nothing owed: the next read runs at once."""
    ran: list[int] = []
    with Catalog(sample_path) as catalog:
        readers = Readers(catalog, 1)
        release = threading.Event()

        def hold(reader: Catalog) -> None:
            release.wait(5)

        def count(i: int) -> Callable[[Catalog], Any]:
            return lambda reader: ran.append(i)

        async def main() -> None:
            held = asyncio.ensure_future(readers.run(hold))
            await asyncio.sleep(0.05)
            queued = [asyncio.ensure_future(readers.run(count(i))) for i in range(1000)]
            await asyncio.sleep(0)
            for task in queued:
                task.cancel()
            await asyncio.gather(*queued, return_exceptions=True)
            release.set()
            await held
            assert await asyncio.wait_for(readers.run(lambda c: "next"), 5) == "next"

        try:
            asyncio.run(main())
            runner = readers._threads
            _until(lambda: runner.busy == 0)
            assert ran == []
            assert runner.threads == 1 and runner._spare == 1
        finally:
            readers.close()


def test_a_reader_lent_across_a_renew_is_retired_when_its_read_ends(sample_path: Path) -> None:
    """A replica renews its readers while a read runs on an old one: that read finishes on
    it, then it is closed, never handed to a later request (it reads the replaced file)."""
    held: list[Catalog] = []
    with Catalog(sample_path) as catalog:
        readers = Readers(catalog, 1)
        started = threading.Event()
        release = threading.Event()

        def hold(reader: Catalog) -> int:
            held.append(reader)
            started.set()
            release.wait(5)
            return len(reader.list(limit=1).tools)

        async def main() -> Catalog:
            task = asyncio.ensure_future(readers.run(hold))
            while not started.is_set():
                await asyncio.sleep(0.01)
            readers.renew(2)  # on the watcher's thread, in a server
            release.set()
            assert await task == 1
            return await readers.run(lambda c: c)

        try:
            later = asyncio.run(main())
            assert later is not held[0]
            assert _is_closed(held[0]) and held[0] not in readers._opened
        finally:
            readers.close()
