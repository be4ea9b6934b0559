"""A growing pool of daemon threads: a stuck call never holds up a fresh one.

``concurrent.futures.ThreadPoolExecutor`` has a fixed size, so calls that time out but keep
running (Python cannot stop a thread) use it up, and ``asyncio.to_thread`` shares the loop's
small default executor. Here a task that finds no idle thread gets a new one, up to
``max_threads``; threads idle for ``idle_seconds`` exit. Threads are daemons, so a stuck tool
never keeps the process alive at exit.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

MAX_THREADS = 1024
IDLE_SECONDS = 30.0

_batched = threading.local()
_yielded = False  # yield_to_loop put a thread of this process under SCHED_BATCH


def _set_policy(policy: int) -> None:
    os.sched_setscheduler(0, policy, os.sched_param(0))


def yield_to_loop() -> None:
    """Put the calling thread under Linux's ``SCHED_BATCH`` (once per thread; nothing
    elsewhere): a thread that works for an event loop (a tool call) then no longer preempts
    the loop's thread when it is woken for a task. On a busy machine the woken thread took
    the loop's core while the loop held the GIL it needs first: ``toolcat serve``'s server
    CPU for a trivial call fell 13% (2 cores, 16 clients). Threads and processes such a
    thread starts inherit the policy (a tool's own); toolcat's long-lived ones are started
    under ``ordinary_children``. Only for threads of one's own: a thread another library
    hands other work next (anyio's) would keep it."""
    global _yielded
    if getattr(_batched, "done", False):
        return
    _batched.done = True
    with contextlib.suppress(AttributeError, OSError):  # not Linux; a policy we may not leave
        if os.sched_getscheduler(0) == os.SCHED_OTHER:
            _set_policy(os.SCHED_BATCH)
            _yielded = True


@contextlib.contextmanager
def ordinary_children() -> Iterator[None]:
    """The threads and processes started inside run under the ordinary policy when the
    calling thread's ``SCHED_BATCH`` is this process's own doing (``yield_to_loop``, or
    inherited from a thread it put there): a tool's worker process, the thread MCP
    connections live on (their stdio servers). A policy the process was started under
    (``chrt --batch toolcat ...``) is left to them."""
    changed = False
    if _yielded:
        with contextlib.suppress(AttributeError, OSError):
            if os.sched_getscheduler(0) == os.SCHED_BATCH:
                _set_policy(os.SCHED_OTHER)
                changed = True
    try:
        yield
    finally:
        if changed:
            with contextlib.suppress(OSError):
                _set_policy(os.SCHED_BATCH)


_Task = tuple["concurrent.futures.Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class ThreadRunner:
    """Runs callables on daemon threads, starting one whenever none is idle."""

    def __init__(
        self,
        *,
        max_threads: int = MAX_THREADS,
        idle_seconds: float = IDLE_SECONDS,
        name: str = "toolcat-tool",
    ) -> None:
        self.max_threads = max_threads
        self.idle_seconds = idle_seconds
        self.name = name
        self.yields_to_loop = False  # its threads ``yield_to_loop`` (toolcat serve's process)
        self._queue: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._spare = 0  # threads waiting for work minus tasks waiting for a thread
        self._busy = 0
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads alive now."""
        return self._threads

    @property
    def busy(self) -> int:
        """Tasks running now (a timed-out sync tool counts until it returns)."""
        return self._busy

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args, **kwargs)`` on a pool thread, in a copy of the caller's context
        variables (as ``asyncio.to_thread`` does: the caller's trace span stays the parent);
        its outcome lands in the future."""
        context = contextvars.copy_context()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the thread runner is closed")
            if self._spare <= 0 and self._threads < self.max_threads:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-{self._threads + 1}", daemon=True
                )
                # Counted once started: a start that fails (no threads left to the process)
                # fails this task alone, not every later one queued for a thread never made.
                thread.start()
                self._threads += 1
            else:
                self._spare -= 1
            self._queue.put((future, context.run, (fn, *args), kwargs))
        return future

    def _work(self) -> None:
        while True:
            try:
                task = self._queue.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._spare > 0:  # more idle threads than queued tasks: leave
                        self._spare -= 1
                        self._threads -= 1
                        return
                continue  # a task was queued for this thread just now
            if task is None:
                with self._lock:
                    self._threads -= 1
                return
            future, fn, args, kwargs = task
            if self.yields_to_loop:
                yield_to_loop()
            if future.set_running_or_notify_cancel():
                with self._lock:
                    self._busy += 1
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # a tool's KeyboardInterrupt is its outcome
                    future.set_exception(e)
                finally:
                    with self._lock:
                        self._busy -= 1
            del task, future, fn, args, kwargs
            with self._lock:
                self._spare += 1

    def close(self) -> None:
        """Let idle threads exit; busy ones finish (they are daemons) and then exit."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _ in range(self._threads):
                self._queue.put(None)
