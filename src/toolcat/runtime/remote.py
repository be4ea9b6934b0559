"""How the runtime reaches a tool that lives elsewhere (an MCP server, an HTTP API) without
knowing the clients that talk to it.

An implementation string that starts with a registered prefix (``mcp+stdio:...``,
``openapi+http:...``) is forwarded: the ``Forwarder`` registered for that prefix makes the
callable the runtime then runs like any other. ``toolcat.remote.forwarding`` registers the
MCP and OpenAPI forwarders; the catalog installs them before any call. Such tools always run
in a thread of the calling process (their work is in another process already), so a worker
process never needs them. No module path has a ``+`` in it, so no prefix hides one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Forwarder(Protocol):
    def __call__(self, spec: str, tool_id: str) -> Callable[..., Any]:
        """A callable that forwards its keyword arguments to the tool ``spec`` names."""
        ...


# Why a toolkit of this kind may not call a forwarded implementation (it would send this
# process's environment), or None: given with each forwarder (``toolcat.remote.secrets``).
Refusal = Callable[[str, "str | None"], "str | None"]

_forwarders: dict[str, tuple[Forwarder, Refusal]] = {}


def register(prefix: str, forwarder: Forwarder, refusal: Refusal) -> None:
    """Forward implementations that start with ``prefix`` through ``forwarder``, once
    ``refusal(spec, toolkit kind)`` says nothing against it."""
    _forwarders[prefix] = (forwarder, refusal)


def refusal(spec: str, kind: str | None) -> str | None:
    """Why a toolkit of ``kind`` may not call ``spec``, or ``None``."""
    found = _registered(spec)
    return found[1](spec, kind) if found is not None else None


def _registered(spec: str) -> tuple[Forwarder, Refusal] | None:
    return next((pair for prefix, pair in _forwarders.items() if spec.startswith(prefix)), None)


def forwarder(spec: str) -> Forwarder | None:
    """The forwarder for ``spec``; None for a Python implementation (``module:attr``)."""
    found = _registered(spec)
    return found[0] if found is not None else None
