"""What a search engine keeps for one catalog revision: its BM25 answers, the tools it built
for hits, whether a hit's name is shared within a scope, and the best mode. A server's readers
share one of each (``Catalog.share_indexes``), so a request one reader answered is kept for
all of them, whichever thread or reader asks next."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


class KeptAtRevision(Generic[Key, Value]):
    """A bounded map for one revision: a look-up at another revision finds nothing, an
    entry kept at a new one forgets the old revision's, and past ``size`` entries the
    oldest kept go first. Safe to share between threads."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._revision = -1
        self._items: dict[Key, Value] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, revision: int, key: Key) -> Value | None:
        with self._lock:
            return self._items.get(key) if revision == self._revision else None

    def found(self, revision: int, keys: Iterable[Key]) -> dict[Key, Value]:
        """The entries of ``keys`` kept at ``revision``, in ``keys``' order."""
        with self._lock:
            if revision != self._revision:
                return {}
            items = self._items
            return {key: items[key] for key in keys if key in items}

    def holds(self, revision: int, keys: Iterable[Key]) -> bool:
        """Whether every one of ``keys`` is kept at ``revision``."""
        with self._lock:
            items = self._items
            return revision == self._revision and all(key in items for key in keys)

    def keep(self, revision: int, entries: dict[Key, Value]) -> None:
        if self.size <= 0:
            return
        with self._lock:
            if revision != self._revision:
                self._items, self._revision = {}, revision
            items = self._items
            items.update(entries)
            for old in list(itertools.islice(items, max(0, len(items) - self.size))):
                del items[old]  # the oldest kept first (dicts keep insertion order)

    def clear(self) -> None:
        with self._lock:
            self._items = {}
