"""One task per server process that notices when the catalog's revision moves.

Another process registering, deprecating or removing a toolkit bumps the revision in the
catalog file. The watcher reads it about once a second on its own connection (one indexed
row, off the event loop) and, when it moved, tells every listener: the server publishes
``ToolsListChanged`` to 2026 ``subscriptions/listen`` streams and sends
``notifications/tools/list_changed`` to legacy sessions. What a request serves from a cache
(a ``tools/list`` answer) is checked against ``current()``: on a primary one ``PRAGMA
data_version`` on a connection of its own (a few microseconds; the revision row is read only
when something committed since), so a change from any process is seen by the next request,
not a tick later.

On a replica (store/replica.py) each tick first runs ``follow`` (Litestream: restore the
newest published revision and rename it over the file), and a file replaced that way is
reopened; the next tick comes at once when ``news`` says follow mode holds a newer
transaction (a small file read every 50 ms), else after the interval. ``prepare`` then
builds what serving the new revision needs (the server's warm reader catalogs) before
``revision`` moves and listeners hear of it, so no request waits for that work and none
sees a half-made revision.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from ..errors import ToolcatError
from ..store import reader
from ..store.connection import connect

logger = logging.getLogger(__name__)

NEWS_POLL = 0.05  # seconds between two asks of a replica's ``news`` (a stat and a read)

Listener = Callable[[int], Awaitable[None]]
Hook = Callable[[], object]


class RevisionWatcher:
    """Polls the catalog file's revision; ``run`` is the task, ``revision`` the last seen."""

    def __init__(
        self,
        path: Path,
        *,
        interval: float = 1.0,
        follow: Hook | None = None,
        prepare: Callable[[int], object] | None = None,
        news: Callable[[], bool] | None = None,
    ) -> None:
        self.path = path
        self.interval = interval
        self.follow = follow
        self.prepare = prepare
        # A replica's cheap "something new has arrived" (follow mode's file holds a newer
        # transaction): asked every NEWS_POLL seconds between looks, it starts the next
        # look at once instead of at the end of the interval.
        self.news = news
        self._news_failing = False  # the last ask of ``news`` raised (logged once)
        # Held by the thread reading ``news`` while it reads: taken there, not before the
        # thread is asked for, as a thread cancelled before it starts never lets go of it.
        self._asking = threading.Lock()
        # The revision ``prepare`` last made ready: a restarted replica listens before its
        # first, which its first tick then makes (off the request path).
        self.prepared: int | None = None
        self._conn: sqlite3.Connection | None = None
        self._inode: int | None = None
        self.revision = self._read()
        self._listeners: list[Listener] = []
        self._probe: sqlite3.Connection | None = None  # current()'s own connection
        self._probe_state = (-1, -1)  # (data_version, revision) it last read
        self._probe_lock = threading.Lock()
        self.failure: str | None = None  # why the last tick failed; None when it worked

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _read(self) -> int:
        inode = os.stat(self.path).st_ino
        if self._conn is not None and inode != self._inode:  # renamed over: open the new one
            self._conn.close()
            self._conn = None
        if self._conn is None:
            self._conn = connect(self.path)
            self._inode = inode
        return reader.revision(self._conn)

    def current(self) -> int | None:
        """The catalog's revision now, for checking a cached answer per request: on a
        primary read each time (``PRAGMA data_version`` first, which only moves when another
        connection committed); on a replica the last revision ``prepare`` made ready. None
        when the file cannot be read (serve without the cache then)."""
        if self.follow is not None:
            return self.revision
        try:
            with self._probe_lock:
                if self._probe is None:
                    self._probe = connect(self.path, create=False)
                (version,) = self._probe.execute("PRAGMA data_version").fetchone()
                if version != self._probe_state[0]:
                    self._probe_state = (version, reader.revision(self._probe))
                return self._probe_state[1]
        except (sqlite3.Error, ToolcatError, OSError) as e:
            logger.warning("catalog revision unreadable: %s", e)
            return None

    def close(self) -> None:
        with self._probe_lock:
            if self._probe is not None:
                self._probe.close()
                self._probe = None

    def _tick(self) -> int:
        swapped = bool(self.follow()) if self.follow is not None else False
        revision = self._read()
        # A copy restored again on the same revision (the old one was damaged) needs
        # readers on the new file too.
        if (swapped or revision != self.prepared) and self.prepare is not None:
            self.prepare(revision)
            self.prepared = revision
        return revision

    async def check(self) -> bool:
        """Read the revision once; tell the listeners if it moved. True when it did."""
        try:
            # A replica's tick may wait on the store (a restore, a store that is down):
            # shutting down does not wait for it.
            revision = await anyio.to_thread.run_sync(
                self._tick, abandon_on_cancel=self.follow is not None
            )
        except (sqlite3.Error, ToolcatError, OSError) as e:  # busy or replaced: next tick
            logger.warning("catalog revision unreadable: %s", e)
            self.failure = str(e)
            return False
        except Exception as e:  # a replica keeps serving and says so; the next tick retries
            if self.follow is None:
                raise
            logger.exception("replica: following the primary failed")
            self.failure = f"following the primary failed ({type(e).__name__})"
            return False
        self.failure = None
        if revision == self.revision:
            return False
        self.revision = revision
        for listener in list(self._listeners):
            try:
                await listener(revision)
            except Exception:  # one broken listener must not stop the others
                logger.exception("revision listener failed")
        return True

    async def _until_next_look(self) -> None:
        """Wait ``interval`` seconds, or less when ``news`` says there is something to take."""
        if self.news is None:
            await anyio.sleep(self.interval)
            return
        deadline = anyio.current_time() + self.interval
        while (left := deadline - anyio.current_time()) > 0:
            await anyio.sleep(min(NEWS_POLL, left))
            if self._asking.locked():  # the last read hangs still: no second thread on it
                continue
            # On a thread: a read that hangs (a network disk gone) holds up the wait for the
            # next look at most until the interval ends, and never the requests being served.
            with anyio.move_on_after(max(deadline - anyio.current_time(), 0.0)):
                try:
                    told = await anyio.to_thread.run_sync(self._ask_news, abandon_on_cancel=True)
                except OSError:  # its file unreadable now: the look at the interval says why
                    continue
                except Exception:  # a bug, or no thread to be had: never ends following
                    # Asked again after the next look, not never again: a passing failure
                    # (no thread now, memory short) must not cost every later change the
                    # rest of an interval. Logged once until news works again.
                    if not self._news_failing:
                        logger.exception(
                            "replica: follow mode's news failed; looking at the interval "
                            "until it works again"
                        )
                    self._news_failing = True
                    await anyio.sleep(max(deadline - anyio.current_time(), 0.0))
                    return
                self._news_failing = False
                if told:
                    return

    def _ask_news(self) -> bool:
        assert self.news is not None
        if not self._asking.acquire(blocking=False):
            return False  # another read hangs still
        try:
            return self.news()
        finally:
            self._asking.release()

    async def run(self) -> None:
        """Check forever, every ``interval`` seconds (cancel the task to stop)."""
        try:
            while True:
                if self.follow is None:
                    await anyio.sleep(self.interval)
                await self.check()
                if self.follow is not None:  # a replica looks at once when it starts
                    await self._until_next_look()
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
