"""What the console reads and acts on, and the headers every answer carries."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...catalog import Catalog
from ..scope import Scope
from .auth import Sessions

PATH = "/ui"
HERE = Path(__file__).parent

HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; "
        "frame-ancestors 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # no-referrer would make a form's Origin "null"
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
