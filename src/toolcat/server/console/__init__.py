"""The web console at ``/ui`` (``toolcat serve --http``, ``toolcat ui``): browse, search
playground, usage, status, and an admin's deprecate/activate/reindex.

Server-rendered Jinja2 with autoescape on in every template; no inline script or style, no
CDN (``static/`` ships in the package); every answer carries a strict Content-Security-Policy.
Pages only read, through the server's reader catalogs and inside the viewer's scope (as
over MCP); the admin forms are POSTs with a CSRF token and a same-origin check. See
docs/console.md and docs/security.md "Console".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ...catalog import Catalog
from ..scope import Scope
from .auth import Sessions

PATH = "/ui"
HERE = Path(__file__).parent
T = TypeVar("T")

HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; "
        "frame-ancestors 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


@dataclass
class Source:
    """What the console reads and acts on.

    Attributes:
        run: Runs a function on a reader catalog in a worker thread (``Readers.run``).
        writer: The catalog admin actions write through.
        scope: The server's scope; a principal's is narrowed from it.
        health: The server's ``/healthz`` report (role, revision, lag, staleness).
        gaps: The newest searches that found nothing: (time, principal, query, mode).
        sessions: Who is logged in.
        hosts: The ``Host`` names a request may carry (loopback binds: DNS rebinding);
            empty = any.
    """

    run: Callable[[Callable[[Catalog], Any]], Awaitable[Any]]
    writer: Catalog
    scope: Scope
    health: Callable[[], dict[str, Any]]
    gaps: Callable[[], list[tuple[float, str, str, str]]]
    sessions: Sessions
    hosts: tuple[str, ...] = ()


def console_app(source: Source) -> Any:
    """The console as an ASGI app to mount at ``/ui`` (needs the ``console`` extra: without
    Jinja2 every console address answers 404 saying so, and MCP is served as before)."""
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return _not_installed
    from .app import build

    return build(source)


async def _not_installed(scope: Any, receive: Any, send: Any) -> None:
    body = b"the web console needs the console extra: pip install 'toolcat[console]'\n"
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def for_server(server: Any, tokens: Any, host: str) -> Any:
    """The console of a ``CatalogServer`` (``toolcat serve --http``): its readers, scope,
    health and gaps; logins by its tokens (none: open and read-only)."""
    from ..http import LOOPBACK

    return console_app(
        Source(
            run=server.readers.run,
            writer=server.catalog,
            scope=server.scope,
            health=server.health,
            gaps=server.gaps.newest,
            sessions=Sessions(tokens=tokens),
            hosts=LOOPBACK_NAMES if host in LOOPBACK else (),
        )
    )


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
