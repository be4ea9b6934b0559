"""What an index makes from a filter's allowed tools, kept per filter (``PerFilter``).

Search's in-memory indexes apply a filter as the set of row ids it lets through
(``reader.allowed_ids``), and make something of it: the vector index a boolean mask over its
matrix rows, BM25's native first stage a bit mask over its tools. A scoped caller asks with
the same filter again and again, so that is kept. Each search engine keeps its own set of a
filter per revision and passes the same object back, but a server's pooled readers share one
index with sets of their own, equal and not the same object: kept by set alone, every query
of a second reader compared its set with the kept one element by element (~15 ms at 500k
rows against a ~1.5 ms query; attack44). So a set is found by identity first, and an equal
set is compared whole once.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerFilter(Generic[T]):
    """Values made from allowed sets, kept per set: at most ``size`` values, oldest out
    first. Reader threads may share one: none is ever left above its bounds."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._by_set: dict[frozenset[int], T] = {}
        # id(set) -> (the set, held weakly: an id reused by another set is not it; its value)
        self._by_id: dict[int, tuple[weakref.ref[frozenset[int]], T]] = {}

    def __len__(self) -> int:
        return len(self._by_set)

    def __contains__(self, allowed: frozenset[int]) -> bool:
        return allowed in self._by_set

    def get(self, allowed: frozenset[int], make: Callable[[frozenset[int]], T]) -> T:
        """The value kept for ``allowed`` (or an equal set), else ``make(allowed)``, kept."""
        known = self._by_id.get(id(allowed))
        if known is not None and known[0]() is allowed:
            return known[1]
        value = self._by_set.get(allowed)  # an equal set's (another reader's): compared once
        if value is None:
            value = make(allowed)
            _trim(self._by_set, self.size)
            self._by_set[allowed] = value
        _trim(self._by_id, self.size * 4)  # a few readers' sets of each filter
        self._by_id[id(allowed)] = (weakref.ref(allowed), value)
        return value


def _trim(kept: dict[Any, Any], size: int) -> None:
    """Oldest out until under ``size``: in a loop, not one out per insert, because threads
    sharing ``kept`` that each saw it under the bound each add one (or two evict the same
    one), which would leave it above for good (28 of 16 seen with 8 threads)."""
    while len(kept) >= size:
        with contextlib.suppress(KeyError, RuntimeError, StopIteration):
            del kept[next(iter(kept))]
