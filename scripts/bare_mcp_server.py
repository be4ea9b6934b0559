"""A bare MCP SDK server with one trivial tool, for measuring what toolcat's server adds.

The same HTTP stack as ``toolcat serve --http`` (server/http.py): the SDK's low-level
``Server`` behind its ``StreamableHTTPSessionManager`` (both eras, the same loopback DNS
rebinding settings and body limit), a Starlette route at ``/mcp``, uvicorn with the same
``Config`` (log level ``warning``, lifespan on) on a socket bound the same way. Its one tool,
``add(a, b)``, answers ``a + b`` as text, in the request's task: no catalog, no thread hop.

    python scripts/bare_mcp_server.py --port 8765 [--host 127.0.0.1]

``scripts/load_mcp.py`` starts it beside ``toolcat serve --http`` and drives both.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import mcp.types as types  # noqa: E402
import uvicorn  # noqa: E402
from mcp.server.lowlevel import Server  # noqa: E402
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager  # noqa: E402
from mcp.server.transport_security import TransportSecuritySettings  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Route  # noqa: E402

from toolcat.server.http import MAX_BODY_BYTES, MCP_PATH, listening_socket  # noqa: E402

ADD = types.Tool(
    name="add",
    description="Add two integers.",
    input_schema={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 2}},
        "required": ["a"],
    },
)


async def list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[ADD])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    total = int(arguments.get("a", 0)) + int(arguments.get("b", 2))
    return types.CallToolResult(content=[types.TextContent(type="text", text=str(total))])


def app(host: str) -> Any:
    server: Server[Any] = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    hosts = ("127.0.0.1", "localhost", "[::1]")
    security = TransportSecuritySettings(  # as toolcat's on loopback (server/http.py)
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*(f"{h}:*" for h in hosts), *hosts],
        allowed_origins=[*(f"http://{h}:*" for h in hosts), *(f"http://{h}" for h in hosts)],
    )
    manager = StreamableHTTPSessionManager(
        app=server, security_settings=security, max_request_body_size=MAX_BODY_BYTES
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    class Endpoint:
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    return Starlette(routes=[Route(MCP_PATH, endpoint=Endpoint())], lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    sock = listening_socket(args.host, args.port)
    config = uvicorn.Config(
        app(args.host), host=args.host, port=args.port, log_level="warning", lifespan="on"
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
