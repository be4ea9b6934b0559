"""Hostile: what ``search_tools`` does on the event loop when it answers a repeated request
from the catalog's kept answer (``Readers.now``). Its SQLite work must not grow with what the
catalog holds beyond the request's hits: thousands of tools sharing a hit's name outside the
caller's scope (``short_names``), or sharing the query's one word (a principal's
reordering). Over real HTTP with the SDK's client."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio

from tests.search.test_kept_attack48 import same_named
from tests.server.clients import MODERN, http_session
from tests.server.test_listcache import counted_reader_runs, served
from toolcat import Catalog
from toolcat.server.mcp import CatalogServer

ASKED = {"query": "get", "k": 3}


def loop_steps(server: CatalogServer) -> list[int]:
    """From now on, count the SQLite VM instructions the server's readers run off the
    worker threads: on the event loop."""
    steps = [0]

    def count() -> int:
        if not threading.current_thread().name.startswith("AnyIO worker"):
            steps[0] += 1
        return 0

    for reader in list(server.readers._opened):
        reader._conn.set_progress_handler(count, 1)
    return steps


def repeated_search_work(tmp_path: Path, count: int) -> tuple[int, list[str]]:
    """The event loop's SQLite work for a repeated ``search_tools`` of a server whose scope
    (tag ``first``) holds one of ``count`` tools called ``get``; the anonymous caller has a
    recorded use of it."""
    db = tmp_path / f"same{count}.db"
    with Catalog(db) as catalog:
        catalog.register(same_named(count))
        assert catalog.record_uses([("get", "kit00000.get")], principal="anonymous") == 1
    with served(db, tags=["first"], readers=1) as (url, server):
        trips = counted_reader_runs(server, "CatalogServer._search")

        async def check() -> tuple[int, list[str]]:
            async with http_session(url, None, mode=MODERN) as session:
                first = [await session.call("search_tools", ASKED) for _ in range(4)][-1]
                steps = loop_steps(server)
                trips[0] = 0
                again = await session.call("search_tools", ASKED)
                assert trips[0] == 0  # answered on the event loop
                assert again.structured_content == first.structured_content
                return steps[0], [t["name"] for t in again.structured_content["tools"]]

        return anyio.run(check)


def test_a_repeated_search_on_the_loop_reads_no_out_of_scope_namesakes(tmp_path: Path) -> None:
    """Hostile: 400 toolkits outside the server's scope have a tool called ``get``, as the
    one hit inside it does. Its short name (is ``get`` shared within the scope?) was looked
    up on the event loop at every repeat, scanning every ``get`` row against the scope's
    filter; the principal's reordering read every ``get`` row too."""
    few, names = repeated_search_work(tmp_path, 10)
    assert names == ["get"]  # unique within the scope: the bare name
    many, names = repeated_search_work(tmp_path, 400)
    assert names == ["get"]
    assert many < few * 2, (few, many)


def test_a_missing_scope_toolkit_is_explained_alike_on_both_paths(tmp_path: Path) -> None:
    """Regression: a server whose toolkit was removed by another connection answers every
    search, first or repeated, with the same error, naming no other toolkit."""
    db = tmp_path / "same.db"
    with Catalog(db) as catalog:
        catalog.register(same_named(20))
    with served(db, toolkit="kit00003") as (url, _server):

        async def check() -> list[Any]:
            async with http_session(url, None, mode=MODERN) as session:
                for _ in range(4):
                    found = await session.call("search_tools", {"query": "fetch record"})
                    assert not found.is_error
                with Catalog(db) as writer:
                    writer.remove("kit00003")
                return [
                    (r.is_error, r.content[0].text)
                    for r in [
                        await session.call("search_tools", {"query": "fetch record"})
                        for _ in range(3)
                    ]
                ]

        answers = anyio.run(check)
        assert len(set(answers)) == 1 and answers[0][0], answers
        assert "kit00003" in answers[0][1] and "kit00002" not in answers[0][1]


def test_a_legacy_session_answered_on_the_loop_is_told_of_its_found_tools(
    tmp_path: Path,
) -> None:
    """Regression: a 2025 session whose search is answered from another session's kept
    answer (on the event loop) has the deferred tools it found revealed in its own list,
    and is sent ``list_changed``, as when its search was ranked on a reader; the other
    session's list is its own."""
    from tests.helpers import SAMPLE_TOOLKITS
    from tests.server.clients import LEGACY, LIST_CHANGED

    db = tmp_path / "sample.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    asked = {"query": "delete a file", "k": 3}
    with served(db) as (url, server):
        trips = counted_reader_runs(server, "CatalogServer._search")

        async def check() -> None:
            async with http_session(url, None, mode=LEGACY) as first:
                for _ in range(3):
                    await first.call("search_tools", asked)
                assert "delete_file" in await first.names()
            async with (
                http_session(url, None, mode=LEGACY) as second,
                http_session(url, None, mode=LEGACY) as bystander,
            ):
                plain = await bystander.names()
                assert "delete_file" not in plain
                trips[0] = 0
                await second.call("search_tools", asked)
                assert trips[0] == 0  # the kept answer, on the event loop
                await second.wait_for(LIST_CHANGED)
                assert "delete_file" in await second.names()
                assert await bystander.names() == plain
                assert LIST_CHANGED not in bystander.notifications

        anyio.run(check)
