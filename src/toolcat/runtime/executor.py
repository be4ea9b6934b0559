"""Running implementations with timeouts and per-tool concurrency limits.

Sync implementations run in a worker thread so a timeout can return control to the caller;
Python cannot stop a thread, so a timed-out sync tool runs on until it returns, its result
is discarded, and it keeps its concurrency slot until then. Async implementations run on
one background event loop and are cancelled at their timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import ToolTimeoutError

MAX_WORKERS = 32


class Executor:
    """Owns the worker threads and the event loop that tools run on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._slots: dict[str, threading.BoundedSemaphore] = {}

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    MAX_WORKERS, thread_name_prefix="toolcat-tool"
                )
            return self._pool

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
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

    def run(
        self,
        func: Callable[..., Any],
        arguments: dict[str, Any],
        *,
        tool_id: str,
        timeout: float,
        max_concurrency: int | None = None,
    ) -> Any:
        """Call ``func(**arguments)`` and return its result (awaited if it is a coroutine).

        Raises:
            ToolTimeoutError: No result (or no free slot) within ``timeout`` seconds.
            Exception: Whatever the tool raised.
        """
        deadline = time.monotonic() + timeout
        slot = self._slot(tool_id, max_concurrency)
        if slot is not None and not slot.acquire(timeout=timeout):
            raise ToolTimeoutError(
                f"tool {tool_id!r} allows {max_concurrency} call(s) at a time and none "
                f"finished within {timeout:g} s; try again later"
            )
        future: concurrent.futures.Future[Any]
        try:
            if inspect.iscoroutinefunction(func):
                future = asyncio.run_coroutine_threadsafe(func(**arguments), self._event_loop())
            else:
                future = self._threads().submit(func, **arguments)
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        if slot is not None:
            future.add_done_callback(lambda _: slot.release())
        try:
            result = future.result(timeout=max(deadline - time.monotonic(), 0))
            if inspect.isawaitable(result):
                awaited = asyncio.run_coroutine_threadsafe(_await(result), self._event_loop())
                result = awaited.result(timeout=max(deadline - time.monotonic(), 0))
            return result
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolTimeoutError(
                f"tool {tool_id!r} did not finish within {timeout:g} s; ask for less work, or "
                "pass a longer timeout"
            ) from None

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
            if self._loop is not None and self._loop_thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop_thread.join(timeout=5)
                if not self._loop.is_running():
                    self._loop.close()
                self._loop, self._loop_thread = None, None


async def _await(awaitable: Any) -> Any:
    return await awaitable
