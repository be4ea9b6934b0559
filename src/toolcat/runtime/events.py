"""What a running tool reports: ``report_progress``, ``report_status``, ``report_artifact``
and ``report_log`` (A2E's four event kinds).

A tool calls these from anywhere inside its call (sync or async, thread or process
isolation); the runtime routes each event to the call that is running it: in a thread through
a context variable, in a worker process over the worker's pipe. Outside a call they do nothing,
so a tool stays an ordinary function in its own tests.

Bounds: messages are cut at ``MAX_MESSAGE`` characters; a result keeps the latest
``MAX_EVENTS`` events but every artifact (at most ``artifacts.MAX_ARTIFACTS`` per call); an
artifact above ``artifacts.INLINE_BYTES`` is written to the call's folder and referenced by
URI (runtime/artifacts.py says where and for how long); one above
``artifacts.MAX_ARTIFACT_BYTES`` is refused with ``ValueError`` in the tool. An artifact over
a call's count or byte budget is not kept, and a ``warning`` log event says so.

A tool may report in a tight loop, so every path a call's events take passes them through one
``Gate`` per call (the call's ``EventLog``, and a worker process before its pipe): progress
and status events pass ``BURST`` at once, then ``PER_SECOND`` a second, the latest of each
kind held back and passed on when the next one may go or when the call ends (the last
progress always arrives); log lines pass up to ``MAX_LOGS`` a call. An artifact past
``artifacts.MAX_ARTIFACTS`` becomes its ``warning`` line there, content dropped, and counts
as a log line: artifacts reported in a loop pass no more than log lines do. What
did not pass is counted, and one ``warning`` log event at the end says how many.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import math
import mimetypes
import threading
import time
from collections.abc import Callable
from typing import Any

from ..models import ToolEvent
from . import artifacts

MAX_EVENTS = 256  # kept in ToolResult.events (the latest, and every artifact); a callback sees all
MAX_MESSAGE = 2000
MAX_STATE = 100
BURST = 100  # progress and status events passed on at once, before the rate applies
PER_SECOND = 20.0  # then at most this many a second (the latest of each kind waits)
MAX_LOGS = 1000  # log lines passed on per call; the rest are counted

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


def report_status(state: str, message: str | None = None) -> None:
    """Report what the running tool is doing now: a short ``state`` ("waiting for the API",
    "retrying 2/3") and, optionally, a longer ``message``."""
    sink = _current()
    if sink is None:
        return
    event: dict[str, Any] = {"kind": "status", "state": str(state)[:MAX_STATE]}
    if message is not None:
        event["message"] = str(message)[:MAX_MESSAGE]
    sink(event)


def report_artifact(
    name: str,
    content: str | bytes,
    *,
    mime_type: str | None = None,
    description: str | None = None,
) -> None:
    """Hand back an artifact (a file, an image, a table too large for the result) before the
    tool returns.

    Args:
        name: A file name for it (``report.csv``); folders are dropped.
        content: Text or bytes, at most ``MAX_ARTIFACT_BYTES`` (32 MiB). Small ones travel
            inside the event; larger ones are written to the call's artifact folder.
        mime_type: Its media type; default: guessed from ``name``, else ``text/plain`` for
            text and ``application/octet-stream`` for bytes.
        description: One line on what it holds.

    Raises:
        ValueError: ``content`` is larger than ``MAX_ARTIFACT_BYTES``.
        TypeError: ``content`` is neither text nor bytes.
    """
    if not isinstance(content, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"an artifact's content is str or bytes, not {type(content).__name__}")
    size = len(content.encode("utf-8")) if isinstance(content, str) else len(content)
    if size > artifacts.MAX_ARTIFACT_BYTES:
        raise ValueError(
            f"artifact {name!r} is {size:,} bytes; at most {artifacts.MAX_ARTIFACT_BYTES:,}"
        )
    sink = _current()
    if sink is None:
        return
    name = str(name)[:200] or "artifact"
    guessed = mimetypes.guess_type(name)[0]
    fallback = "text/plain" if isinstance(content, str) else "application/octet-stream"
    event: dict[str, Any] = {
        "kind": "artifact",
        "name": name,
        "mime_type": str(mime_type)[:200] if mime_type else guessed or fallback,
    }
    if description is not None:
        event["message"] = str(description)[:MAX_MESSAGE]
    if isinstance(content, str):
        event["text"] = content
    else:  # JSON-safe, so it crosses a worker's pipe as it is
        event["blob"] = base64.b64encode(bytes(content)).decode("ascii")
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


def piped(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` as a worker process sends it over its pipe: a text artifact that will be a
    file (over ``INLINE_BYTES``) goes as base64 bytes, whose JSON is 4/3 of its size at
    most; as text, control characters would be escaped to six bytes each and a 32 MiB
    artifact would pass the pipe's line limit. The parent writes either to the same file."""
    text = event.get("text")
    if event.get("kind") != "artifact" or not isinstance(text, str):
        return event
    content = text.encode("utf-8")
    if len(content) <= artifacts.INLINE_BYTES:
        return event
    blob = base64.b64encode(content).decode("ascii")
    return {**{k: v for k, v in event.items() if k != "text"}, "blob": blob}


def set_sink(sink: Sink | None) -> contextvars.Token[Sink | None]:
    """Route this context's reports to ``sink`` (the runtime calls this around a tool)."""
    return _sink.set(sink)


def set_process_sink(sink: Sink) -> None:
    """Route every report in this process to ``sink`` (a worker process runs one call)."""
    _process_sink[:] = [sink]


def reset_sink(token: contextvars.Token[Sink | None]) -> None:
    _sink.reset(token)


class Gate:
    """One call's events on their way to ``sink``, bounded (see the module's docstring).

    Artifacts pass as they come up to ``artifacts.MAX_ARTIFACTS`` (``EventLog`` bounds their
    size), then as log lines. Call ``end`` once the tool has returned: it passes on what was
    held back, then the note of what was dropped."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.tokens = float(BURST)
        self.refilled = time.monotonic()
        self.held: dict[str, dict[str, Any]] = {}  # kind -> its latest event not passed on
        self.logs = 0
        self.artifacts = 0
        self.dropped = 0

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if kind == "artifact":
            self.artifacts += 1
            if self.artifacts > artifacts.MAX_ARTIFACTS:  # its content goes no further
                name = str(event.get("name") or "artifact")[:200]
                event = {"kind": "log", "level": "warning", "message": _over_count(name)}
                kind = "log"
        if kind == "log":
            self.logs += 1
            if self.logs > MAX_LOGS:
                self.dropped += 1
                return
        elif kind in ("progress", "status"):
            now = time.monotonic()
            self.tokens = min(BURST, self.tokens + (now - self.refilled) * PER_SECOND)
            self.refilled = now
            if self.tokens < 1:
                if self.held.pop(str(kind), None) is not None:
                    self.dropped += 1  # superseded before it could go
                self.held[str(kind)] = event
                return
            self.tokens -= 1
            self.held.pop(str(kind), None)  # this one is newer
        self.sink(event)

    def end(self) -> None:
        """Pass on the events held back (in the order they came), then say what was dropped."""
        held = list(self.held.values())  # a newer event of a kind moved it to the end
        self.held.clear()
        for event in held:
            self.sink(event)
        if self.dropped:
            self.sink(
                {
                    "kind": "log",
                    "level": "warning",
                    "message": (
                        f"{self.dropped:,} events of this call not passed on: progress and "
                        f"status at most {BURST} at once then {PER_SECOND:g} a second (the "
                        f"latest kept), log lines at most {MAX_LOGS:,} a call"
                    ),
                }
            )
        self.dropped = 0


class EventLog:
    """The events of one call: kept (bounded) for the result and passed to ``on_event``.

    Artifacts are never evicted by later events; large ones are written to the call's
    folder here, in the calling process, whichever isolation ran the tool.
    """

    def __init__(self, on_event: Callable[[ToolEvent], Any] | None, started: float) -> None:
        self.on_event = on_event
        self.started = started
        self.events: list[ToolEvent] = []
        self.folder = artifacts.CallFolder()
        self.gate = Gate(self._keep)
        self.closed = False
        self.lock = threading.RLock()  # a tool's own threads may report at once

    def __call__(self, raw: dict[str, Any]) -> None:
        if self.closed:  # a timed-out thread reporting after the result went back
            return
        kind = raw.get("kind", "log")
        if kind not in KINDS:
            return
        fields: dict[str, Any] = {
            "kind": kind,
            "elapsed_ms": round((time.perf_counter() - self.started) * 1000, 3),
        }
        fields.update({key: raw[key] for key in FIELDS if raw.get(key) is not None})
        with self.lock:
            if not self.closed:
                self.gate(fields)

    def _keep(self, fields: dict[str, Any]) -> None:
        """Keep an event that passed the gate, and pass it to ``on_event``."""
        if "elapsed_ms" not in fields:  # the gate's own note
            fields["elapsed_ms"] = round((time.perf_counter() - self.started) * 1000, 3)
        if fields["kind"] == "artifact":
            problem = self._artifact(fields)
            if problem is not None:
                fields = {
                    "kind": "log",
                    "level": "warning",
                    "message": problem,
                    "elapsed_ms": fields["elapsed_ms"],
                }
        event = ToolEvent.model_construct(**fields)
        self.events.append(event)
        if len(self.events) > MAX_EVENTS:  # the oldest event that is not an artifact goes
            oldest = next(i for i, e in enumerate(self.events) if e.kind != "artifact")
            del self.events[oldest]
        if self.on_event is not None:
            with contextlib.suppress(Exception):  # a broken callback must not fail the tool
                self.on_event(event)

    def _artifact(self, fields: dict[str, Any]) -> str | None:
        """Size the artifact and move a large one to a file; or why it is not kept."""
        name = str(fields.get("name") or "artifact")
        text, blob = fields.pop("text", None), fields.pop("blob", None)
        try:
            content = (
                text.encode("utf-8")
                if isinstance(text, str)
                else base64.b64decode(blob or "", validate=True)
            )
        except (binascii.Error, ValueError, UnicodeEncodeError):
            return f"artifact {name!r} not kept: its content is not text or base64 bytes"
        fields["mime_type"] = artifacts.media_type(fields.get("mime_type"))
        if len(content) > artifacts.MAX_ARTIFACT_BYTES:
            return f"artifact {name!r} not kept: over {artifacts.MAX_ARTIFACT_BYTES:,} bytes"
        fields["size"] = len(content)
        if len(content) <= artifacts.INLINE_BYTES:
            fields["text" if isinstance(text, str) else "blob"] = text if text is not None else blob
            return None
        if self.folder.written + len(content) > artifacts.MAX_CALL_BYTES:
            return (
                f"artifact {name!r} not kept: the call's artifacts would pass "
                f"{artifacts.MAX_CALL_BYTES:,} bytes"
            )
        try:
            fields["uri"] = self.folder.write(name, content).as_uri()
        except ValueError as e:  # the folder's checks, its TTL or its total cap
            return f"artifact {name!r} not kept: {e}"
        except OSError as e:
            return f"artifact {name!r} not kept: cannot write it ({e.strerror or e})"
        return None

    def close(self) -> list[ToolEvent]:
        """The events to keep in the result, once what the gate held back was passed on."""
        with self.lock:
            if not self.closed:
                self.gate.end()
            self.closed = True
            return list(self.events)


def _over_count(name: str) -> str:
    return f"artifact {name!r} not kept: at most {artifacts.MAX_ARTIFACTS} per call"


KINDS = frozenset({"progress", "status", "artifact", "log"})
# What a raw event may carry into a ToolEvent (a worker's events are JSON from its pipe).
FIELDS = ("progress", "total", "message", "level", "state", "name", "mime_type", "text", "blob")
