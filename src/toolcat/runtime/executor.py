"""Running implementations with timeouts and per-tool concurrency limits, in two isolations.

``thread`` (fast, for trusted tools): a sync tool runs on a thread of a growing daemon pool
(``threads.ThreadRunner``) and an async one on a background event loop. At the timeout the
*caller's wait* stops: an async tool is cancelled, but a sync tool cannot be stopped (Python has
no way to stop a thread): it runs on, its result is dropped, and it keeps its concurrency slot
until it returns. A fresh call never waits behind it: the pool starts another thread. The wait
itself needs the GIL: a tool inside one long C call that holds it (``7 ** 3_000_000``) keeps the
caller waiting until that call returns; nothing in this process can end it sooner.

``process``: the tool runs in a worker subprocess (``processes.ProcessPool``); at the timeout
the worker and its children are killed, so the work stops, whatever the tool is doing (a
GIL-holding C loop included), and its slot is free again.

Either way a tool's failure of any kind (``KeyboardInterrupt``, ``SystemExit``, ...) comes back
as the call's outcome; it never propagates into the caller's thread or the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import ToolTimeoutError
from . import events
from .processes import ProcessPool, WorkerDied, WorkerTimeout
from .threads import ThreadRunner


class ToolFailed(Exception):
    """The tool raised ``error`` (any ``BaseException``); carried, never re-raised as is."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class WorkerError(Exception):
    """A worker process replied with an error (``code``), or died."""

    def __init__(self, message: str, code: str = "TOOL_ERROR") -> None:
        super().__init__(message)
        self.code = code


def timeout_error(tool_id: str, timeout: float, stopped: bool) -> ToolTimeoutError:
    tail = "" if stopped else " (it may still be running in its thread)"
    return ToolTimeoutError(
        f"tool {tool_id!r} did not finish within {timeout:g} s{tail}; ask for less work, or "
        "pass a longer timeout"
    )


class Executor:
    """Owns the worker threads, the event loop and the worker processes that tools run on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.threads = ThreadRunner()
        self._processes: ProcessPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._slots: dict[str, threading.BoundedSemaphore] = {}

    @property
    def processes(self) -> ProcessPool:
        with self._lock:
            if self._processes is None:
                self._processes = ProcessPool()
            return self._processes

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                loop.set_exception_handler(_quiet_handler)
                thread = threading.Thread(
                    target=loop.run_forever, name="toolcat-async-tools", daemon=True
                )
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    def _slot(self, tool_id: str, limit: int | None) -> threading.BoundedSemaphore | None:
        if limit is None:
            return None
        with self._lock:
            slot = self._slots.get(tool_id)
            if slot is None:
                slot = self._slots[tool_id] = threading.BoundedSemaphore(limit)
            return slot

    def _acquire(
        self, tool_id: str, limit: int | None, timeout: float
    ) -> threading.BoundedSemaphore | None:
        slot = self._slot(tool_id, limit)
        if slot is not None and not slot.acquire(timeout=timeout):
            raise ToolTimeoutError(
                f"tool {tool_id!r} allows {limit} call(s) at a time and none "
                f"finished within {timeout:g} s; try again later"
            )
        return slot

    def run(
        self,
        func: Callable[..., Any],
        arguments: dict[str, Any],
        *,
        tool_id: str,
        timeout: float,
        max_concurrency: int | None = None,
        sink: events.Sink | None = None,
    ) -> Any:
        """Call ``func(**arguments)`` in this process and return its result (awaited if a
        coroutine).

        Raises:
            ToolTimeoutError: No result (or no free slot) within ``timeout`` seconds.
            ToolFailed: The tool raised (anything).
        """
        deadline = time.monotonic() + timeout
        slot = self._acquire(tool_id, max_concurrency, timeout)
        is_async = inspect.iscoroutinefunction(func)
        future: concurrent.futures.Future[Any]
        try:
            if is_async:
                future = asyncio.run_coroutine_threadsafe(
                    _guarded(func(**arguments), sink), self._event_loop()
                )
            else:
                future = self.threads.submit(_invoke, func, arguments, sink)
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        if slot is not None:
            future.add_done_callback(lambda _: slot.release())
        try:
            ok, value = future.result(timeout=max(deadline - time.monotonic(), 0))
        except concurrent.futures.TimeoutError:
            future.cancel()  # cancels an async tool; a running thread cannot be stopped
            raise timeout_error(tool_id, timeout, stopped=is_async) from None
        return self._outcome(
            ok, value, tool_id=tool_id, timeout=timeout, deadline=deadline, sink=sink
        )

    def run_here(
        self,
        func: Callable[..., Any],
        arguments: dict[str, Any],
        *,
        tool_id: str,
        timeout: float,
        deadline: float,
        sink: events.Sink | None = None,
    ) -> Any:
        """``run`` for a sync ``func`` with no concurrency limit, on the calling thread: a tool
        thread whose caller keeps the timeout itself (``Runtime.acall``). ``deadline`` is a
        ``time.monotonic()`` reading; a coroutine ``func`` returns is awaited until then.

        Raises:
            ToolTimeoutError: A coroutine it returned did not finish by ``deadline``.
            ToolFailed: The tool raised (anything).
        """
        ok, value = _invoke(func, arguments, sink)
        return self._outcome(
            ok, value, tool_id=tool_id, timeout=timeout, deadline=deadline, sink=sink
        )

    def _outcome(
        self,
        ok: bool,
        value: Any,
        *,
        tool_id: str,
        timeout: float,
        deadline: float,
        sink: events.Sink | None,
    ) -> Any:
        """The tool's value from ``_invoke``'s outcome; a coroutine a sync function returned is
        awaited on the tools' loop until ``deadline`` (cancelled there when it is not done)."""
        if ok and inspect.isawaitable(value):
            future = asyncio.run_coroutine_threadsafe(_guarded(value, sink), self._event_loop())
            try:
                ok, value = future.result(timeout=max(deadline - time.monotonic(), 0))
            except concurrent.futures.TimeoutError:
                future.cancel()
                raise timeout_error(tool_id, timeout, stopped=False) from None
        if not ok:
            raise ToolFailed(value)
        return value

    def run_in_process(
        self,
        key: str,
        message: dict[str, Any],
        *,
        tool_id: str,
        timeout: float,
        max_concurrency: int | None = None,
        sink: events.Sink | None = None,
    ) -> dict[str, Any]:
        """Send ``message`` to a worker process of ``key``; return its ``ok`` reply.

        Raises:
            ToolTimeoutError: No reply within ``timeout`` (the worker was killed).
            WorkerError: The tool failed in the worker, or the worker died.
        """
        deadline = time.monotonic() + timeout
        slot = self._acquire(tool_id, max_concurrency, timeout)
        try:
            remaining = max(deadline - time.monotonic(), 0.001)
            reply = self.processes.call(key, message, timeout=remaining, on_event=sink)
        except WorkerTimeout:
            raise timeout_error(tool_id, timeout, stopped=True) from None
        except WorkerDied as e:
            raise WorkerError(f"tool {tool_id!r} failed: {e}") from None
        finally:
            if slot is not None:
                slot.release()
        if "error" in reply:
            raise WorkerError(str(reply["error"]), str(reply.get("code") or "TOOL_ERROR"))
        return reply

    def close(self) -> None:
        with self._lock:
            self.threads.close()
            if self._processes is not None:
                self._processes.close()
                self._processes = None
            if self._loop is not None and self._loop_thread is not None:
                loop = self._loop
                with contextlib.suppress(RuntimeError):
                    asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=2)
                loop.call_soon_threadsafe(loop.stop)
                self._loop_thread.join(timeout=2)
                if not loop.is_running():
                    loop.close()
                self._loop, self._loop_thread = None, None


def _invoke(
    func: Callable[..., Any], arguments: dict[str, Any], sink: events.Sink | None
) -> tuple[bool, Any]:
    token = events.set_sink(sink)
    try:
        return True, func(**arguments)
    except BaseException as e:  # the tool's outcome, whatever it raised
        return False, e
    finally:
        events.reset_sink(token)


async def _guarded(coroutine: Any, sink: events.Sink | None) -> tuple[bool, Any]:
    events.set_sink(sink)  # this task's own context
    try:
        return True, await coroutine
    except BaseException as e:  # CancelledError (our timeout) and KeyboardInterrupt alike
        return False, e


async def _cancel_all() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=1)


def _quiet_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Tools that ignore cancellation are abandoned at close, without a warning on stderr."""
    message = str(context.get("message", ""))
    if "Task was destroyed but it is pending" in message:
        return
    loop.default_exception_handler(context)
