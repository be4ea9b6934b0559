"""A call's events handed to an async callback on the caller's event loop, in the order the
tool reported them, and all of them before the call's result.

The tool runs on another thread; each event it reports is queued on the loop and one task
awaits the callback for each in turn. The call's result waits until that task has delivered
the last one (at most ``DRAIN_SECONDS``), so a transport that closes its response with the
result (the 2026 era over HTTP) has sent every event first. A callback that fails is logged
once per call; the remaining events still go, and the call's result is not affected (one that
raises ``CancelledError`` ends the call's delivery, logged, without cancelling the caller). A
caller cancelled while its events drain stops their delivery. The callback runs in the caller's
context variables, never in the tool's. How many events reach the queue is bounded by the
call's ``events.Gate``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ..models import ToolEvent

logger = logging.getLogger(__name__)

DRAIN_SECONDS = 10.0  # how long a result waits for its events to be delivered
_END = object()


class Delivery:
    """``async with Delivery(callback) as put:`` — ``put`` is the call's ``on_event`` (any
    thread); leaving the block waits until every event put was delivered."""

    def __init__(self, callback: Callable[[ToolEvent], Any]) -> None:
        self.callback = callback
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.failed = False
        self.task: asyncio.Task[None] | None = None  # started by the first event
        self.ended = False
        # The callback runs in its caller's context, never in the tool's that put the event
        # (a loop callback runs in the putting thread's context, with the tool's event sink).
        self.context = contextvars.copy_context()

    def put(self, event: ToolEvent) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed while the tool ran
            self.loop.call_soon_threadsafe(self._queued, event, context=self.context)

    def _queued(self, event: ToolEvent) -> None:
        """On the loop: the event queued for the pump, which the first one starts (most
        calls report none: a task and its wait per call were ~15% of a trivial call's CPU
        in ``Catalog.acall``). An event put after the block ended is dropped."""
        if self.ended:
            return
        if self.task is None:
            self.task = asyncio.ensure_future(self._pump())
        self.queue.put_nowait(event)

    async def __aenter__(self) -> Callable[[ToolEvent], None]:
        return self.put

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Every event the call put before its result is queued by now: the result reached
        # this loop through the same FIFO of callbacks, after them.
        self.ended = True
        if self.task is None:  # no event: nothing to deliver
            return
        if kind is not None:  # cancelled or failed: nothing waits for the events
            self.task.cancel()
            return
        self.queue.put_nowait(_END)  # after every event the call put (the loop is FIFO)
        try:  # ``wait``, not the task itself: a callback's CancelledError stays its own
            done, _ = await asyncio.wait({self.task}, timeout=DRAIN_SECONDS)
        except BaseException:  # the caller was cancelled: its events go no further
            self.task.cancel()
            raise
        if not done:
            self.task.cancel()
            logger.warning(
                "a call's events were not all delivered within %gs: the rest are dropped",
                DRAIN_SECONDS,
            )
        elif self.task.cancelled():
            logger.warning("a call's event callback was cancelled: the rest are dropped")

    async def _pump(self) -> None:
        while (event := await self.queue.get()) is not _END:
            try:
                outcome = self.callback(event)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as e:  # a client gone away must not fail the call
                if not self.failed:
                    self.failed = True
                    logger.warning("a call's event could not be delivered: %s", e)
