"""runtime/delivery.py: a call's events reach the caller's async callback in order and before
its result; a call that reports none costs no task, and nothing put after the call ended is
delivered."""

from __future__ import annotations

import asyncio
import threading

from toolcat.models import ToolEvent
from toolcat.runtime.delivery import Delivery


def event(n: int) -> ToolEvent:
    return ToolEvent(kind="progress", progress=float(n), total=100.0, elapsed_ms=0.0)


def test_a_call_without_events_starts_no_task() -> None:
    got: list[ToolEvent] = []

    async def check() -> None:
        before = len(asyncio.all_tasks())
        delivery = Delivery(got.append)
        async with delivery:
            assert len(asyncio.all_tasks()) == before
        assert delivery.task is None and not got

    asyncio.run(check())


def test_events_from_another_thread_arrive_in_order_before_the_block_ends() -> None:
    got: list[float | None] = []

    async def deliver(e: ToolEvent) -> None:
        await asyncio.sleep(0)  # an async callback, awaited in turn
        got.append(e.progress)

    async def check() -> None:
        async with Delivery(deliver) as put:
            tool = threading.Thread(target=lambda: [put(event(n)) for n in range(50)])
            tool.start()
            await asyncio.get_running_loop().run_in_executor(None, tool.join)
        assert got == [float(n) for n in range(50)]

    asyncio.run(check())


def test_an_event_put_after_the_call_ended_is_dropped() -> None:
    """Hostile: a tool that goes on after its call's result (a timed-out thread cannot be
    stopped) floods events: none is delivered and no task is started for them."""
    got: list[ToolEvent] = []

    async def check() -> None:
        delivery = Delivery(got.append)
        async with delivery as put:
            pass
        before = len(asyncio.all_tasks())
        late = threading.Thread(target=lambda: [put(event(n)) for n in range(1000)])
        late.start()
        await asyncio.get_running_loop().run_in_executor(None, late.join)
        await asyncio.sleep(0.05)  # the loop runs the queued callbacks
        assert not got and delivery.task is None
        assert len(asyncio.all_tasks()) == before

    asyncio.run(check())
