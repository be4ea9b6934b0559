"""Process isolation: tools run in worker subprocesses that a timeout kills.

Each worker (``python -m toolcat.runtime.worker``) runs one call at a time and is reused
for later calls of the same pool key (a toolkit), so it imports an implementation once. A
call that outlives its timeout gets its worker killed with every process its tools started,
detached ones included (``containment``, ``reaper``): the work stops, the caller gets
``TIMEOUT``, and the next call starts a fresh worker. A worker that dies mid-call
(``os._exit``, a crash) is a ``TOOL_ERROR``. Workers start on demand, so a slow call never
waits behind another.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..definitions.importpath import child_environment
from . import reaper
from .threads import ordinary_children

MAX_WORKERS = 64  # alive at once, over all keys; more calls wait for one (within their timeout)
MAX_IDLE_PER_KEY = 4  # kept warm per key after their call
MAX_LINE = 64 * 1024 * 1024
WORKER_ARGS = ("-m", "toolcat.runtime.worker")  # after the interpreter


class WorkerTimeout(Exception):
    """No reply within the deadline (the worker was killed)."""


class WorkerDied(Exception):
    """The worker exited before replying."""


class Worker:
    """One worker subprocess and its protocol pipes."""

    def __init__(self) -> None:
        # The child imports what this process can: the same interpreter and import path.
        env = child_environment(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        with ordinary_children():  # started by a serving thread that yields to its loop
            self.process = subprocess.Popen(
                [sys.executable, *WORKER_ARGS],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own process group: a kill takes the tool's too
                close_fds=True,
            )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in = self.process.stdin
        self._out = self.process.stdout.fileno()
        os.set_blocking(self._out, False)
        self._buffer = bytearray()
        self.calls = 0

    def request(
        self,
        message: dict[str, Any],
        *,
        deadline: float,
        on_event: Callable[[dict[str, Any]], None] | None,
    ) -> dict[str, Any]:
        """Send one request; return its reply, passing events on as they arrive.

        Raises:
            WorkerTimeout: ``deadline`` (``time.monotonic()``) passed; the worker is killed.
            WorkerDied: The worker exited first.
        """
        self.calls += 1
        try:
            self._in.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            self._in.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._exit_reason()) from None
        with selectors.DefaultSelector() as selector:
            selector.register(self._out, selectors.EVENT_READ)
            while True:
                line = self._next_line()
                if line is not None:
                    reply = json.loads(line)
                    if "event" in reply:
                        if on_event is not None:
                            on_event(reply["event"])
                        continue
                    return reply  # type: ignore[no-any-return]
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    if time.monotonic() >= deadline:
                        self.kill()
                        raise WorkerTimeout()
                    continue
                try:
                    chunk = os.read(self._out, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise WorkerDied(self._exit_reason())
                self._buffer += chunk
                if len(self._buffer) > MAX_LINE:
                    self.kill()
                    raise WorkerDied("the worker sent a reply over 64 MB")

    def _next_line(self) -> bytes | None:
        end = self._buffer.find(b"\n")
        if end < 0:
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def _exit_reason(self) -> str:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the worker process stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the worker process was killed by {name}"
        return f"the worker process exited with code {code} before the tool returned"

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """Kill the worker and everything it started (detached grandchildren included, on
        Linux: ``containment``); reap it. In a PID namespace, killing its init (a descendant)
        kills all of it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.process.pid, signal.SIGSTOP)  # it forks no more while we sweep
        reaper.kill_tree(self.process.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        self._close_pipes()

    def stop(self) -> None:
        """Ask an idle worker to exit (end of its input), then make sure."""
        with contextlib.suppress(OSError):
            self._in.close()
        try:
            self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.kill()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class ProcessPool:
    """Worker processes by key; a call borrows an idle worker or starts one."""

    def __init__(self, *, max_workers: int = MAX_WORKERS, max_idle: int = MAX_IDLE_PER_KEY) -> None:
        self.max_workers = max_workers
        self.max_idle = max_idle
        self._idle: dict[str, collections.deque[Worker]] = collections.defaultdict(
            collections.deque
        )
        self._alive = 0
        self._busy: set[Worker] = set()
        self._changed = threading.Condition()
        self._closed = False

    @property
    def workers(self) -> int:
        """Worker processes alive now."""
        return self._alive

    def _borrow(self, key: str, deadline: float) -> Worker:
        with self._changed:
            while True:
                if self._closed:
                    raise WorkerDied("the catalog was closed")
                idle = self._idle.get(key)
                while idle:
                    worker = idle.pop()
                    if worker.alive():
                        self._busy.add(worker)
                        return worker
                    self._alive -= 1
                if self._alive < self.max_workers:
                    self._alive += 1
                    break
                if not self._evict_idle():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise WorkerTimeout()
                    self._changed.wait(remaining)
        try:
            worker = Worker()
        except BaseException:
            with self._changed:
                self._alive -= 1
                self._changed.notify()
            raise
        with self._changed:
            self._busy.add(worker)
        return worker

    def _evict_idle(self) -> bool:
        """Stop one idle worker of any key to make room (holding the lock)."""
        for idle in self._idle.values():
            if idle:
                idle.popleft().stop()
                self._alive -= 1
                return True
        return False

    def _give_back(self, key: str, worker: Worker, reusable: bool) -> None:
        with self._changed:
            self._busy.discard(worker)
            idle = self._idle[key]
            if reusable and not self._closed and worker.alive() and len(idle) < self.max_idle:
                idle.append(worker)
            else:
                self._alive -= 1
                worker.stop()  # exits an idle one; closes the pipes of a dead one
            self._changed.notify()

    def call(
        self,
        key: str,
        message: dict[str, Any],
        *,
        timeout: float,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Run one request on a worker of ``key`` within ``timeout`` seconds.

        Raises:
            WorkerTimeout: No reply in time; the worker was killed.
            WorkerDied: The worker exited (or could not start).
        """
        deadline = time.monotonic() + timeout
        worker = self._borrow(key, deadline)
        reusable = False
        try:
            reply = worker.request(message, deadline=deadline, on_event=on_event)
            reusable = True
            return reply
        finally:
            self._give_back(key, worker, reusable)

    def close(self) -> None:
        """Stop idle workers and kill busy ones."""
        with self._changed:
            self._closed = True
            idle = [w for queue in self._idle.values() for w in queue]
            busy = list(self._busy)
            self._idle.clear()
            self._changed.notify_all()
        for worker in idle:
            worker.stop()
        for worker in busy:
            worker.kill()
