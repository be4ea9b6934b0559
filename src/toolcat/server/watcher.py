"""One task per server process that notices when the catalog's revision moves.

Another process registering, deprecating or removing a toolkit bumps the revision in the
catalog file. The watcher reads it about once a second on its own connection (one indexed
row, off the event loop) and, when it moved, tells every listener: the server publishes
``ToolsListChanged`` to 2026 ``subscriptions/listen`` streams and sends
``notifications/tools/list_changed`` to legacy sessions. Requests never read the revision
themselves: they use ``watcher.revision``, so watching costs nothing per request.

On a replica (store/replica.py) each tick first runs ``follow`` (Litestream: restore the
newest published revision and rename it over the file), and a file replaced that way is
reopened. ``prepare`` then builds what serving the new revision needs (the server's warm
reader catalogs) before ``revision`` moves and listeners hear of it, so no request waits
for that work and none sees a half-made revision.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from ..errors import ToolcatError
from ..store import reader
from ..store.connection import connect

logger = logging.getLogger(__name__)

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
    ) -> None:
        self.path = path
        self.interval = interval
        self.follow = follow
        self.prepare = prepare
        self._conn: sqlite3.Connection | None = None
        self._inode: int | None = None
        self.revision = self._read()
        self._listeners: list[Listener] = []

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

    def _tick(self) -> int:
        if self.follow is not None:
            self.follow()
        revision = self._read()
        if revision != self.revision and self.prepare is not None:
            self.prepare(revision)
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
            return False
        if revision == self.revision:
            return False
        self.revision = revision
        for listener in list(self._listeners):
            try:
                await listener(revision)
            except Exception:  # one broken listener must not stop the others
                logger.exception("revision listener failed")
        return True

    async def run(self) -> None:
        """Check forever, every ``interval`` seconds (cancel the task to stop)."""
        try:
            while True:
                await anyio.sleep(self.interval)
                await self.check()
        finally:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
