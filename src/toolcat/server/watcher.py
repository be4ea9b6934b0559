"""One task per server process that notices when the catalog's revision moves.

Another process registering, deprecating or removing a toolkit bumps the revision in the
catalog file. The watcher reads it about once a second on its own connection (one indexed
row, off the event loop) and, when it moved, tells every listener: the server publishes
``ToolsListChanged`` to 2026 ``subscriptions/listen`` streams and sends
``notifications/tools/list_changed`` to legacy sessions. Requests never read the revision
themselves: they use ``watcher.revision``, so watching costs nothing per request.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from ..store import reader
from ..store.connection import connect

logger = logging.getLogger(__name__)

Listener = Callable[[int], Awaitable[None]]


class RevisionWatcher:
    """Polls the catalog file's revision; ``run`` is the task, ``revision`` the last seen."""

    def __init__(self, path: Path, *, interval: float = 1.0) -> None:
        self.path = path
        self.interval = interval
        self._conn: sqlite3.Connection | None = None
        self.revision = self._read()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _read(self) -> int:
        if self._conn is None:
            self._conn = connect(self.path)
        return reader.revision(self._conn)

    async def check(self) -> bool:
        """Read the revision once; tell the listeners if it moved. True when it did."""
        try:
            revision = await anyio.to_thread.run_sync(self._read)
        except sqlite3.Error as e:  # a busy or replaced file: try again next tick
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
