"""Hostile (attack51): ``Catalog.acall`` with a resolved tool, the MCP server's call path,
which runs a sync tool already imported straight on a tool thread while the caller's loop
keeps the timeout (``Runtime.acall``). Nothing a tool does reaches the caller's loop as an
exception or runs its code there; the timeout holds though no thread is free or the runtime
closed meanwhile; what a timed-out call reported is all delivered."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import attack51_tools
from toolcat import Catalog, Tool, ToolEvent, Toolkit, ToolResult
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import loader
from toolcat.runtime.threads import ThreadRunner


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("attack51") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.attack51_tools"))
        catalog.register(
            Toolkit(
                name="proxies",
                version="1.0.0",
                module="tests.fixtures.attack51_tools",
                tools=[
                    Tool(
                        name="proxied",
                        description="A callable object that delegates its attributes.",
                        implementation="tests.fixtures.attack51_tools:proxied",
                    )
                ],
            )
        )
    return path


@pytest.fixture
def cat(db: Path) -> Iterator[Catalog]:
    with Catalog(db) as catalog:
        yield catalog


def acall(catalog: Catalog, tool: Any, arguments: Any = None, **kw: Any) -> ToolResult:
    return asyncio.run(catalog.acall(tool, arguments, **kw))


@pytest.mark.parametrize("route", ["call", "direct"])
@pytest.mark.parametrize("kind", ["cancelled", "keyboard", "generator", "exit"])
def test_a_result_whose_conversion_raises_anything_is_the_tools_error(
    cat: Catalog, routes: list[str], monkeypatch: pytest.MonkeyPatch, kind: str, route: str
) -> None:
    """``to_jsonable`` runs the tool's own ``model_dump``: a ``CancelledError`` it raised
    reached the caller's loop as the caller's own cancellation (the MCP server's request
    handler), a ``KeyboardInterrupt`` as an interrupt of the server."""
    tool = cat.get("attack51.bad_result")
    if route == "call":  # not imported yet: a thread runs ``call``
        monkeypatch.delitem(loader._cache, tool.implementation, raising=False)
    else:
        loader.load(tool.implementation, tool.id, root=tool.module)
    result = acall(cat, tool, {"kind": kind})
    assert routes == [route]
    assert result.error_code == "TOOL_ERROR", result
    assert (result.error or "").startswith(attack51_tools.RAISED[kind].__name__)


@pytest.mark.parametrize("kind", ["cancelled", "generator", "exit"])
def test_call_answers_a_result_whose_conversion_raises_as_acall_does(
    cat: Catalog, kind: str
) -> None:
    result = cat.call("attack51.bad_result", {"kind": kind})
    assert result.error_code == "TOOL_ERROR", result


def test_a_tools_own_timeout_error_is_not_the_calls_timeout(
    cat: Catalog, routes: list[str]
) -> None:
    tool = cat.get("own_timeout")
    cat.call(tool, {})
    routes.clear()
    started = time.monotonic()
    result = acall(cat, tool, {}, timeout=30)
    assert routes == ["direct"] and time.monotonic() - started < 5
    assert result.error_code == "TOOL_ERROR"
    assert result.error == "TimeoutError: the tool's own upstream timed out"


def test_a_callable_objects_own_code_never_runs_on_the_loop(
    cat: Catalog, routes: list[str]
) -> None:
    """Routing judged ``inspect.iscoroutinefunction(found)`` on the loop, which reads
    ``__name__`` and ``__code__`` through the object's own ``__getattr__``."""
    tool = cat.get("proxies.proxied")
    assert cat.call(tool, {}).success
    attack51_tools.LOOKED_UP.clear()

    async def called() -> tuple[ToolResult, int]:
        return await cat.acall(tool, {}), threading.get_ident()

    result, loop_thread = asyncio.run(called())
    assert result.success and result.data != loop_thread
    assert loop_thread not in [thread for _, thread in attack51_tools.LOOKED_UP]


def test_a_timed_out_call_answers_though_no_thread_is_free(cat: Catalog) -> None:
    """Every tool thread taken (by stuck tools, up to ``MAX_THREADS``): the call's own wait
    ends at its timeout, not when a thread comes free to close its events."""
    tool = cat.get("naps")
    cat.call(tool, {"seconds": 0})
    cat.runtime.executor.threads = ThreadRunner(max_threads=1)

    async def behind_a_stuck_one() -> tuple[ToolResult, float, ToolResult]:
        stuck = asyncio.ensure_future(cat.acall(tool, {"seconds": 2}, timeout=0.1))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        result = await cat.acall(tool, {"seconds": 0}, timeout=0.3)
        return result, time.monotonic() - started, await stuck

    result, elapsed, stuck = asyncio.run(behind_a_stuck_one())
    assert result.error_code == "TIMEOUT" and stuck.error_code == "TIMEOUT"
    assert elapsed < 1.5, elapsed


def test_a_runtime_closed_during_a_call_still_answers_its_timeout(cat: Catalog) -> None:
    tool = cat.get("naps")
    cat.call(tool, {"seconds": 0})

    async def closed_meanwhile() -> ToolResult:
        call = asyncio.ensure_future(cat.acall(tool, {"seconds": 1}, timeout=0.3))
        await asyncio.sleep(0.1)
        cat.runtime.close()
        return await call

    result = asyncio.run(closed_meanwhile())
    assert result.error_code == "TIMEOUT", result


def test_what_a_timed_out_call_held_back_is_delivered_before_its_result(
    cat: Catalog, routes: list[str]
) -> None:
    """Past the gate's burst the latest progress waits for the call's end: at a timeout it
    is passed on then, and reaches ``on_event`` before ``acall`` returns."""
    tool = cat.get("naps")
    cat.call(tool, {"seconds": 0})
    seen: list[ToolEvent] = []
    result = acall(cat, tool, {"seconds": 2, "reports": 150}, timeout=0.4, on_event=seen.append)
    assert result.error_code == "TIMEOUT" and routes[-1] == "direct"
    assert [e.progress for e in result.events if e.kind == "progress"][-1] == 149
    assert [e.progress for e in seen if e.kind == "progress"][-1] == 149
    assert seen[-1].kind == "log" and "not passed on" in (seen[-1].message or "")


@pytest.mark.parametrize(
    ("name", "route"),
    [("naps", "direct"), ("proxies.proxied", "call")],
)
def test_only_what_is_told_sync_without_its_own_code_goes_direct(
    cat: Catalog, routes: list[str], name: str, route: str
) -> None:
    tool = cat.get(name)
    assert cat.call(tool, {"seconds": 0} if name == "naps" else {}).success
    routes.clear()
    assert acall(cat, tool, {"seconds": 0} if name == "naps" else {}).success
    assert routes == [route]


def test_a_pydantic_model_tool_still_goes_direct(routes: list[str], tmp_path: Path) -> None:
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.tools"))
        tool = catalog.get("Greeting")
        expected = catalog.call(tool, {"name": "Ada"})
        routes.clear()
        result = acall(catalog, tool, {"name": "Ada"})
    assert result.data == expected.data == "Hello, Ada!" and routes == ["direct"]
