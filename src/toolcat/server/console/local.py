"""``toolcat ui``: the console on a local catalog file, on loopback, for its owner.

A random free port; a one-time secret in the printed (and opened) address is exchanged for
a session cookie on the first visit (server/console/auth.py). The visitor is an admin: who
can run ``toolcat ui`` on the file can change it anyway. Needs no MCP SDK.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable
from typing import Any

from ...catalog import Catalog
from ..loopback import LOOPBACK_NAMES
from ..scope import Scope
from . import console_app
from .auth import Sessions
from .source import PATH, Source

HOST = "127.0.0.1"


def local_app(catalog: Catalog, secret: str) -> Any:
    """The console app of ``catalog``, logging in with ``secret`` once."""
    import anyio

    async def run(fn: Callable[[Catalog], Any]) -> Any:
        return await anyio.to_thread.run_sync(lambda: fn(catalog))

    def health() -> dict[str, Any]:
        report: dict[str, Any] = {"role": "primary", "revision": catalog.revision}
        if catalog.replica_of is not None:
            report["role"] = "replica"
        return report

    from starlette.applications import Starlette
    from starlette.responses import RedirectResponse
    from starlette.routing import Mount, Route

    async def home(_request: Any) -> Any:
        return RedirectResponse(f"{PATH}/", 303)

    source = Source(
        run=run,
        writer=catalog,
        scope=Scope(),
        health=health,
        gaps=list,
        sessions=Sessions(local_secret=secret),
        hosts=LOOPBACK_NAMES,
    )
    return Starlette(routes=[Route("/", home), Mount(PATH, app=console_app(source))])


def serve_local(
    catalog: Catalog, *, port: int, announce: Callable[[str], None], open_browser: bool
) -> None:
    """Serve until interrupted on ``127.0.0.1:port`` (0: a free one), announcing the
    one-time address first."""
    import uvicorn

    secret = secrets.token_urlsafe(32)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    url = f"http://{HOST}:{bound}{PATH}/login?secret={secret}"
    announce(url)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    config = uvicorn.Config(local_app(catalog, secret), log_level="warning", lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
