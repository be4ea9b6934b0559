"""``tools/list`` answers kept as the SDK put them on the wire.

A list page is the same for every request with the same catalog revision, caller's scope,
cursor and protocol version, but the SDK validates and dumps the result's pydantic models
on every request: for a page of 100 tools with their schemas that is most of the server's
time (measured in docs/benchmarks.md, "MCP server: what the face adds"). ``ListCache`` is an
SDK server middleware that keeps the answer the handler and the SDK produced (validated,
shaped for the protocol version, ``serverInfo`` stamped) and hands a copy of it to the next
such request.

Never stale, never another caller's:

- the key holds the caller's whole ``Scope`` (a principal's scope names the principal, so
  two tokens never share an entry, even with equal selections), the protocol version and
  the request's params exactly as sent (cursor and ``_meta`` included): the SDK checks a
  request's params inside the middleware chain, after this cache, so only params that
  the SDK already accepted once, for this version, are ever answered from it;
- the catalog revision is read per request (``RevisionWatcher.current``); when it moved,
  every entry is dropped, and an answer is kept only if the revision did not move while it
  was made; a revision that cannot be read serves without the cache;
- a request whose answer depends on more than the key (a legacy session: its found tools,
  its initialization) is neither answered from nor kept in the cache.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from typing import Any

METHOD = "tools/list"
MAX_ENTRIES = 1024


class ListCache:
    """SDK ``ServerMiddleware`` that answers ``tools/list`` from kept wire answers.

    Args:
        revision: The catalog revision now, or None when it cannot be read.
        key: The caller part of a request's key (its scope), or None when its answer
            must not be kept (it depends on the caller's session).
    """

    def __init__(
        self,
        revision: Callable[[], int | None],
        key: Callable[[Any], Hashable | None],
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.revision = revision
        self.key = key
        self.max_entries = max_entries
        self._revision: int | None = None
        self._answers: dict[Hashable, dict[str, Any]] = {}
        self.hits = 0  # answers served from the cache (for tests and benchmarks)

    def __len__(self) -> int:
        """Answers kept now (at the revision last seen)."""
        return len(self._answers)

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method != METHOD:
            return await call_next(ctx)
        caller = self.key(ctx)
        revision = self.revision()
        if caller is None or revision is None:
            return await call_next(ctx)
        try:
            params = json.dumps(ctx.params, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return await call_next(ctx)
        key = (caller, ctx.protocol_version, params)
        if revision != self._revision:
            self._answers = {}
            self._revision = revision
        answers = self._answers  # ``forget`` may start another while this one is built
        kept = answers.get(key)
        if kept is not None:
            self.hits += 1
            return _copy(kept)
        answer = await call_next(ctx)
        if isinstance(answer, dict) and self._revision == revision == self.revision():
            if len(answers) >= self.max_entries:
                answers.clear()
            answers[key] = _copy(answer)
        return answer

    def forget(self) -> None:
        """Keep nothing answered so far, even at the same revision (a replica's copy
        restored again after the one served was found damaged)."""
        self._answers = {}
        self._revision = None


def _copy(answer: dict[str, Any]) -> dict[str, Any]:
    """A copy the SDK may shape further (it owns what a handler returns); the tools inside
    are shared and never changed by it."""
    copied = dict(answer)
    meta = copied.get("_meta")
    if isinstance(meta, dict):
        copied["_meta"] = dict(meta)
    return copied
