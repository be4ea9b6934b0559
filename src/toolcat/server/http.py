"""``toolcat serve --http``: the MCP server over streamable HTTP, both eras on one endpoint.

One SDK session manager serves 2026-07-28 requests (stateless, routed on the
``MCP-Protocol-Version`` header) and 2025-11-25 sessions. Bearer tokens (``--token``, or a
tokens file of principals) are checked before the SDK sees a request; the principal a token
names travels in the ASGI scope to the handlers, which narrow the server's scope to it.
Legacy sessions stay bound to the credential that opened them (the SDK answers 404 to
another). Bodies over 4 MiB get 413.

``GET /healthz`` (a load balancer probes it without a token) answers 200 with the revision
served and, on a replica, the primary's revision; 503 while a replica cannot serve (its copy
is damaged and being restored again, or its watcher fails), and with ``?max_stale=SECONDS``
(a finite number >= 0, else 400) once the replica has not heard from its store for longer,
so a balancer can prefer fresher replicas without ever emptying the pool by default. The
details (the primary's URL, redacted; the lag; staleness; Litestream's last error) need a
valid token when the server has tokens. The ``Host`` header is checked as for ``/mcp``.

``GET /metrics`` (server/metrics.py) is Prometheus's scrape: behind the tokens like ``/mcp``
(any valid token) unless ``metrics_public``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

from ..errors import ServeError
from .access import note_caller
from .loopback import host_names
from .mcp import PARAM_HEADERS, PRINCIPAL_KEY, CatalogServer
from .tokens import Tokens
from .wire import repairing_receive

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
MAX_BODY_BYTES = 4 * 1024 * 1024
SHORT_HEALTH = ("role", "revision", "primary_revision")  # what /healthz says without a token


class BearerAuth:
    """ASGI middleware: ``Authorization: Bearer TOKEN`` (scheme in any case) names a
    principal, or the request gets 401 with ``WWW-Authenticate``. Tokens are compared in
    constant time and never logged."""

    def __init__(self, app: Any, tokens: Tokens, public: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.tokens = tokens
        # Served without a token: these paths (``/metrics`` with ``metrics_public``) and the
        # console, which has its own sign-in; ``/healthz`` answers a caller without one briefly.
        self.public = public

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path not in self.public and not _console(path):
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            principal = self.tokens.principal(given) if given else None
            if principal is None and scope.get("path") == HEALTH_PATH:  # the short answer
                await self.app(scope, receive, send)
                return
            if principal is None:
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
            note_caller(scope, principal.name)  # for the access log, whatever answers
            scope = {**scope, PRINCIPAL_KEY: principal}
        await self.app(scope, receive, send)


def http_app(
    server: CatalogServer,
    *,
    host: str,
    port: int,
    tokens: Tokens | None,
    metrics: bool = False,
    metrics_public: bool = False,
) -> Any:
    """The ASGI app: the MCP endpoint at ``/mcp``, behind the tokens when there are some,
    and with ``metrics`` Prometheus's at ``/metrics`` (no token needed if ``metrics_public``).

    Bound to loopback, requests must name a loopback host, on any port (DNS rebinding
    protection that a balancer on this host passes: it forwards its own ``Host``).
    """
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import (
        TransportSecurityMiddleware,
        TransportSecuritySettings,
    )
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route

    security = None
    names = host_names(host)
    if names:
        # Any loopback port: a balancer on this host forwards its own Host header (a
        # rebinding page names a foreign host, which stays refused); and no port (a
        # balancer on port 80 forwards a bare Host).
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{h}:*" for h in names] + list(names),
            allowed_origins=[f"http://{h}:*" for h in names] + [f"http://{h}" for h in names],
        )
    manager = StreamableHTTPSessionManager(
        app=server.server, security_settings=security, max_request_body_size=MAX_BODY_BYTES
    )
    owners: dict[str, str] = {}  # legacy session id -> the principal that opened it

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with manager.run():  # enters the server's lifespan: the revision watcher
            try:
                yield
            finally:
                server.close()

    class Endpoint:  # an instance, not a function: Starlette passes it raw ASGI calls
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            principal = scope.get(PRINCIPAL_KEY)
            headers = scope.get("headers") or []
            session_id = dict(headers).get(b"mcp-session-id")
            if principal is not None and session_id is not None:
                owner = owners.get(session_id.decode("latin-1"))
                if owner is not None and owner != principal.name:
                    await _not_found(send)  # as if the session did not exist
                    return
            receive = repairing_receive(receive, MAX_BODY_BYTES)  # lone surrogates: wire.py
            PARAM_HEADERS.set(any(key.lower().startswith(b"mcp-param-") for key, _ in headers))
            await manager.handle_request(scope, receive, _record_session(send, principal, owners))

    checked_host = TransportSecurityMiddleware(security) if security is not None else None

    async def healthz(request: Any) -> Any:
        from starlette.responses import JSONResponse

        # A foreign Host is refused as on /mcp (DNS rebinding: a browser always sends one);
        # a balancer's HTTP/1.0 probe sends none (haproxy's `option httpchk GET /healthz`).
        if checked_host is not None and "host" in request.headers:
            refused = await checked_host.validate_request(request)
            if refused is not None:
                return refused
        bound = _max_stale(request.query_params.get("max_stale"))
        if bound is not None and not bound >= 0:  # nan, a negative, no number
            return JSONResponse({"error": "max_stale must be a number of seconds >= 0"}, 400)
        report = server.health()
        status = 200 if report.pop("serving", True) else 503
        stale = report.get("stale_seconds")
        if bound is not None and report["role"] == "replica" and (stale is None or stale > bound):
            status = 503
        if tokens is not None and request.scope.get(PRINCIPAL_KEY) is None:
            report = {key: report.get(key) for key in SHORT_HEALTH if key in report}
        return JSONResponse(report, status)

    from .console import PATH as CONSOLE_PATH  # its own login: server/console/auth.py
    from .console import for_server

    routes = [
        Route(MCP_PATH, endpoint=Endpoint()),
        Route(HEALTH_PATH, endpoint=healthz, methods=["GET", "HEAD"]),
        Mount(CONSOLE_PATH, app=for_server(server, tokens, host)),
    ]
    if metrics:
        from .metrics import scrape_endpoint

        routes.append(Route(METRICS_PATH, endpoint=scrape_endpoint(server), methods=["GET"]))
    app: Any = Starlette(routes=routes, lifespan=lifespan)
    public = frozenset({METRICS_PATH} if metrics and metrics_public else ())
    app = BearerAuth(app, tokens, public) if tokens else app
    return server.access_log.http(app) if server.access_log is not None else app


def _max_stale(given: str | None) -> float | None:
    """``?max_stale`` as seconds; NaN for a value that is no finite number (refused)."""
    import math

    if given is None:
        return None
    try:
        bound = float(given)
    except ValueError:
        return math.nan
    return bound if math.isfinite(bound) else math.nan


def _console(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


def _record_session(send: Any, principal: Any, owners: dict[str, str]) -> Any:
    """Remember which principal opened a legacy session (from the response's session id)."""
    if principal is None:
        return send

    async def recording(message: Any) -> None:
        if message.get("type") == "http.response.start":
            for key, value in message.get("headers") or []:
                if key.lower() == b"mcp-session-id":
                    if len(owners) > 100_000:
                        owners.clear()
                    owners.setdefault(value.decode("latin-1"), principal.name)
        await send(message)

    return recording


async def _not_found(send: Any) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound and listening on ``host:port``, before anything is announced: a busy
    port is a one-line ``ServeError`` here, not a traceback from the server later.

    Raises:
        ServeError: The address cannot be bound (in use, not this host's, not permitted).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as e:
        raise ServeError(f"cannot serve on {host}:{port}: unknown host ({e})") from e
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            reason = "the port is already in use (another server?): pick another --port"
        else:
            reason = e.strerror or str(e)
        raise ServeError(f"cannot serve on {host}:{port}: {reason}") from e
    sock.set_inheritable(True)
    return sock


def serve_http(
    server: CatalogServer,
    *,
    host: str,
    port: int,
    tokens: Tokens | None,
    log_level: str = "warning",
    sock: socket.socket | None = None,
    metrics: bool = False,
    metrics_public: bool = False,
) -> None:
    """Serve until interrupted, on ``sock`` (``listening_socket``) or a new one."""
    import uvicorn

    from ..definitions.printable import install

    install()  # every log line escaped (definitions/printable.py)
    install("mcp")  # the SDK's own warnings quote a client's headers and messages
    sock = sock or listening_socket(host, port)
    app = http_app(
        server, host=host, port=port, tokens=tokens, metrics=metrics, metrics_public=metrics_public
    )
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
