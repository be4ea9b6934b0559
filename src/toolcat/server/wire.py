"""Requests as they arrive on the wire, before the MCP SDK parses them.

JSON may escape a lone UTF-16 surrogate (``"\\ud800"``); the SDK's parser refuses such a
request whole with a JSON-RPC parse error, so a client whose query held one got no tool
result at all. Each lone surrogate escape becomes ``\\ufffd`` (the replacement character, as
any UTF-8 decoder does with a bad byte) before the SDK sees the request: the call goes through
and its tool answers. The repair keeps the text's length, so a ``Content-Length`` stays true.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

# An escaped backslash (so the ``u`` after it is plain text), a valid surrogate pair, or a
# lone surrogate escape; only the last is replaced.
_ESCAPES = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_LONE = re.compile(rb"\\u[dD][89a-fA-F]")


def repair(body: bytes) -> bytes:
    """``body`` with every lone surrogate escape replaced by ``\\ufffd`` (same length)."""
    if not _LONE.search(body):
        return body
    return _ESCAPES.sub(lambda m: rb"\ufffd" if len(m[0]) == 6 else m[0], body)


def repairing_receive(
    receive: Callable[[], Awaitable[Any]], limit: int
) -> Callable[[], Awaitable[Any]]:
    """An ASGI ``receive`` that hands over the request body whole (up to ``limit`` bytes;
    past it, as it came, for the SDK to refuse), repaired."""
    delivered = False

    async def wrapped() -> Any:
        nonlocal delivered
        if delivered:
            return await receive()
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if not message.get("more_body") or size > limit:
                break
        delivered = True
        body = b"".join(chunks)
        more = bool(message.get("more_body"))
        return {"type": "http.request", "body": body if more else repair(body), "more_body": more}

    return wrapped


async def repaired_lines(lines: AsyncIterable[str]) -> AsyncIterator[str]:
    """Lines of a stdio stream, repaired."""
    async for line in lines:
        yield repair(line.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")


@contextlib.contextmanager
def claimed_stdin() -> Iterator[Any]:
    """Standard input as repaired lines for ``stdio_server(stdin=...)``, claimed the way the
    SDK claims it (read from a private duplicate; file descriptor 0 points at the null device
    meanwhile, so a tool that reads stdin gets EOF instead of protocol bytes)."""
    import anyio

    private = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    # Never closed: a reader thread may still block on it after the server stops.
    text = io.TextIOWrapper(os.fdopen(private, "rb", closefd=False), encoding="utf-8",
                            errors="replace")  # fmt: skip
    try:
        yield repaired_lines(anyio.wrap_file(text))
    finally:
        os.dup2(private, 0)
