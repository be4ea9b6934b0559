"""What the server keeps between requests, over real HTTP with the SDK's client:
``tools/list`` answers per revision and caller (server/listcache.py), ``search_tools``'
entries per tool (``FoundTools``) and the tool a called name resolved to per revision and
caller (``ResolvedTools``). A change is seen by the very next request (not a
watcher tick later), and no caller ever gets another's kept answer."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx2

from tests.helpers import SAMPLE_TOOLKITS, free_port
from tests.server.clients import MODERN, http_session, run
from toolcat import Catalog, Toolkit
from toolcat.server.http import http_app
from toolcat.server.mcp import CatalogServer, ServeOptions
from toolcat.server.tokens import load_tokens

TOKENS_YAML = """\
principals:
  - name: math-team
    token: math-team-token
    toolkits: [math]
  - name: math-twin
    token: math-twin-token
    toolkits: [math]
  - name: everyone
    token: everyone-token
"""


@contextlib.contextmanager
def served(
    db: Path, tokens: Path | None = None, **options: Any
) -> Iterator[tuple[str, CatalogServer]]:
    """``toolcat serve --http`` in this process (its cache can be inspected), with a
    revision watcher that never ticks during a test: only the per-request check can see
    a change; ``options``: more ``ServeOptions``."""
    import uvicorn

    server = CatalogServer(Catalog(db), ServeOptions(watch_interval=3600, **options))
    port = free_port()
    app = http_app(
        server, host="127.0.0.1", port=port, tokens=load_tokens(tokens) if tokens else None
    )
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp", server
    finally:
        uv.should_exit = True
        thread.join(10)


def extra_toolkit(version: str = "1.0.0", parameter: str = "when") -> Toolkit:
    return Toolkit.model_validate(
        {
            "toolkit": "late",
            "version": version,
            "module": "tests.fixtures",
            "tools": [
                {
                    "name": "late_arrival",
                    "description": f"Registered while the server runs (version {version}).",
                    "parameters": {"type": "object", "properties": {parameter: {"type": "string"}}},
                    "implementation": "tests.fixtures.tools:add",
                }
            ],
        }
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return path


def test_a_new_revision_is_seen_by_the_next_list(db: Path) -> None:
    with served(db) as (url, server):

        async def check() -> None:
            async with http_session(url, None, mode=MODERN) as session:
                first = await session.names()
                assert await session.names() == first
                assert server.list_cache.hits >= 1  # the second list was a kept answer
                with Catalog(db) as writer:  # another connection, as another process would
                    writer.register(extra_toolkit())
                assert "late_arrival" in await session.names()  # no watcher tick between
                with Catalog(db) as writer:
                    writer.remove("late")
                assert await session.names() == first

        run(check)


def test_kept_answers_never_skip_the_sdks_request_checks(db: Path) -> None:
    """A malformed request after a well-formed one is kept is still refused."""
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/list",
    }

    def post(params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}
        return httpx2.post(url, json=body, headers=headers)

    with served(db) as (url, server):
        for _ in range(2):
            assert post({"_meta": meta}).status_code == 200
        assert server.list_cache.hits == 1
        bad = post({"_meta": {**meta, "io.modelcontextprotocol/clientCapabilities": "nope"}})
        assert bad.status_code == 400
        bad_cursor = post({"_meta": meta, "cursor": "not-a-cursor"})
        assert bad_cursor.json()["error"]["code"] == -32602


def test_callers_never_share_a_kept_list(db: Path, tmp_path: Path) -> None:
    """Hostile: the widest caller fills the cache first; a narrow one, and its twin with the
    same selection under another name, each get their own answer, however often they
    alternate."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    with Catalog(db) as catalog:
        math_tools = {t.name for t in catalog.iter_tools(toolkit="math", include_deferred=False)}
        every_tool = {t.name for t in catalog.iter_tools(include_deferred=False)}
    own = {"search_tools", "call_tool"}
    assert math_tools < every_tool

    with served(db, tokens) as (url, server):

        async def names(token: str) -> set[str]:
            async with http_session(url, token, mode=MODERN) as session:
                return set(await session.names()) - own

        async def check() -> None:
            for _ in range(3):
                assert await names("everyone-token") == every_tool
                assert await names("math-team-token") == math_tools
                assert await names("math-twin-token") == math_tools
            assert server.list_cache.hits >= 6
            assert len(server.list_cache) == 3  # one answer per caller, none shared

        run(check)


def test_found_tools_follow_a_new_version_at_once(db: Path) -> None:
    """search_tools' kept entries: a new version of a found tool is what the next search
    returns, description and schema."""
    with Catalog(db) as writer:
        writer.register(extra_toolkit())
    with served(db) as (url, server):

        async def found(session: Any) -> dict[str, Any]:
            result = await session.call("search_tools", {"query": "late arrival", "k": 1})
            (tool,) = result.structured_content["tools"]
            return tool  # type: ignore[no-any-return]

        async def check() -> None:
            async with http_session(url, None, mode=MODERN) as session:
                first = await found(session)
                assert first == await found(session)  # the kept entry, unchanged
                assert len(server.found_tools) >= 1
                assert first["version"] == "1.0.0"
                assert list(first["inputSchema"]["properties"]) == ["when"]
                with Catalog(db) as writer:
                    writer.register(extra_toolkit("2.0.0", parameter="where"))
                second = await found(session)
                assert second["version"] == "2.0.0"
                assert second["description"].endswith("(version 2.0.0).")
                assert list(second["inputSchema"]["properties"]) == ["where"]

        run(check)


def test_a_legacy_sessions_found_tools_never_reach_a_kept_list(db: Path) -> None:
    """Hostile: a 2025 session reveals a deferred tool by searching, and a 2026 caller's
    kept answer is listed between its lists: neither answer leaks into the other, whatever
    the order (the protocol version is part of the key; a legacy session is never kept)."""
    from tests.server.clients import LEGACY

    with served(db) as (url, server):

        async def check() -> None:
            async with (
                http_session(url, None, mode=MODERN) as modern,
                http_session(url, None, mode=LEGACY) as legacy,
            ):
                plain = await modern.names()
                assert "delete_file" not in plain  # deferred
                assert await legacy.names() == plain
                await legacy.call("search_tools", {"query": "delete a file", "k": 3})
                revealed = await legacy.names()
                assert "delete_file" in revealed
                for _ in range(2):
                    assert await modern.names() == plain
                    assert await legacy.names() == revealed
                assert server.list_cache.hits >= 2
                assert len(server.list_cache) == 1  # the modern caller's answer alone

        run(check)


def test_a_principals_own_list_is_never_marked_shareable(db: Path, tmp_path: Path) -> None:
    """A server made in Python with a tokens file but without ``per_caller`` (the CLI sets
    it): a principal with a selection of its own still gets ``cacheScope: private``, so no
    shared cache downstream hands its list to another caller; one that selects nothing sees
    the server's list, which stays ``public``."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    with served(db, tokens) as (url, _server):

        async def scope_of(token: str) -> str | None:
            async with http_session(url, token, mode=MODERN) as session:
                listed = await session.client.list_tools(cache_mode="refresh")
                return listed.cache_scope

        async def check() -> None:
            for _ in range(2):  # the kept answer too
                assert await scope_of("math-team-token") == "private"
                assert await scope_of("everyone-token") == "public"

        run(check)


def test_a_servers_own_selection_keeps_its_list_shareable(db: Path, tmp_path: Path) -> None:
    """``toolcat serve --toolkit math`` without tokens: every caller gets the same list, so
    it stays ``public``; a principal's own selection inside it makes that list private."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)

    async def scope_of(url: str, token: str | None) -> str | None:
        async with http_session(url, token, mode=MODERN) as session:
            return (await session.client.list_tools(cache_mode="refresh")).cache_scope

    with served(db, toolkit="math") as (url, _server):

        async def server_alone() -> None:
            assert await scope_of(url, None) == "public"

        run(server_alone)
    with served(db, tokens, tags=("read-only",)) as (url, _server):

        async def principals() -> None:
            assert await scope_of(url, "everyone-token") == "public"
            assert await scope_of(url, "math-team-token") == "private"

        run(principals)


def counted_reader_runs(server: CatalogServer, asker: str = "") -> list[int]:
    """Count the server's trips to a reader on a worker thread from now on (those of the
    method ``asker`` names, as ``CatalogServer._search``, when given)."""
    trips = [0]
    run_on_reader = server.readers.run

    async def counted(fn: Any) -> Any:
        trips[0] += fn.__qualname__.startswith(f"{asker}.<locals>.") if asker else 1
        return await run_on_reader(fn)

    server.readers.run = counted  # type: ignore[method-assign]
    return trips


def adding_toolkit(version: str = "1.0.0") -> Toolkit:
    """``late_arrival``: the fixtures' ``add`` (a + b) under another name."""
    integer = {"type": "integer"}
    kit = extra_toolkit(version).model_dump(mode="json", by_alias=True, exclude_none=True)
    kit["tools"][0]["parameters"] = {"type": "object", "properties": {"a": integer, "b": integer}}
    return Toolkit.model_validate(kit)


def test_a_called_name_is_resolved_once_per_revision(db: Path) -> None:
    """The second call of a name at the same revision takes no reader; a removal and a new
    version by another connection are what the very next call sees (no watcher tick)."""
    with Catalog(db) as writer:
        writer.register(adding_toolkit())
    with served(db) as (url, server):
        trips = counted_reader_runs(server)

        async def check() -> None:
            async with http_session(url, None, mode=MODERN) as session:
                for i in range(3):
                    trips[0] = 0
                    result = await session.call("late_arrival", {"a": 1, "b": 2})
                    assert not result.is_error and result.content[0].text == "3"
                    assert (trips[0] > 0) == (i == 0)  # resolved on a reader once, then kept
                assert len(server.resolved) == 1
                with Catalog(db) as writer:
                    writer.remove("late")
                gone = await session.call("late_arrival", {"a": 1, "b": 2})
                assert gone.is_error
                assert gone.meta["toolcat/error_code"] == "UNKNOWN_TOOL"
                with Catalog(db) as writer:
                    writer.register(adding_toolkit("2.0.0"))
                again = await session.call("call_tool", {"name": "late_arrival@2.0.0",
                                                         "arguments": {"a": 2}})  # fmt: skip
                assert not again.is_error and again.content[0].text == "4"

        run(check)


def test_callers_never_share_a_resolved_name(db: Path, tmp_path: Path) -> None:
    """Hostile: the widest caller resolves a name first; a principal whose scope leaves that
    tool out still gets what an unregistered name gets, however often they alternate."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    with Catalog(db) as writer:
        writer.register(adding_toolkit())
    with served(db, tokens) as (url, server):

        async def call(token: str) -> Any:
            async with http_session(url, token, mode=MODERN) as session:
                return await session.call("late_arrival", {"a": 1})

        async def check() -> None:
            for _ in range(3):
                assert not (await call("everyone-token")).is_error
                refused = await call("math-team-token")
                assert refused.is_error
                assert refused.meta["toolcat/error_code"] == "UNKNOWN_TOOL"
            assert len(server.resolved) == 1  # only what was found is kept

        run(check)


def test_resolved_names_are_bounded_and_forget_an_old_revision(db: Path) -> None:
    """Hostile: however many names callers resolve, at most ``size`` are kept (the least
    recently called go first), and none is answered at another revision."""
    from toolcat.server.mcp import ResolvedTools
    from toolcat.server.scope import Scope

    with Catalog(db) as catalog:
        tools = list(catalog.iter_tools())[:5]
    kept = ResolvedTools(size=3)
    scope = Scope()
    for tool in tools:
        kept.keep(7, scope, tool.name, tool)
        assert kept.get(7, scope, tools[2].name) in (None, tools[2])  # touched: kept longer
    assert len(kept) == 3
    assert kept.get(7, scope, tools[0].name) is None  # the oldest went first
    assert kept.get(7, scope, tools[2].name) is tools[2]
    assert kept.get(7, Scope(toolkits=(tools[2].toolkit,)), tools[2].name) is None
    assert kept.get(8, scope, tools[2].name) is None  # another revision: nothing
    assert kept.get(None, scope, tools[2].name) is None  # the revision unreadable
    kept.keep(8, scope, tools[0].name, tools[0])
    assert len(kept) == 1 and kept.get(7, scope, tools[2].name) is None


def test_a_copy_swapped_in_again_forgets_the_resolved_names(db: Path) -> None:
    """Hostile (a replica): a copy found damaged is restored again at the same revision and
    ``prepare`` renews the readers on it. A tool resolved from the damaged copy (say, an
    implementation with a flipped bit that still parses) is forgotten, not called for the
    rest of that revision."""
    server = CatalogServer(Catalog(db), ServeOptions(watch_interval=3600))
    try:
        revision = server.watcher.current()
        assert revision is not None
        with server.readers.borrowed() as catalog:
            tool = catalog.get("calculate")
        server.resolved.keep(revision, server.scope, "calculate", tool)
        server.prepare(revision)  # the same revision, a new copy
        assert server.resolved.get(revision, server.scope, "calculate") is None
    finally:
        server.close()


def test_a_copy_swapped_in_again_forgets_the_lists_built_from_the_old_one(db: Path) -> None:
    """Hostile (a replica): the same revision's copy restored again after the served one was
    found damaged. The ``tools/list`` pages and kept answers built from that one are not
    served: the list is taken up again from what ``prepare`` built on the new copy."""
    import asyncio

    server = CatalogServer(Catalog(db), ServeOptions(watch_interval=3600))
    try:
        revision = server.watcher.current()
        assert revision is not None
        first = asyncio.run(server._listed(server.scope, 5))
        old_pages = server._lists[server.scope]
        server.list_cache._answers[("caller", "v", "{}")] = {"tools": []}
        server.list_cache._revision = revision
        server.prepare(revision)  # the same revision, a new copy
        assert len(server.list_cache) == 0 and server.list_cache._revision is None
        again = asyncio.run(server._listed(server.scope, 5))
        assert server._lists[server.scope] is not old_pages
        assert server._lists[server.scope] is server._prepared[1][server.scope]
        assert [t.name for t in again] == [t.name for t in first]  # same rows, new build
    finally:
        server.close()


SEARCHED = {"query": "multiply two numbers and round the result", "k": 4}


def test_a_repeated_search_takes_no_reader_trip(db: Path) -> None:
    """``search_tools`` asked again at the same revision is answered on the event loop
    (the catalog's kept answer), the same answer; a change by another connection is seen
    by the very next search, ranked on a reader."""
    with served(db) as (url, server):
        trips = counted_reader_runs(server)

        async def check() -> None:
            async with http_session(url, None, mode=MODERN) as session:
                first = [await session.call("search_tools", SEARCHED) for _ in range(3)]
                assert trips[0] >= 1
                trips[0] = 0
                again = await session.call("search_tools", SEARCHED)
                assert trips[0] == 0  # no worker thread
                assert again.structured_content == first[-1].structured_content
                assert again.content[0].text == first[-1].content[0].text
                toolkit = again.structured_content["tools"][0]["toolkit"]
                with Catalog(db) as writer:
                    writer.remove(toolkit)
                changed = await session.call("search_tools", SEARCHED)
                assert trips[0] == 1  # ranked again
                assert toolkit not in {t["toolkit"] for t in changed.structured_content["tools"]}

        run(check)


def test_callers_never_share_a_kept_search(db: Path, tmp_path: Path) -> None:
    """Hostile: the widest caller's kept answer is never another scope's. ``math-team``
    (one toolkit) asking what ``everyone`` asked gets only math tools, kept or not, however
    often they alternate; its repeats are kept apart from everyone's, and a principal of the
    same scope (``math-twin``) is answered from them, reordered by its own uses only."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    with served(db, tokens) as (url, server):
        trips = counted_reader_runs(server, "CatalogServer._search")

        async def toolkits(token: str) -> list[str]:
            async with http_session(url, token, mode=MODERN) as session:
                found = await session.call("search_tools", SEARCHED)
                return [t["toolkit"] for t in found.structured_content["tools"]]

        async def check() -> None:
            wide = [await toolkits("everyone-token") for _ in range(3)][-1]
            assert set(wide) - {"math"}  # everyone's answer holds other toolkits
            for _ in range(3):
                assert set(await toolkits("math-team-token")) == {"math"}
                assert await toolkits("everyone-token") == wide
            for token in ("math-team-token", "everyone-token", "math-twin-token"):
                trips[0] = 0
                await toolkits(token)
                assert trips[0] == 0, token  # its scope's kept answer (twin: math-team's)

        run(check)


def test_a_copy_swapped_in_again_forgets_the_kept_searches(db: Path) -> None:
    """Hostile (a replica): the same revision's copy restored again over one found damaged.
    No answer ranked, or tool built, from that copy is given from the new readers."""
    server = CatalogServer(Catalog(db), ServeOptions(watch_interval=3600))
    try:
        revision = server.watcher.current()
        assert revision is not None
        query = SEARCHED["query"]
        with server.readers.borrowed() as catalog:
            for _ in range(3):
                catalog.search(query, k=4)
            assert catalog.search_kept(query, k=4) is not None
        server.prepare(revision)  # the same revision, a new copy
        assert server.readers.now(lambda c: c.search_kept(query, k=4)) is None
    finally:
        server.close()


def test_readers_now_takes_only_a_free_reader(db: Path) -> None:
    from toolcat.server.mcp import Readers

    with Catalog(db) as catalog:
        readers = Readers(catalog, 2)
        try:
            first, second = readers._take(), readers._take()  # both lent out
            assert readers.now(lambda c: c) is None  # none free: none opened here
            with readers._lent(first), readers._lent(second):
                pass  # given back
            assert readers.now(lambda c: c) in (first, second)
        finally:
            readers.close()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_served_heap_is_settled_once_warm_and_again_at_each_revision(db: Path) -> None:
    """``toolcat serve`` in a process of its own (``settle_heap``): what it built to serve
    a revision is frozen out of later collections once warm; preparing a new revision
    unfreezes it first, so the old revision's readers and index are collected with the
    rest. A server in someone else's process (the default) leaves their collector alone."""
    import gc
    import weakref

    from toolcat.server.mcp import settle_heap

    assert gc.get_freeze_count() == 0
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        plain = CatalogServer(Catalog(db), ServeOptions(watch_interval=3600))
        try:
            revision = plain.watcher.current()
            assert revision is not None
            plain.prepare(revision)
            assert gc.get_freeze_count() == 0  # not its process: nothing frozen
        finally:
            plain.close()
        own = CatalogServer(Catalog(db), ServeOptions(watch_interval=3600, settle_heap=True))
        try:
            own.prepare(revision)
            assert gc.get_freeze_count() > 0
            old = [weakref.ref(reader) for reader in own.readers._opened]
            # What the old revision holds in a reference cycle, frozen with it (refcounts
            # alone never free a cycle: only a collection that may visit it).
            gc.unfreeze()
            cycles = []
            for reader in own.readers._opened:
                cycle = Cycle()
                cycles.append(weakref.ref(cycle))
                reader.held_in_a_cycle = cycle  # type: ignore[attr-defined]
            del cycle, reader
            settle_heap()
            own.prepare(revision)  # a copy restored again: the old readers retired
            assert gc.get_freeze_count() > 0
            gc.collect()
            assert old and all(ref() is None for ref in old)
            assert cycles and all(ref() is None for ref in cycles)  # not kept frozen
        finally:
            own.close()
    finally:
        gc.unfreeze()
