"""The web console at ``/ui`` (``toolcat serve --http``, ``toolcat ui``): browse, search
playground, usage, status, and an admin's deprecate/activate/reindex.

Server-rendered Jinja2 with autoescape on in every template; no inline script or style, no
CDN (``static/`` ships in the package); every answer carries a strict Content-Security-Policy.
Pages only read, through the server's reader catalogs and inside the viewer's scope (as
over MCP); the admin forms are POSTs with a CSRF token and a same-origin check. See
docs/console.md and docs/security.md "Console".
"""

from __future__ import annotations

from typing import Any

from ..loopback import host_names
from .auth import Sessions
from .source import PATH, Source

__all__ = ["PATH", "Source", "console_app", "for_server"]


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
    return console_app(
        Source(
            run=server.readers.run,
            writer=server.catalog,
            scope=server.scope,
            health=server.health,
            gaps=server.gaps.newest,
            sessions=Sessions(tokens=tokens),
            hosts=host_names(host),
        )
    )
