"""Talking to other MCP servers: read their tools, and forward calls to them.

A tool imported from an MCP server has an implementation of the form
``mcp+stdio:COMMAND ARGS#TOOL`` or ``mcp+http:URL#TOOL`` (``TOOL`` percent-encoded), optionally
followed by ``?OPTIONS`` (percent-encoded ``key=value`` pairs, repeatable):

- ``header=NAME=VALUE`` (HTTP) and ``env=NAME=VALUE``, ``cwd=DIR`` (stdio): how to reach the
  server. Values may reference environment variables as ``${NAME}``; the catalog stores the
  reference and the process that makes the call resolves it (``toolcat.remote.credentials``).
- ``definition=D.S``: content hashes of the tool's description and input schema as the server
  listed them at registration. Before a call the server's current definition is compared with
  it: on the tool's first use on a connection, again whenever the server announces
  ``tools/list_changed``, and at least every ``RECHECK_SECONDS`` however long the connection
  lives (a server that changes a tool without announcing it is caught within that bound).
  ``on_change=warn`` reports a change (a warning log line and a ``warning`` event of the call)
  and sends the call instead of refusing it.

Like a Python implementation a remote tool is "imported" lazily: the server process is
started (or the HTTP connection opened) on the first call, kept for later calls, started again
if it died, and closed when the process exits. The client is the SDK 2.x ``Client`` in
``mode="auto"``: it asks ``server/discover`` first (protocol 2026-07-28) and falls back to the
``initialize`` handshake of older servers. The MCP SDK is imported only here, and only when
needed.

All connections live on one background event loop thread, because an SDK client must be
entered and left on the same loop; callers in other threads submit coroutines to it. The
forwarding callable is async, so the runtime's timeout cancels it, which cancels the request
and sends the server ``notifications/cancelled``.

A stdio server's stderr (banners, logs) goes to the ``toolcat.mcp.stderr`` logger at INFO, not
to the terminal; its last lines are quoted when the server fails to start.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import os
import re
import shlex
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlencode

from ..errors import DefinitionChangedError, ImportFailedError, ToolcatError
from ..models import MAX_TOOLS_PER_TOOLKIT, content_hash
from .schemes import MCP_PREFIX

T = TypeVar("T")

PREFIX = MCP_PREFIX
CONNECT_TIMEOUT = 30.0
CALL_TIMEOUT = 3600.0  # the runtime's own timeout is shorter and cancels the call
MAX_PAGES = 10_000
# How long a connection trusts the definitions it checked before listing them again. Per call
# would close the window entirely, at one tools/list per call (measured on the test server
# over stdio: docs/importing.md, "Rug-pull protection"); a few seconds keeps that cost off
# busy connections.
RECHECK_SECONDS = 5.0
STDERR_LINES = 20  # kept per stdio server, quoted when it fails to start
INSTALL_HINT = "install the MCP extra: pip install 'toolcat[mcp]'"
OnChange = Literal["refuse", "warn"]
ON_CHANGE: tuple[OnChange, ...] = ("refuse", "warn")

# What a stdio server inherits from the caller's environment besides its own --env: the SDK's
# safe defaults (HOME, LOGNAME, PATH, SHELL, TERM, USER; their Windows counterparts) and these.
SAFE_ENV = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TMPDIR", "TZ")

HEADER_NAME_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

log = logging.getLogger("toolcat.mcp")
stderr_log = logging.getLogger("toolcat.mcp.stderr")


class RemoteToolError(Exception):
    """The MCP server answered a call with an error; the message is its text."""


@dataclass(frozen=True)
class Endpoint:
    """An MCP server: a command to run (stdio) or a URL (streamable HTTP), and how to reach it.

    ``headers``, ``env`` and ``cwd`` are stored as given: ``${NAME}`` references stay
    unresolved until a connection is opened.
    """

    transport: Literal["stdio", "http"]
    target: str
    headers: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None

    def __str__(self) -> str:
        return f"MCP server {self.target!r}"

    def implementation(
        self, tool_name: str, *, definition: str | None = None, on_change: OnChange = "refuse"
    ) -> str:
        """The implementation string of the server's tool ``tool_name``."""
        spec = f"{PREFIX}{self.transport}:{self.target}#{quote(tool_name, safe='')}"
        options: list[tuple[str, str]] = []
        if definition:
            options.append(("definition", definition))
        if on_change != "refuse":
            options.append(("on_change", on_change))
        options += [("header", f"{k}={v}") for k, v in self.headers]
        options += [("env", f"{k}={v}") for k, v in self.env]
        if self.cwd is not None:
            options.append(("cwd", self.cwd))
        if options:
            spec += "?" + urlencode(options, quote_via=quote, safe="${}/:,")
        return spec


@dataclass(frozen=True)
class RemoteTool:
    """A parsed remote implementation: where the tool lives and what was registered."""

    endpoint: Endpoint
    name: str
    definition: str | None = None
    on_change: OnChange = "refuse"


def make_endpoint(
    transport: Literal["stdio", "http"],
    target: str,
    *,
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Endpoint:
    """An ``Endpoint`` with checked options.

    Raises:
        ToolcatError: A header for a stdio server, env/cwd for an HTTP one, a name that is not
            a header or variable name, or a value with a line break or NUL.
    """
    target = target.strip()
    if not target:
        raise ToolcatError(f"the MCP server {'URL' if transport == 'http' else 'command'} is empty")
    if transport == "http":
        if env or cwd is not None:
            raise ToolcatError(
                "--env and --cwd are for --mcp-stdio servers; HTTP servers get --header"
            )
        if not re.match(r"https?://", target):
            raise ToolcatError(f"{target!r} is not an http:// or https:// URL")
    elif headers:
        raise ToolcatError("--header is for --mcp-http servers; stdio servers get --env")
    for name, value in (headers or {}).items():
        if not HEADER_NAME_RE.fullmatch(name):
            raise ToolcatError(f"header name {name!r} is not a valid HTTP header name")
        if any(c in value for c in "\r\n\0"):
            raise ToolcatError(f"header {name!r}: the value must not contain line breaks or NUL")
    for name, value in (env or {}).items():
        if not ENV_NAME_RE.fullmatch(name):
            raise ToolcatError(f"--env {name!r}: not an environment variable name")
        if "\0" in value:
            raise ToolcatError(f"--env {name!r}: the value must not contain NUL")
    return Endpoint(
        transport,
        target,
        headers=tuple((headers or {}).items()),
        env=tuple((env or {}).items()),
        cwd=cwd,
    )


def is_remote(spec: str) -> bool:
    return spec.startswith(PREFIX)


def parse_implementation(spec: str) -> RemoteTool:
    """The ``RemoteTool`` of an ``mcp+stdio:...#tool[?options]`` or ``mcp+http:...#tool``."""
    scheme, _, rest = spec.partition(":")
    target, hash_sign, tail = rest.rpartition("#")
    tool, _, query = tail.partition("?")
    transport = scheme[len(PREFIX) :]
    if transport not in ("stdio", "http") or not hash_sign or not target or not tool:
        raise ImportFailedError(
            f"{spec!r} is not of the form 'mcp+stdio:COMMAND#TOOL' or 'mcp+http:URL#TOOL'"
        )
    headers: list[tuple[str, str]] = []
    env: list[tuple[str, str]] = []
    cwd: str | None = None
    definition: str | None = None
    on_change: str = "refuse"
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in ("header", "env"):
            name, sep, assigned = value.partition("=")
            if not sep or not name:
                raise ImportFailedError(f"{spec!r}: option {key}={value!r} is not NAME=VALUE")
            (headers if key == "header" else env).append((name, assigned))
        elif key == "cwd":
            cwd = value
        elif key == "definition":
            definition = value
        elif key == "on_change" and value in ON_CHANGE:
            on_change = value
        else:
            raise ImportFailedError(f"{spec!r}: unknown option {key}={value!r}")
    endpoint = Endpoint(transport, target, tuple(headers), tuple(env), cwd)  # type: ignore[arg-type]
    return RemoteTool(endpoint, unquote(tool), definition, on_change)  # type: ignore[arg-type]


# -- definitions --------------------------------------------------------------------------


def definition_digest(raw: Mapping[str, Any]) -> str:
    """``D.S``: hashes of a listed tool's description and input schema (its name is the key
    it is found under). What rug-pull protection compares."""
    description = content_hash(raw.get("description") or "")[:32]
    schema = content_hash(raw.get("inputSchema") or {})[:32]
    return f"{description}.{schema}"


def definition_changes(registered: str, raw: Mapping[str, Any] | None) -> list[str]:
    """What differs between a registered digest and the server's current tool (``None``:
    the server no longer lists it): ``[]``, ``["removed"]`` or parts of
    ``["description", "input schema"]``."""
    if raw is None:
        return ["removed"]
    now = definition_digest(raw).split(".")
    then = registered.split(".")
    if len(then) != 2:
        return ["description", "input schema"]
    return [p for p, a, b in zip(("description", "input schema"), then, now, strict=True) if a != b]


def require_sdk() -> None:
    """Raise a clear error when the MCP SDK is not installed."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        raise ToolcatError(f"the MCP SDK is not installed; {INSTALL_HINT}")


# -- connecting ---------------------------------------------------------------------------


class _StderrPipe:
    """Where a stdio server's stderr goes: each line to the ``toolcat.mcp.stderr`` logger (INFO),
    the last few kept to explain a failed start."""

    def __init__(self, endpoint: Endpoint) -> None:
        read_fd, write_fd = os.pipe()
        self.file = os.fdopen(write_fd, "w")
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._name = endpoint.target
        self._thread = threading.Thread(
            target=self._pump, args=(read_fd,), name="toolcat-mcp-stderr", daemon=True
        )
        self._thread.start()

    def _pump(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                line = line.rstrip("\n")
                self.lines.append(line)
                stderr_log.info("%s: %s", self._name, line)

    def close(self) -> None:
        """Close our end (the server's copy closes when it exits; the reader then stops)."""
        with contextlib.suppress(OSError):
            self.file.close()

    def tail(self, wait: float = 0.5) -> str:
        """The last lines the server wrote, after giving the reader a moment to catch up."""
        self._thread.join(wait)
        return "\n".join(self.lines)


@dataclass
class _Link:
    """What one connection learned about its server: refused credentials, stderr lines."""

    refused: int | None = None  # an HTTP 401/403 status seen
    challenge: str = ""  # its WWW-Authenticate header
    stderr: _StderrPipe | None = None
    listing: dict[str, dict[str, Any]] | None = None  # name -> listed tool (JSON), for checks
    listed_at: float = 0.0  # time.monotonic() of ``listing``
    verified: set[str] = field(default_factory=set)
    # The calls in flight hear the server's log messages (MCP does not say which call a
    # notification belongs to: with several calls at once, each hears them all).
    log_listeners: set[Callable[[str, str], None]] = field(default_factory=set)


def _resolved(endpoint: Endpoint) -> tuple[dict[str, str], dict[str, str], str | None]:
    """Headers, env and cwd with every ``${NAME}`` resolved from this process's environment.

    Raises:
        MissingSecretError: A referenced variable is not set (an ``ImportFailedError``).
    """
    from .credentials import resolve, resolve_headers

    headers = resolve_headers(dict(endpoint.headers), where=str(endpoint))
    env = {k: resolve(v, where=f"{endpoint}: --env {k}") for k, v in endpoint.env}
    cwd = None if endpoint.cwd is None else resolve(endpoint.cwd, where=f"{endpoint}: --cwd")
    return headers, env, cwd


def stdio_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What a stdio server is started with, besides the SDK's safe defaults: ``SAFE_ENV``
    from this process, then the server's own ``env``. Never the caller's whole environment."""
    inherited = {name: os.environ[name] for name in SAFE_ENV if name in os.environ}
    return {**inherited, **env}


def _refusal(endpoint: Endpoint, link: _Link) -> ImportFailedError:
    status = link.refused
    sent = ", ".join(name for name, _ in endpoint.headers)
    if sent:
        hint = f"check the header(s) it was sent ({sent}) and the variables they reference"
    else:
        hint = "give it credentials with --header 'Authorization=Bearer ${TOKEN}'"
    if "resource_metadata" in link.challenge or "oauth" in link.challenge.lower():
        hint += "; it asks for OAuth, which toolcat does not support (use a token it accepts)"
    return ImportFailedError(f"{endpoint} refused the credentials (HTTP {status}): {hint}")


def _innermost(error: BaseException) -> BaseException:
    """The first leaf of an exception group (the SDK's transports raise groups)."""
    while getattr(error, "exceptions", None):  # BaseExceptionGroup is 3.11+
        error = error.exceptions[0]  # type: ignore[attr-defined]
    return error


def _describe(error: BaseException) -> str:
    inner = _innermost(error)
    text = str(inner) or type(inner).__name__
    return text if type(inner).__name__ == "MCPError" else f"{type(inner).__name__}: {text}"


@contextlib.asynccontextmanager
async def open_client(
    endpoint: Endpoint,
    timeout: float = CONNECT_TIMEOUT,
    *,
    link: _Link | None = None,
    on_message: Callable[[Any], Any] | None = None,
) -> AsyncIterator[Any]:
    """A connected SDK ``Client`` (``mode="auto"``) with ``endpoint``.

    Raises:
        ImportFailedError: A referenced variable is not set; the server cannot be started or
            reached, refuses the credentials, or does not answer the handshake within
            ``timeout`` seconds (each request of it).
    """
    require_sdk()
    link = link if link is not None else _Link()
    headers, env, cwd = _resolved(endpoint)
    try:
        async with contextlib.AsyncExitStack() as stack:
            client = await _connect(endpoint, headers, env, cwd, timeout, link, stack, on_message)
            yield client
    except ToolcatError:
        raise
    except Exception as e:
        raise _connect_error(endpoint, e, timeout, link) from e
    finally:
        if link.stderr is not None:
            link.stderr.close()


async def _connect(
    endpoint: Endpoint,
    headers: dict[str, str],
    env: dict[str, str],
    cwd: str | None,
    timeout: float,
    link: _Link,
    stack: contextlib.AsyncExitStack,
    on_message: Callable[[Any], Any] | None,
) -> Any:
    from mcp import Client
    from mcp.types import Implementation

    from ..definitions.version import __version__

    transport: Any
    if endpoint.transport == "stdio":
        from mcp.client.stdio import StdioServerParameters, stdio_client

        argv = shlex.split(endpoint.target)
        if not argv:
            raise ImportFailedError("the MCP server command is empty")
        if cwd is not None and not os.path.isdir(cwd):
            raise ImportFailedError(f"{endpoint}: --cwd {cwd!r} is not a directory")
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env=stdio_environment(env), cwd=cwd
        )
        link.stderr = _StderrPipe(endpoint)
        transport = stdio_client(params, errlog=link.stderr.file)
    else:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async def watch(response: Any) -> None:
            if response.status_code in (401, 403):
                link.refused = response.status_code
                link.challenge = response.headers.get("www-authenticate", "")

        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=headers,
                timeout=httpx2.Timeout(timeout, read=max(timeout, 300.0)),
                event_hooks={"response": [watch]},
            )
        )
        transport = streamable_http_client(endpoint.target, http_client=http)

    async def handle(message: Any) -> None:
        if on_message is not None:
            on_message(message)

    client = Client(
        transport,
        mode="auto",
        read_timeout_seconds=timeout,  # each handshake and listing request; calls pass their own
        client_info=Implementation(name="toolcat", version=__version__),
        cache=None,  # always the server's current tools/list: rug-pull checks compare it
        message_handler=handle,
        log_level="info",  # 2026-07-28 servers log only to requests that ask (a call's log events)
    )
    return await stack.enter_async_context(client)


def _connect_error(
    endpoint: Endpoint, error: BaseException, timeout: float, link: _Link
) -> ImportFailedError:
    from mcp.shared.exceptions import MCPError
    from mcp.types import REQUEST_TIMEOUT

    inner = _innermost(error)
    if link.refused:
        return _refusal(endpoint, link)
    if isinstance(inner, TimeoutError) or (
        isinstance(inner, MCPError) and inner.code == REQUEST_TIMEOUT
    ):
        message = f"{endpoint} did not answer the MCP handshake within {timeout:g} s"
    else:
        message = f"cannot start {endpoint}: {_describe(error)}"
    if link.stderr is not None:
        said = link.stderr.tail()
        if said:
            message += f"; it wrote on stderr:\n{said}"
    return ImportFailedError(message)


async def _list_all(client: Any) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        tools.extend(
            t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools
        )
        if len(tools) > MAX_TOOLS_PER_TOOLKIT:  # more than a toolkit holds: read no further
            break
        cursor = page.next_cursor
        if not cursor or cursor in seen:
            break
        seen.add(cursor)
    return tools


async def _read_tools(
    endpoint: Endpoint, timeout: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    link = _Link()
    try:
        async with open_client(endpoint, timeout, link=link) as client:
            try:
                tools = await _list_all(client)
            except Exception as e:
                if link.refused:
                    raise _refusal(endpoint, link) from e
                raise ImportFailedError(
                    f"{endpoint} failed to list its tools: {_describe(e)}"
                ) from e
            info = client.server_info
    except ToolcatError:
        raise
    except Exception as e:  # raised while the connection closed
        raise ImportFailedError(f"{endpoint} failed to list its tools: {_describe(e)}") from e
    server = {} if info is None else info.model_dump(mode="json", by_alias=True, exclude_none=True)
    return server, tools


def read_tools(
    endpoint: Endpoint, timeout: float = CONNECT_TIMEOUT
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The server's info and every tool of its ``tools/list`` (all pages), as JSON (the wire's
    camelCase keys).

    Raises:
        ImportFailedError: The server cannot be started, refuses the credentials, or does not
            answer in time; a referenced variable is not set.
    """
    try:
        # Each request has ``timeout``; the handshake may take two (server/discover, then
        # initialize), and stopping a stdio server that ignores its closed stdin a few more.
        return _loop().run(_read_tools(endpoint, timeout), timeout=timeout * 3 + 10)
    except TimeoutError as e:
        raise ImportFailedError(f"{endpoint} did not list its tools within {timeout:g} s") from e


class _Loop:
    """A daemon thread running the event loop every MCP connection lives on."""

    def __init__(self) -> None:
        from ..runtime.threads import ordinary_children

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="toolcat-mcp", daemon=True
        )
        with ordinary_children():  # made by a call's thread: stdio servers start from it
            self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the loop and wait for it.

        Raises:
            TimeoutError: It took longer than ``timeout`` seconds (it is cancelled).
        """
        future = self.submit(coro)
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
    """One kept-open connection with an MCP server, opened on first use and again after the
    server went away. Each tool's definition is checked against the registered one on its
    first use on a connection."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._client: Any = None
        self._link = _Link()
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None

    async def _client_now(self) -> tuple[Any, _Link]:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._client is not None and self._owner is not None and not self._owner.done():
                return self._client, self._link
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._link = _Link()
            self._owner = asyncio.create_task(self._hold(ready, self._stop, self._link))
            self._client = await ready
            return self._client, self._link

    async def _hold(self, ready: asyncio.Future[Any], stop: asyncio.Event, link: _Link) -> None:
        """Keep the connection open until told to stop (entered and left in this one task)."""

        def on_message(message: Any) -> None:
            kind = type(message).__name__
            if kind == "ToolListChangedNotification":
                link.listing = None  # check every tool again against the new list
                link.verified.clear()
            elif kind == "LoggingMessageNotification" and link.log_listeners:
                level, text = log_line(message.params)
                for listener in list(link.log_listeners):
                    with contextlib.suppress(Exception):
                        listener(level, text)

        try:
            async with open_client(self.endpoint, link=link, on_message=on_message) as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as e:  # once ready, an end here is the server going away:
            if not ready.done():  # the next call starts it again
                ready.set_exception(e)
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    async def _reset(self) -> None:
        stop, owner = self._stop, self._owner
        self._client = None
        if stop is not None:
            stop.set()
        if owner is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(owner, 5)

    async def _verify(
        self,
        client: Any,
        link: _Link,
        tool: RemoteTool,
        tool_id: str,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        """Compare the server's current definition of ``tool`` with the registered one (its
        listing read again once older than ``RECHECK_SECONDS``)."""
        if tool.definition is None:
            return
        if link.listing is None or time.monotonic() - link.listed_at >= RECHECK_SECONDS:
            listed = await _list_all(client)
            link.listing = {str(t.get("name")): t for t in listed}
            link.listed_at = time.monotonic()
            link.verified.clear()
        if tool.name in link.verified:
            return
        changed = definition_changes(tool.definition, link.listing.get(tool.name))
        if not changed:
            link.verified.add(tool.name)
            return
        if tool.on_change == "warn":
            message = changed_message(self.endpoint, tool, tool_id, changed, sent=True)
            log.warning("%s", message)
            if on_warning is not None:
                on_warning(message)
            link.verified.add(tool.name)  # warned again at the next re-check
            return
        message = changed_message(self.endpoint, tool, tool_id, changed, sent=False)
        raise DefinitionChangedError(message, tool=tool_id or tool.name, changed=changed)

    async def call(
        self,
        tool: RemoteTool,
        arguments: dict[str, Any],
        tool_id: str = "",
        on_progress: Callable[[float, float | None, str | None], None] | None = None,
        on_warning: Callable[[str], None] | None = None,
        on_log: Callable[[str, str], None] | None = None,
        on_artifact: Callable[[str, str | bytes, str | None], None] | None = None,
    ) -> Any:
        """Call ``tool``; its progress, the server's log messages meanwhile and the resources
        in its result reach the callbacks (resources then leave the returned value)."""
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        client, link = await self._client_now()
        if _closed(client):  # the server went away since the last call: start it again
            await self._reset()
            client, link = await self._client_now()
        if on_log is not None:
            link.log_listeners.add(on_log)
        try:
            await self._verify(client, link, tool, tool_id, on_warning)
            progress = None
            if on_progress is not None:

                async def progress(done: float, total: float | None, message: str | None) -> None:
                    on_progress(done, total, message)

            result = await client.call_tool(
                tool.name,
                arguments,
                read_timeout_seconds=CALL_TIMEOUT,
                progress_callback=progress,
            )
            if progress is not None:  # let reports that arrived before the result be delivered
                for _ in range(3):
                    await asyncio.sleep(0)
        except ToolcatError:
            raise
        except MCPError as e:
            if link.refused:
                raise _refusal(self.endpoint, link) from e
            if e.code == CONNECTION_CLOSED:
                await self._reset()  # not repeated: the server may have acted before it died
                said = link.stderr.tail(0.1) if link.stderr is not None else ""
                raise RemoteToolError(
                    f"{self.endpoint} closed the connection during the call"
                    + (f"; it wrote on stderr:\n{said}" if said else "")
                ) from e
            raise RemoteToolError(f"{self.endpoint} refused the call: {e}") from e
        finally:
            if on_log is not None:
                link.log_listeners.discard(on_log)
        handed: set[int] = set()
        if on_artifact is not None and not result.is_error:
            handed = await resource_artifacts(client, result, on_artifact, on_log)
        return call_result(result, handed)

    async def close(self) -> None:
        await self._reset()


def _closed(client: Any) -> bool:
    """Whether the client's connection has ended (the server exited or hung up)."""
    dispatcher = getattr(client.session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def changed_message(
    endpoint: Endpoint, tool: RemoteTool, tool_id: str, changed: list[str], *, sent: bool = False
) -> str:
    """What to say of a tool whose definition moved since registration, with the way out:
    the call was refused, or (``sent``: ``on_change=warn``) sent anyway."""
    toolkit = tool_id.split(".", 1)[0] if "." in tool_id else "TOOLKIT"
    option = "--mcp-http" if endpoint.transport == "http" else "--mcp-stdio"
    again = f"toolcat register {option} {shlex.quote(endpoint.target)} --toolkit {toolkit} ..."
    what = (
        f"no longer lists tool {tool.name!r}"
        if changed == ["removed"]
        else f"changed the {' and '.join(changed)} of tool {tool.name!r} since it was registered"
    )
    return (
        f"{endpoint} {what}"
        + (f" (catalog tool {tool_id!r})" if tool_id else "")
        + ("; calling it anyway (--on-change warn)" if sent else "; the call was not sent")
        + ". Review the server's new definition, then accept it by "
        f"registering again (`{again}`), which makes a new version"
    )


def log_line(params: Any) -> tuple[str, str]:
    """(level, text) of an MCP log message: its data as text, after its logger's name."""
    data = params.data
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    logger_name = getattr(params, "logger", None)
    return str(params.level), f"{logger_name}: {text}" if logger_name else text


async def resource_artifacts(
    client: Any,
    result: Any,
    on_artifact: Callable[[str, str | bytes, str | None], None],
    on_log: Callable[[str, str], None] | None,
) -> set[int]:
    """Hand each resource of a result to ``on_artifact`` (name, content, MIME type): embedded
    ones as they are, links read from the server (within ``MAX_ARTIFACT_BYTES``). Returns
    the positions of the blocks handed over; a link that cannot be read stays in the value,
    and ``on_log`` hears why."""
    import base64

    from ..runtime.artifacts import MAX_ARTIFACT_BYTES

    handed: set[int] = set()
    for position, block in enumerate(result.content):
        kind = getattr(block, "type", None)
        try:
            if kind == "resource":
                contents = block.resource
                name = str(contents.uri).rstrip("/").rsplit("/", 1)[-1] or "resource"
            elif kind == "resource_link":
                name = block.name
                if block.size is not None and block.size > MAX_ARTIFACT_BYTES:
                    raise ValueError(f"{block.size:,} bytes; at most {MAX_ARTIFACT_BYTES:,}")
                read = await asyncio.wait_for(client.read_resource(str(block.uri)), CALL_TIMEOUT)
                contents = read.contents[0]
            else:
                continue
            text = getattr(contents, "text", None)
            content = text if text is not None else base64.b64decode(contents.blob)
            on_artifact(name, content, contents.mime_type or getattr(block, "mime_type", None))
            handed.add(position)
        except Exception as e:  # one resource must not fail the call
            if on_log is not None:
                uri = block.uri if kind == "resource_link" else block.resource.uri
                on_log("warning", f"resource {str(uri)[:200]} not kept as an artifact: {e}")
    return handed


def call_result(result: Any, handed: Collection[int] = ()) -> Any:
    """The value of an SDK ``CallToolResult``: its structured content if any, else the text
    of a single text block, else the content blocks as JSON (less those ``handed`` over as
    artifacts).

    Raises:
        RemoteToolError: The result has ``is_error``.
    """
    blocks = [
        b.model_dump(mode="json", by_alias=True, exclude_none=True)
        for i, b in enumerate(result.content)
        if i not in handed
    ]
    if result.is_error:
        text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        raise RemoteToolError(text or "the MCP server reported an error without a message")
    if result.structured_content is not None:
        return result.structured_content
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
    """Close the kept-open connection with ``endpoint``, if any: its next call starts the
    server again (after a re-registration picked up a new version of it)."""
    with _connections_lock:
        found = _connections.pop(endpoint, None)
    if found is not None and _shared is not None:
        with contextlib.suppress(Exception):
            _shared.run(found.close(), timeout=timeout)


def close_all(timeout: float = 10.0) -> None:
    """Close every kept-open connection (stops stdio server processes)."""
    with _connections_lock:
        open_ones = list(_connections.values())
        _connections.clear()
    if not open_ones or _shared is None:
        return

    async def close_them() -> None:
        await asyncio.gather(*(c.close() for c in open_ones), return_exceptions=True)

    with contextlib.suppress(Exception):
        _shared.run(close_them(), timeout=timeout)


def remote_tool(spec: str, tool_id: str = "") -> Callable[..., Coroutine[Any, Any, Any]]:
    """An async callable that forwards its keyword arguments to the remote tool ``spec``
    names. Cancelling it (the runtime's timeout does) cancels the request on the server;
    progress the server reports becomes this call's progress events (``report_progress``),
    its log messages during the call ``log`` events, and the resources in its result
    (embedded, or links read back from it) ``artifact`` events.

    Nothing is started here: the server starts on the first call.
    """
    require_sdk()
    remote = parse_implementation(spec)

    async def forward(**arguments: Any) -> Any:
        from ..runtime import events

        context = contextvars.copy_context()  # where the runtime routes this call's events

        def on_progress(done: float, total: float | None, message: str | None) -> None:
            with contextlib.suppress(Exception):  # a malformed report is not the call's failure
                context.run(events.report_progress, done, total, message)

        def on_warning(message: str) -> None:
            with contextlib.suppress(Exception):
                context.run(events.report_log, message, "warning")

        def on_log(level: str, text: str) -> None:
            with contextlib.suppress(Exception):
                context.run(events.report_log, text, level)

        def on_artifact(name: str, content: str | bytes, mime_type: str | None) -> None:
            context.run(events.report_artifact, name, content, mime_type=mime_type)

        call = connection(remote.endpoint).call(
            remote,
            arguments,
            tool_id,
            on_progress,
            on_warning=on_warning,
            on_log=on_log,
            on_artifact=on_artifact,
        )
        return await asyncio.wrap_future(_loop().submit(call))

    forward.__name__ = remote.name
    return forward


def remote_tools(specs: Iterable[str]) -> dict[Endpoint, list[RemoteTool]]:
    """Parsed remote implementations grouped by server."""
    grouped: dict[Endpoint, list[RemoteTool]] = {}
    for spec in specs:
        remote = parse_implementation(spec)
        grouped.setdefault(remote.endpoint, []).append(remote)
    return grouped
