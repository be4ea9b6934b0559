"""``Catalog.acall`` with a resolved tool, as the MCP server calls: a sync tool already
imported runs straight on a tool thread while the caller's loop keeps the timeout
(``Runtime.acall``). Every answer matches ``call``'s, the policy, guards and import checks
are judged on that path too, the loop is never blocked, and every other call is routed as
before (a thread that runs ``call``)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import direct_tools
from toolcat import Catalog, Policy, RegisteredTool, ToolEvent, ToolResult
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import loader


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("direct") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.tools"))
        catalog.register(toolkit_from_module("tests.fixtures.direct_tools"))
    return path


@pytest.fixture
def cat(db: Path) -> Iterator[Catalog]:
    with Catalog(db) as catalog:
        yield catalog


def acall(
    catalog: Catalog, tool: str | RegisteredTool, arguments: Any = None, **kw: Any
) -> ToolResult:
    return asyncio.run(catalog.acall(tool, arguments, **kw))


def outcome(result: ToolResult) -> tuple[Any, ...]:
    return (result.success, result.data, result.error_code, result.error, result.truncated)


def test_first_call_imports_on_a_thread_then_calls_go_direct(
    cat: Catalog, routes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = cat.get("direct.where")
    monkeypatch.delitem(loader._cache, tool.implementation, raising=False)

    async def twice() -> tuple[ToolResult, ToolResult, int]:
        first = await cat.acall(tool, {})
        second = await cat.acall(tool, {})
        return first, second, threading.get_ident()

    first, second, loop_thread = asyncio.run(twice())
    assert routes == ["call", "direct"]
    assert first.success and second.success
    assert second.data != loop_thread  # a tool never runs on the caller's loop


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("add", {"a": 1}),
        ("add", {"a": "one"}),
        ("add", {"a": 1, "c": 3}),
        ("add", [1, 2]),
        ("fails", {"message": "no"}),
        ("exits", {}),
        ("unserialisable", {}),
        ("converted", {}),
        ("huge", {"megabytes": 2}),
        ("direct.returns_a_coroutine", {}),
    ],
)
def test_the_direct_path_answers_as_call_does(
    cat: Catalog, routes: list[str], name: str, arguments: Any
) -> None:
    tool = cat.get(name)
    expected = cat.call(tool, arguments)  # imports it, if no earlier test did
    routes.clear()
    assert outcome(acall(cat, tool, arguments)) == outcome(expected)
    assert routes == ["direct"]


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf")])
def test_a_bad_timeout_is_refused_as_call_refuses_it(cat: Catalog, timeout: float) -> None:
    tool = cat.get("add")
    cat.call(tool, {"a": 1})
    expected = cat.call(tool, {"a": 1}, timeout=timeout)
    assert not expected.success
    assert outcome(acall(cat, tool, {"a": 1}, timeout=timeout)) == outcome(expected)


def test_rules_and_guards_are_judged_off_the_loop(db: Path, routes: list[str]) -> None:
    guarded_on: list[int] = []

    def no_big_numbers(tool: RegisteredTool, arguments: dict[str, Any]) -> str | None:
        guarded_on.append(threading.get_ident())
        return "a is too big" if arguments.get("a", 0) > 100 else None

    with Catalog(db, policy=Policy.of(guards=[no_big_numbers])) as catalog:
        tool = catalog.get("add")
        assert catalog.call(tool, {"a": 1}).success  # on this thread: the loop's below
        guarded_on.clear()

        async def calls() -> tuple[ToolResult, ToolResult, int]:
            small = await catalog.acall(tool, {"a": 1})
            big = await catalog.acall(tool, {"a": 1000})
            return small, big, threading.get_ident()

        small, big, loop_thread = asyncio.run(calls())
    assert small.data == 3
    assert big.error_code == "TOOL_DENIED" and "a is too big" in (big.error or "")
    assert routes[-2:] == ["direct", "direct"] and loop_thread not in guarded_on
    with Catalog(db, policy=Policy.of(deny=["fixtures.add"])) as catalog:
        denied = acall(catalog, tool, {"a": 1})
    assert denied.error_code == "TOOL_DENIED" and "denied by policy rule" in (denied.error or "")
    assert routes[-1] == "direct"


def test_what_another_catalog_imported_is_still_checked_against_this_ones_root(
    tmp_path: Path, routes: list[str]
) -> None:
    """The import cache is the process's: a trusted catalog imported ``fixtures.add``; a row
    of this catalog edited to name it is refused on the direct path, as on every path."""
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.direct_tools"))
    with Catalog(path, trust_any_module=True) as trusted:
        trusted.register(toolkit_from_module("tests.fixtures.tools"))
        assert trusted.call("add", {"a": 1}).success  # now in the import cache
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE tools SET definition = json_set(definition, '$.implementation', ?) "
            "WHERE name = 'where'",
            ("tests.fixtures.tools:add",),
        )
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
    conn.close()
    with Catalog(path) as catalog:
        tool = catalog.get("direct.where")
        assert loader.imported(tool.implementation or "") is not None
        result = acall(catalog, tool, {})
    assert result.error_code == "TOOL_DENIED", result
    assert "outside the toolkit's module" in (result.error or "")
    assert routes[-1] == "direct"


def test_the_loop_keeps_the_timeout_and_the_events_reported_before_it(
    cat: Catalog, routes: list[str]
) -> None:
    tool = cat.get("reports_then_naps")
    cat.call(tool, {"seconds": 0})
    seen: list[ToolEvent] = []
    started = time.monotonic()
    result = acall(
        cat, tool, {"seconds": 3, "token": "timed-out"}, timeout=0.4, on_event=seen.append
    )
    elapsed = time.monotonic() - started
    assert result.error_code == "TIMEOUT" and "0.4 s" in (result.error or "")
    assert "may still be running" in (result.error or "")
    assert 0.35 <= elapsed < 2.0, elapsed
    assert [e.kind for e in result.events] == ["progress"] and len(seen) == 1
    assert routes[-1] == "direct"


def test_the_loop_runs_on_while_a_tool_runs(cat: Catalog) -> None:
    tool = cat.get("reports_then_naps")
    cat.call(tool, {"seconds": 0})

    async def race() -> tuple[int, ToolResult]:
        ticks = 0
        call = asyncio.ensure_future(cat.acall(tool, {"seconds": 0.5}))
        while not call.done():
            ticks += 1
            await asyncio.sleep(0.01)
        return ticks, call.result()

    ticks, result = asyncio.run(race())
    assert result.data == "awake" and ticks >= 20


def test_a_coroutine_a_sync_tool_returned_is_cancelled_at_the_timeout(
    cat: Catalog, routes: list[str]
) -> None:
    tool = cat.get("returns_a_coroutine")
    cat.call(tool, {})
    started = time.monotonic()
    result = acall(cat, tool, {"seconds": 5}, timeout=0.3)
    assert result.error_code == "TIMEOUT" and time.monotonic() - started < 2.0
    assert routes[-1] == "direct"


def test_a_cancelled_caller_leaves_the_tool_to_finish_alone(cat: Catalog) -> None:
    tool = cat.get("reports_then_naps")
    cat.call(tool, {"seconds": 0})

    async def cancelled() -> None:
        call = asyncio.ensure_future(cat.acall(tool, {"seconds": 0.3, "token": "abandoned"}))
        await asyncio.sleep(0.1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(cancelled())
    deadline = time.monotonic() + 5
    while "abandoned" not in direct_tools.FINISHED and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "abandoned" in direct_tools.FINISHED


def test_other_calls_take_the_thread_that_runs_call(db: Path, routes: list[str]) -> None:
    with Catalog(db) as catalog:
        async_tool, limited = catalog.get("async_add"), catalog.get("limited")
        for tool, arguments in [(async_tool, {"a": 1, "b": 2}), (limited, {"seconds": 0})]:
            catalog.call(tool, arguments)
            routes.clear()
            assert acall(catalog, tool, arguments).success
            assert routes == ["call"], tool.id
        routes.clear()
        assert acall(catalog, "add", {"a": 1}).data == 3  # an address is resolved on a thread
        assert routes == ["call"]
    with Catalog(db, isolation="process") as catalog:
        tool = catalog.get("add")
        routes.clear()
        assert acall(catalog, tool, {"a": 1}).data == 3
        assert routes == ["call"]


def test_a_concurrency_limit_holds_through_acall(cat: Catalog) -> None:
    from tests.fixtures import tools

    tool = cat.get("limited")
    tools.PEAK = 0

    async def six() -> list[ToolResult]:
        return await asyncio.gather(*[cat.acall(tool, {"seconds": 0.2}) for _ in range(6)])

    results = asyncio.run(six())
    assert all(r.success for r in results) and tools.PEAK == 2


def test_a_use_is_learnt_off_the_loop(cat: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    learnt: list[tuple[str, int]] = []
    used = cat.used

    def spy(tool_id: str) -> bool:
        learnt.append((tool_id, threading.get_ident()))
        return used(tool_id)

    monkeypatch.setattr(cat, "used", spy)
    tool = cat.get("add")
    cat.call(tool, {"a": 1})
    cat.searched("add two integers", [tool.id])  # as a search that returned it does

    async def called() -> tuple[ToolResult, int]:
        return await cat.acall(tool, {"a": 1}), threading.get_ident()

    result, loop_thread = asyncio.run(called())
    assert result.data == 3
    assert [t for t, _ in learnt] == [tool.id] and learnt[0][1] != loop_thread


def test_a_closed_runtime_answers_acall_as_it_answers_call(db: Path) -> None:
    """Every route of ``acall`` (direct, a thread running ``call``, an address) gives the
    failed result ``call`` gives once the runtime is closed, never an exception."""
    with Catalog(db) as catalog:
        add, async_add = catalog.get("add"), catalog.get("async_add")
        catalog.call(add, {"a": 1})
        catalog.runtime.close()
        expected = catalog.call(add, {"a": 1})
        assert expected.error_code == "TOOL_ERROR" and "closed" in (expected.error or "")
        for tool, arguments in [(add, {"a": 1}), (async_add, {"a": 1, "b": 2}), ("add", {"a": 1})]:
            result = acall(catalog, tool, arguments)
            assert outcome(result) == outcome(expected), tool
