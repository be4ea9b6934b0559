"""What a running tool reports: ``report_progress`` and ``report_log``.

A tool calls these from anywhere inside its call (sync or async, thread or process
isolation); the runtime routes each event to the call that is running it: in a thread through
a context variable, in a worker process over the worker's pipe. Outside a call they do nothing,
so a tool stays an ordinary function in its own tests.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import math
import time
from collections.abc import Callable
from typing import Any

from ..models import ToolEvent

MAX_EVENTS = 256  # kept in ToolResult.events (the latest); a callback sees them all
MAX_MESSAGE = 2000

Sink = Callable[[dict[str, Any]], None]
_sink: contextvars.ContextVar[Sink | None] = contextvars.ContextVar(
    "toolcat_event_sink", default=None
)
_process_sink: list[Sink] = []  # a worker process: every thread reports to its one call


def _current() -> Sink | None:
    sink = _sink.get()
    if sink is None and _process_sink:
        return _process_sink[0]
    return sink


def report_progress(
    progress: float, total: float | None = None, message: str | None = None
) -> None:
    """Report how far the running tool has got (``progress`` of ``total``, if known)."""
    sink = _current()
    if sink is None:
        return
    event: dict[str, Any] = {"kind": "progress", "progress": _number(progress)}
    if total is not None:
        event["total"] = _number(total)
    if message is not None:
        event["message"] = str(message)[:MAX_MESSAGE]
    sink(event)


def report_log(message: str, level: str = "info") -> None:
    """Report a log line from the running tool (``level``: debug, info, warning, error)."""
    sink = _current()
    if sink is not None:
        sink({"kind": "log", "message": str(message)[:MAX_MESSAGE], "level": str(level)[:20]})


def _number(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"progress must be a finite number, not {value!r}")
    return number


def set_sink(sink: Sink | None) -> contextvars.Token[Sink | None]:
    """Route this context's reports to ``sink`` (the runtime calls this around a tool)."""
    return _sink.set(sink)


def set_process_sink(sink: Sink) -> None:
    """Route every report in this process to ``sink`` (a worker process runs one call)."""
    _process_sink[:] = [sink]


def reset_sink(token: contextvars.Token[Sink | None]) -> None:
    _sink.reset(token)


class EventLog:
    """The events of one call: kept (bounded) for the result and passed to ``on_event``."""

    def __init__(self, on_event: Callable[[ToolEvent], Any] | None, started: float) -> None:
        self.on_event = on_event
        self.started = started
        self.events: collections.deque[ToolEvent] = collections.deque(maxlen=MAX_EVENTS)
        self.closed = False

    def __call__(self, raw: dict[str, Any]) -> None:
        if self.closed:  # a timed-out thread reporting after the result went back
            return
        event = ToolEvent.model_construct(
            kind=raw.get("kind", "log"),
            progress=raw.get("progress"),
            total=raw.get("total"),
            message=raw.get("message"),
            level=raw.get("level"),
            elapsed_ms=round((time.perf_counter() - self.started) * 1000, 3),
        )
        self.events.append(event)
        if self.on_event is not None:
            with contextlib.suppress(Exception):  # a broken callback must not fail the tool
                self.on_event(event)

    def close(self) -> list[ToolEvent]:
        self.closed = True
        return list(self.events)
