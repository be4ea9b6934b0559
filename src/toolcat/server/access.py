"""The server's access log: one line per MCP request on stderr (``toolcat serve
--access-log``), and one per HTTP request refused before it reached MCP (401, 404, 413, 421).

A line is ``TIME WHO METHOD [TOOL] STATUS DURATION``::

    2026-11-26T00:05:02.123Z math-team tools/call convert_units ok 3.1ms
    2026-11-26T00:05:02.456Z anonymous tools/call call_tool:delete_file UNKNOWN_TOOL 0.8ms
    2026-11-26T00:05:03.001Z - POST /mcp 401 0.2ms

``WHO`` is the principal a bearer token names, ``anonymous`` without one (``-`` for a request
refused before anyone was known). ``STATUS`` is ``ok``, a tool result's error code, or the
JSON-RPC error code. Never a token, never an argument value: the only client text written is
the tool's name, escaped and cut short.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import IO, Any

MAX_NAME = 80


class AccessLog:
    """Writes access lines to ``stream`` (stderr); ``who(ctx)`` names a request's caller.

    An instance is also an SDK ``ServerMiddleware``: put it on ``Server.middleware`` and it
    times every request through the handler."""

    def __init__(self, who: Callable[[Any], str], stream: IO[str] | None = None) -> None:
        self.who = who
        self.stream = stream

    def write(self, who: str, what: str, status: str, seconds: float) -> None:
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        line = f"{now.replace('+00:00', 'Z')} {who} {what} {status} {seconds * 1000:.1f}ms"
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
            scope = {**scope, ANSWERED_KEY: answered}

            async def sending(message: Any) -> None:
                nonlocal status
                if message.get("type") == "http.response.start":
                    status = int(message.get("status", 0))
                await send(message)

            try:
                await app(scope, receive, sending)
            finally:
                if status >= 400 and not answered:
                    what = f"{scope.get('method', '?')} {_clean(scope.get('path', '?'))}"
                    self.write("-", what, str(status), time.perf_counter() - started)

        return logged


ANSWERED_KEY = "toolcat.answered"  # set in an HTTP request's scope once MCP logged it


def _what(ctx: Any) -> str:
    method = str(getattr(ctx, "method", "?"))
    params = getattr(ctx, "params", None)
    if method != "tools/call" or not isinstance(params, dict):
        return method
    name = params.get("name")
    arguments = params.get("arguments")
    if name == "call_tool" and isinstance(arguments, dict) and "name" in arguments:
        return f"{method} call_tool:{_clean(arguments['name'])}"
    return f"{method} {_clean(name)}"


def result_status(result: Any) -> str:
    """``ok``, a failed tool result's error code, or ``TOOL_ERROR``."""
    if isinstance(result, dict):
        is_error, meta = result.get("isError"), result.get("_meta")
    else:
        is_error, meta = getattr(result, "is_error", None), getattr(result, "meta", None)
    if not is_error:
        return "ok"
    code = meta.get("toolcat/error_code") if isinstance(meta, dict) else None
    return _clean(code) if code else "TOOL_ERROR"


def _clean(value: Any) -> str:
    """Client text made safe for one log line: printable, no spaces, at most MAX_NAME."""
    text = value if isinstance(value, str) else repr(value)
    text = "".join(c if c.isprintable() and not c.isspace() else "?" for c in text)
    return text[:MAX_NAME] + ("…" if len(text) > MAX_NAME else "") if text else "''"
