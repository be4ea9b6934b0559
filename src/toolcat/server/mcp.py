"""The catalog as an MCP server (the official SDK's low-level ``Server``).

``tools/list`` is list mode (the always-on tools, filtered by the server's tags and toolkit,
paginated) plus two tools of the server's own: ``search_tools``, which returns matching
tools (deferred ones included) with their input schemas, and ``call_tool``, which calls any
catalog tool by name for clients that never refresh their list. Tools a search returned are
added to that session's ``tools/list`` and the client is sent
``notifications/tools/list_changed``.

Every call goes through ``Catalog.acall`` (policy, validation, timeouts, lazy import). A
failure is a ``CallToolResult`` with ``isError`` whose text starts with the error code, never a
protocol error.
"""

from __future__ import annotations

import json
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server

from ..errors import ToolcatError
from ..export import mcp_tool
from ..models import RegisteredTool, ToolResult
from ..runtime.call import error_result

if TYPE_CHECKING:
    from ..catalog import Catalog

SEARCH_TOOL = "search_tools"
CALL_TOOL = "call_tool"
OWN_TOOLS = (SEARCH_TOOL, CALL_TOOL)
MAX_SEARCH_K = 50
MAX_REVEALED = 200  # tools a session's searches add to its list; the oldest drop out
MAX_ARGUMENT_BYTES = 1_000_000

SEARCH_TOOL_SPEC = types.Tool(
    name=SEARCH_TOOL,
    description=(
        "Search the tool catalog, including tools not in your tool list. Returns the best "
        "matching tools with their input schemas; call one with call_tool (or directly by "
        "its name once your tool list refreshes)."
    ),
    inputSchema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What you want to do, in words."},
            "k": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SEARCH_K,
                "default": 5,
                "description": "How many tools to return.",
            },
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only tools with all of these tags.",
            },
        },
        "required": ["query"],
    },
    annotations=types.ToolAnnotations(readOnlyHint=True, idempotentHint=True),
)
CALL_TOOL_SPEC = types.Tool(
    name=CALL_TOOL,
    description=(
        "Call any tool of the catalog by name (as search_tools returned it) with its arguments."
    ),
    inputSchema={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The tool's name."},
            "arguments": {
                "type": "object",
                "description": "The tool's arguments, as its input schema describes.",
            },
        },
        "required": ["name"],
    },
)


@dataclass
class ServeOptions:
    """How ``toolcat serve`` behaves.

    Attributes:
        tags: List mode and search only show tools with all of these tags.
        toolkit: List mode and search only show this toolkit.
        page_size: Tools per ``tools/list`` page.
        refuse_unsearched: Refuse calls of deferred tools that no search of this session
            returned (by default any catalog tool may be called by name).
        search_mode: The search mode of ``search_tools`` (default: the best available).
        plain: Serve as an ordinary MCP server: every selected tool in ``tools/list``,
            deferred ones included, and no ``search_tools``/``call_tool`` (for serving one
            toolkit to clients, or to another catalog).
    """

    tags: tuple[str, ...] = ()
    toolkit: str | None = None
    page_size: int = 100
    refuse_unsearched: bool = False
    search_mode: str | None = None
    plain: bool = False


@dataclass
class SessionState:
    """What one client session has found by search."""

    revealed: OrderedDict[str, RegisteredTool] = field(default_factory=OrderedDict)


class CatalogServer:
    """An MCP server over one catalog. ``server`` is the SDK server to run."""

    def __init__(self, catalog: Catalog, options: ServeOptions | None = None) -> None:
        from .. import __version__

        self.catalog = catalog
        self.options = options or ServeOptions()
        self._sessions: weakref.WeakKeyDictionary[Any, SessionState] = weakref.WeakKeyDictionary()
        # Building an SDK Tool costs ~30 µs; the same pages are asked for again and again.
        self._specs_cache: dict[tuple[str, str], types.Tool] = {}
        self._specs_revision = -1
        self.server: Server[Any, Any] = Server(
            "toolcat",
            version=__version__,
            instructions=(
                "Your tool list holds the always-on tools. For anything else, call "
                "search_tools with what you want to do, then call the tool it returns."
            ),
        )
        self.server.request_handlers[types.ListToolsRequest] = self._list_tools
        self.server.request_handlers[types.CallToolRequest] = self._call_tool

    def initialization_options(self) -> Any:
        return self.server.create_initialization_options(NotificationOptions(tools_changed=True))

    def _session(self) -> tuple[Any, SessionState]:
        session = self.server.request_context.session
        state = self._sessions.get(session)
        if state is None:
            state = self._sessions[session] = SessionState()
        return session, state

    # -- tools/list -------------------------------------------------------------------------

    async def _list_tools(self, request: types.ListToolsRequest) -> types.ServerResult:
        cursor = request.params.cursor if request.params is not None else None
        _, state = self._session()
        try:
            page = await anyio.to_thread.run_sync(self._page, cursor)
        except ToolcatError as e:
            from mcp.shared.exceptions import McpError

            raise McpError(types.ErrorData(code=types.INVALID_PARAMS, message=str(e))) from e
        own = cursor is None and not self.options.plain
        tools = [SEARCH_TOOL_SPEC, CALL_TOOL_SPEC] if own else []
        if page.revision != self._specs_revision:
            self._specs_cache.clear()
            self._specs_revision = page.revision
        tools += self._specs(page.tools)
        if page.next_cursor is None:
            listed = {t.id for t in page.tools}
            tools += self._specs([t for t in state.revealed.values() if t.id not in listed])
        return types.ServerResult(types.ListToolsResult(tools=tools, nextCursor=page.next_cursor))

    def _page(self, cursor: str | None) -> Any:
        return self.catalog.list(
            tags=self.options.tags,
            toolkit=self.options.toolkit,
            include_deferred=self.options.plain,
            limit=self.options.page_size,
            cursor=cursor,
        )

    def _specs(self, tools: list[RegisteredTool]) -> list[types.Tool]:
        names = self.catalog.short_names(tools) if tools else {}
        specs = []
        for tool in tools:
            name = self._exposed_name(tool, names)
            spec = self._specs_cache.get((tool.id, name))
            if spec is None:  # the cache is emptied when the catalog's revision changes
                spec = self._specs_cache[(tool.id, name)] = types.Tool.model_validate(
                    mcp_tool(tool, name)
                )
            specs.append(spec)
        return specs

    @staticmethod
    def _exposed_name(tool: RegisteredTool, short_names: dict[str, str]) -> str:
        name = short_names.get(tool.id, tool.id)
        return tool.id if name in OWN_TOOLS else name  # also in plain mode: names stay stable

    def _in_list_mode(self, tool: RegisteredTool) -> bool:
        return (
            not tool.defer_loading
            and set(self.options.tags) <= set(tool.tags)
            and (self.options.toolkit is None or tool.toolkit == self.options.toolkit.split("@")[0])
        )

    # -- tools/call -------------------------------------------------------------------------

    async def _call_tool(self, request: types.CallToolRequest) -> types.ServerResult:
        name = request.params.name
        arguments = request.params.arguments or {}
        if name == SEARCH_TOOL and not self.options.plain:
            result = await self._search(arguments)
        elif name == CALL_TOOL and not self.options.plain:
            inner = arguments.get("name")
            inner_arguments = arguments.get("arguments") or {}
            if not isinstance(inner, str) or not isinstance(inner_arguments, dict):
                result = _error(
                    "INVALID_ARGUMENTS",
                    "call_tool takes 'name' (a string) and 'arguments' (an object)",
                )
            else:
                result = await self._call(inner, inner_arguments)
        else:
            result = await self._call(name, arguments)
        return types.ServerResult(result)

    async def _call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        size = len(json.dumps(arguments, default=str))
        if size > MAX_ARGUMENT_BYTES:
            return _error(
                "INVALID_ARGUMENTS",
                f"the arguments are {size:,} bytes of JSON; at most {MAX_ARGUMENT_BYTES:,}",
            )
        try:
            tool = await anyio.to_thread.run_sync(self.catalog.get, name)
        except ToolcatError as e:
            failed = error_result(e, time.perf_counter())
            return _error(failed.error_code or e.code, failed.error or str(e))
        if self.options.refuse_unsearched and not self._in_list_mode(tool):
            _, state = self._session()
            if tool.id not in state.revealed:
                return _error(
                    "TOOL_DENIED",
                    f"{name!r} is not in your tool list: find it with {SEARCH_TOOL} first",
                )
        outcome = await self.catalog.acall(tool, arguments)  # the version resolved above
        return _result(outcome, structured=tool.output_schema is not None)

    # -- search_tools -----------------------------------------------------------------------

    async def _search(self, arguments: dict[str, Any]) -> types.CallToolResult:
        query = arguments.get("query")
        k = arguments.get("k", 5)
        tags = arguments.get("tags") or []
        if not isinstance(query, str) or not query.strip():
            return _error("INVALID_ARGUMENTS", "search_tools needs 'query', a non-empty string")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SEARCH_K:
            return _error("INVALID_ARGUMENTS", f"'k' must be an integer from 1 to {MAX_SEARCH_K}")
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            return _error("INVALID_ARGUMENTS", "'tags' must be a list of strings")
        try:
            found = await anyio.to_thread.run_sync(
                lambda: self.catalog.search(
                    query,
                    k=k,
                    mode=self.options.search_mode,
                    tags=[*self.options.tags, *tags],
                    toolkit=self.options.toolkit,
                )
            )
        except ToolcatError as e:
            return _error(e.code, str(e))
        hits = [hit.tool for hit in found.hits]
        names = self.catalog.short_names(hits) if hits else {}
        session, state = self._session()
        new = False
        for tool in hits:
            if self._in_list_mode(tool):
                continue
            new = new or tool.id not in state.revealed
            state.revealed[tool.id] = tool
            state.revealed.move_to_end(tool.id)
        while len(state.revealed) > MAX_REVEALED:
            state.revealed.popitem(last=False)
        payload = {
            "query": query,
            "mode": found.mode,
            "tools": [
                {
                    "name": self._exposed_name(hit.tool, names),
                    "description": hit.tool.description,
                    "inputSchema": mcp_tool(hit.tool, hit.tool.name)["inputSchema"],
                    "toolkit": hit.tool.toolkit,
                    "score": round(hit.score, 4),
                }
                for hit in found.hits
            ],
        }
        if found.warnings:
            payload["warnings"] = found.warnings
        if new:
            await session.send_tool_list_changed()
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(payload))],
            structuredContent=payload,
        )


def _error(code: str, message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        isError=True,
        _meta={"toolcat/error_code": code},
    )


def _result(outcome: ToolResult, *, structured: bool) -> types.CallToolResult:
    if not outcome.success:
        return _error(outcome.error_code or "TOOL_ERROR", outcome.error or "the call failed")
    data = outcome.data
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    meta = {"toolcat/duration_ms": outcome.duration_ms}
    if outcome.truncated:
        meta["toolcat/truncated"] = True
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structuredContent=data if structured and isinstance(data, dict) else None,
        _meta=meta,
    )


async def serve_stdio(server: CatalogServer) -> None:
    """Serve one client on standard input and output until it disconnects."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.server.run(read, write, server.initialization_options())
