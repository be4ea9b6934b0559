"""Attacks on runtime/delivery.py: a call's events reach the caller's callback in the caller's
context, in order, before the result; cancellation, a callback that raises or hangs, several
threads, a flood and a closed loop neither lose events nor leak a task nor reach the caller.

The module is also a toolkit (``relay`` nests a call and relays its events as its own)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog, ToolEvent, report_progress, tool
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import delivery as delivery_module
from toolcat.runtime.delivery import Delivery

__version__ = "1.0"

_catalog: list[Catalog] = []  # the catalog ``relay`` calls through (set by the fixture)
_who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


@tool
def steps(count: int = 3) -> int:
    """Report ``count`` progress steps."""
    for step in range(1, count + 1):
        report_progress(step, count)
    return count


@tool
def steps_then_nap(count: int = 3, seconds: float = 0.3) -> int:
    """Report ``count`` progress steps, then sleep ``seconds`` before returning."""
    for step in range(1, count + 1):
        report_progress(step, count)
    time.sleep(seconds)
    return count


@tool
def nap_then_steps(count: int = 3, seconds: float = 0.3) -> int:
    """Sleep ``seconds``, then report ``count`` progress steps (after a timeout, if short)."""
    time.sleep(seconds)
    for step in range(1, count + 1):
        report_progress(step, count)
    return count


@tool
async def relay(inner: str = "steps", count: int = 3) -> int:
    """Call ``inner`` through the catalog and relay its progress as this call's own."""

    async def forward(event: ToolEvent) -> None:
        report_progress(100 + (event.progress or 0.0))

    result = await _catalog[0].acall(inner, {"count": count}, on_event=forward)
    return len(result.events)


def event(n: int) -> ToolEvent:
    return ToolEvent(kind="progress", progress=float(n), total=100.0, elapsed_ms=0.0)


def pending_pumps() -> list[asyncio.Task[Any]]:
    return [
        t for t in asyncio.all_tasks() if not t.done() and "Delivery._pump" in repr(t.get_coro())
    ]


# -- the callback's context ------------------------------------------------------------------


def test_the_callback_runs_in_the_callers_context_not_the_tools() -> None:
    """Hole: the pump was started by the first event's loop callback, which runs in the
    context of the thread that put it (the tool's), so the callback saw the tool's context
    variables (the tool's own event sink among them) instead of its caller's."""
    seen: list[str] = []

    async def deliver(e: ToolEvent) -> None:
        seen.append(_who.get())

    async def check() -> None:
        _who.set("caller")
        async with Delivery(deliver) as put:

            def tool_thread() -> None:
                _who.set("tool")
                for n in range(3):
                    put(event(n))

            await asyncio.get_running_loop().run_in_executor(None, tool_thread)

    asyncio.run(check())
    assert seen == ["caller"] * 3


@pytest.fixture
def relaying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Catalog]:
    monkeypatch.setenv("TOOLCAT_ARTIFACTS", str(tmp_path / "artifacts"))
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(toolkit_from_module(__name__, name="relaying"))
        _catalog[:] = [catalog]
        try:
            yield catalog
        finally:
            _catalog.clear()


@pytest.mark.parametrize("inner", ["steps", "steps_then_nap"])
def test_a_tool_relaying_a_nested_calls_progress_reports_it_as_its_own(
    relaying: Catalog, inner: str
) -> None:
    """Hole: an async tool that relays a nested ``acall``'s events with ``report_progress``
    reported them into the nested call (whose event sink the callback's context carried): its
    own result lost them, and a nested call still running fed them back to itself."""
    result = relaying.call("relay", {"inner": inner, "count": 3})
    assert result.success, result.error
    assert result.data == 3  # the nested call kept its own three steps, nothing fed back
    assert [e.progress for e in result.events if e.kind == "progress"] == [101.0, 102.0, 103.0]


# -- cancellation, a callback that raises or hangs -------------------------------------------


def test_a_caller_cancelled_while_events_drain_stops_the_pump() -> None:
    """Hole: the drain awaited a shielded pump, so cancelling the caller left the pump
    running (a hanging callback kept it forever, and events went on after the cancel)."""
    started, body_done = asyncio.Event(), asyncio.Event()
    leaked: list[asyncio.Task[Any]] = []

    async def hang(e: ToolEvent) -> None:
        started.set()
        await asyncio.Event().wait()

    async def call() -> None:
        async with Delivery(hang) as put:
            await asyncio.get_running_loop().run_in_executor(None, put, event(1))
            body_done.set()  # the block ends now, in this step: the call waits for its events

    async def check() -> None:
        task = asyncio.ensure_future(call())
        await asyncio.wait_for(asyncio.gather(started.wait(), body_done.wait()), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        leaked.extend(pending_pumps())

    asyncio.run(check())
    assert not leaked


def test_a_callback_raising_cancelled_error_does_not_cancel_the_call() -> None:
    """Hole: a callback raising ``CancelledError`` (a BaseException, not caught as a
    failure) ended the pump cancelled, and the caller's drain re-raised it: the call was
    cancelled though nobody cancelled it. Now it is a failed delivery, logged."""
    got: list[float | None] = []

    async def deliver(e: ToolEvent) -> None:
        if e.progress == 1.0:
            raise asyncio.CancelledError()
        got.append(e.progress)

    async def check() -> str:
        async with Delivery(deliver) as put:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: [put(event(n)) for n in range(3)]
            )
        return "returned"

    assert asyncio.run(check()) == "returned"
    assert got[:1] == [0.0]


def test_a_callback_that_raises_does_not_stop_the_rest() -> None:
    got: list[float | None] = []

    def deliver(e: ToolEvent) -> None:
        if e.progress == 1.0:
            raise RuntimeError("client gone")
        got.append(e.progress)

    async def check() -> None:
        async with Delivery(deliver) as put:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: [put(event(n)) for n in range(4)]
            )

    asyncio.run(check())
    assert got == [0.0, 2.0, 3.0]


def test_a_hanging_callback_costs_the_drain_bound_and_no_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(delivery_module, "DRAIN_SECONDS", 0.1)
    leaked: list[asyncio.Task[Any]] = []

    async def hang(e: ToolEvent) -> None:
        await asyncio.Event().wait()

    async def check() -> None:
        async with Delivery(hang) as put:
            await asyncio.get_running_loop().run_in_executor(None, put, event(1))
        await asyncio.sleep(0)
        leaked.extend(pending_pumps())

    began = time.monotonic()
    asyncio.run(check())
    assert time.monotonic() - began < 3 and not leaked


def test_a_block_that_raises_drops_its_events_and_leaks_no_task() -> None:
    got: list[ToolEvent] = []
    leaked: list[asyncio.Task[Any]] = []

    async def check() -> None:
        with pytest.raises(ValueError):
            async with Delivery(got.append) as put:
                await asyncio.get_running_loop().run_in_executor(None, put, event(1))
                raise ValueError("the call failed")
        await asyncio.sleep(0)
        leaked.extend(pending_pumps())

    asyncio.run(check())
    assert not leaked


# -- several threads, a flood, a closed loop -------------------------------------------------


def test_events_from_several_threads_keep_each_threads_order() -> None:
    got: list[tuple[int, int]] = []

    async def deliver(e: ToolEvent) -> None:
        got.append((int(e.total or 0), int(e.progress or 0)))

    async def check() -> None:
        async with Delivery(deliver) as put:

            def thread(k: int) -> None:
                for n in range(200):
                    put(ToolEvent(kind="progress", progress=n, total=k, elapsed_ms=0.0))

            threads = [threading.Thread(target=thread, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: [t.join() for t in threads]
            )

    asyncio.run(check())
    assert len(got) == 800
    for k in range(4):
        assert [n for kk, n in got if kk == k] == list(range(200))


def test_a_put_after_the_loop_closed_is_ignored() -> None:
    puts: list[Any] = []

    async def check() -> None:
        async with Delivery(lambda e: None) as put:
            puts.append(put)

    asyncio.run(check())
    puts[0](event(1))  # the loop is closed: nothing raises into the tool


@pytest.mark.parametrize("isolation", ["thread", "process"])
@pytest.mark.parametrize("name", ["steps", "async_steps"])
def test_acall_delivers_every_event_in_order_before_its_result(
    tmp_path: Path, isolation: str, name: str
) -> None:
    with Catalog(tmp_path / "catalog.db", isolation=isolation) as catalog:  # type: ignore[arg-type]
        catalog.register(toolkit_from_module("tests.fixtures.runtime_tools", name="rt"))
        catalog.register(toolkit_from_module(__name__, name="relaying"))
        tool_name = "rt.async_counts" if name == "async_steps" else "relaying.steps"
        argument = "steps" if name == "async_steps" else "count"

        async def check() -> tuple[list[float | None], list[float | None]]:
            got: list[float | None] = []

            async def deliver(e: ToolEvent) -> None:
                await asyncio.sleep(0)
                got.append(e.progress)

            result = await catalog.acall(tool_name, {argument: 50}, on_event=deliver)
            assert result.success, result.error
            return got[:], [e.progress for e in result.events]

        got, kept = asyncio.run(check())
    assert got == [float(n) for n in range(1, 51)] and kept == got


def test_a_timed_out_tool_reporting_on_is_not_delivered_after_the_result(tmp_path: Path) -> None:
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(toolkit_from_module(__name__, name="relaying"))
        late: list[ToolEvent] = []
        leaked: list[asyncio.Task[Any]] = []

        async def check() -> None:
            returned = False

            def deliver(e: ToolEvent) -> None:
                if returned:
                    late.append(e)

            result = await catalog.acall(
                "relaying.nap_then_steps", {"seconds": 0.3}, timeout=0.1, on_event=deliver
            )
            returned = True
            assert result.error_code == "TIMEOUT"
            await asyncio.sleep(0.5)
            leaked.extend(pending_pumps())

        asyncio.run(check())
    assert not late and not leaked
