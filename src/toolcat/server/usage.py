"""Learning from use in the server: which searches a caller ran, so that a later call of one
of their hits records (query, tool) in the catalog.

A ``Catalog`` remembers its own searches, but the server answers many callers from a few
catalog connections, so the memory lives here, one per caller:

- a **2025-11-25 session**: its connection (the memory lives and dies with the session);
- a **2026-07-28 request** (stateless, no session): the principal its bearer token names
  (a tokens file or ``--token``), together with the ``clientInfo`` name the request's
  ``_meta`` carries, if any; with neither (stdio, or HTTP without tokens), one anonymous
  caller. Two anonymous clients of one HTTP server therefore share a memory: a search by
  one followed by a call by the other of the same tool is recorded, a harmless
  mis-attribution (the query did lead to the tool somewhere), never a leak of results.

Both are bounded: the newest ``PER_CALLER`` tools per caller, ``MAX_CLIENTS`` client names
per principal and ``MAX_CALLERS`` principals, the least recently active forgotten first. The
client name is the client's own text, so a principal's names only ever push out its own:
one principal sending thousands of names never makes the server forget another's searches.
A query is kept as the catalog records it (``MAX_LEARNED_CHARS``), never whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, MutableMapping
from typing import Any

from ..catalog import MAX_LEARNED_CHARS

PER_CALLER = 100  # tools of recent searches remembered per caller
MAX_CALLERS = 1_000  # stateless principals remembered at once
MAX_CLIENTS = 100  # client names remembered per stateless principal
STATE_KEY = "toolcat.recent_searches"  # a legacy connection's memory, in its state


class RecentSearches:
    """Tool id → the latest query whose search returned it, per caller."""

    def __init__(
        self,
        per_caller: int = PER_CALLER,
        max_callers: int = MAX_CALLERS,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.per_caller = per_caller
        self.max_callers = max_callers
        self.max_clients = max_clients
        # principal -> client name -> tool id -> query
        self._stateless: OrderedDict[Hashable, OrderedDict[Hashable, OrderedDict[str, str]]]
        self._stateless = OrderedDict()
        self._lock = threading.Lock()

    def _memory(
        self, caller: Hashable, connection: Any | None, create: bool = True
    ) -> OrderedDict[str, str] | None:
        """The memory of ``caller``: a 2026 request's ``(principal, client name)``, or any
        other key as one principal's (``create`` off: None when there is none)."""
        if connection is not None:
            state: MutableMapping[str, Any] = connection.state
            memory: OrderedDict[str, str] = state.setdefault(STATE_KEY, OrderedDict())
            return memory
        principal, client = (
            caller if isinstance(caller, tuple) and len(caller) == 2 else (caller, None)
        )
        clients = self._stateless.get(principal)
        if clients is None or client not in clients:
            if not create:
                return None
            clients = self._stateless.setdefault(principal, OrderedDict())
        self._stateless.move_to_end(principal)
        while len(self._stateless) > self.max_callers:
            self._stateless.popitem(last=False)
        memory = clients.setdefault(client, OrderedDict())
        clients.move_to_end(client)
        while len(clients) > self.max_clients:
            clients.popitem(last=False)
        return memory

    def searched(
        self, caller: Hashable, connection: Any | None, query: str, tool_ids: Iterable[str]
    ) -> None:
        """A search for ``query`` returned these tools (catalog-wide ids) to ``caller``."""
        query = query.strip()[:MAX_LEARNED_CHARS]  # what a use records of it
        with self._lock:
            memory = self._memory(caller, connection)
            assert memory is not None
            for tool_id in tool_ids:
                memory[tool_id] = query
                memory.move_to_end(tool_id)
            while len(memory) > self.per_caller:
                memory.popitem(last=False)

    def called(self, caller: Hashable, connection: Any | None, tool_id: str) -> str | None:
        """``caller`` called a tool successfully: the query of the recent search that found
        it, forgotten now (one search, one recorded use), or ``None``."""
        with self._lock:
            memory = self._memory(caller, connection, create=False)
            return None if memory is None else memory.pop(tool_id, None)

    def __len__(self) -> int:
        """Stateless callers (principal and client name) remembered (for tests of bounds)."""
        return sum(len(clients) for clients in self._stateless.values())


MAX_GAPS = 1_000  # searches that found nothing, remembered per server process


class Gaps:
    """The newest searches that found nothing fitting (``no_match``): (time, principal,
    query, mode), for the console's usage page. In memory only, per server process: a
    replica behind a balancer shows its own."""

    def __init__(self, size: int = MAX_GAPS) -> None:
        from collections import deque

        self._entries: deque[tuple[float, str, str, str]] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, principal: str, query: str, mode: str) -> None:
        import time

        with self._lock:
            self._entries.append((time.time(), principal, query[:MAX_GAP_QUERY], mode))

    def newest(self) -> list[tuple[float, str, str, str]]:
        with self._lock:
            return list(reversed(self._entries))


MAX_GAP_QUERY = 500  # characters of a query kept
