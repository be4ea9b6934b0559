"""``toolcat ui``: the web console on the catalog file, on loopback."""

from __future__ import annotations

import click

from .options import open_catalog
from .output import echo


@click.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    help="Port on 127.0.0.1. Default: a free one.",
)
@click.option("--no-browser", is_flag=True, help="Print the address; do not open a browser.")
@click.pass_context
def ui(ctx: click.Context, port: int, no_browser: bool) -> None:
    """Browse, search and manage the catalog in a web page (127.0.0.1 only).

    Prints a one-time address (its secret logs the first visit in; a session cookie does
    the rest) and opens it in the browser unless --no-browser. As its owner you may
    deprecate, activate and reindex. Needs the console extra: pip install 'toolcat[console]'.
    """
    try:
        import jinja2  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise click.ClickException(
            "toolcat ui needs the console extra: pip install 'toolcat[console]'"
        ) from None
    from ..errors import ServeError
    from ..server.console.local import serve_local

    catalog = open_catalog(ctx)
    try:
        serve_local(
            catalog,
            port=port,
            announce=lambda url: echo(f"toolcat console: {url}", err=True),
            open_browser=not no_browser,
        )
    except OSError as e:
        raise ServeError(f"cannot serve the console on port {port}: {e.strerror or e}") from e


COMMANDS = [ui]
