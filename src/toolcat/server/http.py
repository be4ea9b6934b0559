"""``toolcat serve --http``: the MCP server over streamable HTTP, with an optional bearer
token."""

from __future__ import annotations

import contextlib
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

from .mcp import CatalogServer

MCP_PATH = "/mcp"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class BearerToken:
    """ASGI middleware refusing HTTP requests without ``Authorization: Bearer TOKEN``
    (401, with ``WWW-Authenticate``)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps(
                    {"error": "unauthorized", "message": "a valid bearer token is required"}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="toolcat"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: CatalogServer, *, host: str, port: int, token: str | None) -> Any:
    """The ASGI app: the MCP endpoint at ``/mcp``, behind the token when there is one.

    Bound to loopback, requests must name a loopback host (DNS rebinding protection).
    """
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.routing import Route

    security = None
    if host in LOOPBACK:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]")],
            allowed_origins=[f"http://{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]")],
        )
    manager = StreamableHTTPSessionManager(app=server.server, security_settings=security)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    class Endpoint:  # an instance, not a function: Starlette passes it raw ASGI calls
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

    app: Any = Starlette(routes=[Route(MCP_PATH, endpoint=Endpoint())], lifespan=lifespan)
    return BearerToken(app, token) if token else app


def serve_http(
    server: CatalogServer, *, host: str, port: int, token: str | None, log_level: str = "warning"
) -> None:
    """Serve until interrupted."""
    import uvicorn

    app = http_app(server, host=host, port=port, token=token)
    uvicorn.run(app, host=host, port=port, log_level=log_level, lifespan="on")
