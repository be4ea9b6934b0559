"""The server's access log: one line per MCP request on stderr (``toolcat serve
--access-log``), and one per HTTP request refused before it reached MCP (401, 404, 413, 421).

A line is ``TIME WHO METHOD [TOOL] STATUS DURATION``::

    2026-11-26T00:05:02.123Z math-team tools/call convert_units ok 3.1ms
    2026-11-26T00:05:02.456Z anonymous tools/call call_tool:delete_file UNKNOWN_TOOL 0.8ms
    2026-11-26T00:05:03.001Z - POST /mcp 401 0.2ms

``WHO`` is the principal a bearer token names, ``anonymous`` without one (``-`` for a request
refused before anyone was known). ``STATUS`` is ``ok``, a tool result's error code, or the
JSON-RPC error code. Never a token, never an argument value. Every field is escaped by
``definitions.printable.escape`` as it is written (a client's method and tool name, the
principal, the status, an HTTP method and path): one printable word each, so no field can
end the line or start another, or reach the terminal as an escape sequence.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import IO, Any

from ..definitions.printable import escape

MAX_NAME = 80


class AccessLog:
    """Writes access lines to ``stream`` (stderr); ``who(ctx)`` names a request's caller.

    An instance is also an SDK ``ServerMiddleware``: put it on ``Server.middleware`` and it
    times every request through the handler."""

    def __init__(self, who: Callable[[Any], str], stream: IO[str] | None = None) -> None:
        self.who = who
        self.stream = stream

    def write(self, who: Any, what: tuple[Any, ...], status: Any, seconds: float) -> None:
        """A line for a request: ``what`` is its method and, for a call, the tool's name."""
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        fields = " ".join(escape(field, MAX_NAME) for field in (who, *what, status))
        line = f"{now.replace('+00:00', 'Z')} {fields} {seconds * 1000:.1f}ms"
        stream = self.stream or sys.stderr
        with contextlib.suppress(OSError, ValueError):  # a closed stderr must not fail a request
            print(line, file=stream, flush=True)

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if getattr(ctx, "request_id", None) is None:  # a notification: no answer to time
            return await call_next(ctx)
        started = time.perf_counter()
        status = "error"
        try:
            result = await call_next(ctx)
            status = result_status(result)
            return result
        except Exception as e:
            error = getattr(e, "error", None)
            code = getattr(error, "code", None)
            status = f"error({code})" if code is not None else "error"
            raise
        finally:
            request = getattr(ctx, "request", None)
            answered = request.scope.get(ANSWERED_KEY) if request is not None else None
            if isinstance(answered, list):
                answered.append(True)  # the HTTP layer need not log this request again
            self.write(self.who(ctx), _what(ctx), status, time.perf_counter() - started)

    def http(self, app: Any) -> Any:
        """``app`` (ASGI) with a line for each HTTP response of status 400 or more that no
        MCP handler answered (a missing token, an unknown session, a body too large)."""

        async def logged(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            started = time.perf_counter()
            status = 0
            answered: list[bool] = []  # shared by the copies of the scope made further in
            caller: list[str] = []  # the principal a valid token named (``note_caller``)
            scope = {**scope, ANSWERED_KEY: answered, CALLER_KEY: caller}

            async def sending(message: Any) -> None:
                nonlocal status
                if message.get("type") == "http.response.start":
                    status = int(message.get("status", 0))
                await send(message)

            try:
                await app(scope, receive, sending)
            finally:
                if status >= 400 and not answered:
                    what = (scope.get("method", "?"), scope.get("path", "?"))
                    who = caller[0] if caller else "-"
                    self.write(who, what, str(status), time.perf_counter() - started)

        return logged


ANSWERED_KEY = "toolcat.answered"  # set in an HTTP request's scope once MCP logged it
CALLER_KEY = "toolcat.caller"  # the principal of an HTTP request, once its token is checked


def note_caller(scope: Any, principal: str) -> None:
    """Tell the HTTP access log who a request's valid token named, so a request refused
    further in (before MCP answers it) is logged under its principal, not ``-``."""
    caller = scope.get(CALLER_KEY)
    if isinstance(caller, list):
        caller[:] = [principal]


def _what(ctx: Any) -> tuple[Any, ...]:
    method = getattr(ctx, "method", "?")
    params = getattr(ctx, "params", None)
    if method != "tools/call" or not isinstance(params, dict):
        return (method,)
    name = params.get("name")
    arguments = params.get("arguments")
    if name == "call_tool" and isinstance(arguments, dict) and "name" in arguments:
        inner = arguments["name"]
        return (method, f"call_tool:{inner if isinstance(inner, str) else repr(inner)}")
    return (method, name)


def result_status(result: Any) -> str:
    """``ok``, a failed tool result's error code, or ``TOOL_ERROR``."""
    if isinstance(result, dict):
        is_error, meta = result.get("isError"), result.get("_meta")
    else:
        is_error, meta = getattr(result, "is_error", None), getattr(result, "meta", None)
    if not is_error:
        return "ok"
    code = meta.get("toolcat/error_code") if isinstance(meta, dict) else None
    return str(code) if code else "TOOL_ERROR"
