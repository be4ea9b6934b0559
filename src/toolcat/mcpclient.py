"""Talking to other MCP servers: read their tools, and forward calls to them.

A tool imported from an MCP server has an implementation of the form
``mcp+stdio:COMMAND ARGS#TOOL`` or ``mcp+http:URL#TOOL`` (``TOOL`` percent-encoded). Like a
Python implementation it is "imported" lazily: the server process is started (or the HTTP
session opened) on the first call, kept for later calls, started again if it died, and
closed when the process exits. The MCP SDK is imported only here, and only when needed.

All sessions live on one background event loop thread, because an SDK session must be
entered and left on the same loop; callers in other threads submit coroutines to it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import shlex
import threading
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, TypeVar
from urllib.parse import quote, unquote

from .errors import ImportFailedError, ToolcatError

T = TypeVar("T")

PREFIX = "mcp+"
CONNECT_TIMEOUT = 30.0
CALL_TIMEOUT = 3600.0  # the runtime's own timeout is shorter; this only frees the thread
MAX_PAGES = 10_000
INSTALL_HINT = "install the MCP extra: pip install 'toolcat[mcp]'"


class RemoteToolError(Exception):
    """The MCP server answered a call with ``isError``; the message is its text."""


@dataclass(frozen=True)
class Endpoint:
    """An MCP server: a command to run (stdio) or a URL (streamable HTTP)."""

    transport: Literal["stdio", "http"]
    target: str

    def __str__(self) -> str:
        return f"MCP server {self.target!r}"

    def implementation(self, tool_name: str) -> str:
        """The implementation string of the server's tool ``tool_name``."""
        return f"{PREFIX}{self.transport}:{self.target}#{quote(tool_name, safe='')}"


def is_remote(spec: str) -> bool:
    return spec.startswith(PREFIX)


def parse_implementation(spec: str) -> tuple[Endpoint, str]:
    """(endpoint, remote tool name) of an ``mcp+stdio:...#tool`` or ``mcp+http:...#tool``."""
    scheme, _, rest = spec.partition(":")
    target, hash_sign, tool = rest.rpartition("#")
    transport = scheme[len(PREFIX) :]
    if transport not in ("stdio", "http") or not hash_sign or not target or not tool:
        raise ImportFailedError(
            f"{spec!r} is not of the form 'mcp+stdio:COMMAND#TOOL' or 'mcp+http:URL#TOOL'"
        )
    return Endpoint(transport, target), unquote(tool)  # type: ignore[arg-type]


def require_sdk() -> None:
    """Raise a clear error when the MCP SDK is not installed."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        raise ToolcatError(f"the MCP SDK is not installed; {INSTALL_HINT}")


@contextlib.asynccontextmanager
async def open_session(
    endpoint: Endpoint, timeout: float = CONNECT_TIMEOUT
) -> AsyncIterator[tuple[Any, Any]]:
    """An initialized SDK ``ClientSession`` with ``endpoint``, and the server's
    ``InitializeResult``.

    Raises:
        ImportFailedError: The server cannot be started or reached, or does not answer
            ``initialize`` within ``timeout`` seconds.
    """
    require_sdk()
    try:
        async with _session(endpoint, timeout) as found:
            yield found
    except Exception as e:  # the transports' task groups wrap our own errors: unwrap them
        inner = _innermost(e)
        if inner is not e and isinstance(inner, ToolcatError):
            raise inner from e
        raise


@contextlib.asynccontextmanager
async def _session(endpoint: Endpoint, timeout: float) -> AsyncIterator[tuple[Any, Any]]:
    import anyio
    from mcp import ClientSession

    async with contextlib.AsyncExitStack() as stack:
        try:
            if endpoint.transport == "stdio":
                from mcp.client.stdio import StdioServerParameters, stdio_client

                argv = shlex.split(endpoint.target)
                if not argv:
                    raise ImportFailedError("the MCP server command is empty")
                params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
                read, write = await stack.enter_async_context(stdio_client(params))
            else:
                from mcp.client.streamable_http import streamable_http_client

                read, write, _ = await stack.enter_async_context(
                    streamable_http_client(endpoint.target)
                )
            session = await stack.enter_async_context(
                ClientSession(read, write, read_timeout_seconds=timedelta(seconds=CALL_TIMEOUT))
            )
            with anyio.fail_after(timeout):
                initialized = await session.initialize()
        except ToolcatError:
            raise
        except Exception as e:
            inner = _innermost(e)
            if isinstance(inner, TimeoutError):
                raise ImportFailedError(
                    f"{endpoint} did not answer 'initialize' within {timeout:g} s"
                ) from e
            raise ImportFailedError(
                f"cannot start {endpoint}: {type(inner).__name__}: {inner}"
            ) from e
        yield session, initialized


def _innermost(error: BaseException) -> BaseException:
    """The first leaf of an exception group (the SDK's transports raise groups)."""
    while getattr(error, "exceptions", None):  # BaseExceptionGroup is 3.11+
        error = error.exceptions[0]  # type: ignore[attr-defined]
    return error


async def _read_tools(
    endpoint: Endpoint, timeout: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    import anyio

    tools: list[dict[str, Any]] = []
    try:
        async with open_session(endpoint, timeout) as (session, initialized):
            cursor: str | None = None
            seen: set[str] = set()
            for _ in range(MAX_PAGES):
                with anyio.fail_after(timeout):
                    page = await session.list_tools(cursor)
                tools.extend(t.model_dump(mode="json", exclude_none=True) for t in page.tools)
                cursor = page.nextCursor
                if not cursor or cursor in seen:
                    break
                seen.add(cursor)
    except ToolcatError:
        raise
    except Exception as e:
        inner = _innermost(e)
        raise ImportFailedError(
            f"{endpoint} failed to list its tools: {type(inner).__name__}: {inner}"
        ) from e
    return initialized.serverInfo.model_dump(mode="json", exclude_none=True), tools


def read_tools(
    endpoint: Endpoint, timeout: float = CONNECT_TIMEOUT
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The server's info and every tool of its ``tools/list`` (all pages), as JSON.

    Raises:
        ImportFailedError: The server cannot be started, or does not answer in time.
    """
    try:
        return _loop().run(_read_tools(endpoint, timeout), timeout=timeout * 3)
    except TimeoutError as e:
        raise ImportFailedError(f"{endpoint} did not list its tools within {timeout:g} s") from e


class _Loop:
    """A daemon thread running the event loop every MCP session lives on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="toolcat-mcp", daemon=True
        )
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the loop and wait for it.

        Raises:
            TimeoutError: It took longer than ``timeout`` seconds (it is cancelled).
        """
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError as e:  # not the builtin before Python 3.11
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g} s") from e


_shared: _Loop | None = None
_shared_lock = threading.Lock()


def _loop() -> _Loop:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = _Loop()
        return _shared


class Connection:
    """One kept-open session with an MCP server, started on first use and again after it
    died."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._session: Any = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None

    async def _session_now(self) -> Any:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._session is not None and self._owner is not None and not self._owner.done():
                return self._session
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._owner = asyncio.create_task(self._hold(ready, self._stop))
            self._session = await ready
            return self._session

    async def _hold(self, ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        """Keep the session open until told to stop (entered and left in this one task)."""
        try:
            async with open_session(self.endpoint) as (session, _):
                ready.set_result(session)
                await stop.wait()
        except BaseException as e:  # once ready, an end here is the server going away:
            if not ready.done():  # the next call starts it again
                ready.set_exception(e)
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self._session = None

    async def _reset(self) -> None:
        stop, owner = self._stop, self._owner
        self._session = None
        if stop is not None:
            stop.set()
        if owner is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(owner, 5)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        import anyio
        from mcp.shared.exceptions import McpError

        attempts = 2
        while True:
            attempts -= 1
            session = await self._session_now()
            try:
                result = await session.call_tool(tool, arguments)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError) as e:
                # The request was never sent: the server had died. Start it again, once.
                await self._reset()
                if attempts == 0:
                    raise ImportFailedError(f"{self.endpoint} is not running: {e}") from e
                continue
            except McpError as e:
                if "closed" in str(e).lower():
                    await self._reset()  # died while working: not retried, it may have acted
                    raise RemoteToolError(f"{self.endpoint} closed during the call: {e}") from e
                raise RemoteToolError(f"{self.endpoint} refused the call: {e}") from e
            return call_result(result)

    async def close(self) -> None:
        await self._reset()


def call_result(result: Any) -> Any:
    """The value of an SDK ``CallToolResult``: its structured content if any, else the text
    of a single text block, else the content blocks as JSON.

    Raises:
        RemoteToolError: The result has ``isError``.
    """
    blocks = [b.model_dump(mode="json", exclude_none=True) for b in result.content]
    if result.isError:
        text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        raise RemoteToolError(text or "the MCP server reported an error without a message")
    if result.structuredContent is not None:
        return result.structuredContent
    if len(blocks) == 1 and blocks[0].get("type") == "text":
        return blocks[0]["text"]
    return blocks


_connections: dict[Endpoint, Connection] = {}
_connections_lock = threading.Lock()


def connection(endpoint: Endpoint) -> Connection:
    with _connections_lock:
        found = _connections.get(endpoint)
        if found is None:
            found = _connections[endpoint] = Connection(endpoint)
            if len(_connections) == 1:
                atexit.register(close_all)
        return found


def forget(endpoint: Endpoint, timeout: float = 10.0) -> None:
    """Close the kept-open session with ``endpoint``, if any: its next call starts the
    server again (after a re-registration picked up a new version of it)."""
    with _connections_lock:
        found = _connections.pop(endpoint, None)
    if found is not None and _shared is not None:
        with contextlib.suppress(Exception):
            _shared.run(found.close(), timeout=timeout)


def close_all(timeout: float = 10.0) -> None:
    """Close every kept-open session (stops stdio server processes)."""
    with _connections_lock:
        open_ones = list(_connections.values())
        _connections.clear()
    if not open_ones or _shared is None:
        return

    async def close_them() -> None:
        await asyncio.gather(*(c.close() for c in open_ones), return_exceptions=True)

    with contextlib.suppress(Exception):
        _shared.run(close_them(), timeout=timeout)


def remote_tool(spec: str) -> Any:
    """A callable that forwards its keyword arguments to the remote tool ``spec`` names.

    Nothing is started here: the server starts on the first call.
    """
    require_sdk()
    endpoint, tool = parse_implementation(spec)

    def forward(**arguments: Any) -> Any:
        return _loop().run(connection(endpoint).call(tool, arguments), timeout=CALL_TIMEOUT)

    forward.__name__ = tool
    return forward
